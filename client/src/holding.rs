//! The lifecycle every held lock shares, whatever holds it: the state and
//! loss signal, the sync or async flavour, the watchdog's enrolment, renew
//! and release (idempotent) for both APIs, and the release on drop.
//! [`Lock`](crate::Lock) (one server or a cluster) and
//! [`QuorumLock`](crate::QuorumLock) (a majority) wrap one [`Holding`]
//! each and differ only in their [`Holder`]: how one lock is renewed and
//! released. [`HeldLock`] is the same lifecycle as a public trait, for
//! code that holds "a lock" without caring which.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::engine::{Engine, Renewer};
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::revocation::Revocation;
use crate::runtime;
use crate::state::{LossReason, Shared, Status};
use crate::transport::Api;

/// How the lock was taken, which decides how drop releases it.
#[derive(Clone, Debug)]
pub(crate) enum Flavor {
    /// Sync API: drop releases on the dropping thread (bounded by the
    /// response or node timeout).
    Sync,
    /// Async API: drop queues the release with the client's engine (or
    /// spawns it on this runtime) and returns at once.
    Async(tokio::runtime::Handle),
}

/// What holds a lock: a client's transport, or a quorum's servers.
pub(crate) trait Holder: Renewer {
    /// Refuses an API this holder cannot serve (now).
    fn serves(&self, api: Api) -> Result<()>;

    /// The renewal engine of the client.
    fn engine(self: &Arc<Self>) -> Option<&Arc<Engine>>;

    /// Renews `lock` for `ttl`: from when its new validity counts, and
    /// whether the renewal took effect. `fence`: the grant's.
    fn renew(
        self: Arc<Self>,
        lock: Arc<Shared>,
        ttl: Duration,
        fence: Option<u64>,
    ) -> BoxFuture<'static, (Instant, Result<bool>)>;

    /// Releases `lock`: whether it was still ours.
    fn release(self: Arc<Self>, lock: Arc<Shared>) -> BoxFuture<'static, Result<bool>>;
}

/// One held lock's lifecycle (see the module docs).
pub(crate) struct Holding<H: Holder> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) holder: Arc<H>,
    pub(crate) flavor: Flavor,
    pub(crate) fence: Option<u64>,
}

impl<H: Holder> Holding<H> {
    /// A granted lock, enrolled with the watchdog if `opts` asks for one.
    pub(crate) fn new(holder: Arc<H>, shared: Shared, opts: &LockOptions, flavor: Flavor, fence: Option<u64>) -> Self {
        let shared = Arc::new(shared);
        if let (Some(w), Some(engine)) = (&opts.watchdog, opts.watchdog.as_ref().and_then(|_| holder.engine())) {
            // A session's lock is kept by its session's keepalives, and
            // only checked on its own (see `Engine::add`); a quorum lock's
            // session-held votes by their sessions' (`votes.rs`).
            let sessions: Vec<_> = {
                let g = shared.lock();
                g.session.iter().chain(g.votes.iter().flat_map(|v| v.sessions())).cloned().collect()
            };
            for s in sessions {
                engine.attach(&s, shared.clone());
            }
            engine.add(shared.clone(), w, fence);
        }
        // Without an engine there are no renewals; the state still turns
        // Lost(Expired) at the end of the validity, so the loss is not silent.
        Holding { shared, holder, flavor, fence }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.shared.status() == Status::Held
    }

    pub(crate) fn lost_signal(&self) -> LostSignal {
        LostSignal { shared: self.shared.clone() }
    }

    pub(crate) fn renew(&self, ttl: Duration) -> Result<()> {
        self.shared.check_renewable()?;
        self.holder.serves(Api::Sync)?;
        let renewing = self.holder.clone().renew(self.shared.clone(), ttl, self.fence);
        let (from, r) = runtime::block(async move { Ok(renewing.await) })?;
        self.shared.after_renew(from, ttl, r)
    }

