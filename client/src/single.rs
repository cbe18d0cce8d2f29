//! The transport to one server: its connection (one multiplexed
//! connection shared by every caller, sync and async, and by the renewal
//! engine), the dedicated connections of blocking waits, and what the
//! server was found to speak.
//!
//! A client built from a URL opens a [`ConnectionManager`] (which
//! reconnects by itself) on first use, on the background runtime, so it
//! outlives any caller's runtime. A client built from a given connection
//! uses that one alone, and only the matching API: a given sync
//! [`redis::Connection`] serves the sync API (with blocking calls), a given
//! async one the `_async` API.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, ConnectionLike as _, RedisFuture, RedisResult, Value};

use crate::cmd::{is_wait_unsupported, Grant, LockCmd, LockKind};
use crate::engine;
use crate::error::{Error, Result};
use crate::info::{self, HoldersInfo, LockInfo};
use crate::options::ClientOptions;
use crate::runtime;
use crate::send::{self, BackendCell, Exchange};
use crate::trace;
use crate::transport::{self, bounded, Api, Observer, Transport};
use crate::wait::{self, ReleaseOnCancel, Waited};

/// The shared async connection.
#[derive(Clone)]
pub(crate) enum AsyncConn {
    Manager(ConnectionManager),
    Multiplexed(MultiplexedConnection),
}

impl redis::aio::ConnectionLike for AsyncConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        match self {
            AsyncConn::Manager(m) => m.req_packed_command(cmd),
            AsyncConn::Multiplexed(m) => m.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            AsyncConn::Manager(m) => m.req_packed_commands(cmd, offset, count),
            AsyncConn::Multiplexed(m) => m.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            AsyncConn::Manager(m) => m.get_db(),
            AsyncConn::Multiplexed(m) => m.get_db(),
        }
    }
}

enum Conns {
    /// From a URL: opened on first use; waits get connections of their own.
    Url { client: redis::Client, shared: tokio::sync::OnceCell<AsyncConn> },
    /// A given async connection.
    Given(AsyncConn),
    /// A given sync connection; `None` once it failed (there is no URL to
    /// reconnect to).
    Sync(Mutex<Option<redis::Connection>>),
}

/// One server.
pub(crate) struct Single {
    conns: Conns,
    /// What the server was found to speak (module or scripts, `WAIT` or not).
    pub(crate) backend: BackendCell,
    pub(crate) opts: ClientOptions,
    waits: wait::Pool<()>,
    /// `host:port`, as traces name the server.
    server: String,
}

impl Single {
    pub(crate) fn from_client(client: redis::Client, opts: ClientOptions) -> Single {
        Self::new(Conns::Url { client, shared: tokio::sync::OnceCell::new() }, opts)
    }

    pub(crate) fn from_async(con: AsyncConn, opts: ClientOptions) -> Single {
        Self::new(Conns::Given(con), opts)
    }

    pub(crate) fn from_sync(con: redis::Connection, opts: ClientOptions) -> Result<Single> {
        con.set_read_timeout(Some(opts.response_timeout))?;
        con.set_write_timeout(Some(opts.response_timeout))?;
        Ok(Self::new(Conns::Sync(Mutex::new(Some(con))), opts))
    }

    fn new(conns: Conns, opts: ClientOptions) -> Single {
        let server = match &conns {
            Conns::Url { client, .. } => client.get_connection_info().addr().to_string(),
            Conns::Given(_) | Conns::Sync(_) => "connection".into(),
        };
        Single { conns, backend: BackendCell::default(), opts, waits: wait::Pool::default(), server }
    }

    fn check_api(&self, api: Api) -> Result<()> {
        match (&self.conns, api) {
            (Conns::Given(_), Api::Sync) => Err(Error::InvalidArgument(
                "this client was built from an async connection: use the _async methods".into(),
            )),
            (Conns::Sync(_), Api::Async) => {
                Err(Error::InvalidArgument("this client was built from a sync connection: use the sync methods".into()))
            }
            _ => Ok(()),
        }
    }

    /// A given sync connection: every call blocks its thread.
    fn blocking(&self) -> bool {
        matches!(self.conns, Conns::Sync(_))
    }

