//! [`Lock`]: the handle of a held lock, of every [`LockKind`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::cmd::{self, GuardRefusal, LockCmd, LockKind};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::holding::{held_lock, Flavor, Holder, Holding, LostSignal};
use crate::options::LockOptions;
use crate::revocation::Revocation;
use crate::runtime;
use crate::state::{LossReason, Shared};
use crate::transport::{note_eviction, note_revocation, renewal_took_effect, Api, Core};

/// A held lock, exclusive lock or semaphore permit or read or write lease
/// ([`Lock::kind`]). Released when dropped (best effort).
///
/// One type for every kind: they are held, renewed, watched, lost and
/// released alike, and differ only in the module commands the handle
/// sends, so distinct types would repeat this API without adding a check
/// the compiler could make.
///
/// All methods take `&self`, so a `Lock` can be shared (`Arc<Lock>`).
/// Locks taken with the sync API are renewed/released with the plain
/// methods, those taken with the async API with the `_async` twins; mixing
/// works as long as the client has the other kind of connection.
///
/// Once lost, a lock stays lost: `renew` then fails with
/// [`Error::NotHeld`] without asking the server.
pub struct Lock {
    held: Holding<Core>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.held.shared.key)
            .field("kind", &self.held.shared.kind)
            .field("fence", &self.held.fence)
            .field("flavor", &self.held.flavor)
            .finish_non_exhaustive()
    }
}

held_lock!(Lock);

/// A client's locks are renewed and released by its transport.
impl Holder for Core {
    fn serves(&self, api: Api) -> Result<()> {
        self.transport.serves(api)
    }

    fn engine(self: &Arc<Self>) -> Option<&Arc<Engine>> {
        Core::engine(self)
    }

    fn renew(
        self: Arc<Self>,
        lock: Arc<Shared>,
        ttl: Duration,
        _fence: Option<u64>,
    ) -> BoxFuture<'static, (Instant, Result<bool>)> {
        Box::pin(async move {
            // Validity counts from before the command is sent.
            let sent = Instant::now();
            match LockCmd::renew_of(lock.kind, &lock.key, &lock.token, ttl) {
                Ok(cmd) => {
                    let r = self.run(&cmd).await.map(|g| renewal_took_effect(&lock, sent, g));
                    if matches!(r, Ok(false)) {
                        note_eviction(self.transport.as_ref(), &self.opts, &lock).await;
                    }
                    note_revocation(self.transport.as_ref(), &self.opts, &lock).await;
                    (sent, r)
                }
                Err(e) => (sent, Err(e)),
            }
        })
    }

    fn release(self: Arc<Self>, lock: Arc<Shared>) -> BoxFuture<'static, Result<bool>> {
        Box::pin(async move {
            let r = self.run_ok(&LockCmd::release_of(lock.kind, &lock.key, &lock.token)?).await;
            if matches!(r, Ok(false)) {
                note_eviction(self.transport.as_ref(), &self.opts, &lock).await;
            }
            r
        })
    }
}

impl Lock {
    pub(crate) fn new(
        core: Arc<Core>,
        cmd: &LockCmd,
        sent: Instant,
        ttl: Duration,
        opts: &LockOptions,
        flavor: Flavor,
        fence: Option<u64>,
    ) -> Lock {
        let mut shared = Shared::new(cmd.key().into(), cmd.token().into(), cmd.kind(), sent, ttl);
        if let Some(s) = cmd.session() {
            shared = shared.with_session(s.clone());
        }
        Lock { held: Holding::new(core, shared, opts, flavor, fence) }
    }

    /// Opens its hold's span (see `Shared::trace_held`).
    pub(crate) fn trace_held(&self, acquire: &tracing::Span, kind: &'static str, server: impl FnOnce() -> String) {
        self.held.shared.trace_held(acquire, kind, self.held.fence, server);
    }

    /// Caps the lock's validity at `asked + max_hold`: the server's hold
    /// limit counts from the grant, which came no earlier than `asked`.
    pub(crate) fn limit_hold(&self, asked: Instant, max_hold: Duration) {
        self.held.shared.limit_hold(asked, max_hold);
    }

    /// Refuses a lock already known lost or released, without a round trip.
    pub(crate) fn held_check(&self) -> Result<()> {
        self.held.shared.check_renewable()
    }

    /// The client's transport and engine, which hold this lock.
    pub(crate) fn core(&self) -> Arc<Core> {
        self.held.holder.clone()
    }

    /// Marks the lock lost (a command found it not ours).
    pub(crate) fn lose(&self, reason: LossReason) {
        self.held.shared.mark_lost(reason);
    }

    /// The TTL it was granted (and is renewed) for.
    pub(crate) fn ttl(&self) -> Duration {
        self.held.shared.ttl()
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        &self.held.shared.key
    }

    /// The token that owns the key (the random one, or the caller's).
    pub fn token(&self) -> &str {
        &self.held.shared.token
    }

    /// What it holds: the key alone, a semaphore's permit, a read or a
    /// write lease.
    pub fn kind(&self) -> LockKind {
        self.held.shared.kind
    }

    /// The fencing token of this grant: a positive number, strictly larger
    /// than that of every earlier grant of the key, also across releases and
    /// takeovers. Pass it with each write to the guarded resource and have
    /// the resource refuse writes carrying a smaller fence than it has seen,
    /// so a holder that lost the lock without noticing (a long pause, an
    /// expired TTL) cannot overwrite its successor's work.
    ///
    /// `None` on servers without the module: the Lua fallback issues no
    /// fences. Renewals keep the fence; a takeover gets a new one.
    pub fn fence(&self) -> Option<u64> {
        self.held.fence
    }

