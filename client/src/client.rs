//! [`LockClient`]: the public facade where locks come from. One
//! implementation of every operation, async, over the client's transport
//! (`transport.rs`: one server or a cluster); the sync methods drive the
//! same futures to completion on the calling thread (`runtime::block`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, MultiplexedConnection};
use tracing::Instrument as _;

use crate::cluster::{self, Cluster};
use crate::cmd::{random_token, session_refusal, Backend, Grant, Lease, LockCmd, LockKind};
use crate::error::{Error, Result};
use crate::holding::Flavor;
use crate::info::LockInfo;
use crate::lock::Lock;
use crate::options::{ClientOptions, LockOptions};
use crate::replicas;
use crate::retry::Backoff;
use crate::revocation::{parse_revoke, revoke_cmd, RevokeOptions, RevokeReply};
use crate::runtime;
use crate::session::{self, SessionCalls, SessionUse};
use crate::single::{AsyncConn, Single};
use crate::trace;
use crate::transport::{Api, Core};
use crate::wait::Waited;

/// A lock client: sync methods and their `_async` twins, one
/// implementation each. Cheap to clone (clones share the connections).
///
/// Built from a URL or a [`redis::Client`], it opens one
/// [`ConnectionManager`] (which reconnects by itself) on first use, shared
/// by both APIs and by the watchdogs of all its locks. Built from an
/// existing connection, only the matching API works; the other fails with
/// [`Error::InvalidArgument`].
#[derive(Clone)]
pub struct LockClient {
    pub(crate) core: Arc<Core>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient").field("options", &self.core.opts).finish_non_exhaustive()
    }
}

impl LockClient {
    /// A client for `url` (e.g. `redis://127.0.0.1:6379/`) with default
    /// [`ClientOptions`]. Does not connect yet.
    pub fn open(url: &str) -> Result<Self> {
        Self::open_with(url, ClientOptions::default())
    }

    /// A client for `url` with `opts`. Does not connect yet. A
    /// `redis+cluster://` URL opens a cluster client
    /// ([`LockClient::open_cluster`]).
    pub fn open_with(url: &str, opts: ClientOptions) -> Result<Self> {
        if cluster::is_cluster_url(url) {
            return Self::open_cluster_with(&[url], opts);
        }
        Ok(Self::from_client(redis::Client::open(url)?, opts))
    }

    /// A client on an existing [`redis::Client`]; both APIs work.
    pub fn from_client(client: redis::Client, opts: ClientOptions) -> Self {
        Self::build(Single::from_client(client, opts.clone()), opts)
    }

    /// A sync-only client on an existing connection. Its read and write
    /// timeouts are set to the response timeout. After an I/O error the
    /// connection is dropped and, having no URL, the client cannot reconnect:
    /// further calls fail with [`Error::InvalidArgument`].
    pub fn from_connection(con: redis::Connection, opts: ClientOptions) -> Result<Self> {
        Ok(Self::build(Single::from_sync(con, opts.clone())?, opts))
    }

    /// An async-only client on an existing [`ConnectionManager`].
    pub fn from_manager(manager: ConnectionManager, opts: ClientOptions) -> Self {
        Self::build(Single::from_async(AsyncConn::Manager(manager), opts.clone()), opts)
    }

    /// An async-only client on an existing [`MultiplexedConnection`].
    pub fn from_multiplexed(con: MultiplexedConnection, opts: ClientOptions) -> Self {
        Self::build(Single::from_async(AsyncConn::Multiplexed(con), opts.clone()), opts)
    }

    /// A client for a Redis Cluster, given one or more seed nodes
    /// (`redis://host:port/` each, or `redis+cluster://h1:p1,h2:p2/`). Does
    /// not connect yet. Same API as a single-server client: locks on keys of
    /// every master, with fences, waits and watchdogs; see the "Redis Cluster"
    /// section of the crate docs for what differs.
    pub fn open_cluster<S: AsRef<str>>(urls: &[S]) -> Result<Self> {
        Self::open_cluster_with(urls, ClientOptions::default())
    }

