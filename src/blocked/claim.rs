//! What a waiter waits for (`crate::blocked::waiters`): one wait queue per
//! key serves every kind of claim in arrival order.

use redis_lock_rules::holders::Want;
use redis_module::raw::RedisModuleString;

use crate::server::timings;

/// What a waiter waits for. One queue per key serves all of them in
/// arrival order: a `LOCK.ACQUIRE` waiter on a semaphore's key waits, as on
/// any existing key, until the key is gone, and those behind it wait too.
#[derive(Clone, Copy, Debug)]
pub enum Claim {
    /// The exclusive lock (`LOCK.ACQUIRE … WAIT`).
    Lock,
    /// A place among a semaphore's or read-write lock's holders.
    Holder(Want),
    /// The exclusive lock as an election's leader (`LOCK.ELECT … WAIT`):
    /// granted as `Lock`, storing the election value with the grant's
    /// fence as term and revision. `value` is retained while it waits.
    Elect { value: *mut RedisModuleString },
    /// Every key it waits on, as exclusive locks, at once
    /// (`LOCK.ACQUIREALL … WAIT`): granted as `Lock` on each, when it heads
    /// every key's line and every key is free (`grant_all`).
    All,
}

impl Claim {
    /// The family its wait is counted in.
    pub fn family(self) -> timings::Family {
        match self {
            Claim::Lock | Claim::All => timings::Family::Exclusive,
            Claim::Elect { .. } => timings::Family::Election,
            Claim::Holder(want) => timings::Family::of_holders(want.family()),
        }
    }
}
