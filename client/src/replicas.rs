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

use std::sync::Arc;
use std::time::Duration;

use crate::cmd::LockCmd;
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::options::ClientOptions;
use crate::transport::Core;

/// `WAIT n timeout`, sent after the renewal on the same connection.
fn wait_cmd(n: u32, timeout: Duration) -> redis::Cmd {
    let mut wait = redis::cmd("WAIT");
    wait.arg(n).arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1));
    wait
}

/// What the renewal and `WAIT` found (the replicas that acknowledged, or
/// `None` when the renewal found the lock gone); the lock goes out only on
/// `Ok`.
async fn decide(lock: Lock, acked: Option<i64>, wanted: u32) -> Result<Lock> {
    let key = lock.key().to_string();
    match acked {
        Some(n) if n >= i64::from(wanted) => Ok(lock),
        Some(n) => {
            // Best effort: a failed release leaves the lock to its TTL.
            let _ = lock.release_async().await;
            Err(Error::NotReplicated { key, acked: u32::try_from(n.max(0)).unwrap_or(0), wanted })
        }
        None => Err(Error::NotAcquired { key }),
    }
}

fn check(opts: &ClientOptions, timeout: Duration) -> Result<()> {
    if timeout >= opts.response_timeout {
        return Err(Error::InvalidArgument(format!(
            "wait_for_replicas timeout {timeout:?} must be below the response timeout {:?}",
            opts.response_timeout
        )));
    }
    Ok(())
}

/// Confirms a fresh `lock` on `n` replicas within `timeout`, or fails.
pub(crate) async fn confirm(core: &Arc<Core>, lock: Lock, replicas: Option<(u32, Duration)>) -> Result<Lock> {
    let Some((n, timeout)) = replicas else { return Ok(lock) };
    check(&core.opts, timeout)?;
    let renew = LockCmd::renew_of(lock.kind(), lock.key(), lock.token(), lock.ttl())?;
    let acked = core.transport.renew_then_wait(&renew, wait_cmd(n, timeout)).await?;
    decide(lock, acked, n).await
}
