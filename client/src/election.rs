//! Leader election on the module's `LOCK.ELECT` (docs/election.md): an
//! [`Election`] by key ([`LockClient::election`]), whose
//! [`campaign`](Election::campaign) makes a [`Leadership`] — a lock like
//! any other, renewed by the client's renewal engine and lost through the
//! same signal, with a **term** (its grant's fence) and a value others can
//! read ([`Election::leader`]) and follow ([`Election::observe`]).
//!
//! A campaign is an acquire: it queues FIFO in the server behind earlier
//! candidates (and lock waiters) of the key, on a dedicated connection,
//! exactly as [`LockClient::acquire`] waits; the stream of leader changes
//! is in `observe.rs`.
//!
//! One server or a cluster; module only. There is no quorum election: a
//! majority of independent servers issues no single order of terms (each
//! server numbers its own grants, so two leaders in a row can carry terms
//! from different servers that do not compare), and an observer would have
//! to block on a majority and merge their answers, which no server can
//! tell it is the latest.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::client::{check_key, lease_of, runtime as async_runtime, token_of, LockClient};
use crate::cmd::{self, LockCmd};
use crate::error::{Error, Result};
use crate::holding::{Flavor, HeldLock, LostSignal};
use crate::info::{parse_leader, Leader};
use crate::lock::Lock;
use crate::observe::{LeaderIter, LeaderStream};
use crate::options::LockOptions;
use crate::revocation::Revocation;
use crate::runtime;
use crate::state::LossReason;
use crate::trace;
use crate::transport::{Api, Core};

/// An election by key, from [`LockClient::election`]: campaign for it,
/// read its leader, follow its changes. Cheap to make and to clone.
#[derive(Clone, Debug)]
pub struct Election {
    client: LockClient,
    key: String,
}

impl LockClient {
    /// The election of `key` (a lock key: an exclusive lock's commands see
    /// the leader as the key's owner, so `info`, `release_token`, `list`
    /// and the CLI work on it; in a cluster, the key's slot decides the
    /// node as for any lock).
    pub fn election(&self, key: &str) -> Election {
        Election { client: self.clone(), key: key.into() }
    }
}

