//! Opt-in: a lock is handed out only once its grant reached a number of
//! replicas ([`LockOptions::wait_for_replicas`](crate::LockOptions::wait_for_replicas)),
//! as Redisson's `waitForSlaves` does.
//!
//! Replication is asynchronous: a master that fails over right after a
//! grant can lose it, and the promoted replica then grants the same key to
//! someone else. Waiting for `n` replicas after the grant closes that window
//! for failovers to one of those replicas, at the price of a round trip and
//! of the replicas' lag on every acquisition.
//!
//! How: on the connection that made the grant's node write, a renewal (a
//! write that follows the grant in the master's one replication stream,
//! also when the grant came from the server's wait queue, which no command
//! of this connection wrote), then `WAIT n timeout`: a replica that
//! acknowledged the renewal has the grant. Too few acknowledgements, or a
//! renewal that finds the lock gone, release it and fail the acquisition.

use std::time::Duration;

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::RedisResult;

use crate::client::{AsyncConn, LockClient};
use crate::cmd::{BackendCell, LockCmd};
use crate::error::{Error, Result};
use crate::lock::Lock;

/// `WAIT n timeout` after `renew` on the same connection: the replicas that
/// acknowledged, or `None` when the renewal found the lock gone.
fn wait_cmd(n: u32, timeout: Duration) -> redis::Cmd {
    let mut wait = redis::cmd("WAIT");
    wait.arg(n).arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1));
    wait
}

/// What the renewal and `WAIT` found; the lock goes out only on `Ok`.
fn decide(lock: Lock, acked: Option<i64>, wanted: u32) -> Result<Lock> {
    let key = lock.key().to_string();
    match acked {
        Some(n) if n >= i64::from(wanted) => Ok(lock),
        Some(n) => {
            // Best effort: a failed release leaves the lock to its TTL.
            let _ = release(&lock);
            Err(Error::NotReplicated { key, acked: u32::try_from(n.max(0)).unwrap_or(0), wanted })
        }
        None => Err(Error::NotAcquired { key }),
    }
}

fn release(lock: &Lock) -> Result<()> {
    if lock.is_async() {
        // Dropping an async lock spawns its release (no blocking here).
        Ok(())
    } else {
        lock.release()
    }
}

fn check(client: &LockClient, timeout: Duration) -> Result<()> {
    if timeout >= client.inner.opts.response_timeout {
        return Err(Error::InvalidArgument(format!(
            "wait_for_replicas timeout {timeout:?} must be below the response timeout {:?}",
            client.inner.opts.response_timeout
        )));
    }
    Ok(())
}

/// Confirms a fresh sync `lock` on `n` replicas within `timeout`, or fails.
pub(crate) fn confirm(client: &LockClient, lock: Lock, replicas: Option<(u32, Duration)>) -> Result<Lock> {
    let Some((n, timeout)) = replicas else { return Ok(lock) };
    check(client, timeout)?;
    let renew = LockCmd::renew(lock.key(), lock.token(), lock.ttl())?;
    let acked = match &client.inner.cluster {
        Some(cl) => cl.with_sync(&client.inner, |con| {
            let cell = BackendCell::default();
            if !renew.query(con, &cell)?.took_effect() {
                return Ok(None);
            }
            let v = con.route_command(&wait_cmd(n, timeout), owner(lock.key()))?;
            redis::from_redis_value(v).map(Some).map_err(Into::into)
        })?,
        None => client.inner.with_sync(|con, backend| -> RedisResult<Option<i64>> {
            if !renew.query(con, backend)?.took_effect() {
                return Ok(None);
            }
            wait_cmd(n, timeout).query(con).map(Some)
        })?,
    };
    decide(lock, acked, n)
}

/// The async twin of [`confirm`].
pub(crate) async fn confirm_async(client: &LockClient, lock: Lock, replicas: Option<(u32, Duration)>) -> Result<Lock> {
    let Some((n, timeout)) = replicas else { return Ok(lock) };
    check(client, timeout)?;
    let renew = LockCmd::renew(lock.key(), lock.token(), lock.ttl())?;
    let acked = match &client.inner.cluster {
        Some(cl) => {
            let mut con = cl.conn_async(&client.inner).await?;
            let cell = BackendCell::default();
            if renew.query_async(&mut con, &cell).await?.took_effect() {
                let v = con.route_command(wait_cmd(n, timeout), owner(lock.key())).await?;
                Some(redis::from_redis_value(v).map_err(redis::RedisError::from)?)
            } else {
                None
            }
        }
        None => {
            let backend = &client.inner.aio_backend;
            client
                .inner
                .with_async(|mut con| async move {
                    let granted = match &mut con {
                        AsyncConn::Manager(m) => renew.query_async(m, backend).await?,
                        AsyncConn::Multiplexed(m) => renew.query_async(m, backend).await?,
                    };
                    if !granted.took_effect() {
                        return Ok(None);
                    }
                    let wait = wait_cmd(n, timeout);
                    match &mut con {
                        AsyncConn::Manager(m) => wait.query_async(m).await.map(Some),
                        AsyncConn::Multiplexed(m) => wait.query_async(m).await.map(Some),
                    }
                })
                .await?
        }
    };
    decide(lock, acked, n)
}

/// The master of `key`'s slot: where the renewal went, so `WAIT` counts
/// that node's replicas on the same connection (redis-rs would otherwise
/// send `WAIT` to every master).
fn owner(key: &str) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_slot(Slot::for_key(key), SlotAddr::Master)))
}
