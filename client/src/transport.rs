//! The transport layer's one seam: [`Transport`], what a lock client
//! sends its commands through. Two implement it: one server
//! (`single.rs`) and a Redis Cluster (`cluster/`), both sending through
//! `send.rs`'s exchanges; a quorum is N
//! single-server [`Core`]s (`quorum/`). Above it, [`Core`] adds what every
//! kind shares: the options and the renewal engine.
//!
//! Everything here is async; the sync API drives the same futures to
//! completion (`runtime::block`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::cmd::{Backend, Grant, LockCmd, LockKind};
use crate::engine::{Due, Engine, EngineSlot, Renewed, Renewer};
use crate::error::{Error, Result};
use crate::info::{HoldersInfo, LockInfo};
use crate::options::ClientOptions;
use crate::revocation::{deadline_of, reason_of};
use crate::send::BackendCell;
use crate::session::SessionCalls;
use crate::state::Shared;
use crate::wait::Waited;

/// Which API a call comes from: a client built from a given connection
/// serves only the matching one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    Sync,
    Async,
}

/// One server or a cluster, as the lock operations see it.
pub(crate) trait Transport: Send + Sync + 'static {
    /// Refuses an API this transport cannot serve.
    fn serves(&self, api: Api) -> Result<()>;

    /// What the server (the last node reached) was found to speak.
    fn backend(&self) -> &BackendCell;

    /// One lock command. `deadline`: an acquire that may wait until then
    /// (a cluster retries topology failures until it).
    fn run<'a>(&'a self, cmd: &'a LockCmd, deadline: Option<Instant>) -> BoxFuture<'a, Result<Grant>>;

    /// Many renew or release commands, pipelined per node in batches of at
    /// most `batch`: per command when it was sent and its outcome.
    fn run_batch(
        self: Arc<Self>,
        cmds: Vec<LockCmd>,
        batch: usize,
    ) -> BoxFuture<'static, Vec<(Instant, Result<Grant>)>>;

    fn info<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<LockInfo>>>;

    /// `SEM.INFO` or `RWLOCK.INFO` (by `kind`), on the key's node.
    fn holders_info<'a>(&'a self, kind: LockKind, key: &'a str) -> BoxFuture<'a, Result<Option<HoldersInfo>>>;

    /// `Some(left)` when the rest of an acquire's wait can be spent blocked
    /// in the server (`LOCK.ACQUIRE ... WAIT`).
    fn may_block(&self, left: Duration) -> Option<Duration>;

    /// Blocks in the server for up to `left` on a dedicated connection.
    fn wait_acquire<'a>(
        self: Arc<Self>,
        cmd: &'a LockCmd,
        ttl: Duration,
        left: Duration,
    ) -> BoxFuture<'a, Result<Waited>>;

    /// `renew`, then `wait` (a `WAIT n timeout`) on the node that renewed:
    /// the replicas that acknowledged, `None` when the lock was gone.
    fn renew_then_wait<'a>(&'a self, renew: &'a LockCmd, wait: redis::Cmd) -> BoxFuture<'a, Result<Option<i64>>>;

    /// A command that is not a lock command (a guarded write), on the
    /// server of `key` (in a cluster: the master of its slot), its reply as
    /// the server sent it, error replies as [`Error::Redis`]. It may write,
    /// so it is never sent again after a failure that may have run it.
    fn call<'a>(&'a self, key: &'a str, cmd: &'a redis::Cmd) -> BoxFuture<'a, Result<redis::Value>>;

    fn is_cluster(&self) -> bool;

    /// The node that serves `key`, as sessions name it (`host:port`);
    /// `None` when no session can hold it there (a server known to lack
    /// the module, a given sync connection).
    fn node_of<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<String>>;

    /// A session command on `node` (one [`Transport::node_of`] named), its
    /// reply as the server sent it, error replies as [`Error::Redis`].
    fn node_call<'a>(&'a self, node: &'a str, cmd: &'a redis::Cmd) -> BoxFuture<'a, Result<redis::Value>>;

    /// A node stopped answering its sessions' keepalives: the next
    /// [`Transport::node_of`] reads the topology afresh.
    fn nodes_changed(&self) {}

    /// The server of `key` as traces name it (`host:port`), from what is
    /// known already: never a round trip.
    fn server_of(&self, key: &str) -> String;

    /// A connection of its own to the server (in a cluster: the node) of
    /// `key`, for one observer's blocking `LOCK.OBSERVE` calls (see
    /// [`Observer`]). Opened on the first call. [`Error::InvalidArgument`]
    /// for a client built from a given connection, which cannot open one.
    fn observer(self: Arc<Self>, key: &str) -> Result<Box<dyn Observer>>;
}