    pub(crate) async fn renew_async(&self, ttl: Duration) -> Result<()> {
        self.shared.check_renewable()?;
        self.holder.serves(Api::Async)?;
        let (from, r) = self.holder.clone().renew(self.shared.clone(), ttl, self.fence).await;
        self.shared.after_renew(from, ttl, r)
    }

    /// Whether release has anything to do: the watchdog stops either way.
    fn releasing(&self) -> bool {
        self.shared.stop_watchdog();
        self.shared.status() != Status::Released
    }

    fn after_release(&self, r: Result<bool>) -> Result<()> {
        if r? {
            self.shared.mark_released();
            Ok(())
        } else {
            self.shared.mark_lost(LossReason::NotOwner);
            Err(Error::NotHeld { key: self.shared.key.clone() })
        }
    }

    pub(crate) fn release(&self) -> Result<()> {
        if !self.releasing() {
            return Ok(());
        }
        self.holder.serves(Api::Sync)?;
        let r = runtime::block(self.holder.clone().release(self.shared.clone()));
        self.after_release(r)
    }

    pub(crate) async fn release_async(&self) -> Result<()> {
        if !self.releasing() {
            return Ok(());
        }
        self.holder.serves(Api::Async)?;
        let r = self.holder.clone().release(self.shared.clone()).await;
        self.after_release(r)
    }
}

impl<H: Holder> Drop for Holding<H> {
    /// Best-effort release. Sync locks release on the dropping thread
    /// (bounded by the response or node timeout); async locks queue the
    /// release with the client's renewal engine, which pipelines the
    /// releases of many dropped locks (or, its bounded queue full, spawn it
    /// on their runtime), and return at once, so dropping never blocks a
    /// runtime thread. If the release fails, the key simply expires after
    /// its TTL.
    fn drop(&mut self) {
        if !self.releasing() {
            return;
        }
        if self.shared.status() == Status::Held {
            // Observers learn of a normal end now, not after the round trip.
            self.shared.mark_dropped();
        }
        // Also for a lost lock: the release deletes only our own value, and
        // "lost" may have been a connection scare while the key is still ours.
        match &self.flavor {
            Flavor::Sync => {
                let _ = runtime::block(self.holder.clone().release(self.shared.clone()));
            }
            Flavor::Async(rt) => {
                let owner: Arc<dyn Renewer> = self.holder.clone();
                if self.holder.engine().is_some_and(|e| e.queue_release(owner, self.shared.clone())) {
                    return;
                }
                let releasing = self.holder.clone().release(self.shared.clone());
                let rt = tokio::runtime::Handle::try_current().unwrap_or_else(|_| rt.clone());
                rt.spawn(async move {
                    let _ = releasing.await;
                });
            }
        }
    }
}

/// What every held lock offers, [`Lock`](crate::Lock) and
/// [`QuorumLock`](crate::QuorumLock) alike, with the meaning their own
/// methods of the same names document: for code that holds "a lock"
/// without caring where (`Box<dyn HeldLock>`), such as a command runner
/// that takes it on one server, a cluster or a quorum. The async methods
/// stay on the types (a trait object cannot have them).
pub trait HeldLock: Send + Sync + std::fmt::Debug {
    /// The locked key.
    fn key(&self) -> &str;
    /// The token that owns the key.
    fn token(&self) -> &str;
    /// The fencing token of this grant, if any.
    fn fence(&self) -> Option<u64>;
    /// True while the lock is held as far as this process can tell.
    fn is_held(&self) -> bool;
    /// Why the lock was lost, if it was.
    fn loss_reason(&self) -> Option<LossReason>;
    /// A signal that fires when this lock is lost (or ends when released).
    fn lost_signal(&self) -> LostSignal;
    /// Resets the TTL to `ttl`.
    fn renew(&self, ttl: Duration) -> Result<()>;
    /// Releases the lock and stops its watchdog; idempotent.
    fn release(&self) -> Result<()>;
}

