//! Options, each with its documented default.

use std::time::Duration;

/// The default of [`ClientOptions::watchdog_batch`]: Redisson's
/// `lockWatchdogBatchSize`.
pub(crate) const DEFAULT_WATCHDOG_BATCH: usize = 100;

/// The default of [`ClientOptions::session_checks`].
pub(crate) const DEFAULT_SESSION_CHECKS: u32 = 2;

/// Connection-level options of a [`LockClient`](crate::LockClient).
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) watchdog_batch: usize,
    pub(crate) sessions: bool,
    pub(crate) session_ttl: Option<Duration>,
    pub(crate) session_checks: u32,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            watchdog_batch: DEFAULT_WATCHDOG_BATCH,
            sessions: true,
            session_ttl: None,
            session_checks: DEFAULT_SESSION_CHECKS,
        }
    }
}

impl ClientOptions {
    /// The defaults: see each setter.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long opening a connection may take. Default: 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one command may wait for its reply before it fails with
    /// [`Error::Redis`](crate::Error::Redis) (an I/O timeout). It bounds how
    /// long a dead server can stall a renew or release, so keep it below the
    /// TTLs you use. Default: 2 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// At most this many watchdog renewals (or queued releases of dropped
    /// locks) go in one pipeline to one node. The client's renewal engine
    /// sends every renewal due within a short window together, one
    /// pipeline per node of this size at most, several pipelines in flight
    /// at once. Larger batches mean fewer round trips and longer single
    /// commands on the server. Default: 100 (Redisson's
    /// `lockWatchdogBatchSize`); 0 counts as 1.
    pub fn watchdog_batch(mut self, n: usize) -> Self {
        self.watchdog_batch = n.max(1);
        self
    }

    /// Whether the renewal engine holds watchdog locks with a session
    /// (docs/sessions.md): one `SESSION.GRANT` per node, granted when the
    /// first lock that can use it is taken, each lock attached to it with
    /// its acquire (`SESSION id`), and all of them kept by one
    /// `SESSION.KEEPALIVE` per node every TTL/3, whatever their number,
    /// instead of a `LOCK.RENEW` per lock. Where the module serves the key
    /// and the lock can be held so: a watchdog lock without
    /// [`WatchdogOptions::max_lifetime`] (the session would outlive it),
    /// not a takeover (also [`lock_all`](crate::LockClient::lock_all)'s), on a
    /// client built from a URL, a `redis::Client` or an async connection.
    /// Every other lock, and every lock on a server without the module (or
    /// without sessions), is renewed on its own as before. A lock's loss
    /// when its session ends reads how it ended:
    /// [`LossReason::SessionRevoked`](crate::LossReason::SessionRevoked),
    /// [`SessionExpired`](crate::LossReason::SessionExpired) or
    /// [`SessionUnknown`](crate::LossReason::SessionUnknown).
    /// Default: on.
    pub fn sessions(mut self, on: bool) -> Self {
        self.sessions = on;
        self
    }

    /// One TTL for the client's sessions: each node gets one session of
    /// this TTL (per lock-delay in use), kept alive every `ttl`/3, which
    /// the watchdog locks whose own TTL is at least `ttl` attach to (a
    /// shorter one renews on its own: a session never keeps a lock longer
    /// after its holder stopped than the lock's TTL). Default: none: each
    /// lock is held by the session of its own TTL on its node (one session
    /// per node and TTL in use, so a lock ends exactly as its own lease
    /// would). 0 counts as 1 ms.
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = Some(ttl.max(Duration::from_millis(1)));
        self
    }

    /// How many session-held locks the renewal engine checks one by one
    /// each second, at most (all of the client's nodes together): a
    /// `LOCK.RENEW`, which changes nothing on a session's lock but answers
    /// that it was deleted behind its holder's back (`DEL`, `FLUSHDB`, an
    /// eviction, a release by its token elsewhere) or revoked, each lock
    /// at most once per TTL/3. So a client holding a few locks hears of
    /// such a loss as fast as without a session ([`LossReason::NotOwner`](crate::LossReason::NotOwner),
    /// `Evicted`, `Revoked`), and one holding N of them within about
    /// N/`per_second` seconds, while the server's cost stays one keepalive
    /// per node per TTL/3 plus `per_second`. A session's own end is heard
    /// by its keepalives whatever this is. Default: 2; 0: no checks (such
    /// a loss is then heard by the lock's release).
    pub fn session_checks(mut self, per_second: u32) -> Self {
        self.session_checks = per_second;
        self
    }
}

