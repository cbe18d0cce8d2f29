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
}