/// One observer's dedicated connection: a blocked `LOCK.OBSERVE` holds its
/// connection until the server answers, so it cannot share the client's.
/// Each call sends one command there, with a reply timeout of `wait` plus
/// the response timeout, and returns its reply (error replies as errors);
/// a cluster's follows `MOVED` and `ASK` to the slot's owner, and rides
/// out a failover (retrying from the seed nodes) for a while before it
/// gives the error back. A connection that failed is dropped, and the next
/// call opens a new one.
pub(crate) trait Observer: Send {
    fn call<'a>(&'a mut self, cmd: &'a redis::Cmd, wait: Duration) -> BoxFuture<'a, Result<redis::Value>>;
}

/// A client's transport, options and renewal engine.
pub(crate) struct Core {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) opts: ClientOptions,
    /// Renews every watchdog lock of this client.
    engine: EngineSlot,
}

impl Core {
    pub(crate) fn new(transport: Arc<dyn Transport>, opts: ClientOptions) -> Arc<Core> {
        Arc::new(Core { transport, opts, engine: EngineSlot::default() })
    }

    /// One lock command; "unknown command" for a kind without a script
    /// fallback is [`Error::Unsupported`].
    pub(crate) async fn run(&self, cmd: &LockCmd) -> Result<Grant> {
        self.transport.run(cmd, None).await.map_err(|e| cmd.explain(e))
    }

    /// One lock command: true when it took effect.
    pub(crate) async fn run_ok(&self, cmd: &LockCmd) -> Result<bool> {
        self.run(cmd).await.map(Grant::took_effect)
    }

    /// This client's renewal engine (see [`EngineSlot::get`]).
    pub(crate) fn engine(self: &Arc<Self>) -> Option<&Arc<Engine>> {
        self.engine.get(|| self.clone(), self.opts.watchdog_batch, self.opts.session_checks)
    }
}

impl Renewer for Core {
    fn renew_all(self: Arc<Self>, due: Vec<Due>, batch: usize) -> BoxFuture<'static, Vec<Renewed>> {
        Box::pin(async move {
            let now = Instant::now();
            let cmds: Vec<Result<LockCmd>> =
                due.iter().map(|d| LockCmd::renew_of(d.shared.kind, &d.shared.key, &d.shared.token, d.ttl)).collect();
            let ok: Vec<LockCmd> = cmds.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
            let mut ran = self.transport.clone().run_batch(ok, batch).await.into_iter();
            let renewed: Vec<Renewed> = cmds
                .into_iter()
                .zip(&due)
                .map(|(c, d)| match c {
                    Ok(_) => ran.next().map_or_else(
                        || (now, Err(Error::InvalidArgument("no renewal answer".into()))),
                        |(sent, r)| (sent, r.map(|g| renewal_took_effect(&d.shared, sent, g))),
                    ),
                    Err(e) => (now, Err(e)),
                })
                .collect();
            for ((_, r), d) in renewed.iter().zip(&due) {
                if matches!(r, Ok(false)) {
                    note_eviction(self.transport.as_ref(), &self.opts, &d.shared).await;
                }
                note_revocation(self.transport.as_ref(), &self.opts, &d.shared).await;
            }
            renewed
        })
    }

    fn release_all(self: Arc<Self>, locks: Vec<Arc<Shared>>, batch: usize) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let cmds = locks.iter().filter_map(|l| LockCmd::release_of(l.kind, &l.key, &l.token).ok()).collect();
            self.transport.clone().run_batch(cmds, batch).await;
        })
    }
}

