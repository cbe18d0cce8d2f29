//! [`Lease`]: the lease rules a grant may ask the server to enforce,
//! `LOCKDELAY ms` and `MAXHOLD ms` (docs/commands.md), checked before
//! anything is sent, with the module's own words (`redis_lock_rules::args`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Cmd;
use redis_lock_rules::args::{self, MAX_LOCK_DELAY_MS};
use redis_lock_rules::ArgError;

use crate::error::{Error, Result};

/// `LOCKDELAY` and `MAXHOLD` of one grant, in whole milliseconds; both
/// absent by default (no delay after an involuntary end, no hold limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) lock_delay_ms: Option<u64>,
    pub(crate) max_hold_ms: Option<u64>,
}

impl Lease {
    /// The options of a grant of `ttl_ms`: a lock-delay of 0 to 60 s, a
    /// hold limit no shorter than the TTL and no longer than the longest
    /// TTL (an absolute expiry that fits). Sub-millisecond parts are cut,
    /// as for TTLs.
    pub(crate) fn new(lock_delay: Option<Duration>, max_hold: Option<Duration>, ttl: Duration) -> Result<Lease> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let lock_delay_ms = lock_delay.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        if lock_delay_ms.is_some_and(|ms| ms > MAX_LOCK_DELAY_MS.unsigned_abs()) {
            return Err(ArgError::LockDelayInvalid.into());
        }
        let max_hold_ms = max_hold.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        if let Some(ms) = max_hold_ms {
            if ms < ttl_ms {
                return Err(ArgError::MaxHoldBelowTtl.into());
            }
            let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
            let now = i64::try_from(now).unwrap_or(i64::MAX);
            let ms = i64::try_from(ms).map_err(|_| Error::from(ArgError::MaxHoldTooLarge))?;
            args::expiry_at(now, ms).map_err(|_| Error::from(ArgError::MaxHoldTooLarge))?;
        }
        Ok(Lease { lock_delay_ms, max_hold_ms })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock_delay_ms.is_none() && self.max_hold_ms.is_none()
    }

    /// The hold limit, if any.
    pub(crate) fn max_hold(&self) -> Option<Duration> {
        self.max_hold_ms.map(Duration::from_millis)
    }

    /// `[LOCKDELAY ms] [MAXHOLD ms]` at the end of a grant's arguments.
    pub(crate) fn append(&self, c: &mut Cmd) {
        if let Some(ms) = self.lock_delay_ms {
            c.arg("LOCKDELAY").arg(ms);
        }
        if let Some(ms) = self.max_hold_ms {
            c.arg("MAXHOLD").arg(ms);
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
    fn lease_options_are_checked_and_appended() {
        assert!(Lease::new(None, None, ms(100)).unwrap().is_empty());
        let l = Lease::new(Some(ms(60_000)), Some(ms(100)), ms(100)).unwrap();
        assert_eq!((l.lock_delay_ms, l.max_hold_ms), (Some(60_000), Some(100)));
        assert_eq!(l.max_hold(), Some(ms(100)));
        assert!(Lease::new(Some(ms(0)), None, ms(100)).is_ok(), "a delay of 0 is allowed");
        assert!(
            matches!(Lease::new(Some(ms(60_001)), None, ms(100)), Err(Error::InvalidArgument(m)) if m.contains("LOCKDELAY"))
        );
        assert!(
            matches!(Lease::new(None, Some(ms(99)), ms(100)), Err(Error::InvalidArgument(m)) if m.contains("at least ttl-ms"))
        );
        assert!(
            matches!(Lease::new(None, Some(Duration::MAX), ms(100)), Err(Error::InvalidArgument(m)) if m.contains("too large"))
        );
        let mut c = redis::cmd("X");
        l.append(&mut c);
        let packed = String::from_utf8_lossy(&c.get_packed_command()).replace("\r\n", " ");
        assert!(packed.ends_with("$9 LOCKDELAY $5 60000 $7 MAXHOLD $3 100 "), "{packed}");
    }
}