    /// [`LockClient::open_cluster`] with options.
    pub fn open_cluster_with<S: AsRef<str>>(urls: &[S], opts: ClientOptions) -> Result<Self> {
        Ok(LockClient { core: Core::new(Arc::new(Cluster::open(urls, opts.clone())?), opts) })
    }

    fn build(single: Single, opts: ClientOptions) -> Self {
        LockClient { core: Core::new(Arc::new(single), opts) }
    }

    /// Whether this client talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.core.transport.is_cluster()
    }

    /// What the client's server was found to speak (in a cluster: the node
    /// of the last command). One connection serves both APIs, so this is
    /// [`LockClient::backend_async`] too.
    pub fn backend(&self) -> Backend {
        self.core.transport.backend().get()
    }

    /// What the async connection's server was found to speak.
    pub fn backend_async(&self) -> Backend {
        self.backend()
    }

    /// Takes `key` for `ttl` if it is free; [`Error::NotAcquired`] if not.
    pub fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Lock> {
        self.try_acquire_with(key, ttl, &LockOptions::default())
    }

    /// [`LockClient::try_acquire`] with options (token, watchdog).
    pub fn try_acquire_with(&self, key: &str, ttl: Duration, opts: &LockOptions) -> Result<Lock> {
        self.acquire_with(key, ttl, Duration::ZERO, opts)
    }

    /// Takes `key` for `ttl`, waiting up to `wait` while it is held; then
    /// [`Error::NotAcquired`]. Server and connection errors end the wait at
    /// once, except in a cluster, where a topology change (a failover's
    /// refused connections and redirects, `CLUSTERDOWN`, `TRYAGAIN`) is
    /// retried with a growing pause until the wait ends.
    ///
    /// With the module, the wait happens inside the server
    /// (`LOCK.ACQUIRE ... WAIT`): one call on a dedicated connection, queued
    /// FIFO behind earlier waiters, handed the lock the moment it is
    /// released. Its reply may take the whole wait, which the response
    /// timeout does not cut short. Without the module, with a module that
    /// refuses `WAIT`, or on a client built from a single connection, it
    /// retries with jittered backoff ([`LockOptions::retry_delay`]).
    pub fn acquire(&self, key: &str, ttl: Duration, wait: Duration) -> Result<Lock> {
        self.acquire_with(key, ttl, wait, &LockOptions::default())
    }

    /// [`LockClient::acquire`] with options (token, watchdog, backoff).
    pub fn acquire_with(&self, key: &str, ttl: Duration, wait: Duration, opts: &LockOptions) -> Result<Lock> {
        self.acquire_sync(LockKind::Exclusive, key, ttl, wait, opts)
    }

    /// Acquire-or-takeover (`LOCK.TAKEOVER`): takes `key` when it is free,
    /// holds a structured lock of the same `run_id`, or holds a legacy bare
    /// token that is stale (remaining TTL ≤ TTL/2, or no expiry). The value
    /// written is `{"owner":token,"runId":run_id}`. An empty `run_id` is a
    /// plain [`LockClient::try_acquire`].
    pub fn takeover(&self, key: &str, run_id: &str, ttl: Duration) -> Result<Lock> {
        self.takeover_with(key, run_id, ttl, &LockOptions::default())
    }

    /// [`LockClient::takeover`] with options (token, watchdog).
    pub fn takeover_with(&self, key: &str, run_id: &str, ttl: Duration, opts: &LockOptions) -> Result<Lock> {
        self.core.transport.serves(Api::Sync)?;
        let (me, key, run_id, opts) = (self.clone(), key.to_string(), run_id.to_string(), opts.clone());
        runtime::block(async move { me.takeover_core(&key, &run_id, ttl, &opts, Flavor::Sync).await })
    }

    /// What `key` holds, as the lock commands see it; `None` when it does
    /// not exist. `LOCK.INFO` with the module; without it, computed from
    /// `GET` and `PTTL` the way the scripts read values (then `fence` is
    /// `None` and `waiters` 0). A key of another type is
    /// [`Error::Redis`] (`WRONGTYPE`).
    pub fn info(&self, key: &str) -> Result<Option<LockInfo>> {
        check_key(key)?;
        self.core.transport.serves(Api::Sync)?;
        let (core, key) = (self.core.clone(), key.to_string());
        runtime::block(async move { core.transport.info(&key).await })
    }

    /// The async twin of [`LockClient::info`].
    pub async fn info_async(&self, key: &str) -> Result<Option<LockInfo>> {
        check_key(key)?;
        self.core.transport.serves(Api::Async)?;
        self.core.transport.info(key).await
    }

    /// Releases `key` if `token` owns it, without a [`Lock`] handle (for
    /// operators clearing a lock whose holder is gone). [`Error::NotHeld`]
    /// if `token` does not own it.
    pub fn release_token(&self, key: &str, token: &str) -> Result<()> {
        self.core.transport.serves(Api::Sync)?;
        let (core, cmd) = (self.core.clone(), LockCmd::release(key, token)?);
        released(key, runtime::block(async move { core.run_ok(&cmd).await })?)
    }

    /// Revokes `key`'s hold (`LOCK.REVOKE`, module only; docs/revocation.md):
    /// a lock, a leadership, or (with [`RevokeOptions::token`]) a holder of a
    /// semaphore or read-write lock. Its holder hears it on its next renewal
    /// ([`Lock::revoked`]); the server ends the hold after the grace.
    pub fn revoke(&self, key: &str, opts: &RevokeOptions) -> Result<RevokeReply> {
        check_key(key)?;
        self.core.transport.serves(Api::Sync)?;
        let (core, key, cmd) = (self.core.clone(), key.to_string(), revoke_cmd(key, opts));
        runtime::block(async move { parse_revoke(core.transport.call(&key, &cmd).await?) })
    }

    /// The async twin of [`LockClient::revoke`].
    pub async fn revoke_async(&self, key: &str, opts: &RevokeOptions) -> Result<RevokeReply> {
        check_key(key)?;
        self.core.transport.serves(Api::Async)?;
        parse_revoke(self.core.transport.call(key, &revoke_cmd(key, opts)).await?)
    }

    /// The async twin of [`LockClient::try_acquire`].
    pub async fn try_acquire_async(&self, key: &str, ttl: Duration) -> Result<Lock> {
        self.try_acquire_with_async(key, ttl, &LockOptions::default()).await
    }

    /// The async twin of [`LockClient::try_acquire_with`].
    pub async fn try_acquire_with_async(&self, key: &str, ttl: Duration, opts: &LockOptions) -> Result<Lock> {
        self.acquire_with_async(key, ttl, Duration::ZERO, opts).await
    }

    /// The async twin of [`LockClient::acquire`]; waits without blocking
    /// the runtime (in the server's queue with the module, as there).
    pub async fn acquire_async(&self, key: &str, ttl: Duration, wait: Duration) -> Result<Lock> {
        self.acquire_with_async(key, ttl, wait, &LockOptions::default()).await
    }

    /// The async twin of [`LockClient::acquire_with`].
    pub async fn acquire_with_async(
        &self,
        key: &str,
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
    ) -> Result<Lock> {
        self.acquire_async_of(LockKind::Exclusive, key, ttl, wait, opts).await
    }

    /// The async twin of [`LockClient::takeover`].
    pub async fn takeover_async(&self, key: &str, run_id: &str, ttl: Duration) -> Result<Lock> {
        self.takeover_with_async(key, run_id, ttl, &LockOptions::default()).await
    }

    /// The async twin of [`LockClient::takeover_with`].
    pub async fn takeover_with_async(
        &self,
        key: &str,
        run_id: &str,
        ttl: Duration,
        opts: &LockOptions,
    ) -> Result<Lock> {
        let rt = runtime()?;
        self.core.transport.serves(Api::Async)?;
        self.takeover_core(key, run_id, ttl, opts, Flavor::Async(rt)).await
    }

    /// The async twin of [`LockClient::release_token`].
    pub async fn release_token_async(&self, key: &str, token: &str) -> Result<()> {
        self.core.transport.serves(Api::Async)?;
        released(key, self.core.run_ok(&LockCmd::release(key, token)?).await?)
    }

    /// The sync acquire of every kind.
    pub(crate) fn acquire_sync(
        &self,
        kind: LockKind,
        key: &str,
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
    ) -> Result<Lock> {
        self.core.transport.serves(Api::Sync)?;
        let (me, key, opts) = (self.clone(), key.to_string(), opts.clone());
        runtime::block(async move { me.acquire_core(kind, &key, ttl, wait, &opts, Flavor::Sync).await })
    }

    /// The async acquire of every kind.
    pub(crate) async fn acquire_async_of(
        &self,
        kind: LockKind,
        key: &str,
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
    ) -> Result<Lock> {
        let rt = runtime()?;
        self.core.transport.serves(Api::Async)?;
        self.acquire_core(kind, key, ttl, wait, opts, Flavor::Async(rt)).await
    }

    /// The one acquire, for both APIs and every kind.
    async fn acquire_core(
        &self,
        kind: LockKind,
        key: &str,
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
        flavor: Flavor,
    ) -> Result<Lock> {
        let lease = lease_of(opts, ttl)?;
        let cmd = LockCmd::acquire_of(kind, key, &token_of(opts), ttl)?.with_lease(lease);
        let span = acquire_span(&cmd, "acquire", wait);
        let started = Instant::now();
        let r = self.acquire_cmd(&cmd, ttl, wait, opts, flavor).instrument(span.clone()).await;
        self.traced(key, &span, started, r.map_err(|e| cmd.explain(e)))
    }

    /// Records an acquire's outcome on its span, and opens the hold's.
    fn traced(&self, key: &str, span: &tracing::Span, started: Instant, r: Result<Lock>) -> Result<Lock> {
        self.traced_as(key, None, span, started, r)
    }

    /// [`LockClient::traced`], the hold's span of kind `kind` (an
    /// election's) rather than the lock's own.
    pub(crate) fn traced_as(
        &self,
        key: &str,
        kind: Option<&'static str>,
        span: &tracing::Span,
        started: Instant,
        r: Result<Lock>,
    ) -> Result<Lock> {
        let server = || self.core.transport.server_of(key);
        trace::acquired(span, started, &r, Lock::fence, server);
        if let Ok(lock) = &r {
            lock.trace_held(span, kind.unwrap_or(lock.kind().trace_name()), server);
        }
        r
    }

    /// An acquire of `cmd` (any grant: a lock of any kind, a campaign),
    /// waiting up to `wait`; held by the client's session on the key's
    /// node where one can hold it (`session.rs`). A node that refuses the
    /// session (it does not know it, or this command takes none there)
    /// wrote nothing: the acquire is then made again without it, in what
    /// is left of the wait, and the lock renews on its own.
    pub(crate) async fn acquire_cmd(
        &self,
        cmd: &LockCmd,
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
        flavor: Flavor,
    ) -> Result<Lock> {
        let started = Instant::now();
        if let Some(used) = self.session_for(cmd, ttl, opts).await {
            let held = cmd.with_session(used.lease.clone());
            let r = self.acquire_once(&held, ttl, wait, opts, flavor.clone()).await;
            let refusal = match &r {
                Err(Error::Redis(e)) => session_refusal(e),
                _ => None,
            };
            match (refusal, self.core.engine()) {
                (Some(why), Some(engine)) => engine.sessions().refused(&used, why, cmd.name()),
                _ => return r,
            }
        }
        self.acquire_once(cmd, ttl, wait.saturating_sub(started.elapsed()), opts, flavor).await
    }

    /// The session a lock of `cmd` can be held by, if any (`session.rs`).
    async fn session_for(&self, cmd: &LockCmd, ttl: Duration, opts: &LockOptions) -> Option<SessionUse> {
        let session_ttl = session::session_ttl(cmd, ttl, opts, &self.core.opts)?;
        let (engine, calls) = (self.core.engine()?, self.core.clone() as Arc<dyn SessionCalls>);
        engine.sessions().session_for(calls, cmd.key(), session_ttl, cmd.lease().lock_delay_ms, cmd.name()).await
    }

    /// [`LockClient::acquire_cmd`] as it is sent.
    async fn acquire_once(
        &self,
        cmd: &LockCmd,
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
        flavor: Flavor,
    ) -> Result<Lock> {
        let key = cmd.key();
        let t = &self.core.transport;
        let mut backoff = Backoff::new(opts.retry_min_delay, opts.retry_max_delay, wait, Instant::now());
        loop {
            if let Some(left) = t.may_block(backoff.left(Instant::now())) {
                match t.clone().wait_acquire(cmd, ttl, left).await? {
                    Waited::Granted { fence, sent, asked } => {
                        return self.hand_out(cmd, Handed { fence, sent, asked }, ttl, opts, flavor).await
                    }
                    Waited::Refused => return Err(Error::NotAcquired { key: key.into() }),
                    Waited::Unsupported => {}
                }
            }
            let sent = Instant::now();
            if let g @ Grant::Granted(_) = t.run(cmd, Some(backoff.deadline())).await? {
                return self.hand_out(cmd, Handed { fence: g.fence(), sent, asked: sent }, ttl, opts, flavor).await;
            }
            // This first attempt found the module: wait in its queue from now.
            if t.may_block(backoff.left(Instant::now())).is_some() {
                continue;
            }
            match backoff.next(Instant::now(), rand::random::<f64>()) {
                Some(d) => tokio::time::sleep(d).await,
                None => return Err(Error::NotAcquired { key: key.into() }),
            }
        }
    }

    /// The one takeover, for both APIs.
    async fn takeover_core(
        &self,
        key: &str,
        run_id: &str,
        ttl: Duration,
        opts: &LockOptions,
        flavor: Flavor,
    ) -> Result<Lock> {
        let cmd = LockCmd::takeover(key, &token_of(opts), run_id, ttl)?.with_lease(lease_of(opts, ttl)?);
        let span = acquire_span(&cmd, "takeover", Duration::ZERO);
        let sent = Instant::now();
        let r = async {
            match self.core.run(&cmd).await? {
                g if g.took_effect() => {
                    self.hand_out(&cmd, Handed { fence: g.fence(), sent, asked: sent }, ttl, opts, flavor).await
                }
                _ => Err(Error::NotAcquired { key: key.into() }),
            }
        }
        .instrument(span.clone())
        .await;
        self.traced(key, &span, sent, r)
    }

    /// The lock `cmd` was granted, confirmed on the replicas first if asked for.
    async fn hand_out(
        &self,
        cmd: &LockCmd,
        h: Handed,
        ttl: Duration,
        opts: &LockOptions,
        flavor: Flavor,
    ) -> Result<Lock> {
        let lock = Lock::new(self.core.clone(), cmd, h.sent, ttl, opts, flavor, h.fence);
        if let Some(max_hold) = cmd.lease().max_hold() {
            lock.limit_hold(h.asked, max_hold);
        }
        replicas::confirm(&self.core, lock, opts.replicas).await
    }
}

