//! Blocking acquires on the module's `LOCK.ACQUIRE ... WAIT`: the server
//! queues the caller (FIFO per key) and answers once the lock is granted or
//! the wait is over, so a waiter gets a released lock at once, without
//! polling. This file holds what a wait means, for both transports (one
//! server: `single.rs`; a cluster: `cluster/`).
//!
//! A waiting client is blocked inside the server, and a blocked connection
//! runs nothing else until it is answered. So a wait never uses the client's
//! shared connection (that would stall every renewal and release of this
//! client, watchdogs included, for the whole wait): it runs on a dedicated
//! connection, taken from a small pool of idle ones or opened for it. That
//! connection's reply timeout is the wait plus the response timeout, so a
//! long wait is not cut off while a dead server is still noticed.
//!
//! Clients built from a single given connection have no way to open another
//! and always poll.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::RedisError;

use crate::cmd::{Backend, Grant, LockCmd};
use crate::error::Result;
use crate::send::BackendCell;

/// Idle wait connections kept per node; more concurrent waits open more
/// connections, which are closed when they finish.
const MAX_IDLE: usize = 4;

/// Idle dedicated connections, per node.
pub(crate) struct Pool<K> {
    idle: Mutex<HashMap<K, Vec<MultiplexedConnection>>>,
}

impl<K> Default for Pool<K> {
    fn default() -> Self {
        Pool { idle: Mutex::default() }
    }
}

impl<K: Eq + Hash + Clone> Pool<K> {
    fn idle(&self) -> std::sync::MutexGuard<'_, HashMap<K, Vec<MultiplexedConnection>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn take(&self, node: &K) -> Option<MultiplexedConnection> {
        self.idle().get_mut(node).and_then(Vec::pop)
    }

    pub(crate) fn put(&self, node: &K, con: MultiplexedConnection) {
        let mut idle = self.idle();
        let v = idle.entry(node.clone()).or_default();
        if v.len() < MAX_IDLE {
            v.push(con);
        }
    }

    /// Drops the idle connections to `node` (it closed one on us).
    pub(crate) fn forget(&self, node: &K) {
        self.idle().remove(node);
    }
}

/// How a blocking acquire ended.
pub(crate) enum Waited {
    /// Granted. `sent` is when the validity of the lock starts counting: the
    /// moment the WAIT, or the confirming renewal, was sent; `asked` when
    /// the granting WAIT was sent (no grant can be older: a hold limit
    /// counts from it).
    Granted { fence: Option<u64>, sent: Instant, asked: Instant },
    /// The wait ran out without a grant.
    Refused,
    /// This module has no WAIT; the caller polls from now on.
    Unsupported,
}

/// The `WAIT timeout-ms` for what is left of the wait: whole milliseconds,
/// rounded up so the server never gives up before the caller's deadline,
/// and at least 1 (0 would mean forever).
pub(crate) fn wait_ms(left: Duration) -> u64 {
    u64::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX).clamp(1, i64::MAX.unsigned_abs())
}

/// The grant came at some unknown moment during the wait, and the client
/// counts a lock's validity from the earliest moment the server could have
/// started its TTL: when the command was sent. After a wait longer than a
/// tenth of the TTL that would leave the lock too little (or no) validity,
/// so the grant is confirmed by a renewal, whose sending time is a safe
/// start again.
pub(crate) fn needs_confirming(sent: Instant, ttl: Duration, now: Instant) -> bool {
    now.saturating_duration_since(sent) > ttl / 10
}

/// A grant that came at `sent` after waiting, confirmed by a renewal
/// (sent by `renew`, on whatever connection the transport chooses) when the
/// wait was long (see [`needs_confirming`]), so that the lock's validity
/// counts from a safe start. `guard` is disarmed once the outcome is known;
/// on an error it is left to release the token.
pub(crate) async fn confirm<F, Fut>(
    cmd: &LockCmd,
    ttl: Duration,
    fence: Option<u64>,
    sent: Instant,
    guard: ReleaseOnCancel,
    renew: F,
) -> Result<Waited>
where
    F: FnOnce(LockCmd) -> Fut,
    Fut: std::future::Future<Output = Result<Grant>>,
{
    let asked = sent;
    if !needs_confirming(sent, ttl, Instant::now()) {
        guard.disarm();
        return Ok(Waited::Granted { fence, sent, asked });
    }
    let renewal = cmd.renewal(ttl)?;
    let sent = Instant::now();
    // A renewal cut short by a hold limit still confirms the grant; the
    // lock's validity is capped by that limit (`Shared::limit_hold`).
    let waited = match renew(renewal).await? {
        g if g.took_effect() => Waited::Granted { fence, sent, asked },
        // Gone again before we could confirm it (deleted, or a tiny TTL).
        _ => Waited::Refused,
    };
    guard.disarm();
    Ok(waited)
}

/// A refused WAIT ends the wait, unless the server turned out to have no
/// module (it was replaced since the backend was detected): then the one
/// `SET NX` attempt made instead does not, and the caller polls.
pub(crate) fn refused(backend: &BackendCell) -> Waited {
    if backend.get() == Backend::Scripts {
        return Waited::Unsupported;
    }
    backend.set_wait(true);
    Waited::Refused
}

/// An I/O failure or timeout leaves unknown whether the server granted the
/// lock just before; such a wait ends with a best-effort release.
pub(crate) fn outcome_unknown(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

/// A reused idle connection that the server or a proxy closed meanwhile
/// (an idle `timeout`) fails at once; that is worth one more try on a fresh
/// connection, with what is left of the wait.
pub(crate) fn stale(e: &RedisError, reused: bool) -> bool {
    reused && (e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error()) && !e.is_timeout()
}

/// Releases the token if the acquire future is dropped mid-wait (a
/// `select!` or timeout around it): closing the connection takes the waiter
/// out of the server's queue, but a grant may already be on its way. The
/// release is the transport's, given as a future to spawn.
pub(crate) struct ReleaseOnCancel {
    armed: Option<BoxFuture<'static, ()>>,
}

impl ReleaseOnCancel {
    pub(crate) fn new(release: BoxFuture<'static, ()>) -> Self {
        ReleaseOnCancel { armed: Some(release) }
    }

    pub(crate) fn disarm(mut self) {
        self.armed = None;
    }
}

impl Drop for ReleaseOnCancel {
    fn drop(&mut self) {
        let Some(release) = self.armed.take() else { return };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_whole_ms_rounded_up_never_zero() {
        assert_eq!(wait_ms(Duration::from_micros(1500)), 2);
        assert_eq!(wait_ms(Duration::from_micros(149_680)), 150);
        assert_eq!(wait_ms(Duration::from_millis(150)), 150);
        assert_eq!(wait_ms(Duration::from_micros(10)), 1);
        assert_eq!(wait_ms(Duration::ZERO), 1);
        assert_eq!(wait_ms(Duration::from_secs(10)), 10_000);
        assert_eq!(wait_ms(Duration::MAX), i64::MAX.unsigned_abs());
    }

    #[test]
    fn a_long_wait_is_confirmed() {
        let sent = Instant::now();
        let ttl = Duration::from_millis(1000);
        assert!(!needs_confirming(sent, ttl, sent + Duration::from_millis(100)));
        assert!(needs_confirming(sent, ttl, sent + Duration::from_millis(101)));
    }
}
