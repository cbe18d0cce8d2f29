//! Blocking acquires on the module's `LOCK.ACQUIRE ... WAIT`: the server
//! queues the caller (FIFO per key) and answers once the lock is granted or
//! the wait is over, so a waiter gets a released lock at once, without
//! polling.
//!
//! A waiting client is blocked inside the server, and a blocked connection
//! runs nothing else until it is answered. So a wait never uses the client's
//! shared connections (that would stall every renewal and release of this
//! client, watchdogs included, for the whole wait): it runs on a dedicated
//! connection, taken from a small pool of idle ones or opened for it. That
//! connection's reply timeout is the wait plus the response timeout, so a
//! long wait is not cut off while a dead server is still noticed.
//!
//! Clients built from a single given connection have no way to open another
//! and always poll.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};

use crate::client::{Inner, LockClient};
use crate::cmd::{is_wait_unsupported, Backend, BackendCell, Grant, LockCmd};
use crate::error::Result;

/// Idle wait connections kept per client and API; more concurrent waits
/// open more connections, which are closed when they finish.
const MAX_IDLE: usize = 4;

/// Idle dedicated connections, for the sync and the async API.
#[derive(Default)]
pub(crate) struct Pool {
    sync: Mutex<Vec<redis::Connection>>,
    aio: Mutex<Vec<MultiplexedConnection>>,
}