/// The `trace::ACQUIRE` span of `cmd` (`op`: acquire or takeover).
fn acquire_span(cmd: &LockCmd, op: &'static str, wait: Duration) -> tracing::Span {
    trace::acquire_span(cmd.key(), cmd.kind().trace_name(), op, wait)
}

/// A grant to hand out: its fence, when its validity counts from, and
/// when the command that made it was sent (a hold limit counts from then).
struct Handed {
    fence: Option<u64>,
    sent: Instant,
    asked: Instant,
}

/// `LOCKDELAY` / `MAXHOLD` of a grant of `ttl`, from the options.
pub(crate) fn lease_of(opts: &LockOptions, ttl: Duration) -> Result<Lease> {
    Lease::new(opts.lock_delay, opts.max_hold, ttl)
}

fn released(key: &str, took_effect: bool) -> Result<()> {
    if took_effect {
        Ok(())
    } else {
        Err(Error::NotHeld { key: key.into() })
    }
}

/// The runtime that will run the lock's release on drop (if the engine
/// cannot). Checked up front: tokio would panic outside a runtime.
pub(crate) fn runtime() -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .map_err(|_| Error::InvalidArgument("the _async methods must run inside a tokio runtime".into()))
}

/// The module's check (`LOCK.INFO` with an empty key is refused there too).
pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("lock key is required".into()));
    }
    Ok(())
}

pub(crate) fn token_of(opts: &LockOptions) -> String {
    opts.token.clone().unwrap_or_else(random_token)
}
