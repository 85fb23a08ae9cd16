//! What the pipeline's admission steps keep between messages (a count per tenant, say), one
//! value per type, made on its first use. It lives in `Services`, so every context shares it
//! and a reload keeps it, as it keeps the buckets. `state` is below the pipeline and cannot
//! name a step's types: each step asks for its own, and a new step adds no field here.

use std::any::Any;
use std::sync::{Arc, RwLock};

/// One value per type, each shared (`Arc`).
#[derive(Default)]
pub struct Kept {
    values: RwLock<Vec<Arc<dyn Any + Send + Sync>>>,
}

impl Kept {
    /// The value of type `T`, made by `make` when there is none yet.
    pub fn get_or_make<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        if let Some(value) = find(&self.values.read().unwrap_or_else(|e| e.into_inner())) {
            return value;
        }
        let mut values = self.values.write().unwrap_or_else(|e| e.into_inner());
        // Another task may have made it between the two locks.
        if let Some(value) = find(&values) {
            return value;
        }
        let value = Arc::new(make());
        values.push(value.clone());
        value
    }
}

fn find<T: Any + Send + Sync>(values: &[Arc<dyn Any + Send + Sync>]) -> Option<Arc<T>> {
    values.iter().find_map(|v| v.clone().downcast::<T>().ok())
}

#[cfg(test)]
mod tests {
    use super::Kept;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn each_type_has_one_value_made_once() {
        let kept = Kept::default();
        let first = kept.get_or_make(|| AtomicU64::new(1));
        first.fetch_add(1, Ordering::Relaxed);
        let again = kept.get_or_make(|| AtomicU64::new(100));
        assert_eq!(
            again.load(Ordering::Relaxed),
            2,
            "the same value, not made again"
        );
        let other = kept.get_or_make(|| String::from("other"));
        assert_eq!(*other, "other");
        assert_eq!(
            kept.get_or_make(|| AtomicU64::new(7))
                .load(Ordering::Relaxed),
            2
        );
    }
}