    /// True while the lock is held as far as this process can tell: not
    /// released, no renewal answered "not owner", and its TTL (counted from
    /// when the last successful acquire/renew was sent) has not run out.
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// Why the lock was lost, if it was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.held.shared.loss_reason()
    }

    /// A signal that fires when this lock is lost (or ends when released),
    /// usable from another thread or task.
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// Resolves when the lock is lost (`Some(reason)`) or released (`None`).
    pub async fn lost(&self) -> Option<LossReason> {
        self.lost_signal().lost().await
    }

    /// Resolves when the renewal engine hears this hold was revoked
    /// (`LOCK.REVOKE`: finish before [`Revocation::deadline`] and release),
    /// or `None` when it ends unrevoked. Also for semaphore permits and
    /// read-write guards; [`LostSignal::revocation`] asks without waiting.
    pub async fn revoked(&self) -> Option<Revocation> {
        self.lost_signal().revoked().await
    }

    /// Resets the TTL to `ttl` (the watchdog, if any, uses it from then on).
    /// [`Error::NotHeld`] if the key is no longer ours; then the lock is lost.
    pub fn renew(&self, ttl: Duration) -> Result<()> {
        self.held.renew(ttl)
    }

    /// The async twin of [`Lock::renew`].
    pub async fn renew_async(&self, ttl: Duration) -> Result<()> {
        self.held.renew_async(ttl).await
    }

    /// Runs `cmd` only if this lock is still held, decided by the server in
    /// the same step (`LOCK.GUARD key token cmd...`), and returns `cmd`'s
    /// reply as the server sent it (RESP3 types on a RESP3 connection).
    /// This closes the gap every lock has: a holder paused past its TTL (GC,
    /// a stopped VM, a slow network) whose write lands after someone else
    /// took the lock. It covers data on the lock's own server only (in a
    /// cluster, keys in the lock key's slot: use a hash tag, `job:{42}` and
    /// `result:{42}`); anything else needs the [`fence`](Lock::fence).
    ///
    /// - [`Error::NotHeld`]: the server found the lock absent, expired or
    ///   another owner's, and ran nothing; the lock is then lost
    ///   ([`LossReason::NotOwner`]). A lock already known lost or released
    ///   fails so without asking the server.
    /// - [`Error::Redis`]: `cmd`'s own error (`WRONGTYPE`, `NOPERM`, `OOM`,
    ///   `CROSSSLOT` for a key in another slot, an unknown command, ...) or
    ///   LOCK.GUARD's refusal of a command it cannot run inside (`MULTI`,
    ///   `EVAL`, `SELECT`, ...); the lock stays held. A connection failure
    ///   or timeout is an `Error::Redis` too: then whether `cmd` ran is
    ///   unknown, and it is never sent again by itself (a cluster resends
    ///   only after `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN` or a refused
    ///   connection, which show it did not run).
    /// - [`Error::Unsupported`]: the server has no `lock` module.
    /// - [`Error::InvalidArgument`]: an empty `cmd`, or one with a
    ///   `cursor_arg`.
    ///
    /// To read the reply as a type: `redis::from_redis_value(v)?`. Several
    /// writes in one step: LOCK.GUARD calls inside `MULTI`, or LOCK.GUARD
    /// called from a script (docs/guarded-writes.md).
    pub fn guard(&self, cmd: &redis::Cmd) -> Result<redis::Value> {
        runtime::block(self.guarded(Api::Sync, cmd)?)
    }

    /// The async twin of [`Lock::guard`].
    pub async fn guard_async(&self, cmd: &redis::Cmd) -> Result<redis::Value> {
        self.guarded(Api::Async, cmd)?.await
    }

    /// The checks made before sending, then the guarded call and what its
    /// outcome does to the lock, as one future both APIs run.
    fn guarded(
        &self,
        api: Api,
        inner: &redis::Cmd,
    ) -> Result<impl Future<Output = Result<redis::Value>> + Send + 'static> {
        if self.kind() != LockKind::Exclusive {
            // LOCK.GUARD decides by LOCK.RELEASE's ownership rule, which a
            // permit or a read/write lease (a member of a sorted set) has not.
            return Err(Error::InvalidArgument(
                "guard runs under an exclusive lock only, not a semaphore permit or a read-write lease".into(),
            ));
        }
        self.held.shared.check_renewable()?;
        self.held.holder.transport.serves(api)?;
        let guard = cmd::guard_cmd(self.key(), self.token(), inner)?;
        let (core, shared) = (self.held.holder.clone(), self.held.shared.clone());
        Ok(async move {
            let r = core.transport.call(&shared.key, &guard).await;
            match r {
                Err(Error::Redis(e)) => match cmd::guard_refusal(&e) {
                    Some(GuardRefusal::NotHeld) => {
                        shared.mark_lost(LossReason::NotOwner);
                        Err(Error::NotHeld { key: shared.key.clone() })
                    }
                    Some(GuardRefusal::NoModule) => Err(Error::Unsupported { command: "LOCK.GUARD" }),
                    None => Err(Error::Redis(e)),
                },
                r => r,
            }
        })
    }

    /// Deletes the key if this token still owns it and stops the watchdog.
    /// Idempotent: after a successful release, further calls return `Ok`
    /// without a round trip. [`Error::NotHeld`] if the lock had been lost
    /// (the key is left alone). On [`Error::Redis`] the lock may still be
    /// held until its TTL runs out; calling again retries.
    pub fn release(&self) -> Result<()> {
        self.held.release()
    }

    /// The async twin of [`Lock::release`].
    pub async fn release_async(&self) -> Result<()> {
        self.held.release_async().await
    }
}
