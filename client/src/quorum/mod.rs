//! Quorum locks over N independent masters (the Redlock scheme, with
//! fencing tokens that never go backwards): [`QuorumClient`] hands out
//! [`QuorumLock`]s that are held on a majority of the servers.
//!
//! - **Acquire**: `LOCK.ACQUIRE ... FENCE` on all servers in parallel, each
//!   bounded by a node timeout; granted by ⌊N/2⌋+1 with a positive validity
//!   (TTL − elapsed − drift allowance); fails fast once a majority can no
//!   longer be reached; on failure, released everywhere; `acquire` retries
//!   after 50–250 ms of jitter until its wait is over.
//! - **Fence**: after the majority granted with fences fᵢ, F = max fᵢ is
//!   pushed back to every granting server with `LOCK.RENEW key token ttl
//!   FLOOR F`, which raises that server's fence mark to ≥ F while it still
//!   holds the key. The lock counts only if a majority then still holds it
//!   within the validity, and its fence is F when a majority took the
//!   floor. Fences then strictly increase across successful acquisitions
//!   whatever the servers' clocks (the argument is in `protocol.rs`).
//! - **Renew** needs a majority within the validity and takes an absent key
//!   again (redsync's `setNXOnExtend`); **release** goes to all servers.
//! - Servers without the module work through the script fallback, as for a
//!   single-server lock, but give no fences: with fewer than a majority of
//!   fence-capable servers, [`QuorumLock::fence`] is `None`.
//!
//! - **Sessions** (`sessions.rs`, docs/sessions.md "Quorum locks"): a
//!   watchdog lock is held by one session per server (the renewal
//!   engine's sessions, a quorum's servers as its nodes), each server's
//!   grant a vote its session keeps (`votes.rs`): one keepalive per server
//!   per TTL/3 for all locks; a session's end drops that server's votes,
//!   taken again at the next renewal unless it was revoked; a lock is lost
//!   below a majority.
//!
//! The sync API drives the same async code to completion on the calling
//! thread (`runtime::block`); the `_async` twins run on the caller's
//! runtime. The watchdogs of all of a client's locks are one renewal
//! engine, which renews them in one pipeline per server.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{Error, QuorumClient};
//!
//! fn main() -> Result<(), Error> {
//!     let client = QuorumClient::open(&["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"])?;
//!     let lock = client.acquire("jobs:nightly", Duration::from_secs(30), Duration::from_secs(5))?;
//!     let _fence: Option<u64> = lock.fence(); // send it with every guarded write
//!     // ... work that ends before lock.valid_until() ...
//!     lock.release()
//! }
//! ```

mod ctx;
mod lock;
mod node;
mod options;
mod protocol;
mod round;
mod sessions;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

pub use crate::failure::QuorumFailure;
pub use lock::QuorumLock;
pub use options::QuorumOptions;

use crate::cmd::{random_token, LockKind};
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::runtime;
use crate::trace;
use ctx::Ctx;
use node::Node;
use protocol::Acquired;

/// A lock client over several independent redis masters: a lock is held
/// when a majority of them hold it. Cheap to clone (clones share the
/// connections). Opening does not connect; each server gets its own
/// connections on first use, one for the sync API and one for the async
/// API, and a server that is down only costs the node timeout of the steps
/// that needed it.
#[derive(Clone)]
pub struct QuorumClient {
    ctx: Arc<Ctx>,
}

impl std::fmt::Debug for QuorumClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.ctx.nodes.iter().map(|n| n.name.as_str()).collect();
        f.debug_struct("QuorumClient").field("servers", &names).field("options", &self.ctx.opts).finish()
    }
}

impl QuorumClient {
    /// A client for these servers with the default [`QuorumOptions`].
    pub fn open<S: AsRef<str>>(urls: &[S]) -> Result<Self> {
        Self::open_with(urls, QuorumOptions::default())
    }

