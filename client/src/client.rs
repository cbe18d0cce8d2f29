//! [`LockClient`]: where locks come from. It owns the connections (one sync,
//! one async, each opened on first use) and runs every [`LockCmd`] on them.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use rand::Rng;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{ConnectionLike as _, RedisResult};

use crate::cluster::{self, Cluster};
use crate::cmd::{query_batch, random_token, Backend, BackendCell, Grant, LockCmd};
use crate::engine::{self, Due, Engine, Renewed, Renewer};
use crate::error::{Error, Result};
use crate::info::{self, LockInfo};
use crate::lock::Lock;
use crate::options::{ClientOptions, LockOptions};
use crate::replicas;
use crate::runtime;
use crate::wait::{self, Waited};

/// A lock client: sync methods and their `_async` twins over one command
/// builder. Cheap to clone (clones share the connections).
///
/// Built from a URL or a [`redis::Client`], it opens a blocking connection
/// for the sync API and a [`ConnectionManager`] (which reconnects by itself)
/// for the async API, each on first use. Built from an existing connection,
/// only the matching API works; the other fails with
/// [`Error::InvalidArgument`].
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Clone)]
pub(crate) enum AsyncConn {
    Manager(ConnectionManager),
    Multiplexed(MultiplexedConnection),
}

pub(crate) struct Inner {
    /// `None` when built from a connection: no reconnects, no wait connections.
    pub(crate) client: Option<redis::Client>,
    pub(crate) opts: ClientOptions,
    /// `None` until first use, and again after an I/O error: a connection
    /// that timed out may still deliver the late reply, which the next
    /// command would take for its own.
    sync: Mutex<Option<redis::Connection>>,
    /// Also what the sync wait connections (same URL) are taken to speak.
    pub(crate) sync_backend: BackendCell,
    /// Set once the sync connection was given by the caller (no reconnect).
    sync_given: bool,
    aio: tokio::sync::OnceCell<AsyncConn>,
    pub(crate) aio_backend: BackendCell,
    /// Dedicated connections for blocking waits (see the `wait` module).
    pub(crate) waits: wait::Pool,
    /// Set for a Redis Cluster client: then every command goes through it
    /// (`client`, `sync` and `aio` stay unused).
    pub(crate) cluster: Option<Cluster>,
    /// Renews every watchdog lock of this client; started by the first.
    engine: OnceLock<Option<Arc<Engine>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(Some(e)) = self.engine.get() {
            e.close();
        }
    }
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient").field("options", &self.inner.opts).finish_non_exhaustive()
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
        Self::build(Some(client), None, None, opts)
    }

    /// A sync-only client on an existing connection. Its read and write
    /// timeouts are set to the response timeout. After an I/O error the
    /// connection is dropped and, having no URL, the client cannot reconnect:
    /// further calls fail with [`Error::InvalidArgument`].
    pub fn from_connection(con: redis::Connection, opts: ClientOptions) -> Result<Self> {
        con.set_read_timeout(Some(opts.response_timeout))?;
        con.set_write_timeout(Some(opts.response_timeout))?;
        Ok(Self::build(None, Some(con), None, opts))
    }

    /// An async-only client on an existing [`ConnectionManager`].
    pub fn from_manager(manager: ConnectionManager, opts: ClientOptions) -> Self {
        Self::build(None, None, Some(AsyncConn::Manager(manager)), opts)
    }

    /// An async-only client on an existing [`MultiplexedConnection`].
    pub fn from_multiplexed(con: MultiplexedConnection, opts: ClientOptions) -> Self {
        Self::build(None, None, Some(AsyncConn::Multiplexed(con)), opts)
    }

    pub(crate) fn build_cluster(cluster: Cluster, opts: ClientOptions) -> Self {
        let mut lc = Self::build(None, None, None, opts);
        if let Some(inner) = Arc::get_mut(&mut lc.inner) {
            inner.cluster = Some(cluster);
        }
        lc
    }

    fn build(client: Option<redis::Client>, sync: Option<redis::Connection>, aio: Option<AsyncConn>, opts: ClientOptions) -> Self {
        let sync_given = sync.is_some();
        LockClient {
            inner: Arc::new(Inner {
                client,
                opts,
                sync: Mutex::new(sync),
                sync_backend: BackendCell::default(),
                sync_given,
                aio: tokio::sync::OnceCell::new_with(aio),
                aio_backend: BackendCell::default(),
                waits: wait::Pool::default(),
                cluster: None,
                engine: OnceLock::new(),
            }),
        }
    }

    /// What the sync connection's server was found to speak.
    pub fn backend(&self) -> Backend {
        self.inner.sync_backend.get()
    }

    /// What the async connection's server was found to speak.
    pub fn backend_async(&self) -> Backend {
        self.inner.aio_backend.get()
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
    /// once.
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
        let token = token_of(opts);
        let cmd = LockCmd::acquire(key, &token, ttl)?;
        let mut backoff = Backoff::new(opts, wait);
        loop {
            if let Some(left) = self.inner.may_block(&self.inner.sync_backend, backoff.left()) {
                match wait::acquire(&self.inner, &cmd, ttl, left)? {
                    Waited::Granted { fence, sent } => return replicas::confirm(self, Lock::new_sync(self.clone(), key, token, sent, ttl, opts, fence), opts.replicas),
                    Waited::Refused => return Err(Error::NotAcquired { key: key.into() }),
                    Waited::Unsupported => {}
                }
            }
            let sent = Instant::now();
            if let Grant::Granted(fence) = self.inner.run_grant_within(&cmd, backoff.deadline)? {
                return replicas::confirm(self, Lock::new_sync(self.clone(), key, token, sent, ttl, opts, fence), opts.replicas);
            }
            // This first attempt found the module: wait in its queue from now.
            if self.inner.may_block(&self.inner.sync_backend, backoff.left()).is_some() {
                continue;
            }
            match backoff.next() {
                Some(d) => std::thread::sleep(d),
                None => return Err(Error::NotAcquired { key: key.into() }),
            }
        }
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
        let token = token_of(opts);
        let cmd = LockCmd::takeover(key, &token, run_id, ttl)?;
        let sent = Instant::now();
        match self.inner.run_grant(&cmd)? {
            Grant::Granted(fence) => replicas::confirm(self, Lock::new_sync(self.clone(), key, token, sent, ttl, opts, fence), opts.replicas),
            Grant::Refused => Err(Error::NotAcquired { key: key.into() }),
        }
    }

    /// What `key` holds, as the lock commands see it; `None` when it does
    /// not exist. `LOCK.INFO` with the module; without it, computed from
    /// `GET` and `PTTL` the way the scripts read values (then `fence` is
    /// `None` and `waiters` 0). A key of another type is
    /// [`Error::Redis`] (`WRONGTYPE`).
    pub fn info(&self, key: &str) -> Result<Option<LockInfo>> {
        check_key(key)?;
        if let Some(c) = &self.inner.cluster {
            return c.info(&self.inner, key);
        }
        self.inner.with_sync(|con, backend| info::query(key, con, backend))
    }

    /// The async twin of [`LockClient::info`].
    pub async fn info_async(&self, key: &str) -> Result<Option<LockInfo>> {
        check_key(key)?;
        if let Some(c) = &self.inner.cluster {
            return c.info_async(&self.inner, key).await;
        }
        let backend = &self.inner.aio_backend;
        self.inner
            .with_async(|mut con| async move {
                match &mut con {
                    AsyncConn::Manager(m) => info::query_async(key, m, backend).await,
                    AsyncConn::Multiplexed(m) => info::query_async(key, m, backend).await,
                }
            })
            .await
    }

    /// Releases `key` if `token` owns it, without a [`Lock`] handle (for
    /// operators clearing a lock whose holder is gone). [`Error::NotHeld`]
    /// if `token` does not own it.
    pub fn release_token(&self, key: &str, token: &str) -> Result<()> {
        if self.inner.run(&LockCmd::release(key, token)?)? {
            Ok(())
        } else {
            Err(Error::NotHeld { key: key.into() })
        }
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
    pub async fn acquire_with_async(&self, key: &str, ttl: Duration, wait: Duration, opts: &LockOptions) -> Result<Lock> {
        let rt = runtime()?;
        let token = token_of(opts);
        let cmd = LockCmd::acquire(key, &token, ttl)?;
        let mut backoff = Backoff::new(opts, wait);
        loop {
            if let Some(left) = self.inner.may_block(&self.inner.aio_backend, backoff.left()) {
                match wait::acquire_async(self, &cmd, ttl, left).await? {
                    Waited::Granted { fence, sent } => {
                        let lock = Lock::new_async(self.clone(), key, token, sent, ttl, opts, rt, fence);
                        return replicas::confirm_async(self, lock, opts.replicas).await;
                    }
                    Waited::Refused => return Err(Error::NotAcquired { key: key.into() }),
                    Waited::Unsupported => {}
                }
            }
            let sent = Instant::now();
            if let Grant::Granted(fence) = self.inner.run_grant_within_async(&cmd, backoff.deadline).await? {
                let lock = Lock::new_async(self.clone(), key, token, sent, ttl, opts, rt, fence);
                return replicas::confirm_async(self, lock, opts.replicas).await;
            }
            if self.inner.may_block(&self.inner.aio_backend, backoff.left()).is_some() {
                continue;
            }
            match backoff.next() {
                Some(d) => tokio::time::sleep(d).await,
                None => return Err(Error::NotAcquired { key: key.into() }),
            }
        }
    }

    /// The async twin of [`LockClient::takeover`].
    pub async fn takeover_async(&self, key: &str, run_id: &str, ttl: Duration) -> Result<Lock> {
        self.takeover_with_async(key, run_id, ttl, &LockOptions::default()).await
    }

    /// The async twin of [`LockClient::takeover_with`].
    pub async fn takeover_with_async(&self, key: &str, run_id: &str, ttl: Duration, opts: &LockOptions) -> Result<Lock> {
        let rt = runtime()?;
        let token = token_of(opts);
        let cmd = LockCmd::takeover(key, &token, run_id, ttl)?;
        let sent = Instant::now();
        match self.inner.run_grant_async(&cmd).await? {
            Grant::Granted(fence) => replicas::confirm_async(self, Lock::new_async(self.clone(), key, token, sent, ttl, opts, rt, fence), opts.replicas).await,
            Grant::Refused => Err(Error::NotAcquired { key: key.into() }),
        }
    }

    /// The async twin of [`LockClient::release_token`].
    pub async fn release_token_async(&self, key: &str, token: &str) -> Result<()> {
        if self.inner.run_async(&LockCmd::release(key, token)?).await? {
            Ok(())
        } else {
            Err(Error::NotHeld { key: key.into() })
        }
    }
}

