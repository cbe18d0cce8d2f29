//! Several exclusive lock keys opened together for one all-or-nothing
//! grant (LOCK.ACQUIREALL, at once or as a waiter from the queues): every
//! key is opened and an ended lease settled, all are judged, and only when
//! every one is free is each written, exactly as LOCK.ACQUIRE writes one
//! (`SET key value PXAT at`, the effect replicated with its absolute
//! expiry), so the reference scripts and LOCK.RENEW / LOCK.RELEASE see N
//! ordinary locks; with a session (`SESSION id`), each stored and attached
//! as LOCK.ACQUIRE … SESSION stores and attaches one.

use redis_lock_rules::lease::Grant;
use redis_lock_rules::lock;
use redis_module::raw::RedisModuleString;

use crate::boundary::ctx::{bytes, Ctx};
use crate::server::timings;
use crate::store::lease;
use crate::store::lock_key::{LockKey, NewValue};
use crate::store::session;

/// The keys, open, in the request's order.
pub struct LockSet {
    keys: Vec<LockKey>,
}

impl LockSet {
    /// Opens every key of `names` for a write at `now`, settling ended leases.
    pub fn open(ctx: Ctx, names: &[*mut RedisModuleString], now: i64) -> LockSet {
        LockSet { keys: names.iter().map(|&name| lease::open(ctx, name, now)).collect() }
    }

    /// The keys that cannot be taken now (held, in a lock-delay, another
    /// type): each one's index and deadline (none: no expiry).
    pub fn busy(&self) -> Vec<(usize, Option<i64>)> {
        let taken = |k: &LockKey| !lock::may_acquire(k.entry());
        self.keys.iter().enumerate().filter(|(_, k)| taken(k)).map(|(i, k)| (i, k.expires_at())).collect()
    }

    /// Whether a key is in its lock-delay (holds a tombstone).
    pub fn delayed(&self) -> bool {
        self.keys.iter().any(lease::delayed)
    }

    /// Grants every key to `token` with the lease `g` at `now`; with
    /// `held` (a session's id and what its grant stores: the value and
    /// the keys' expiry, none without MAXHOLD), as LOCK.ACQUIRE … SESSION
    /// stores one, each key attached to the session next to its write.
    /// The keys' expiry (none: persistent).
    pub fn grant(mut self, token: *mut RedisModuleString, g: &Grant, held: Option<&Held>, now: i64) -> Option<i64> {
        let value = lease::lock_value(bytes(token), g);
        for k in &mut self.keys {
            match held {
                Some((_, (v, pxat))) => k.set_maybe_expiring(NewValue::Composed(v), *pxat),
                None => k.set(value.new_value(token), g.pxat),
            }
            let (ctx, name) = k.ctx_and_name();
            if let Some((id, _)) = held {
                session::attach(ctx, *id, name);
            }
            timings::hold_started(ctx, name, timings::Family::Exclusive, now);
        }
        held.map_or(Some(g.pxat), |(_, (_, pxat))| *pxat)
    }
}

/// A grant held by a session: its id, the value and the keys' expiry.
pub type Held = (u128, (Vec<u8>, Option<i64>));