    /// A client for these servers. At least one URL, no URL twice (a server
    /// counted twice would make two holders' majorities share no server).
    /// One server is allowed and is then a plain single-server lock with
    /// this client's semantics.
    pub fn open_with<S: AsRef<str>>(urls: &[S], opts: QuorumOptions) -> Result<Self> {
        if urls.is_empty() {
            return Err(Error::InvalidArgument("a quorum client needs at least one server URL".into()));
        }
        let mut seen = std::collections::HashSet::new();
        let client_opts = opts.client_options();
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            let url = url.as_ref();
            let info = redis::IntoConnectionInfo::into_connection_info(url)?;
            if !seen.insert(format!("{:?}/{}", info.addr(), info.redis_settings().db())) {
                return Err(Error::InvalidArgument(format!("server {} is listed twice", crate::failure::redact(url))));
            }
            nodes.push(Arc::new(Node::open(url, client_opts.clone())?));
        }
        Ok(QuorumClient { ctx: Arc::new(Ctx::new(nodes, opts)) })
    }

    /// How many servers.
    pub fn servers(&self) -> usize {
        self.ctx.nodes.len()
    }

    /// The majority a lock needs: ⌊servers/2⌋ + 1.
    pub fn quorum(&self) -> usize {
        self.ctx.quorum()
    }

    /// One attempt to take `key` for `ttl` on a majority;
    /// [`Error::NotAcquired`] if a majority holds it for someone else,
    /// [`Error::NoQuorum`] if too few servers answered in time.
    pub fn try_acquire(&self, key: &str, ttl: Duration) -> Result<QuorumLock> {
        self.acquire_with(key, ttl, Duration::ZERO, &LockOptions::default())
    }

    /// [`QuorumClient::try_acquire`] with options (token, watchdog).
    pub fn try_acquire_with(&self, key: &str, ttl: Duration, opts: &LockOptions) -> Result<QuorumLock> {
        self.acquire_with(key, ttl, Duration::ZERO, opts)
    }

    /// Takes `key` for `ttl` on a majority, attempting again after a pause
    /// of [`QuorumOptions::retry_delay`] until `wait` is over; the error is
    /// then the last attempt's.
    pub fn acquire(&self, key: &str, ttl: Duration, wait: Duration) -> Result<QuorumLock> {
        self.acquire_with(key, ttl, wait, &LockOptions::default())
    }

    /// [`QuorumClient::acquire`] with options (token, watchdog).
    pub fn acquire_with(&self, key: &str, ttl: Duration, wait: Duration, opts: &LockOptions) -> Result<QuorumLock> {
        let token = opts.token.clone().unwrap_or_else(random_token);
        protocol::check(&self.ctx, key, &token, ttl)?;
        no_lease_rules(opts)?;
        let (ctx, k, t, o) = (self.ctx.clone(), key.to_string(), token.clone(), opts.clone());
        let (span, started) = (acquire_span(key, wait), Instant::now());
        let acquiring = async move { protocol::acquire(&ctx, &k, &t, ttl, wait, &o).await }.instrument(span.clone());
        let acquired = runtime::block(acquiring);
        self.traced(&span, started, acquired, |a| QuorumLock::new(self.ctx.clone(), key, token, a, ttl, opts, None))
    }

    /// The async twin of [`QuorumClient::try_acquire`].
    pub async fn try_acquire_async(&self, key: &str, ttl: Duration) -> Result<QuorumLock> {
        self.acquire_with_async(key, ttl, Duration::ZERO, &LockOptions::default()).await
    }

    /// The async twin of [`QuorumClient::try_acquire_with`].
    pub async fn try_acquire_with_async(&self, key: &str, ttl: Duration, opts: &LockOptions) -> Result<QuorumLock> {
        self.acquire_with_async(key, ttl, Duration::ZERO, opts).await
    }

    /// The async twin of [`QuorumClient::acquire`].
    pub async fn acquire_async(&self, key: &str, ttl: Duration, wait: Duration) -> Result<QuorumLock> {
        self.acquire_with_async(key, ttl, wait, &LockOptions::default()).await
    }

    /// The async twin of [`QuorumClient::acquire_with`]. Dropping the future
    /// half-way releases whatever was granted, in the background.
    pub async fn acquire_with_async(
        &self,
        key: &str,
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
    ) -> Result<QuorumLock> {
        let rt = lock::in_runtime()?;
        let token = opts.token.clone().unwrap_or_else(random_token);
        protocol::check(&self.ctx, key, &token, ttl)?;
        no_lease_rules(opts)?;
        let (span, started) = (acquire_span(key, wait), Instant::now());
        let acquired = protocol::acquire(&self.ctx, key, &token, ttl, wait, opts).instrument(span.clone()).await;
        self.traced(&span, started, acquired, |a| QuorumLock::new(self.ctx.clone(), key, token, a, ttl, opts, Some(rt)))
    }

    /// Records an acquire's outcome on its span, makes the lock of a
    /// grant (`lock`) and opens its hold's span.
    fn traced(
        &self,
        span: &tracing::Span,
        started: Instant,
        acquired: Result<Acquired>,
        lock: impl FnOnce(Acquired) -> QuorumLock,
    ) -> Result<QuorumLock> {
        // The trace's `server`: the servers that held the key.
        let servers = |held_on: &[usize]| {
            let names: Vec<String> =
                held_on.iter().filter_map(|&i| self.ctx.nodes.get(i)).map(|n| n.server()).collect();
            names.join(",")
        };
        let servers_of = || acquired.as_ref().map_or_else(|_| String::new(), |a| servers(&a.held_on));
        trace::acquired(span, started, &acquired, |a| a.fence, servers_of);
        let mut acquired = acquired?;
        let held_on = std::mem::take(&mut acquired.held_on);
        let lock = lock(acquired);
        lock.trace_held(span, || servers(&held_on));
        Ok(lock)
    }

    /// Releases `key` on every server where `token` holds it, without a
    /// handle (for operators clearing a lock whose holder is gone).
    /// [`Error::NotHeld`] if no majority held it for `token`.
    pub fn release_token(&self, key: &str, token: &str) -> Result<()> {
        let (ctx, k, t) = (self.ctx.clone(), key.to_string(), token.to_string());
        let timeout = self.ctx.opts.node_timeout.unwrap_or(Duration::from_secs(1));
        match runtime::block(async move { protocol::release(&ctx, &k, &t, timeout).await })? {
            true => Ok(()),
            false => Err(Error::NotHeld { key: key.into() }),
        }
    }
}

/// The `trace::ACQUIRE` span of a quorum acquire (an exclusive lock).
fn acquire_span(key: &str, wait: Duration) -> tracing::Span {
    trace::acquire_span(key, LockKind::Exclusive.trace_name(), "acquire", wait)
}

/// A lock-delay or hold limit is kept by each server for its own copy of
/// the key, from its own grant time; a majority's copies would end at
/// different moments, so neither would bound the quorum lock as a whole.
/// Refused rather than half-kept.
fn no_lease_rules(opts: &LockOptions) -> Result<()> {
    if opts.lock_delay.is_some() || opts.max_hold.is_some() {
        return Err(Error::InvalidArgument(
            "lock_delay and max_hold are not supported on quorum locks (each server would keep its own)".into(),
        ));
    }
    Ok(())
}
