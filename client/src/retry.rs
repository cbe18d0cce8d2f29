//! Which failures of a cluster command are a topology change passing by
//! (a failover, a slot move, a node restarting) rather than an answer, how
//! long to pause before trying again, and what to do about an attempt that
//! may have taken effect ([`Retrying`]); and the backoff of a polling
//! acquire. Pure decisions taking `now`, no I/O.

use std::time::{Duration, Instant};

use redis::{ErrorKind, RedisError};

use crate::cmd::{Grant, LockCmd};
use crate::error::{Error, Result};

/// Attempts a cluster `try_acquire`, `renew`, `release` or `info` makes
/// when a topology change fails it (on top of redis-rs's own retries),
/// before the error reaches the caller. An `acquire` with a wait keeps
/// trying for as long as its wait lasts instead.
pub(crate) const TOPOLOGY_ATTEMPTS: usize = 4;

/// What a failed cluster command means for a retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// An answer (or a fault that trying again cannot mend): pass it on.
    Final,
    /// The command did not take effect (a redirect, `TRYAGAIN`,
    /// `CLUSTERDOWN`, a refused connection): safe to send again.
    NotApplied,
    /// The connection broke with the command possibly applied: before an
    /// acquire is sent again, its possible grant must be released.
    Unknown,
}

/// Classifies `e` (see [`Failure`]). Timeouts are final: the response
/// timeout is the caller's bound on a dead server, not to be multiplied.
pub(crate) fn classify(e: &RedisError) -> Failure {
    if e.is_timeout() {
        return Failure::Final;
    }
    if e.redirect_node().is_some() || matches!(e.code(), Some("TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "LOADING")) {
        return Failure::NotApplied;
    }
    if e.is_connection_refusal() || e.kind() == ErrorKind::ClusterConnectionNotFound {
        return Failure::NotApplied;
    }
    if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        return Failure::Unknown;
    }
    Failure::Final
}