    /// Runs `f` on the given sync connection.
    fn with_sync<T>(&self, f: impl FnOnce(&mut redis::Connection) -> RedisResult<T>) -> Result<T> {
        let Conns::Sync(m) = &self.conns else { return Err(Error::InvalidArgument("no sync connection".into())) };
        // Poisoning only means another thread panicked mid-command; the
        // connection is dropped below on any doubt, so carry on.
        let mut slot = m.lock().unwrap_or_else(|p| p.into_inner());
        let Some(con) = slot.as_mut() else {
            return Err(Error::InvalidArgument(
                "the connection this client was built from failed; build a new client".into(),
            ));
        };
        let r = f(con);
        // A connection that timed out may still deliver the late reply,
        // which the next command would take for its own.
        if let Err(e) = &r {
            if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || !con.is_open() {
                *slot = None;
            }
        }
        Ok(r?)
    }

    async fn shared(&self) -> Result<AsyncConn> {
        match &self.conns {
            Conns::Given(c) => Ok(c.clone()),
            Conns::Sync(_) => {
                Err(Error::InvalidArgument("this client was built from a sync connection: use the sync methods".into()))
            }
            Conns::Url { client, shared } => {
                let con = shared
                    .get_or_try_init(|| async {
                        let cfg = ConnectionManagerConfig::new()
                            .set_connection_timeout(Some(self.opts.connect_timeout))
                            .set_response_timeout(Some(self.opts.response_timeout))
                            .set_number_of_retries(2)
                            .set_max_delay(Duration::from_millis(200));
                        let client = client.clone();
                        let m =
                            runtime::on_background(async move { client.get_connection_manager_with_config(cfg).await })
                                .await??;
                        Ok::<_, Error>(AsyncConn::Manager(m))
                    })
                    .await?;
                Ok(con.clone())
            }
        }
    }

    /// Runs `f` on the shared async connection, bounded by the response
    /// timeout (a connection given by the caller may have none).
    async fn with_async<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(AsyncConn) -> Fut,
        Fut: std::future::Future<Output = RedisResult<T>>,
    {
        let fut = async {
            let con = self.shared().await?;
            Ok::<T, Error>(f(con).await?)
        };
        bounded(&self.opts, fut).await
    }

    /// Runs `e` on the given sync connection (blocking), else on the
    /// shared async one: the one place that tells the two apart.
    async fn exchange<E>(&self, e: E) -> Result<E::Output>
    where
        E: Exchange + Send,
        E::Output: Send,
    {
        if self.blocking() {
            return self.with_sync(|con| send::drive(e, con));
        }
        self.with_async(|mut con| async move { send::drive_async(e, &mut con).await }).await
    }

    /// Runs one lock command.
    pub(crate) async fn run(&self, cmd: &LockCmd) -> Result<Grant> {
        self.exchange(send::Lock::new(cmd, &self.backend)).await
    }

    /// Runs many renew or release commands, in pipelines of at most
    /// `batch`; per command when it was sent and its outcome.
    pub(crate) async fn run_batch(self: &Arc<Self>, cmds: Vec<LockCmd>, batch: usize) -> Vec<(Instant, Result<Grant>)> {
        engine::in_chunks(cmds, batch, |chunk| async move {
            let sent = Instant::now();
            let n = chunk.len();
            let chunk_name = chunk.first().map_or("", LockCmd::name);
            let r = if self.blocking() {
                // Blocking calls, off the runtime.
                let me = self.clone();
                tokio::task::spawn_blocking(move || {
                    chunk
                        .iter()
                        .map(|c| me.with_sync(|con| send::drive(send::Lock::new(c, &me.backend), con)))
                        .collect::<Vec<_>>()
                })
                .await
                .map_err(|e| Error::Redis(std::io::Error::other(e.to_string()).into()))
            } else {
                let backend = &self.backend;
                let chunk = &chunk;
                self.with_async(|mut con| async move {
                    send::pipeline(chunk, &mut con, backend)
                        .await
                        .map(|v| v.into_iter().map(|r| r.map_err(Error::from)).collect::<Vec<_>>())
                })
                .await
            };
            let r = r.unwrap_or_else(|e| engine::failed_all(&e, n));
            trace::batch_event(&self.server, chunk_name, n, r.iter().filter(|r| r.is_err()).count(), sent);
            r.into_iter().map(|r| (sent, r)).collect::<Vec<_>>()
        })
        .await
    }