impl Pool {
    fn take_sync(&self) -> Option<redis::Connection> {
        self.sync.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn put_sync(&self, con: redis::Connection) {
        let mut idle = self.sync.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE && redis::ConnectionLike::is_open(&con) {
            idle.push(con);
        }
    }

    /// Drops every idle connection.
    fn clear(&self) {
        self.sync.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.aio.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn take_async(&self) -> Option<MultiplexedConnection> {
        self.aio.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn put_async(&self, con: MultiplexedConnection) {
        let mut idle = self.aio.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(con);
        }
    }
}

/// How a blocking acquire ended.
pub(crate) enum Waited {
    /// Granted. `sent` is when the validity of the lock starts counting: the
    /// moment the WAIT, or the confirming renewal, was sent.
    Granted { fence: Option<u64>, sent: Instant },
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
pub(crate) fn needs_confirming(sent: Instant, ttl: Duration) -> bool {
    sent.elapsed() > ttl / 10
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

/// Blocks in the server for up to `left` on a dedicated sync connection.
pub(crate) fn acquire(inner: &Inner, cmd: &LockCmd, ttl: Duration, left: Duration) -> Result<Waited> {
    if let Some(cl) = &inner.cluster {
        return crate::cluster::wait_acquire(inner, cl, cmd, ttl, left);
    }
    let Some(client) = &inner.client else { return Ok(Waited::Unsupported) };
    let backend = &inner.sync_backend;
    let start = Instant::now();
    let mut pooled = inner.waits.take_sync();
    let (mut con, sent, fence) = loop {
        let reused = pooled.is_some();
        let mut con = match pooled.take() {
            Some(con) => con,
            None => client.get_connection_with_timeout(inner.opts.connect_timeout)?,
        };
        let left = left.saturating_sub(start.elapsed());
        con.set_write_timeout(Some(inner.opts.response_timeout))?;
        // The server answers when the wait ends; then the reply still has to come.
        con.set_read_timeout(Some(left.saturating_add(inner.opts.response_timeout)))?;
        let sent = Instant::now();
        match cmd.with_wait(wait_ms(left)).query(&mut con, backend) {
            Ok(Grant::Granted(fence)) => break (con, sent, fence),
            Ok(Grant::Refused) => {
                inner.waits.put_sync(con);
                return Ok(refused(backend));
            }
            Err(e) if is_wait_unsupported(&e) => {
                backend.set_wait(false);
                inner.waits.put_sync(con);
                return Ok(Waited::Unsupported);
            }
            Err(e) => {
                drop(con);
                if outcome_unknown(&e) {
                    release_quietly(inner, cmd);
                }
                if stale(&e, reused) {
                    // Its idle siblings are likely just as dead.
                    inner.waits.clear();
                    continue;
                }
                return Err(e.into());
            }
        }
    };
    backend.set_wait(true);
    if !needs_confirming(sent, ttl) {
        inner.waits.put_sync(con);
        return Ok(Waited::Granted { fence, sent });
    }
    con.set_read_timeout(Some(inner.opts.response_timeout))?;
    let renew = LockCmd::renew(cmd.key(), cmd.token(), ttl)?;
    let sent = Instant::now();
    match renew.query(&mut con, backend) {
        Ok(Grant::Granted(_)) => {
            inner.waits.put_sync(con);
            Ok(Waited::Granted { fence, sent })
        }
        // Gone again before we could confirm it (deleted, or a tiny TTL).
        Ok(Grant::Refused) => {
            inner.waits.put_sync(con);
            Ok(Waited::Refused)
        }
        Err(e) => {
            drop(con);
            release_quietly(inner, cmd);
            Err(e.into())
        }
    }
}

pub(crate) fn release_quietly(inner: &Inner, cmd: &LockCmd) {
    if let Ok(release) = LockCmd::release(cmd.key(), cmd.token()) {
        let _ = inner.run(&release);
    }
}

/// Releases the token if the acquire future is dropped mid-wait (a
/// `select!` or timeout around it): closing the connection takes the waiter
/// out of the server's queue, but a grant may already be on its way.
pub(crate) struct ReleaseOnCancel {
    armed: Option<(LockClient, LockCmd)>,
}

impl ReleaseOnCancel {
    pub(crate) fn new(lc: &LockClient, cmd: &LockCmd) -> Self {
        ReleaseOnCancel { armed: Some((lc.clone(), cmd.clone())) }
    }

    pub(crate) fn disarm(mut self) {
        self.armed = None;
    }
}

impl Drop for ReleaseOnCancel {
    fn drop(&mut self) {
        let Some((client, cmd)) = self.armed.take() else { return };
        let Ok(release) = LockCmd::release(cmd.key(), cmd.token()) else { return };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = client.inner.run_async(&release).await;
            });
        }
    }
}

/// The async twin of [`acquire`], on a dedicated multiplexed connection.
pub(crate) async fn acquire_async(lc: &LockClient, cmd: &LockCmd, ttl: Duration, left: Duration) -> Result<Waited> {
    let inner = &lc.inner;
    if let Some(cl) = &inner.cluster {
        return crate::cluster::wait_acquire_async(lc, cl, cmd, ttl, left).await;
    }
    let Some(client) = &inner.client else { return Ok(Waited::Unsupported) };
    let backend = &inner.aio_backend;
    let start = Instant::now();
    let mut pooled = inner.waits.take_async();
    let (mut con, sent, fence, guard) = loop {
        let reused = pooled.is_some();
        let mut con = match pooled.take() {
            Some(con) => con,
            None => {
                // No response timeout of its own: each use sets one below.
                let cfg = AsyncConnectionConfig::new().set_connection_timeout(Some(inner.opts.connect_timeout)).set_response_timeout(None);
                client.get_multiplexed_async_connection_with_config(&cfg).await?
            }
        };
        let left = left.saturating_sub(start.elapsed());
        con.set_response_timeout(left.saturating_add(inner.opts.response_timeout));
        let guard = ReleaseOnCancel { armed: Some((lc.clone(), cmd.clone())) };
        let sent = Instant::now();
        match cmd.with_wait(wait_ms(left)).query_async(&mut con, backend).await {
            Ok(Grant::Granted(fence)) => break (con, sent, fence, guard),
            Ok(Grant::Refused) => {
                guard.disarm();
                inner.waits.put_async(con);
                return Ok(refused(backend));
            }
            Err(e) if is_wait_unsupported(&e) => {
                guard.disarm();
                backend.set_wait(false);
                inner.waits.put_async(con);
                return Ok(Waited::Unsupported);
            }
            Err(e) if stale(&e, reused) => {
                // Released here, not by the guard's spawned task, which
                // could otherwise run after the retry's grant.
                guard.disarm();
                if let Ok(release) = LockCmd::release(cmd.key(), cmd.token()) {
                    let _ = inner.run_async(&release).await;
                }
                inner.waits.clear();
            }
            Err(e) => {
                if !outcome_unknown(&e) {
                    guard.disarm();
                }
                // Otherwise the guard releases as it goes.
                return Err(e.into());
            }
        }
    };
    backend.set_wait(true);
    if !needs_confirming(sent, ttl) {
        guard.disarm();
        inner.waits.put_async(con);
        return Ok(Waited::Granted { fence, sent });
    }
    con.set_response_timeout(inner.opts.response_timeout);
    let renew = LockCmd::renew(cmd.key(), cmd.token(), ttl)?;
    let sent = Instant::now();
    let r = renew.query_async(&mut con, backend).await;
    match r {
        Ok(Grant::Granted(_)) => {
            guard.disarm();
            inner.waits.put_async(con);
            Ok(Waited::Granted { fence, sent })
        }
        Ok(Grant::Refused) => {
            guard.disarm();
            inner.waits.put_async(con);
            Ok(Waited::Refused)
        }
        // The guard releases.
        Err(e) => Err(e.into()),
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
}