/// Per-lock options, for the `*_with` methods.
#[derive(Clone, Debug)]
pub struct LockOptions {
    pub(crate) token: Option<String>,
    pub(crate) watchdog: Option<WatchdogOptions>,
    pub(crate) retry_min_delay: Duration,
    pub(crate) retry_max_delay: Duration,
    pub(crate) replicas: Option<(u32, Duration)>,
    pub(crate) lock_delay: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            token: None,
            watchdog: None,
            replicas: None,
            lock_delay: None,
            max_hold: None,
            retry_min_delay: Duration::from_millis(10),
            retry_max_delay: Duration::from_millis(200),
        }
    }
}

impl LockOptions {
    /// The defaults: see each setter.
    pub fn new() -> Self {
        Self::default()
    }

    /// The token that identifies this holder. Default: 128 random bits from
    /// the OS, as 32 lowercase hex digits. Must be non-empty.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Keeps the lock renewed in the background. Default: off (the lock
    /// expires after its TTL unless you call `renew`).
    pub fn watchdog(mut self, watchdog: WatchdogOptions) -> Self {
        self.watchdog = Some(watchdog);
        self
    }

    /// Hands the lock out only once its grant reached `n` replicas of the
    /// master that made it, waiting up to `timeout` (`WAIT n timeout` after
    /// the grant); otherwise releases it and fails with
    /// [`Error::NotReplicated`](crate::Error::NotReplicated). A failover to
    /// one of those replicas then keeps the lock; asynchronous replication
    /// alone can lose a grant made just before the master died. The price:
    /// every acquisition waits for the replicas (a round trip and their
    /// lag), and fails while fewer than `n` are connected. `timeout` must be
    /// below [`ClientOptions::response_timeout`]. Default: off (the lock is
    /// handed out as soon as the master granted it).
    pub fn wait_for_replicas(mut self, n: u32, timeout: Duration) -> Self {
        self.replicas = Some((n, timeout));
        self
    }

    /// A lock-delay (Chubby's, Consul's `LockDelay`), enforced by the
    /// server: when this lock ends *involuntarily* — its lease runs out
    /// (a holder that stopped renewing: paused, partitioned, dead) or it is
    /// taken over — nobody can acquire the key until `delay` after that
    /// end, so a paused holder that still writes to a resource that cannot
    /// check fences is not joined by a second writer at once. A release
    /// frees the key at once. Sent as `LOCKDELAY ms` with the acquire
    /// (0 to 60 s, whole milliseconds); needs the module (without it:
    /// [`Error::Unsupported`](crate::Error::Unsupported)). Default: none
    /// (the key is free the moment the lease ends).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// A hold limit enforced by the server: renewals never extend the lease
    /// past the grant's time plus `limit`, so a holder whose watchdog renews
    /// forever cannot keep the key forever. A renewal cut short by the
    /// limit is answered 2 (not 1); the lock then ends at the limit and is
    /// reported lost with [`LossReason::MaxHold`](crate::LossReason::MaxHold).
    /// Unlike [`WatchdogOptions::max_lifetime`], which this process
    /// enforces on itself, it holds against a runaway holder. Sent as
    /// `MAXHOLD ms` with the acquire (at least the TTL); needs the module
    /// (without it: [`Error::Unsupported`](crate::Error::Unsupported)).
    /// Default: none (renewals always extend by the full TTL).
    pub fn max_hold(mut self, limit: Duration) -> Self {
        self.max_hold = Some(limit);
        self
    }

    /// Backoff of `acquire` between attempts: each wait is drawn uniformly
    /// from `[min, cap]` where `cap` starts at `min` and doubles per attempt up
    /// to `max` (jitter keeps contenders from retrying in lockstep). Default:
    /// 10 ms and 200 ms.
    pub fn retry_delay(mut self, min: Duration, max: Duration) -> Self {
        self.retry_min_delay = min;
        self.retry_max_delay = max.max(min);
        self
    }
}

/// The background renewal of one lock.
///
/// The watchdog renews every TTL/3 (the cadence the TTL/2 staleness rule of
/// `takeover` relies on: a live holder's remaining TTL never falls below
/// 2·TTL/3). After a failed renewal it retries every TTL/10. It stops on
/// release or drop. The lock is marked lost, and every
/// [`LostSignal`](crate::LostSignal) fires, when a renewal answers that the
/// token no longer owns the key, or when no renewal has succeeded within the
/// TTL (measured from when the last successful one was sent).
#[derive(Clone, Debug, Default)]
pub struct WatchdogOptions {
    pub(crate) max_lifetime: Option<Duration>,
}

impl WatchdogOptions {
    /// The defaults: see each setter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops renewing once the lock has been held this long, so a wedged
    /// holder cannot keep it forever; the lock then expires at the end of
    /// its current TTL and is reported lost with
    /// [`LossReason::MaxLifetime`](crate::LossReason::MaxLifetime).
    /// Default: none (renew until release or drop).
    pub fn max_lifetime(mut self, max: Duration) -> Self {
        self.max_lifetime = Some(max);
        self
    }
}
