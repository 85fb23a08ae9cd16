//! The keys of an `[upstream]` table that belong to its kind, not to every kind: read as
//! values first (the URL, which names the kind, may come after them), then taken by the kind
//! that owns them. A key no kind owns was refused when it was read; one the table's kind
//! leaves is another kind's, and refused by name.

use serde::de::DeserializeOwned;

use super::UpstreamKeyError;

/// A kind's keys still to be taken, in the order of the file.
#[derive(Default)]
pub(super) struct KindKeys(Vec<(String, toml::Value)>);

impl KindKeys {
    pub fn push(&mut self, key: String, value: toml::Value) {
        self.0.push((key, value));
    }

    /// Reads `T` from the keys named in `names`, which it removes.
    pub fn take<T: DeserializeOwned>(&mut self, names: &[&str]) -> Result<T, UpstreamKeyError> {
        let (taken, left) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|(key, _)| names.contains(&key.as_str()));
        self.0 = left;
        let table: toml::Table = taken.into_iter().collect();
        T::deserialize(toml::Value::Table(table)).map_err(UpstreamKeyError::Value)
    }

    /// The first key left, if any: the table's kind did not take it.
    pub fn left(&self) -> Option<&str> {
        self.0.first().map(|(key, _)| key.as_str())
    }
}
