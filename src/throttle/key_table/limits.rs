//! What each key of the table runs at: the configured bucket, or the one an adaptive layer
//! learned for that key, with what it learned; and the conversions when either changes, so a
//! bucket keeps the tokens it holds.

use super::{KeyTable, Pin};
use crate::clock::Nanos;
use crate::throttle::adaptive::Learned;
use crate::throttle::bucket::{Bucket, State};

impl<W: Pin> KeyTable<W> {
    /// The configured bucket: that of every key that learned nothing.
    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// The bucket `id` runs at (an adaptive layer's learned one, else the configured one).
    pub fn bucket_of(&self, id: u32) -> &Bucket {
        self.slots[id as usize]
            .bucket
            .as_deref()
            .unwrap_or(&self.bucket)
    }

    /// What an adaptive layer learned for `id`'s key.
    pub fn learned(&self, id: u32) -> Learned {
        self.slots[id as usize]
            .learned
            .as_deref()
            .copied()
            .unwrap_or_default()
    }

    pub fn set_learned(&mut self, id: u32, learned: Learned) {
        let slot = &mut self.slots[id as usize];
        match &mut slot.learned {
            Some(l) => **l = learned,
            None if learned == Learned::default() => {}
            None => slot.learned = Some(Box::new(learned)),
        }
    }

    /// New configured bucket parameters (a fixed layer's limit set at run time): every key
    /// that learned nothing of its own runs at them, its state converted by
    /// `convert(old parameters, state)` so it keeps the tokens it holds.
    pub fn set_bucket(
        &mut self,
        bucket: Bucket,
        now: Nanos,
        convert: impl Fn(&Bucket, State) -> State,
    ) {
        let old = std::mem::replace(&mut self.bucket, bucket);
        for id in self.ids() {
            if self.slots[id as usize].bucket.is_none() {
                self.modify(id, now, |s, _| *s = convert(&old, *s));
            }
        }
    }

    /// New bucket parameters for `id` (its learned limit changed), its state converted by
    /// `convert(old parameters, state)` so it keeps the tokens it holds.
    pub fn set_bucket_of(
        &mut self,
        id: u32,
        bucket: Bucket,
        now: Nanos,
        convert: impl FnOnce(&Bucket, State) -> State,
    ) {
        let old = *self.bucket_of(id);
        let own = (bucket != self.bucket).then(|| Box::new(bucket));
        self.slots[id as usize].bucket = own;
        self.modify(id, now, |s, _| *s = convert(&old, *s));
    }
}