/// The pause before attempt `n + 1` after `n` failed ones: 50 ms, doubling
/// to at most 800 ms (a failover takes the cluster node timeout plus an
/// election, typically one to a few seconds), with ±25 % of `jitter`
/// (uniform in [0, 1)) so retrying clients do not move in lockstep.
pub(crate) fn pause(n: usize, jitter: f64) -> Duration {
    let base = Duration::from_millis(50).saturating_mul(1 << n.min(4)).min(Duration::from_millis(800));
    base.mul_f64(0.75 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// Full-jitter exponential backoff of an `acquire` that polls (no module,
/// or no `WAIT`), bounded by the wait's deadline: each pause is drawn
/// uniformly from `[min, cap]`, `cap` starting at `min` and doubling per
/// attempt up to `max`.
#[derive(Debug)]
pub(crate) struct Backoff {
    deadline: Instant,
    min: Duration,
    max: Duration,
    cap: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration, wait: Duration, now: Instant) -> Self {
        let deadline = now.checked_add(wait).unwrap_or_else(|| now + Duration::from_secs(86_400 * 365));
        Backoff { deadline, min, max, cap: min }
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// What is left of the wait.
    pub(crate) fn left(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// The pause before the next attempt (`jitter` uniform in [0, 1)), or
    /// `None` when the wait is over. The last pause is cut to end at the
    /// deadline, so one attempt is made there.
    pub(crate) fn next(&mut self, now: Instant, jitter: f64) -> Option<Duration> {
        let left = self.left(now);
        if left.is_zero() {
            return None;
        }
        let d = if self.cap > self.min {
            self.min + (self.cap - self.min).mul_f64(jitter.clamp(0.0, 1.0))
        } else {
            self.min
        };
        self.cap = (self.cap * 2).min(self.max);
        Some(d.min(left))
    }
}

/// One cluster command's attempts through a topology change: a failure
/// that did not apply it (a redirect that escaped redis-rs, `TRYAGAIN`,
/// `CLUSTERDOWN`, a refused connection) or may have (a connection reset)
/// is tried again after a growing pause, [`TOPOLOGY_ATTEMPTS`]
/// times in all, or until the deadline of an acquire's wait. An acquire
/// or takeover that may have been applied is released before it is sent
/// again, and once more if it finally fails, so its grant is never left
/// behind; a release refused after a possibly applied attempt had most
/// likely been done by it, and counts as done.
pub(crate) struct Retrying<'a> {
    cmd: &'a LockCmd,
    deadline: Option<Instant>,
    failed: usize,
    doubt: bool,
}

/// What [`Retrying::after`] says to do.
pub(crate) enum Step {
    /// Pause, then try again.
    Again(Duration),
    /// Give the caller this outcome.
    Done,
    /// Give the caller this failure, after sending this release.
    Doubt(LockCmd),
}

impl<'a> Retrying<'a> {
    pub(crate) fn new(cmd: &'a LockCmd, deadline: Option<Instant>) -> Self {
        Retrying { cmd, deadline, failed: 0, doubt: false }
    }

    /// The release of a grant an earlier attempt may have made, to send
    /// before the next attempt.
    pub(crate) fn release_first(&self) -> Option<LockCmd> {
        (self.doubt && self.cmd.grants()).then(|| self.cmd.releasing().ok()).flatten()
    }

    /// What to do after an attempt ended with `r` at `now` (`jitter`
    /// uniform in [0, 1), for the pause).
    pub(crate) fn after(&mut self, r: &Result<Grant>, now: Instant, jitter: f64) -> Step {
        let Err(Error::Redis(e)) = r else { return Step::Done };
        let failure = classify(e);
        if failure == Failure::Unknown {
            self.doubt = true;
        }
        let pause = pause(self.failed, jitter);
        self.failed += 1;
        let more = self.failed < TOPOLOGY_ATTEMPTS || self.deadline.is_some_and(|d| now + pause < d);
        match (failure, more, self.release_first()) {
            (Failure::Final, _, Some(release)) | (_, false, Some(release)) => Step::Doubt(release),
            (Failure::Final, _, None) | (_, false, None) => Step::Done,
            _ => Step::Again(pause),
        }
    }

    pub(crate) fn settle(&self, r: Result<Grant>) -> Result<Grant> {
        match r {
            Ok(Grant::Refused) if self.doubt && matches!(self.cmd, LockCmd::Release { .. }) => Ok(Grant::Granted(None)),
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(line: &str) -> RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(redis::Value::extract_error).unwrap_err()
    }

    #[test]
    fn topology_failures_are_told_from_answers() {
        assert_eq!(classify(&server("MOVED 3300 127.0.0.1:7001")), Failure::NotApplied);
        assert_eq!(classify(&server("ASK 3300 127.0.0.1:7001")), Failure::NotApplied);
        assert_eq!(classify(&server("CLUSTERDOWN The cluster is down")), Failure::NotApplied);
        assert_eq!(classify(&server("TRYAGAIN Multiple keys request during rehashing of slot")), Failure::NotApplied);
        assert_eq!(
            classify(&server("WRONGTYPE Operation against a key holding the wrong kind of value")),
            Failure::Final
        );
        assert_eq!(classify(&server("ERR syntax error")), Failure::Final);
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(&refused), Failure::NotApplied);
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(classify(&reset), Failure::Unknown);
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(classify(&timeout), Failure::Final);
    }

    #[test]
    fn backoff_doubles_its_cap_and_ends_at_the_deadline() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(10), ms(40), ms(100), t0);
        assert_eq!(b.next(t0, 0.9), Some(ms(10)), "the first cap is min");
        assert_eq!(b.next(t0, 1.0), Some(ms(20)));
        assert_eq!(b.next(t0, 1.0), Some(ms(40)));
        assert_eq!(b.next(t0, 1.0), Some(ms(40)), "capped at max");
        assert_eq!(b.next(t0 + ms(95), 1.0), Some(ms(5)), "cut to the deadline");
        assert_eq!(b.next(t0 + ms(100), 0.0), None);
        assert_eq!(b.left(t0 + ms(30)), ms(70));
    }

    #[test]
    fn pauses_grow_and_are_capped() {
        assert_eq!(pause(0, 0.5), Duration::from_millis(50));
        assert_eq!(pause(1, 0.5), Duration::from_millis(100));
        assert_eq!(pause(4, 0.5), Duration::from_millis(800));
        assert_eq!(pause(40, 0.5), Duration::from_millis(800));
        assert_eq!(pause(0, 0.0), Duration::from_micros(37_500));
        assert_eq!(pause(0, 1.0), Duration::from_micros(62_500));
    }
}