/// The runtime that will run the lock's watchdog and its release on drop.
/// Checked up front: tokio's timers would panic outside a runtime.
fn runtime() -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current().map_err(|_| Error::InvalidArgument("the _async methods must run inside a tokio runtime".into()))
}

/// The module's check (`LOCK.INFO` with an empty key is refused there too).
fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("lock key is required".into()));
    }
    Ok(())
}

fn token_of(opts: &LockOptions) -> String {
    opts.token.clone().unwrap_or_else(random_token)
}

/// Full-jitter exponential backoff bounded by the wait's deadline.
struct Backoff {
    deadline: Instant,
    min: Duration,
    max: Duration,
    cap: Duration,
}

impl Backoff {
    fn new(opts: &LockOptions, wait: Duration) -> Self {
        let deadline = Instant::now().checked_add(wait).unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        Backoff { deadline, min: opts.retry_min_delay, max: opts.retry_max_delay, cap: opts.retry_min_delay }
    }

    /// What is left of the wait.
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The pause before the next attempt, or `None` when the wait is over.
    /// The last pause is cut to end at the deadline, so one attempt is made there.
    fn next(&mut self) -> Option<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let d = if self.cap > self.min { rand::thread_rng().gen_range(self.min..=self.cap) } else { self.min };
        self.cap = (self.cap * 2).min(self.max);
        Some(d.min(left))
    }
}

