//! [`QuorumLock`]: the handle of a lock held on a majority of servers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::cmd::LockKind;
use crate::engine::{Due, Engine};
use crate::error::{Error, Result};
use crate::holding::{held_lock, Flavor, Holder, Holding, LostSignal};
use crate::options::LockOptions;
use crate::quorum::ctx::Ctx;
use crate::quorum::protocol::{self, Acquired};
use crate::state::{LossReason, Shared};
use crate::transport::Api;

/// A lock held on a majority of a [`QuorumClient`](crate::QuorumClient)'s
/// servers. Released (on all servers) when dropped, best effort.
///
/// The same methods as [`Lock`](crate::Lock), with the same meaning,
/// where "the server" reads "a majority of the servers":
/// [`renew`](QuorumLock::renew) needs a majority within the validity,
/// [`release`](QuorumLock::release) releases on all, the watchdog
/// ([`LockOptions::watchdog`]) renews every TTL/3, and
/// [`is_held`](QuorumLock::is_held) / [`lost_signal`](QuorumLock::lost_signal)
/// report a loss. The validity is shorter than the TTL: it ends at
/// [`valid_until`](QuorumLock::valid_until) = start of the last successful
/// acquire or renewal + TTL − drift allowance.
///
/// There is no [`Lock::guard`](crate::Lock::guard) here, on purpose: a
/// guarded write is checked against the copy of the lock on the server
/// that holds the data, but a quorum lock is held by a majority, not by
/// any one server. The data's server may be one where the grant failed,
/// expired early or was never made, so its verdict is not the lock's; and
/// no one command can ask a majority and write atomically. Use the
/// [`fence`](QuorumLock::fence) instead: send it with every write and have
/// the resource refuse a fence smaller than the largest it has seen
/// (docs/fencing.md).
pub struct QuorumLock {
    held: Holding<Ctx>,
}

impl std::fmt::Debug for QuorumLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumLock")
            .field("key", &self.held.shared.key)
            .field("fence", &self.held.fence)
            .field("flavor", &self.held.flavor)
            .finish_non_exhaustive()
    }
}

held_lock!(QuorumLock);

/// A quorum's locks are renewed and released on all of its servers.
impl Holder for Ctx {
    /// The async steps are spawned as tasks: checked up front, since tokio
    /// would panic outside a runtime. The sync ones run on the background
    /// runtime.
    fn serves(&self, api: Api) -> Result<()> {
        match api {
            Api::Sync => Ok(()),
            Api::Async => in_runtime().map(drop),
        }
    }

    fn engine(self: &Arc<Self>) -> Option<&Arc<Engine>> {
        Ctx::engine(self)
    }

    fn renew(
        self: Arc<Self>,
        lock: Arc<Shared>,
        ttl: Duration,
        fence: Option<u64>,
    ) -> BoxFuture<'static, (Instant, Result<bool>)> {
        Box::pin(async move {
            if lock.lock().votes.is_none() {
                return protocol::renew(&self, &lock.key, &lock.token, ttl, fence).await;
            }
            // Held by sessions: its own leases renewed, every vote checked.
            let due = [Due { shared: lock, ttl, fence }];
            let batch = self.opts.watchdog_batch;
            let none = || (Instant::now(), Err(Error::InvalidArgument("no renewal answer".into())));
            protocol::renew_all(&self, &due, batch, true).await.pop().unwrap_or_else(none)
        })
    }

    /// Returns once a majority has answered; the other servers' releases
    /// finish within the node timeout.
    fn release(self: Arc<Self>, lock: Arc<Shared>) -> BoxFuture<'static, Result<bool>> {
        let timeout = self.opts.node_timeout_for(lock.ttl());
        Box::pin(async move { protocol::release(&self, &lock.key, &lock.token, timeout).await })
    }
}

