//! [`QuorumLock`]: the handle of a lock held on a majority of servers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cmd::LockKind;
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::quorum::protocol::{self, Acquired, Ctx};
use crate::runtime;
use crate::state::{LossReason, LostSignal, Shared, Status};

/// How the lock was taken, which decides how drop releases it.
#[derive(Debug)]
enum Flavor {
    /// Sync API: drop waits for the release (on the background runtime).
    Sync,
    /// Async API: drop queues the release with the engine, or spawns it on
    /// this runtime.
    Async(tokio::runtime::Handle),
}

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
    shared: Arc<Shared>,
    ctx: Arc<Ctx>,
    flavor: Flavor,
    fence: Option<u64>,
}

impl std::fmt::Debug for QuorumLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumLock")
            .field("key", &self.shared.key)
            .field("fence", &self.fence)
            .field("flavor", &self.flavor)
            .finish_non_exhaustive()
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
        let shared = Arc::new(Shared::new(key.into(), token, LockKind::Exclusive, acquired.valid_from, ttl));
        let flavor = match rt {
            Some(rt) => Flavor::Async(rt),
            None => Flavor::Sync,
        };
        let fence = acquired.fence;
        if let (Some(w), Some(engine)) = (&opts.watchdog, opts.watchdog.as_ref().and_then(|_| ctx.engine())) {
            engine.add(shared.clone(), w, fence);
        }
        // Without an engine there are no renewals; the state still turns
        // Lost(Expired) at the end of the validity, so the loss is not silent.
        QuorumLock { shared, ctx, flavor, fence }
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The token that owns the key on the servers.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The fencing token of this acquisition: strictly larger than that of
    /// every earlier successful quorum acquisition of the key through
    /// servers with the module, whatever their clocks say (see the crate's
    /// docs/quorum.md). `None` when fewer than a majority of the servers
    /// could raise their fence mark to it: servers without the module
    /// (script fallback), or whose module predates `LOCK.RENEW ... FLOOR`.
    /// Renewals keep it.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// True while the lock is held as far as this process can tell: not
    /// released, no renewal found a majority not ours, and the validity has
    /// not run out.
    pub fn is_held(&self) -> bool {
        self.shared.status() == Status::Held
    }

    /// When the current validity ends (if no renewal extends it): the start
    /// of the last successful acquire or renewal + TTL − drift allowance.
    /// Do not start guarded work that cannot finish before it.
    pub fn valid_until(&self) -> Instant {
        self.shared.lock().valid_until
    }

    /// Why the lock was lost, if it was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.shared.loss_reason()
    }

    /// A signal that fires when this lock is lost (or ends when released).
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal { shared: self.shared.clone() }
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
        self.shared.check_renewable()?;
        let (ctx, key, token, fence) = (self.ctx.clone(), self.key().to_string(), self.token().to_string(), self.fence);
        let (from, r) = runtime::block(async move { Ok(protocol::renew(&ctx, &key, &token, ttl, fence).await) })?;
        self.shared.after_renew(from, ttl, r)
    }

    /// The async twin of [`QuorumLock::renew`].
    pub async fn renew_async(&self, ttl: Duration) -> Result<()> {
        self.shared.check_renewable()?;
        in_runtime()?;
        let (from, r) = protocol::renew(&self.ctx, self.key(), self.token(), ttl, self.fence).await;
        self.shared.after_renew(from, ttl, r)
    }

    /// The engine drops the lock from its schedule when it next comes due.
    fn stop_watchdog(&self) {
        self.shared.stop_watchdog();
    }

    fn after_release(&self, r: Result<bool>) -> Result<()> {
        if r? {
            self.shared.mark_released();
            Ok(())
        } else {
            self.shared.mark_lost(LossReason::NotOwner);
            Err(Error::NotHeld { key: self.key().into() })
        }
    }

    fn node_timeout(&self) -> Duration {
        self.ctx.opts.node_timeout_for(self.shared.ttl())
    }

    /// Releases on every server and stops the watchdog. Returns once a
    /// majority has deleted the key (the other servers' releases are under
    /// way and finish within the node timeout). Idempotent.
    /// [`Error::NotHeld`] if no majority held it (it had been lost);
    /// [`Error::NoQuorum`] if too few answered: the key may stay on some
    /// servers until its TTL; calling again retries.
    pub fn release(&self) -> Result<()> {
        self.stop_watchdog();
        if self.shared.status() == Status::Released {
            return Ok(());
        }
        let (ctx, key, token, timeout) =
            (self.ctx.clone(), self.key().to_string(), self.token().to_string(), self.node_timeout());
        let r = runtime::block(async move { protocol::release(&ctx, &key, &token, timeout).await });
        self.after_release(r)
    }

    /// The async twin of [`QuorumLock::release`].
    pub async fn release_async(&self) -> Result<()> {
        self.stop_watchdog();
        if self.shared.status() == Status::Released {
            return Ok(());
        }
        in_runtime()?;
        let r = protocol::release(&self.ctx, self.key(), self.token(), self.node_timeout()).await;
        self.after_release(r)
    }
}

impl Drop for QuorumLock {
    /// Best-effort release on every server: sync locks wait for it (bounded
    /// by the node timeout), async locks spawn it on their runtime and
    /// return at once. If that fails the keys expire after their TTL.
    fn drop(&mut self) {
        self.stop_watchdog();
        let status = self.shared.status();
        if status == Status::Released {
            return;
        }
        if status == Status::Held {
            self.shared.mark_released();
        }
        let (ctx, key, token, timeout) =
            (self.ctx.clone(), self.key().to_string(), self.token().to_string(), self.node_timeout());
        match &self.flavor {
            Flavor::Sync => {
                let _ = runtime::block(async move { protocol::release(&ctx, &key, &token, timeout).await });
            }
            Flavor::Async(rt) => {
                // Queued with the engine, which pipelines the releases of
                // many dropped locks; a full queue (or no engine) spawns it.
                let owner: Arc<dyn crate::engine::Renewer> = ctx.clone();
                if ctx.engine().is_some_and(|e| e.queue_release(owner, self.shared.clone())) {
                    return;
                }
                let rt = tokio::runtime::Handle::try_current().unwrap_or_else(|_| rt.clone());
                rt.spawn(async move {
                    let _ = protocol::release(&ctx, &key, &token, timeout).await;
                });
            }
        }
    }
}

/// The async methods spawn their steps as tasks: checked up front, since
/// tokio would panic outside a runtime.
pub(crate) fn in_runtime() -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .map_err(|_| Error::InvalidArgument("the _async methods must run inside a tokio runtime".into()))
}
