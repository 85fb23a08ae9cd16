//! What a message is charged: so many tokens of one key's bucket in one layer. Apart because
//! the policy builds charges and every part of the engine takes them.

/// `cost` tokens of `key`'s bucket in layer `layer` (an index into the specs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub layer: usize,
    pub key: String,
    pub cost: u64,
}