impl Inner {
    /// `Some(left)` when the rest of a wait can be spent blocked in the
    /// server: the module has (or may have) WAIT, a dedicated connection can
    /// be opened, and at least a millisecond is left.
    pub(crate) fn may_block(&self, backend: &BackendCell, left: Duration) -> Option<Duration> {
        ((self.client.is_some() || self.cluster.is_some()) && backend.may_wait() && left >= Duration::from_millis(1)).then_some(left)
    }

    /// Runs `cmd` on the sync connection: true when it took effect.
    pub(crate) fn run(&self, cmd: &LockCmd) -> Result<bool> {
        self.run_grant(cmd).map(Grant::took_effect)
    }

    /// [`Inner::run_grant`] for an acquire that may wait until
    /// `deadline`: in a cluster, topology failures are retried until then.
    fn run_grant_within(&self, cmd: &LockCmd, deadline: Instant) -> Result<Grant> {
        match &self.cluster {
            Some(c) => c.run_grant_until(self, cmd, Some(deadline)),
            None => self.run_grant(cmd),
        }
    }

    /// The async twin of [`Inner::run_grant_within`].
    async fn run_grant_within_async(&self, cmd: &LockCmd, deadline: Instant) -> Result<Grant> {
        match &self.cluster {
            Some(c) => c.run_grant_until_async(self, cmd, Some(deadline)).await,
            None => self.run_grant_async(cmd).await,
        }
    }