    pub(crate) async fn info(&self, key: &str) -> Result<Option<LockInfo>> {
        self.exchange(send::Info::new(key, &self.backend)).await
    }

    pub(crate) async fn holders_info(&self, kind: LockKind, key: &str) -> Result<Option<HoldersInfo>> {
        let v = self.exchange(send::Plain(Some(info::holders_cmd(kind, key)))).await?;
        Ok(info::parse_holders(v)?)
    }

    /// `renew`, then `wait` on the same connection (see `replicas.rs`):
    /// the replicas that acknowledged, `None` when the renewal found the
    /// lock gone.
    pub(crate) async fn renew_then_wait(&self, renew: &LockCmd, wait: redis::Cmd) -> Result<Option<i64>> {
        self.exchange(send::RenewThenWait::new(renew, &self.backend, wait)).await
    }

    /// A caller's command (see [`Transport::call`]). Sent once: neither a
    /// given connection nor a [`ConnectionManager`] resends a command (the
    /// manager reconnects for the next one).
    pub(crate) async fn call(&self, cmd: &redis::Cmd) -> Result<Value> {
        self.exchange(send::Plain(Some(cmd.clone()))).await
    }

    /// `Some(left)` when the rest of a wait can be spent blocked in the
    /// server: the module has (or may have) WAIT, a dedicated connection can
    /// be opened, and at least a millisecond is left.
    pub(crate) fn may_block(&self, left: Duration) -> Option<Duration> {
        (matches!(self.conns, Conns::Url { .. }) && self.backend.may_wait() && left >= Duration::from_millis(1))
            .then_some(left)
    }

    /// Blocks in the server for up to `left` on a dedicated connection.
    pub(crate) async fn wait_acquire(self: &Arc<Self>, cmd: &LockCmd, ttl: Duration, left: Duration) -> Result<Waited> {
        let Conns::Url { client, .. } = &self.conns else { return Ok(Waited::Unsupported) };
        let backend = &self.backend;
        let start = Instant::now();
        let mut pooled = self.waits.take(&());
        let (mut con, sent, fence, guard) = loop {
            let reused = pooled.is_some();
            let mut con = match pooled.take() {
                Some(con) => con,
                None => {
                    // No response timeout of its own: each use sets one below.
                    let cfg = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(self.opts.connect_timeout))
                        .set_response_timeout(None);
                    let client = client.clone();
                    runtime::on_background(
                        async move { client.get_multiplexed_async_connection_with_config(&cfg).await },
                    )
                    .await??
                }
            };
            let left = left.saturating_sub(start.elapsed());
            con.set_response_timeout(left.saturating_add(self.opts.response_timeout));
            let guard = ReleaseOnCancel::new(transport::release_later(self.clone(), cmd));
            let sent = Instant::now();
            let waiting = cmd.with_wait(wait::wait_ms(left));
            match send::drive_async(send::Lock::new(&waiting, backend), &mut con).await {
                Ok(g) if g.took_effect() => break (con, sent, g.fence(), guard),
                Ok(_) => {
                    guard.disarm();
                    self.waits.put(&(), con);
                    return Ok(wait::refused(backend));
                }
                Err(e) if is_wait_unsupported(&e) => {
                    guard.disarm();
                    backend.set_wait(false);
                    self.waits.put(&(), con);
                    return Ok(Waited::Unsupported);
                }
                Err(e) if wait::stale(&e, reused) => {
                    trace::retry_event(cmd.key(), &self.server, &e, Duration::ZERO);
                    // Released here, not by the guard's spawned task, which
                    // could otherwise run after the retry's grant.
                    guard.disarm();
                    transport::release_later(self.clone(), cmd).await;
                    self.waits.forget(&());
                }
                Err(e) => {
                    if !wait::outcome_unknown(&e) {
                        guard.disarm();
                    }
                    // Otherwise the guard releases as it goes.
                    return Err(e.into());
                }
            }
        };
        backend.set_wait(true);
        con.set_response_timeout(self.opts.response_timeout);
        let on = &mut con;
        let r = wait::confirm(cmd, ttl, fence, sent, guard, |renew| async move {
            Ok(send::drive_async(send::Lock::new(&renew, backend), on).await?)
        })
        .await;
        // After an error the connection's state is unknown: closed.
        if r.is_ok() {
            self.waits.put(&(), con);
        }
        r
    }
}

