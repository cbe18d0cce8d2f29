//! [`Lock`]: the handle of a held lock, of every [`LockKind`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cmd::{self, GuardRefusal, LockCmd, LockKind};
use crate::engine::Renewer;
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::runtime;
use crate::state::{LossReason, LostSignal, Shared, Status};
use crate::transport::{Api, Core};

/// How the lock was taken, which decides how drop releases it.
#[derive(Debug)]
pub(crate) enum Flavor {
    /// Sync API: drop releases on the dropping thread (bounded by the
    /// response timeout).
    Sync,
    /// Async API: drop queues the release with the client's engine (or
    /// spawns it on this runtime) and returns at once.
    Async(tokio::runtime::Handle),
}

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
    shared: Arc<Shared>,
    core: Arc<Core>,
    flavor: Flavor,
    fence: Option<u64>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.shared.key)
            .field("kind", &self.shared.kind)
            .field("fence", &self.fence)
            .field("flavor", &self.flavor)
            .finish_non_exhaustive()
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
        let shared = Arc::new(Shared::new(cmd.key().into(), cmd.token().into(), cmd.kind(), sent, ttl));
        if let (Some(w), Some(engine)) = (&opts.watchdog, opts.watchdog.as_ref().and_then(|_| core.engine())) {
            engine.add(shared.clone(), w, fence);
        }
        // Without an engine there are no renewals; the state still turns
        // Lost(Expired) at the end of the TTL, so the loss is not silent.
        Lock { shared, core, flavor, fence }
    }

    /// The TTL it was granted (and is renewed) for.
    pub(crate) fn ttl(&self) -> Duration {
        self.shared.ttl()
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The token that owns the key (the random one, or the caller's).
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// What it holds: the key alone, a semaphore's permit, a read or a
    /// write lease.
    pub fn kind(&self) -> LockKind {
        self.shared.kind
    }

    fn renewal(&self, ttl: Duration) -> Result<LockCmd> {
        LockCmd::renew_of(self.kind(), self.key(), self.token(), ttl)
    }

    fn releasing(&self) -> Result<LockCmd> {
        LockCmd::release_of(self.kind(), self.key(), self.token())
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
        self.fence
    }

    /// True while the lock is held as far as this process can tell: not
    /// released, no renewal answered "not owner", and its TTL (counted from
    /// when the last successful acquire/renew was sent) has not run out.
    pub fn is_held(&self) -> bool {
        self.shared.status() == Status::Held
    }

    /// Why the lock was lost, if it was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.shared.loss_reason()
    }

    /// A signal that fires when this lock is lost (or ends when released),
    /// usable from another thread or task.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal { shared: self.shared.clone() }
    }

    /// Resolves when the lock is lost (`Some(reason)`) or released (`None`).
    pub async fn lost(&self) -> Option<LossReason> {
        self.lost_signal().lost().await
    }

    /// Resets the TTL to `ttl` (the watchdog, if any, uses it from then on).
    /// [`Error::NotHeld`] if the key is no longer ours; then the lock is lost.
    pub fn renew(&self, ttl: Duration) -> Result<()> {
        self.shared.check_renewable()?;
        self.core.transport.serves(Api::Sync)?;
        let (core, cmd) = (self.core.clone(), self.renewal(ttl)?);
        let sent = Instant::now();
        self.shared.after_renew(sent, ttl, runtime::block(async move { core.run_ok(&cmd).await }))
    }

    /// The async twin of [`Lock::renew`].
    pub async fn renew_async(&self, ttl: Duration) -> Result<()> {
        self.shared.check_renewable()?;
        self.core.transport.serves(Api::Async)?;
        let cmd = self.renewal(ttl)?;
        let sent = Instant::now();
        let r = self.core.run_ok(&cmd).await;
        self.shared.after_renew(sent, ttl, r)
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
        self.shared.check_renewable()?;
        self.core.transport.serves(api)?;
        let guard = cmd::guard_cmd(self.key(), self.token(), inner)?;
        let (core, shared) = (self.core.clone(), self.shared.clone());
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

    /// Deletes the key if this token still owns it and stops the watchdog.
    /// Idempotent: after a successful release, further calls return `Ok`
    /// without a round trip. [`Error::NotHeld`] if the lock had been lost
    /// (the key is left alone). On [`Error::Redis`] the lock may still be
    /// held until its TTL runs out; calling again retries.
    pub fn release(&self) -> Result<()> {
        self.stop_watchdog();
        if self.shared.status() == Status::Released {
            return Ok(());
        }
        self.core.transport.serves(Api::Sync)?;
        let (core, cmd) = (self.core.clone(), self.releasing()?);
        self.after_release(runtime::block(async move { core.run_ok(&cmd).await }))
    }

    /// The async twin of [`Lock::release`].
    pub async fn release_async(&self) -> Result<()> {
        self.stop_watchdog();
        if self.shared.status() == Status::Released {
            return Ok(());
        }
        self.core.transport.serves(Api::Async)?;
        let cmd = self.releasing()?;
        let r = self.core.run_ok(&cmd).await;
        self.after_release(r)
    }
}

impl Drop for Lock {
    /// Best-effort release. Sync locks release on the dropping thread
    /// (bounded by the response timeout); async locks queue the release
    /// with the client's renewal engine, which pipelines the releases of
    /// many dropped locks (or, its bounded queue full, spawn it on their
    /// runtime), and return at once, so dropping never blocks a runtime
    /// thread. If the release fails, the key simply expires after its TTL.
    fn drop(&mut self) {
        self.stop_watchdog();
        let status = self.shared.status();
        if status == Status::Released {
            return;
        }
        if status == Status::Held {
            // Observers learn of a normal end now, not after the round trip.
            self.shared.mark_released();
        }
        // Also for a lost lock: the script deletes only our own value, and
        // "lost" may have been a connection scare while the key is still ours.
        let Ok(cmd) = self.releasing() else { return };
        match &self.flavor {
            Flavor::Sync => {
                let core = self.core.clone();
                let _ = runtime::block(async move { core.run_ok(&cmd).await });
            }
            Flavor::Async(rt) => {
                // Queued for the engine, which pipelines the releases of
                // many dropped locks; a full queue (or no engine) spawns it.
                let owner: Arc<dyn Renewer> = self.core.clone();
                if self.core.engine().is_some_and(|e| e.queue_release(owner, self.shared.clone())) {
                    return;
                }
                let core = self.core.clone();
                let rt = tokio::runtime::Handle::try_current().unwrap_or_else(|_| rt.clone());
                rt.spawn(async move {
                    let _ = core.run_ok(&cmd).await;
                });
            }
        }
    }
}