impl Election {
    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Campaigns for leadership with `value` (an address, an id: what
    /// followers read), waiting up to `wait` in the server's queue behind
    /// earlier candidates (`Duration::ZERO`: only if there is no leader
    /// now). On success the [`Leadership`] carries the term; it is kept
    /// alive by [`renew`](Leadership::renew), or by a watchdog
    /// ([`Election::campaign_with`] with [`LockOptions::watchdog`]).
    /// [`Error::NotAcquired`] when no leadership came within `wait`;
    /// [`Error::Unsupported`] without the module.
    pub fn campaign(&self, value: &str, ttl: Duration, wait: Duration) -> Result<Leadership> {
        self.campaign_with(value, ttl, wait, &LockOptions::default())
    }

    /// [`Election::campaign`] with options: token, watchdog, lock-delay,
    /// hold limit, replicas, and the backoff of a campaign that polls (on
    /// a client built from one connection, which cannot block a
    /// connection of its own in the server's queue).
    pub fn campaign_with(&self, value: &str, ttl: Duration, wait: Duration, opts: &LockOptions) -> Result<Leadership> {
        self.client.core.transport.serves(Api::Sync)?;
        let (me, value, opts) = (self.clone(), value.to_string(), opts.clone());
        runtime::block(async move { me.campaign_core(&value, ttl, wait, &opts, Flavor::Sync).await })
    }

    /// The async twin of [`Election::campaign`].
    pub async fn campaign_async(&self, value: &str, ttl: Duration, wait: Duration) -> Result<Leadership> {
        self.campaign_with_async(value, ttl, wait, &LockOptions::default()).await
    }

    /// The async twin of [`Election::campaign_with`].
    pub async fn campaign_with_async(
        &self,
        value: &str,
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
    ) -> Result<Leadership> {
        let rt = async_runtime()?;
        self.client.core.transport.serves(Api::Async)?;
        self.campaign_core(value, ttl, wait, opts, Flavor::Async(rt)).await
    }

    async fn campaign_core(
        &self,
        value: &str,
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
        flavor: Flavor,
    ) -> Result<Leadership> {
        let cmd = LockCmd::elect(&self.key, &token_of(opts), ttl, value)?.with_lease(lease_of(opts, ttl)?);
        let span = trace::acquire_span(&self.key, trace::ELECTION, "campaign", wait);
        let started = Instant::now();
        let r = self.client.acquire_cmd(&cmd, ttl, wait, opts, flavor).instrument(span.clone()).await;
        let lock =
            self.client.traced_as(&self.key, Some(trace::ELECTION), &span, started, r.map_err(|e| cmd.explain(e)))?;
        let Some(term) = lock.fence() else {
            // LOCK.ELECT always answers a term; only a server that is not
            // the module could grant without one, and it has no LOCK.ELECT.
            return Err(Error::Redis(cmd::unexpected(redis::Value::Okay)));
        };
        Ok(Leadership { lock, term, value: Mutex::new(value.into()) })
    }

    /// The leader now (`LOCK.LEADER`): `None` when there is none. On the
    /// master of the key (in a cluster: of its slot).
    pub fn leader(&self) -> Result<Option<Leader>> {
        check_key(&self.key)?;
        self.client.core.transport.serves(Api::Sync)?;
        let (core, key) = (self.client.core.clone(), self.key.clone());
        runtime::block(async move { leader(&core, &key).await })
    }

    /// The async twin of [`Election::leader`].
    pub async fn leader_async(&self) -> Result<Option<Leader>> {
        check_key(&self.key)?;
        self.client.core.transport.serves(Api::Async)?;
        leader(&self.client.core, &self.key).await
    }

    /// The leader changes, as an async `Stream` (see [`LeaderStream`]):
    /// the state now, then every change, never missing the latest one,
    /// reconnecting by itself. It has a connection of its own (a blocked
    /// `LOCK.OBSERVE` holds it), opened when first polled; nothing else per
    /// stream. [`Error::InvalidArgument`] on a client built from a given
    /// connection, which cannot open one.
    pub fn observe(&self) -> Result<LeaderStream> {
        check_key(&self.key)?;
        let observer = self.client.core.transport.clone().observer(&self.key)?;
        Ok(LeaderStream::new(observer, &self.key))
    }

    /// [`Election::observe`] as a blocking iterator (the same stream, see
    /// [`LeaderIter`]).
    pub fn observe_blocking(&self) -> Result<LeaderIter> {
        Ok(self.observe()?.blocking())
    }
}

async fn leader(core: &Arc<Core>, key: &str) -> Result<Option<Leader>> {
    let v = core.transport.call(key, &cmd::leader_cmd(key)).await.map_err(|e| unsupported(e, "LOCK.LEADER"))?;
    Ok(parse_leader(v)?)
}

fn unsupported(e: Error, command: &'static str) -> Error {
    match e {
        Error::Redis(r) if cmd::is_unknown_command(&r) => Error::Unsupported { command },
        e => e,
    }
}

/// A won campaign: the leadership of an election's key, from
/// [`Election::campaign`]. It is a lock on the key (the token owns it) and
/// behaves as a [`Lock`] does: renewed by [`renew`](Leadership::renew) or
/// the watchdog, lost through the same [`LostSignal`] (with the same
/// [`LossReason`]s), resigned on drop (best effort).
///
/// Its [`term`](Leadership::term) is strictly greater than every earlier
/// leader's of the key: send it with what the leader does, and have the
/// resource refuse a smaller one than it has seen, so a deposed leader
/// that has not noticed yet (a pause past its TTL) is refused.
#[derive(Debug)]
pub struct Leadership {
    lock: Lock,
    term: u64,
    /// The value last proclaimed (or campaigned with).
    value: Mutex<String>,
}

impl Leadership {
    /// The election's key.
    pub fn key(&self) -> &str {
        self.lock.key()
    }

    /// The token that owns the key.
    pub fn token(&self) -> &str {
        self.lock.token()
    }

    /// The term: this leadership's fence (see the type's docs).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The value this leader last proclaimed (or campaigned with).
    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The lock underneath (its [`guard`](Lock::guard) runs a command only
    /// while this leadership holds).
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// True while this process leads as far as it can tell (see
    /// [`Lock::is_held`]).
    pub fn is_held(&self) -> bool {
        self.lock.is_held()
    }

    /// Why the leadership was lost, if it was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.lock.loss_reason()
    }