    pub(crate) fn run_grant(&self, cmd: &LockCmd) -> Result<Grant> {
        if let Some(c) = &self.cluster {
            return c.run_grant(self, cmd);
        }
        self.with_sync(|con, backend| cmd.query(con, backend))
    }

    /// Runs `f` on the sync connection, (re)connecting first if needed.
    pub(crate) fn with_sync<T>(&self, f: impl FnOnce(&mut redis::Connection, &BackendCell) -> RedisResult<T>) -> Result<T> {
        // Poisoning only means another thread panicked mid-command; the
        // connection is dropped below on any doubt, so carry on.
        let mut slot = self.sync.lock().unwrap_or_else(|p| p.into_inner());
        let con = match slot.as_mut() {
            Some(con) => con,
            None => {
                let Some(client) = &self.client else {
                    return Err(Error::InvalidArgument(if self.sync_given {
                        "the connection this client was built from failed; build a new client".into()
                    } else {
                        "this client was built from an async connection: use the _async methods".into()
                    }));
                };
                let con = client.get_connection_with_timeout(self.opts.connect_timeout)?;
                con.set_read_timeout(Some(self.opts.response_timeout))?;
                con.set_write_timeout(Some(self.opts.response_timeout))?;
                self.sync_backend.reset();
                slot.insert(con)
            }
        };
        let r = f(con, &self.sync_backend);
        if let Err(e) = &r {
            if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || !con.is_open() {
                *slot = None;
            }
        }
        Ok(r?)
    }

    async fn conn_async(&self) -> Result<AsyncConn> {
        let con = self
            .aio
            .get_or_try_init(|| async {
                let Some(client) = &self.client else {
                    return Err(Error::InvalidArgument("this client was built from a sync connection: use the sync methods".into()));
                };
                let cfg = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.opts.connect_timeout))
                    .set_response_timeout(Some(self.opts.response_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(200));
                // Opened on the background runtime, which drives it: it then
                // outlives the caller's runtime, and the renewal engine
                // (there too) shares it with the async API.
                let client = client.clone();
                let opened = runtime::spawn(async move { client.get_connection_manager_with_config(cfg).await })?;
                let manager = opened.await.map_err(|e| Error::Redis(std::io::Error::other(e.to_string()).into()))??;
                Ok(AsyncConn::Manager(manager))
            })
            .await?;
        Ok(con.clone())
    }

    /// The async twin of [`Inner::run`].
    pub(crate) async fn run_async(&self, cmd: &LockCmd) -> Result<bool> {
        self.run_grant_async(cmd).await.map(Grant::took_effect)
    }

    pub(crate) async fn run_grant_async(&self, cmd: &LockCmd) -> Result<Grant> {
        if let Some(c) = &self.cluster {
            return c.run_grant_async(self, cmd).await;
        }
        let backend = &self.aio_backend;
        self.with_async(|mut con| async move {
            match &mut con {
                AsyncConn::Manager(m) => cmd.query_async(m, backend).await,
                AsyncConn::Multiplexed(m) => cmd.query_async(m, backend).await,
            }
        })
        .await
    }

    /// The async twin of [`Inner::with_sync`]. The response timeout is
    /// enforced here too, since a connection given by the caller may have none.
    pub(crate) async fn with_async<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(AsyncConn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let fut = async {
            let con = self.conn_async().await?;
            Ok::<T, Error>(f(con).await?)
        };
        match tokio::time::timeout(self.opts.response_timeout + self.opts.connect_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(Error::Redis(std::io::Error::new(std::io::ErrorKind::TimedOut, "lock command timed out").into())),
        }
    }
}

