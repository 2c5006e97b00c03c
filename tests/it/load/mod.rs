//! Many leases, connections and keys at once: nothing freezes the server and the bounds hold.

mod big_shared_keys;
mod connection_churn;
mod expiry_hand_offs;
mod observers;
mod random_mix;
mod stalls;
pub(crate) mod storms;
