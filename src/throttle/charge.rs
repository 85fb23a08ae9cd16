//! What a message is charged: so many tokens of one key's bucket in one layer. Apart because
//! the policy builds charges and every part of the engine takes them.

/// `cost` tokens of `key`'s bucket in layer `layer` (an index into the specs); `fair` is the
/// message's fair key in a layer with `fair_by` (whose turn it is among the waiters), else
/// empty. `blame` is whom an adaptive layer blames for a throttle reply to the message (see
/// `throttle::blame`): the fair key, else the message's key in its first layer keyed by
/// anything but `none` or `rcpt-domain`; empty when none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Charge {
    pub layer: usize,
    pub key: String,
    pub cost: u64,
    pub fair: String,
    pub blame: String,
}
