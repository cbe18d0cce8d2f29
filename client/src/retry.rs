//! Which failures of a cluster command are a topology change passing by
//! (a failover, a slot move, a node restarting) rather than an answer, and
//! how long to pause before trying again. Pure decisions, no I/O.

use std::time::Duration;

use redis::{ErrorKind, RedisError};

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
        assert_eq!(classify(&server("WRONGTYPE Operation against a key holding the wrong kind of value")), Failure::Final);
        assert_eq!(classify(&server("ERR syntax error")), Failure::Final);
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(&refused), Failure::NotApplied);
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(classify(&reset), Failure::Unknown);
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(classify(&timeout), Failure::Final);
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