/// Sessions on the client's one server, or on each master of its cluster.
impl SessionCalls for Core {
    fn session_node(self: Arc<Self>, key: String) -> BoxFuture<'static, Option<String>> {
        Box::pin(async move {
            if !self.opts.sessions {
                return None;
            }
            self.transport.node_of(&key).await
        })
    }

    fn session_call(self: Arc<Self>, node: String, cmd: redis::Cmd) -> BoxFuture<'static, Result<redis::Value>> {
        Box::pin(async move { bounded(&self.opts, self.transport.node_call(&node, &cmd)).await })
    }

    fn nodes_changed(&self) {
        self.transport.nodes_changed();
    }

    fn check(self: Arc<Self>, locks: Vec<Arc<Shared>>) -> BoxFuture<'static, Vec<Result<bool>>> {
        Box::pin(async move {
            let cmds: Vec<Result<LockCmd>> =
                locks.iter().map(|l| LockCmd::renew_of(l.kind, &l.key, &l.token, l.ttl())).collect();
            let ok: Vec<LockCmd> = cmds.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
            let mut ran = self.transport.clone().run_batch(ok, self.opts.watchdog_batch).await.into_iter();
            let checked: Vec<Result<bool>> = cmds
                .into_iter()
                .zip(&locks)
                .map(|(c, l)| match (c, ran.next()) {
                    // `-ms`: a revoked hold, whose revocation is noted.
                    (Ok(_), Some((sent, r))) => r.map(|g| renewal_took_effect(l, sent, g)),
                    (Err(e), _) => Err(e),
                    (Ok(_), None) => Err(Error::InvalidArgument("no check answer".into())),
                })
                .collect();
            for lock in &locks {
                note_revocation(self.transport.as_ref(), &self.opts, lock).await;
            }
            checked
        })
    }
}

/// Whether a renewal of `lock` took effect; one the hold limit cut short
/// (2) is noted on the lock, whose end is then reported as
/// [`LossReason::MaxHold`](crate::LossReason::MaxHold).
pub(crate) fn renewal_took_effect(lock: &Shared, sent: Instant, g: Grant) -> bool {
    match g {
        Grant::Capped => lock.mark_capped(),
        Grant::Revoked { left_ms } => {
            lock.mark_revoked(deadline_of(sent, left_ms));
        }
        _ => {}
    }
    g.took_effect()
}

/// After a renewal that heard `lock` is revoked, the first time: reads the
/// revoke's reason (`LOCK.INFO`, one round trip, a lock or leadership only:
/// the server keeps none for semaphores and read-write locks) and fires
/// the lock's revoked signal ([`LostSignal::revoked`](crate::LostSignal::revoked)).
pub(crate) async fn note_revocation(t: &dyn Transport, opts: &ClientOptions, lock: &Shared) {
    let untold = {
        let g = lock.lock();
        g.revoked.is_some() && !g.revoke_told
    };
    if !untold {
        return;
    }
    let mut reason = None;
    if lock.kind == LockKind::Exclusive {
        let mut cmd = redis::cmd("LOCK.INFO");
        cmd.arg(&lock.key);
        reason = bounded(opts, t.call(&lock.key, &cmd)).await.ok().and_then(reason_of);
    }
    lock.tell_revoked(reason);
}

/// After a renewal or release that found `lock` gone: asks the module
/// whether an eviction took it (`LOCK.EVICTED`, O(1), one round trip on a
/// loss only) and notes it on the lock, whose loss then reads
/// [`LossReason::Evicted`](crate::LossReason::Evicted). Without the
/// module, or on any error (an older module), the loss stays `NotOwner`.
pub(crate) async fn note_eviction(t: &dyn Transport, opts: &ClientOptions, lock: &Shared) {
    if t.backend().get() != Backend::Module {
        return;
    }
    let mut cmd = redis::cmd("LOCK.EVICTED");
    cmd.arg(&lock.key).arg(&lock.token);
    if let Ok(redis::Value::Int(1)) = bounded(opts, t.call(&lock.key, &cmd)).await {
        lock.mark_evicted();
    }
}

/// A best-effort release of `cmd`'s token, to spawn when a wait is
/// abandoned (see `wait::ReleaseOnCancel`).
pub(crate) fn release_later(t: Arc<dyn Transport>, cmd: &LockCmd) -> BoxFuture<'static, ()> {
    let release = cmd.releasing();
    Box::pin(async move {
        if let Ok(release) = release {
            let _ = t.run(&release, None).await;
        }
    })
}

/// Bounds an async call by the response timeout plus the connect timeout.
pub(crate) async fn bounded<T>(opts: &ClientOptions, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(opts.response_timeout + opts.connect_timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(Error::Redis(std::io::Error::new(std::io::ErrorKind::TimedOut, "lock command timed out").into())),
    }
}