    /// A signal that fires when the leadership is lost (or ends when
    /// resigned).
    pub fn lost_signal(&self) -> LostSignal {
        self.lock.lost_signal()
    }

    /// Resolves when the leadership is lost (`Some(reason)`) or resigned
    /// (`None`).
    pub async fn lost(&self) -> Option<LossReason> {
        self.lock.lost().await
    }

    /// Resolves when the renewal engine hears this leadership was revoked
    /// (`LOCK.REVOKE`, e.g. for a better candidate: resign before
    /// [`Revocation::deadline`]), or `None` when it ends unrevoked.
    pub async fn revoked(&self) -> Option<Revocation> {
        self.lock.revoked().await
    }

    /// Resets the lease to `ttl` (`LOCK.RENEW`); [`Error::NotHeld`] when
    /// no longer the leader.
    pub fn renew(&self, ttl: Duration) -> Result<()> {
        self.lock.renew(ttl)
    }

    /// The async twin of [`Leadership::renew`].
    pub async fn renew_async(&self, ttl: Duration) -> Result<()> {
        self.lock.renew_async(ttl).await
    }

    /// Changes the leader's value, keeping the term and the lease
    /// (`LOCK.PROCLAIM`); every observer is told (a new
    /// [`rev`](Leader::rev)). [`Error::NotHeld`] when this token no longer
    /// leads: the leadership is then lost ([`LossReason::NotOwner`]); a
    /// leadership already known lost or resigned fails so without a round
    /// trip. A connection failure leaves unknown whether the value
    /// changed; proclaiming again is harmless (observers see one more rev).
    pub fn proclaim(&self, value: &str) -> Result<()> {
        self.lock.held_check()?;
        let core = self.lock.core();
        core.transport.serves(Api::Sync)?;
        let (key, token, v) = (self.key().to_string(), self.token().to_string(), value.to_string());
        let ok = runtime::block(async move { proclaim(&core, &key, &token, &v).await })?;
        self.proclaimed(value, ok)
    }

    /// The async twin of [`Leadership::proclaim`].
    pub async fn proclaim_async(&self, value: &str) -> Result<()> {
        self.lock.held_check()?;
        let core = self.lock.core();
        core.transport.serves(Api::Async)?;
        let ok = proclaim(&core, self.key(), self.token(), value).await?;
        self.proclaimed(value, ok)
    }

    fn proclaimed(&self, value: &str, ok: bool) -> Result<()> {
        if !ok {
            self.lock.lose(LossReason::NotOwner);
            return Err(Error::NotHeld { key: self.key().into() });
        }
        *self.value.lock().unwrap_or_else(|p| p.into_inner()) = value.into();
        Ok(())
    }

    /// Steps down (`LOCK.RELEASE`): the next candidate in the queue leads
    /// at once. Idempotent; [`Error::NotHeld`] if the leadership had been
    /// lost. Dropping a `Leadership` resigns too (best effort).
    pub fn resign(&self) -> Result<()> {
        self.lock.release()
    }

    /// The async twin of [`Leadership::resign`].
    pub async fn resign_async(&self) -> Result<()> {
        self.lock.release_async().await
    }
}

async fn proclaim(core: &Arc<Core>, key: &str, token: &str, value: &str) -> Result<bool> {
    let c = cmd::proclaim_cmd(key, token, value)?;
    let v = core.transport.call(key, &c).await.map_err(|e| unsupported(e, "LOCK.PROCLAIM"))?;
    Ok(cmd::proclaim_reply(v)?)
}

/// A leadership is held like a lock (its fence is the term; release
/// resigns), for code that holds "a lock" without caring which.
impl HeldLock for Leadership {
    fn key(&self) -> &str {
        Leadership::key(self)
    }
    fn token(&self) -> &str {
        Leadership::token(self)
    }
    fn fence(&self) -> Option<u64> {
        Some(self.term)
    }
    fn is_held(&self) -> bool {
        Leadership::is_held(self)
    }
    fn loss_reason(&self) -> Option<LossReason> {
        Leadership::loss_reason(self)
    }
    fn lost_signal(&self) -> LostSignal {
        Leadership::lost_signal(self)
    }
    fn renew(&self, ttl: Duration) -> Result<()> {
        Leadership::renew(self, ttl)
    }
    fn release(&self) -> Result<()> {
        Leadership::resign(self)
    }
}
