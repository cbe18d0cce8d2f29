//! The renewal schedule of a watchdog lock, as pure decisions taking `now`:
//! when the next renewal is due, how early it may go to share a round trip
//! with others, and what a renewal's outcome means. The renewal engine
//! (`engine.rs`) runs it for every lock of a client at once.

use std::time::{Duration, Instant};

use crate::error::Error;
use crate::options::WatchdogOptions;
use crate::state::{LossReason, Shared};

/// Renew every TTL/3: a live holder's remaining TTL then never falls below
/// 2·TTL/3, which is what the takeover rule's TTL/2 staleness test assumes.
pub(crate) fn interval(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(1))
}

/// After a failed renewal, try again sooner than the cadence: the lock has
/// at most 2·TTL/3 left and every attempt counts.
pub(crate) fn retry_interval(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(1))
}

/// The longest a renewal is sent ahead of its due time, to share a round
/// trip with renewals due just after it.
pub(crate) const MAX_EARLY: Duration = Duration::from_millis(100);

/// How early a renewal of a lock of this TTL may be sent: TTL/30 (so the
/// cadence stays between 0.30 and 0.33 TTL: renewing early only leaves the
/// key more time), at most [`MAX_EARLY`].
pub(crate) fn early(ttl: Duration) -> Duration {
    (ttl / 30).min(MAX_EARLY)
}

/// What a renewal's outcome means for the schedule.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Renew again at this instant.
    Next(Instant),
    /// Stop renewing.
    Stop,
}

/// One lock's schedule.
#[derive(Debug)]
pub(crate) struct Schedule {
    started: Instant,
    max_lifetime: Option<Duration>,
}

impl Schedule {
    pub(crate) fn new(opts: &WatchdogOptions, now: Instant) -> Self {
        Schedule { started: now, max_lifetime: opts.max_lifetime }
    }

    /// The first renewal.
    pub(crate) fn first(&self, ttl: Duration) -> Instant {
        self.started + interval(ttl)
    }

    /// Past its maximum lifetime the watchdog retires: the lock runs out its
    /// current TTL and the state reports `MaxLifetime`.
    pub(crate) fn retired(&self, now: Instant) -> bool {
        self.max_lifetime.is_some_and(|m| now.saturating_duration_since(self.started) >= m)
    }

    /// Applies a renewal sent at `sent` for `ttl` to the lock's state, and
    /// says what comes next.
    pub(crate) fn after(
        &self,
        shared: &Shared,
        sent: Instant,
        ttl: Duration,
        r: Result<bool, Error>,
        now: Instant,
    ) -> Outcome {
        match r {
            Ok(true) if shared.renewed(sent, ttl) => Outcome::Next(sent + interval(ttl)),
            // Released meanwhile.
            Ok(true) => Outcome::Stop,
            Ok(false) => {
                shared.mark_lost(LossReason::NotOwner);
                Outcome::Stop
            }
            // Connection trouble: keep trying; once the validity has passed
            // the state turns Lost(Expired) by itself and renewals stop.
            Err(_) => Outcome::Next(now + retry_interval(ttl)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn cadence_retry_and_early_window() {
        assert_eq!(interval(ms(300)), ms(100));
        assert_eq!(retry_interval(ms(300)), ms(30));
        assert_eq!(interval(Duration::from_micros(10)), ms(1));
        assert_eq!(early(ms(300)), ms(10));
        assert_eq!(early(Duration::from_secs(30)), MAX_EARLY);
        // Sent as early as allowed, a renewal still comes after 0.3 TTL.
        let ttl = ms(3000);
        assert!(interval(ttl) - early(ttl) >= ttl.mul_f64(0.3) - ms(1));
    }

    #[test]
    fn outcomes_follow_the_documented_rules() {
        let t0 = Instant::now();
        let ttl = ms(300);
        let s = Shared::new("k".into(), "t".into(), crate::cmd::LockKind::Exclusive, t0, ttl);
        let sched = Schedule::new(&WatchdogOptions::new().max_lifetime(ms(1000)), t0);
        assert_eq!(sched.first(ttl), t0 + ms(100));
        let sent = t0 + ms(100);
        assert_eq!(sched.after(&s, sent, ttl, Ok(true), sent + ms(1)), Outcome::Next(sent + ms(100)));
        assert_eq!(s.lock().valid_until, sent + ttl, "validity counts from the sending");
        let now = t0 + ms(205);
        assert_eq!(
            sched.after(&s, now, ttl, Err(Error::InvalidArgument("x".into())), now),
            Outcome::Next(now + ms(30))
        );
        assert!(!sched.retired(t0 + ms(999)));
        assert!(sched.retired(t0 + ms(1000)));
        assert_eq!(sched.after(&s, now, ttl, Ok(false), now), Outcome::Stop);
        assert_eq!(s.loss_reason(), Some(LossReason::NotOwner));
        assert_eq!(sched.after(&s, now, ttl, Ok(true), now), Outcome::Stop, "a lost lock stays lost");
    }

    #[test]
    fn a_hold_limit_caps_the_validity_and_ends_as_max_hold() {
        let t0 = Instant::now();
        let ttl = ms(300);
        let s = Shared::new("k".into(), "t".into(), crate::cmd::LockKind::Exclusive, t0, ttl);
        s.limit_hold(t0, ms(500));
        assert!(!s.lock().capped, "the first TTL ends before the limit");
        let sched = Schedule::new(&WatchdogOptions::new(), t0);
        let sent = t0 + ms(100);
        assert_eq!(sched.after(&s, sent, ttl, Ok(true), sent), Outcome::Next(sent + ms(100)));
        assert_eq!(s.lock().valid_until, sent + ttl);
        let sent = t0 + ms(250);
        s.mark_capped(); // the server answered 2
        sched.after(&s, sent, ttl, Ok(true), sent);
        let g = s.lock();
        assert_eq!((g.valid_until, g.capped), (t0 + ms(500), true), "never past the limit");
        drop(g);
        // Past the limit the lock is lost, as MaxHold.
        let late = Shared::new("k".into(), "t".into(), crate::cmd::LockKind::Exclusive, t0 - ms(250), ttl);
        late.limit_hold(t0 - ms(250), ttl);
        std::thread::sleep(ms(60));
        assert_eq!(late.loss_reason(), Some(LossReason::MaxHold), "a limit of one TTL ends the first lease");
        // Capped by a server whose limit this process cannot place: not extended.
        let blind = Shared::new("k".into(), "t".into(), crate::cmd::LockKind::Exclusive, t0, ttl);
        blind.mark_capped();
        assert!(blind.renewed(t0 + ms(200), ttl));
        assert_eq!(blind.lock().valid_until, t0 + ttl);
    }
}
