//! [`QuorumOptions`]: the knobs of the quorum algorithm, with redsync's
//! defaults where redsync has one.

use std::time::Duration;

use crate::options::{ClientOptions, DEFAULT_SESSION_CHECKS};

/// Options of a [`QuorumClient`](crate::QuorumClient). Per-lock options
/// (token, watchdog) are the usual [`LockOptions`](crate::LockOptions);
/// their `retry_delay` is not used here (see [`QuorumOptions::retry_delay`]).
#[derive(Clone, Debug)]
pub struct QuorumOptions {
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) drift_fixed: Duration,
    pub(crate) retry_min_delay: Duration,
    pub(crate) retry_max_delay: Duration,
    pub(crate) reacquire_on_renew: bool,
    pub(crate) watchdog_batch: usize,
    pub(crate) sessions: bool,
    pub(crate) session_ttl: Option<Duration>,
    pub(crate) session_checks: u32,
}

impl Default for QuorumOptions {
    fn default() -> Self {
        QuorumOptions {
            node_timeout: None,
            connect_timeout: Duration::from_secs(2),
            drift_factor: 0.01,
            drift_fixed: Duration::from_millis(2),
            retry_min_delay: Duration::from_millis(50),
            retry_max_delay: Duration::from_millis(250),
            reacquire_on_renew: true,
            watchdog_batch: crate::options::DEFAULT_WATCHDOG_BATCH,
            sessions: true,
            session_ttl: None,
            session_checks: DEFAULT_SESSION_CHECKS,
        }
    }
}

impl QuorumOptions {
    /// The defaults: see each setter.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long one server may take to answer one step (an acquire, the
    /// fence floor, a renewal, a release) before it counts as failed for
    /// that step. Default: 5 % of the lock's TTL (redsync's timeout factor),
    /// at least 1 ms. A slow server then costs a step at most this long,
    /// and only when the majority is not reached without it.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// How long opening a connection to one server may take (a step's
    /// node timeout cuts it shorter). Default: 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The clock-drift allowance subtracted from every validity:
    /// `factor × TTL + fixed`. Default: 1 % of the TTL + 2 ms (the Redlock
    /// description's; redsync uses the 1 % alone). It covers servers whose
    /// clocks *run* at slightly different rates, not clocks that jump.
    pub fn drift(mut self, factor: f64, fixed: Duration) -> Self {
        self.drift_factor = if factor.is_finite() { factor.clamp(0.0, 1.0) } else { 0.01 };
        self.drift_fixed = fixed;
        self
    }

    /// The pause between failed attempts of `acquire`, drawn uniformly from
    /// `[min, max]` each time, so contenders that collided do not collide
    /// again. Default: 50–250 ms (redsync's). redsync's default of 32
    /// tries is about `acquire` with a 5 s wait.
    pub fn retry_delay(mut self, min: Duration, max: Duration) -> Self {
        self.retry_min_delay = min;
        self.retry_max_delay = max.max(min);
        self
    }

    /// Whether a renewal that finds the key *absent* on a server takes it
    /// there again (`LOCK.ACQUIRE`, then the fence floor), as redsync's
    /// `WithSetNXOnExtend` does. Default: on. A server that restarted
    /// without persistence (or lost the key otherwise) then rejoins the
    /// holder's majority at the next renewal instead of staying free for a
    /// competitor; a key held by another token is never touched. See the
    /// docs/quorum.md for what a restart can still break.
    pub fn reacquire_on_renew(mut self, on: bool) -> Self {
        self.reacquire_on_renew = on;
        self
    }

    /// At most this many watchdog renewals (or queued releases) go in one
    /// pipeline to one server; as
    /// [`ClientOptions::watchdog_batch`](crate::ClientOptions::watchdog_batch).
    /// Default: 100.
    pub fn watchdog_batch(mut self, n: usize) -> Self {
        self.watchdog_batch = n.max(1);
        self
    }

    /// Whether watchdog locks are held with a session on each server, as
    /// [`ClientOptions::sessions`] (docs/sessions.md, "Quorum locks"): one
    /// `SESSION.GRANT` per server, granted when the first lock that can
    /// use it is taken; each lock attached to it on every server that
    /// grants it (`SESSION id`), and all of them kept by one
    /// `SESSION.KEEPALIVE` per server every TTL/3, whatever their number.
    /// Each server's grant is then a vote its session keeps: a session's
    /// end drops that server's vote for every lock it holds, and a lock is
    /// lost only when fewer than a majority of votes are left; a vote lost
    /// is taken again at the lock's next renewal (with
    /// [`QuorumOptions::reacquire_on_renew`]) unless its session was
    /// revoked (`SESSION.REVOKE`). A server without the module
    /// (or without sessions) renews its votes lock by lock. Off: every
    /// quorum lock renews lock by lock on every server. Default: on.
    pub fn sessions(mut self, on: bool) -> Self {
        self.sessions = on;
        self
    }

    /// One TTL for the sessions, as [`ClientOptions::session_ttl`].
    /// Default: none (each lock is held by the sessions of its own TTL).
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = Some(ttl.max(Duration::from_millis(1)));
        self
    }

    /// How many session-held locks are checked one by one each second,
    /// at most, as [`ClientOptions::session_checks`]: a quorum lock's
    /// check is a `LOCK.RENEW` on each server whose session holds its
    /// vote, and counts once per such server. Default: 2; 0: no checks.
    pub fn session_checks(mut self, per_second: u32) -> Self {
        self.session_checks = per_second;
        self
    }

    /// Each server's client options: the connect timeout and sessions.
    pub(crate) fn client_options(&self) -> ClientOptions {
        let c = ClientOptions::new()
            .connect_timeout(self.connect_timeout)
            .sessions(self.sessions)
            .session_checks(self.session_checks);
        match self.session_ttl {
            Some(ttl) => c.session_ttl(ttl),
            None => c,
        }
    }

    /// The per-server timeout for a lock of this TTL.
    pub(crate) fn node_timeout_for(&self, ttl: Duration) -> Duration {
        self.node_timeout.unwrap_or_else(|| ttl.mul_f64(0.05)).max(Duration::from_millis(1))
    }

    /// The drift allowance for a lock of this TTL.
    pub(crate) fn drift_for(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.drift_factor).saturating_add(self.drift_fixed)
    }
}