impl Inner {
    /// This client's renewal engine, started on first use; `None` if the
    /// background runtime cannot start (then watchdog locks are not
    /// renewed, and report their loss when their TTL runs out).
    pub(crate) fn engine(self: &Arc<Self>) -> Option<&Arc<Engine>> {
        self.engine
            .get_or_init(|| {
                let me: Arc<dyn Renewer> = self.clone();
                Engine::start(Arc::downgrade(&me), self.opts.watchdog_batch).ok()
            })
            .as_ref()
    }

    /// Runs many renew or release commands, one pipeline per node with at
    /// most `batch` each; per command when it was sent and its outcome.
    pub(crate) async fn run_batch(self: &Arc<Self>, cmds: Vec<LockCmd>, batch: usize) -> Vec<(Instant, Result<Grant>)> {
        if let Some(c) = &self.cluster {
            return c.run_batch(self, cmds, batch).await;
        }
        engine::in_chunks(cmds, batch, |chunk| async move {
            let sent = Instant::now();
            let n = chunk.len();
            let r = if self.sync_given {
                // A given sync connection: blocking calls, off the runtime.
                let me = self.clone();
                tokio::task::spawn_blocking(move || chunk.iter().map(|c| me.run_grant(c)).collect::<Vec<_>>())
                    .await
                    .map_err(|e| Error::Redis(std::io::Error::other(e.to_string()).into()))
            } else {
                let backend = &self.aio_backend;
                let chunk = &chunk;
                self.with_async(|mut con| async move {
                    let r = match &mut con {
                        AsyncConn::Manager(m) => query_batch(chunk, m, backend).await,
                        AsyncConn::Multiplexed(m) => query_batch(chunk, m, backend).await,
                    };
                    r.map(|v| v.into_iter().map(|r| r.map_err(Error::from)).collect::<Vec<_>>())
                })
                .await
            };
            let r = r.unwrap_or_else(|e| engine::failed_all(&e, n));
            r.into_iter().map(|r| (sent, r)).collect::<Vec<_>>()
        })
        .await
    }
}

impl Renewer for Inner {
    fn renew_all(self: Arc<Self>, due: Vec<Due>, batch: usize) -> BoxFuture<'static, Vec<Renewed>> {
        Box::pin(async move {
            let cmds: Vec<Result<LockCmd>> = due.iter().map(|d| LockCmd::renew(&d.shared.key, &d.shared.token, d.ttl)).collect();
            renewed(&self, cmds, batch).await
        })
    }

    fn release_all(self: Arc<Self>, locks: Vec<(String, String)>, batch: usize) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let cmds = locks.iter().filter_map(|(k, t)| LockCmd::release(k, t).ok()).collect();
            self.run_batch(cmds, batch).await;
        })
    }
}

/// Runs the commands that could be built, and answers for all in order.
async fn renewed(inner: &Arc<Inner>, cmds: Vec<Result<LockCmd>>, batch: usize) -> Vec<Renewed> {
    let now = Instant::now();
    let ok: Vec<LockCmd> = cmds.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
    let mut ran = inner.run_batch(ok, batch).await.into_iter();
    cmds.into_iter()
        .map(|c| match c {
            Ok(_) => ran.next().map_or((now, Err(Error::InvalidArgument("no answer".into()))), |(sent, r)| (sent, r.map(Grant::took_effect))),
            Err(e) => (now, Err(e)),
        })
        .collect()
}