/// [`HeldLock`] for a type whose inherent methods of the same names it
/// forwards to (the trait adds no behaviour of its own).
macro_rules! held_lock {
    ($t:ty) => {
        impl $crate::holding::HeldLock for $t {
            fn key(&self) -> &str {
                <$t>::key(self)
            }
            fn token(&self) -> &str {
                <$t>::token(self)
            }
            fn fence(&self) -> Option<u64> {
                <$t>::fence(self)
            }
            fn is_held(&self) -> bool {
                <$t>::is_held(self)
            }
            fn loss_reason(&self) -> Option<$crate::state::LossReason> {
                <$t>::loss_reason(self)
            }
            fn lost_signal(&self) -> $crate::holding::LostSignal {
                <$t>::lost_signal(self)
            }
            fn renew(&self, ttl: std::time::Duration) -> $crate::error::Result<()> {
                <$t>::renew(self, ttl)
            }
            fn release(&self) -> $crate::error::Result<()> {
                <$t>::release(self)
            }
        }
    };
}
pub(crate) use held_lock;

/// Learns of a lock's loss without polling: [`LostSignal::wait`] blocks,
/// [`LostSignal::lost`] is a future. Both return `Some(reason)` when the
/// lock is lost and `None` once it was released (or dropped) normally.
/// Cloneable and independent of the [`Lock`](crate::Lock) handle's lifetime.
#[derive(Clone, Debug)]
pub struct LostSignal {
    pub(crate) shared: Arc<Shared>,
}

fn reason(s: Status) -> Option<LossReason> {
    match s {
        Status::Lost(r) => Some(r),
        _ => None,
    }
}

impl LostSignal {
    /// Blocks until the lock is lost (`Some`) or released (`None`).
    pub fn wait(&self) -> Option<LossReason> {
        reason(self.shared.wait_until(None))
    }

    /// Like [`LostSignal::wait`], but gives up after `timeout` (then `None`).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<LossReason> {
        reason(self.shared.wait_until(Some(Instant::now() + timeout)))
    }

    /// Resolves when the lock is lost (`Some`) or released (`None`).
    /// Does not block the runtime.
    pub async fn lost(&self) -> Option<LossReason> {
        reason(self.shared.wait_async().await)
    }

    /// Why the lock was lost, if it has been (non-blocking).
    pub fn reason(&self) -> Option<LossReason> {
        reason(self.shared.status())
    }
}

/// The revoked signal (`LOCK.REVOKE`, docs/revocation.md): the renewal
/// engine hears a revocation on its next renewal of the hold, and fires it
/// with the deadline and, for a lock or a leadership, the reason.
impl LostSignal {
    /// The reason its session's revoke gave (`SESSION.REVOKE id REASON
    /// text`), once the lock was lost with it
    /// ([`LossReason::SessionRevoked`](crate::LossReason::SessionRevoked)).
    pub fn session_revoke_reason(&self) -> Option<String> {
        let s = self.shared.session()?;
        s.ended().then(|| s.why()).flatten()
    }

    /// The hold's revocation, once a renewal heard it (non-blocking).
    pub fn revocation(&self) -> Option<Revocation> {
        let g = self.shared.lock();
        g.revoked.clone().filter(|_| g.revoke_told)
    }

    /// Resolves with the revocation once a renewal hears it, or `None`
    /// when the hold ends (released or lost) unrevoked. Does not block the
    /// runtime.
    pub async fn revoked(&self) -> Option<Revocation> {
        loop {
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let valid_until = {
                let g = self.shared.lock();
                if g.revoke_told {
                    return g.revoked.clone();
                }
                if g.status != Status::Held {
                    return None;
                }
                g.until()
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(valid_until.into()) => {}
            }
        }
    }

    /// Blocks until a renewal hears a revocation (`Some`), the hold ends
    /// unrevoked, or `timeout` passes (`None`).
    pub fn wait_revoked_timeout(&self, timeout: Duration) -> Option<Revocation> {
        let deadline = Instant::now() + timeout;
        let mut g = self.shared.lock();
        loop {
            if g.revoke_told {
                return g.revoked.clone();
            }
            let now = Instant::now();
            if g.status != Status::Held || now >= deadline {
                return None;
            }
            let wake = deadline.min(g.until());
            g = self.shared.sleep(g, wake);
        }
    }
}