impl Transport for Single {
    /// A client built from a given connection serves only the matching API.
    fn serves(&self, api: Api) -> Result<()> {
        self.check_api(api)
    }

    fn backend(&self) -> &BackendCell {
        &self.backend
    }

    fn run<'a>(&'a self, cmd: &'a LockCmd, _deadline: Option<Instant>) -> BoxFuture<'a, Result<Grant>> {
        Box::pin(Single::run(self, cmd))
    }

    fn run_batch(
        self: Arc<Self>,
        cmds: Vec<LockCmd>,
        batch: usize,
    ) -> BoxFuture<'static, Vec<(Instant, Result<Grant>)>> {
        Box::pin(async move { Single::run_batch(&self, cmds, batch).await })
    }

    fn info<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<LockInfo>>> {
        Box::pin(Single::info(self, key))
    }

    fn holders_info<'a>(&'a self, kind: LockKind, key: &'a str) -> BoxFuture<'a, Result<Option<HoldersInfo>>> {
        Box::pin(Single::holders_info(self, kind, key))
    }

    fn may_block(&self, left: Duration) -> Option<Duration> {
        Single::may_block(self, left)
    }

    fn wait_acquire<'a>(
        self: Arc<Self>,
        cmd: &'a LockCmd,
        ttl: Duration,
        left: Duration,
    ) -> BoxFuture<'a, Result<Waited>> {
        Box::pin(async move { Single::wait_acquire(&self, cmd, ttl, left).await })
    }

    fn renew_then_wait<'a>(&'a self, renew: &'a LockCmd, wait: redis::Cmd) -> BoxFuture<'a, Result<Option<i64>>> {
        Box::pin(Single::renew_then_wait(self, renew, wait))
    }

    fn call<'a>(&'a self, _key: &'a str, cmd: &'a redis::Cmd) -> BoxFuture<'a, Result<Value>> {
        Box::pin(Single::call(self, cmd))
    }

    fn is_cluster(&self) -> bool {
        false
    }

    /// The one server, unless it is known to lack the module or the
    /// client has only a given sync connection (which would block the
    /// engine's thread).
    fn node_of<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Option<String>> {
        let usable = !self.blocking() && self.backend.get() != crate::cmd::Backend::Scripts;
        Box::pin(async move { usable.then(|| self.server.clone()) })
    }

    fn node_call<'a>(&'a self, _node: &'a str, cmd: &'a redis::Cmd) -> BoxFuture<'a, Result<Value>> {
        Box::pin(Single::call(self, cmd))
    }

    fn server_of(&self, _key: &str) -> String {
        self.server.clone()
    }

    fn observer(self: Arc<Self>, _key: &str) -> Result<Box<dyn Observer>> {
        let Conns::Url { client, .. } = &self.conns else {
            return Err(Error::InvalidArgument(
                "observing needs a connection of its own: build the client from a URL or a redis::Client".into(),
            ));
        };
        Ok(Box::new(SingleObserver { client: client.clone(), opts: self.opts.clone(), con: None }))
    }
}

/// An observer's own connection to the one server.
struct SingleObserver {
    client: redis::Client,
    opts: ClientOptions,
    con: Option<MultiplexedConnection>,
}

impl SingleObserver {
    async fn call_once(&mut self, cmd: &redis::Cmd, wait: Duration) -> Result<Value> {
        let mut con = match self.con.take() {
            Some(c) => c,
            None => {
                // No response timeout of its own: each call sets one.
                let cfg = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.opts.connect_timeout))
                    .set_response_timeout(None);
                let client = self.client.clone();
                runtime::on_background(async move { client.get_multiplexed_async_connection_with_config(&cfg).await })
                    .await??
            }
        };
        con.set_response_timeout(wait.saturating_add(self.opts.response_timeout));
        let r = cmd.query_async::<Value>(&mut con).await;
        // After a failure of the connection itself its state is unknown
        // (a late reply could be taken for the next one's): a new one then.
        if !matches!(&r, Err(e) if wait::outcome_unknown(e)) {
            self.con = Some(con);
        }
        Ok(r?)
    }
}

impl Observer for SingleObserver {
    fn call<'a>(&'a mut self, cmd: &'a redis::Cmd, wait: Duration) -> BoxFuture<'a, Result<Value>> {
        Box::pin(self.call_once(cmd, wait))
    }
}
