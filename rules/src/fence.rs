//! Fencing tokens: every grant made with `FENCE` gets a number larger than
//! any this server (or the master it replicates) has handed out before, so
//! for every key the tokens of successive grants strictly increase.
//!
//! One server-wide high-water mark serves every key: nothing is kept per
//! lock name. It is carried three ways, and the clock is the last resort:
//! - replicas and the AOF receive `LOCK.FENCEFLOOR <fence>` with each fenced
//!   grant, so a promoted replica or an AOF replay knows the exact mark;
//! - the RDB stores the mark (module aux data), so SAVE + restart and full
//!   syncs keep it;
//! - a new fence is never below the clock in microseconds (Unix ms × 1000),
//!   which covers a restart from state that lost the mark (an AOF rewritten
//!   without RDB preamble) as long as the clock has not stepped back further
//!   than the server was down. A server cannot grant 1000 locks per
//!   millisecond, so the mark never runs ahead of this clock floor by much.

/// Fences are replied as RESP integers (signed 64-bit).
pub const MAX: u64 = i64::MAX as u64;

/// How far past its clock floor a client may push a server's mark: 24 h
/// of clock-floor units (µs). Wide enough for servers whose clocks
/// disagree by minutes (a quorum lock carries one node's fence to the
/// others); narrow enough that no client can use the space up: the mark
/// can only ever run this far ahead of the clock, and the clock needs
/// ~290 000 years to reach the end of the 63-bit space.
pub const HORIZON: u64 = 86_400_000_000;

/// Whether a client may raise the mark to `floor` at `now_ms`. (The
/// replication stream and the AOF may raise it further: the master's clock
/// was the judge there.)
pub fn within_horizon(floor: u64, now_ms: i64) -> bool {
    floor <= clock_floor(now_ms).saturating_add(HORIZON)
}

/// The clock floor for a fence granted at `now_ms`.
pub fn clock_floor(now_ms: i64) -> u64 {
    u64::try_from(now_ms).unwrap_or(0).saturating_mul(1000)
}

/// The fence for a grant at `now_ms` after `last` was handed out; `None`
/// once the 63-bit space is used up (only a hostile LOCK.FENCEFLOOR can get
/// there: the clock floor would take ~290 000 years).
pub fn next(last: u64, now_ms: i64) -> Option<u64> {
    let next = last.checked_add(1)?.max(clock_floor(now_ms));
    (next <= MAX).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_follow_the_clock_and_never_repeat() {
        assert_eq!(next(0, 1_700_000_000_000), Some(1_700_000_000_000_000));
        // Two grants in the same millisecond: the second is one higher.
        assert_eq!(next(1_700_000_000_000_000, 1_700_000_000_000), Some(1_700_000_000_000_001));
        // A clock that went back does not take fences back with it.
        assert_eq!(next(1_700_000_000_000_000, 1_600_000_000_000), Some(1_700_000_000_000_001));
        assert_eq!(next(MAX - 1, 0), Some(MAX));
        assert_eq!(next(MAX, 0), None);
        assert_eq!(clock_floor(-5), 0);
    }

    #[test]
    fn clients_may_push_the_mark_at_most_a_day_past_the_clock() {
        let now = 1_700_000_000_000;
        assert!(within_horizon(0, now));
        assert!(within_horizon(clock_floor(now) + HORIZON, now));
        assert!(!within_horizon(clock_floor(now) + HORIZON + 1, now));
        assert!(!within_horizon(MAX, now));
        // Even a server whose clock reads year 0 accepts fences of today's clocks.
        assert!(!within_horizon(clock_floor(now), 0));
        assert!(within_horizon(HORIZON, -1));
    }
}