impl QuorumLock {
    pub(crate) fn new(
        ctx: Arc<Ctx>,
        key: &str,
        token: String,
        acquired: Acquired,
        ttl: Duration,
        opts: &LockOptions,
        rt: Option<tokio::runtime::Handle>,
    ) -> QuorumLock {
        let shared = Shared::new(key.into(), token, LockKind::Exclusive, acquired.valid_from, ttl);
        if let Some(votes) = acquired.votes {
            // Counted in its sessions until the lock's first change from
            // held (`Inner::ended`); attached to them by `Holding::new`.
            votes.hold_all(true);
            shared.lock().votes = Some(Box::new(votes));
        }
        let flavor = match rt {
            Some(rt) => Flavor::Async(rt),
            None => Flavor::Sync,
        };
        QuorumLock { held: Holding::new(ctx, shared, opts, flavor, acquired.fence) }
    }

    /// Opens its hold's span (see `Shared::trace_held`).
    pub(crate) fn trace_held(&self, acquire: &tracing::Span, server: impl FnOnce() -> String) {
        self.held.shared.trace_held(acquire, self.held.shared.kind.trace_name(), self.held.fence, server);
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        &self.held.shared.key
    }

    /// The token that owns the key on the servers.
    pub fn token(&self) -> &str {
        &self.held.shared.token
    }

    /// The fencing token of this acquisition: strictly larger than that of
    /// every earlier successful quorum acquisition of the key through
    /// servers with the module, whatever their clocks say (see the crate's
    /// docs/quorum.md). `None` when fewer than a majority of the servers
    /// could raise their fence mark to it: servers without the module
    /// (script fallback), or whose module predates `LOCK.RENEW ... FLOOR`.
    /// Renewals keep it.
    pub fn fence(&self) -> Option<u64> {
        self.held.fence
    }

    /// True while the lock is held as far as this process can tell: not
    /// released, no renewal found a majority not ours, and the validity has
    /// not run out.
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// When the current validity ends (if no renewal extends it): the start
    /// of the last successful acquire or renewal + TTL − drift allowance.
    /// Do not start guarded work that cannot finish before it.
    pub fn valid_until(&self) -> Instant {
        self.held.shared.lock().until()
    }

    /// Why the lock was lost, if it was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.held.shared.loss_reason()
    }

    /// A signal that fires when this lock is lost (or ends when released).
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// Resolves when the lock is lost (`Some(reason)`) or released (`None`).
    pub async fn lost(&self) -> Option<LossReason> {
        self.lost_signal().lost().await
    }

    /// Renews on every server for `ttl` (the watchdog uses it from then on);
    /// succeeds when a majority renewed within the validity. A server where
    /// the key is absent is taken again (`QuorumOptions::reacquire_on_renew`).
    /// [`Error::NotHeld`] when a majority says the key is not ours (the lock
    /// is then lost); [`Error::NoQuorum`] when too few answered (the lock
    /// stays held until its validity runs out; try again).
    pub fn renew(&self, ttl: Duration) -> Result<()> {
        self.held.renew(ttl)
    }

    /// The async twin of [`QuorumLock::renew`].
    pub async fn renew_async(&self, ttl: Duration) -> Result<()> {
        self.held.renew_async(ttl).await
    }

    /// Releases on every server and stops the watchdog. Returns once a
    /// majority has deleted the key (the other servers' releases are under
    /// way and finish within the node timeout). Idempotent.
    /// [`Error::NotHeld`] if no majority held it (it had been lost);
    /// [`Error::NoQuorum`] if too few answered: the key may stay on some
    /// servers until its TTL; calling again retries.
    pub fn release(&self) -> Result<()> {
        self.held.release()
    }

    /// The async twin of [`QuorumLock::release`].
    pub async fn release_async(&self) -> Result<()> {
        self.held.release_async().await
    }
}

/// The async methods spawn their steps as tasks: checked up front, since
/// tokio would panic outside a runtime.
pub(crate) fn in_runtime() -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .map_err(|_| Error::InvalidArgument("the _async methods must run inside a tokio runtime".into()))
}
