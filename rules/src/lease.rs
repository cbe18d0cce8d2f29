//! Lease rules of the exclusive lock: `LOCKDELAY ms` and `MAXHOLD ms`
//! (issue 22), pure and taking `now` as an argument.
//!
//! - A grant with `MAXHOLD` stores `holdUntil` = grant time + `MAXHOLD`;
//!   no renewal ends the lease past it ([`renew`] says when it capped one).
//! - A grant with `LOCKDELAY` stores `lockDelay` and `leaseEnd`; the key
//!   itself expires at `leaseEnd + lockDelay`, so that after the lease ends
//!   nothing, not even the scripts' `SET NX`, takes the key during the
//!   delay. A voluntary release before `leaseEnd` deletes the key (no delay).
//! - A lease that has ended (`leaseEnd <= now`, or `holdUntil <= now`) is
//!   settled lazily by whichever module command opens the key first
//!   ([`settle`]): rewritten as the tombstone `{"owner":null,
//!   "delayedUntil":MS}` with the same expiry, which no token owns (for the
//!   module and the scripts alike), or deleted when it carries no delay.
//!
//! These meanings apply only to values in the module's canonical encoding
//! ([`crate::value::parse`]); every other value is decided as the scripts
//! decide it.

use crate::args::{expiry_at, ArgError, GrantOptions};
use crate::value::{self, Delay, Stored};

/// The lease terms a grant asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Terms {
    /// `LOCKDELAY ms` (0: none).
    pub lock_delay: Option<i64>,
    /// `MAXHOLD ms`.
    pub max_hold: Option<i64>,
}

impl Terms {
    pub fn of(opts: &GrantOptions) -> Terms {
        Terms { lock_delay: opts.lock_delay, max_hold: opts.max_hold }
    }

    /// Whether a grant with these terms stores a lease field. `LOCKDELAY 0`
    /// stores nothing: a delay of 0 ends with the lease, as a plain lock.
    pub fn stores_fields(&self) -> bool {
        self.max_hold.is_some() || self.delay().is_some()
    }

    fn delay(&self) -> Option<i64> {
        self.lock_delay.filter(|&ms| ms > 0)
    }
}

/// What a grant made at some `now` stores: its lease fields and the key's
/// absolute expiry (`SET … PXAT pxat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub hold_until: Option<i64>,
    pub delay: Option<Delay>,
    /// The key's expiry: the lease end, plus the lock-delay if any.
    pub pxat: i64,
}

impl Grant {
    /// Sets the grant's lease fields on `value` (its owner, run id and
    /// election stay as they are).
    pub fn apply(&self, value: &mut Stored) {
        value.hold_until = self.hold_until;
        value.delay = self.delay;
    }
}

/// The lease of a grant of `ttl_ms` made at `now` with `terms`. Errors when
/// a time does not fit the 64-bit millisecond clock (nothing is written).
pub fn grant(now: i64, ttl_ms: i64, terms: Terms) -> Result<Grant, ArgError> {
    let mut lease_end = expiry_at(now, ttl_ms)?;
    let hold_until = match terms.max_hold {
        Some(max) => Some(now.checked_add(max).ok_or(ArgError::MaxHoldTooLarge)?),
        None => None,
    };
    // check_lease_terms refuses MAXHOLD < ttl-ms; capped here all the same.
    if let Some(h) = hold_until {
        lease_end = lease_end.min(h);
    }
    let delay = terms.delay().map(|lock_delay| Delay { lock_delay, lease_end });
    let pxat = key_expiry(lease_end, delay)?;
    Ok(Grant { hold_until, delay, pxat })
}

/// The value and the key's expiry of a grant to `base` (its owner, run id
/// and election, whose lease fields are replaced). `None` as the value: the
/// bare token (`base.owner`), which a grant with no run id, no election and
/// no lease field stores, as `SET` does.
pub fn granted(mut base: Stored, now: i64, ttl_ms: i64, terms: Terms) -> Result<(Option<Vec<u8>>, i64), ArgError> {
    let g = grant(now, ttl_ms, terms)?;
    g.apply(&mut base);
    Ok((base.needs_structure().then(|| base.encode()), g.pxat))
}

/// `base` (owner, run id, election) with the lease fields of `g`, encoded:
/// the value of a grant that is always structured (an election's).
pub fn encode_with(mut base: Stored, g: &Grant) -> Vec<u8> {
    g.apply(&mut base);
    base.encode()
}

/// Until when the key holding `value` (expiring at `pxat`) is held: the
/// end of its lease when it is a canonical value with lease fields (never
/// past the key's expiry), else the key's expiry.
pub fn held_until(value: &[u8], pxat: Option<i64>) -> Option<i64> {
    let end = value::parse(value).filter(|_| may_have_lease(value)).and_then(|v| lease_end(&v));
    match (end, pxat) {
        (Some(e), Some(p)) => Some(e.min(p)),
        (e, p) => e.or(p),
    }
}

fn key_expiry(lease_end: i64, delay: Option<Delay>) -> Result<i64, ArgError> {
    match delay {
        Some(d) => lease_end.checked_add(d.lock_delay).ok_or(ArgError::TtlTooLarge),
        None => Ok(lease_end),
    }
}

/// The end of a canonical value's lease, when its fields say one: the
/// earlier of `leaseEnd` and `holdUntil`. `None`: the lease ends with the key.
pub fn lease_end(v: &Stored) -> Option<i64> {
    match (v.delay.map(|d| d.lease_end), v.hold_until) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What a module command does first with a key it opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// Nothing: not a canonical value with a lease field, or its lease has
    /// not ended.
    Keep,
    /// The lease ended and has a delay: store [`value::tombstone`]`(until)`
    /// with expiry `until` (the key's own expiry, unchanged).
    Tombstone { until: i64 },
    /// The lease ended without a delay still to run (a hold limit passed
    /// under an expiry someone else extended): delete the key.
    Delete,
}

/// Whether the key holding `value` (expiring at `pxat`; `None`: no expiry)
/// holds a lease that ended by `now`, and what it becomes then.
pub fn settle(value: &[u8], pxat: Option<i64>, now: i64) -> Settle {
    if !may_have_lease(value) {
        return Settle::Keep;
    }
    match value::parse(value) {
        Some(v) => settle_stored(&v, pxat, now),
        None => Settle::Keep,
    }
}

/// Whether `value` may be a canonical value with a lease field: those end
/// in `,"holdUntil":N}` or `,"leaseEnd":N}`. Every open of a lock key asks,
/// so the strict parse runs only on values whose last bytes pass this.
#[inline]
pub fn may_have_lease(value: &[u8]) -> bool {
    let Some(body) = value.strip_suffix(b"}") else { return false };
    let digits = body.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let Some(head) = body.get(..body.len() - digits) else { return false };
    digits > 0 && (head.ends_with(br#","leaseEnd":"#) || head.ends_with(br#","holdUntil":"#))
}

/// [`settle`] on a parsed value.
pub fn settle_stored(v: &Stored, pxat: Option<i64>, now: i64) -> Settle {
    let Some(end) = lease_end(v) else { return Settle::Keep };
    if end > now {
        return Settle::Keep;
    }
    let Some(d) = v.delay else { return Settle::Delete };
    // The key's expiry is the delay's end as the module wrote it; a key
    // someone made persistent ends its delay as the value says.
    let until = pxat.unwrap_or_else(|| end.saturating_add(d.lock_delay));
    if until > now {
        Settle::Tombstone { until }
    } else {
        Settle::Delete
    }
}

/// A renewal of an owned canonical value whose lease has not ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewed {
    /// The new lease end: now + ttl, or `holdUntil` when that is earlier.
    pub lease_end: i64,
    /// The lease is shorter than asked (`MAXHOLD`): reply 2.
    pub capped: bool,
    /// The key's new expiry.
    pub pxat: i64,
    /// The value to store (`leaseEnd` rewritten), when it has a delay; else
    /// only the expiry changes (`PEXPIREAT`).
    pub value: Option<Vec<u8>>,
}

/// The renewal at `now` for `ttl_ms` of `v`, a canonical value with lease
/// fields (`None` for one without: the renewal is a plain `PEXPIREAT`). The
/// caller has settled the key, so the lease has not ended.
pub fn renew(v: &Stored, now: i64, ttl_ms: i64) -> Result<Option<Renewed>, ArgError> {
    if v.hold_until.is_none() && v.delay.is_none() {
        return Ok(None);
    }
    let asked = expiry_at(now, ttl_ms)?;
    let lease_end = v.hold_until.map_or(asked, |h| asked.min(h));
    let delay = v.delay.map(|d| Delay { lease_end, ..d });
    let pxat = key_expiry(lease_end, delay)?;
    let value = delay.map(|delay| Stored { delay: Some(delay), ..v.clone() }.encode());
    Ok(Some(Renewed { lease_end, capped: lease_end < asked, pxat, value }))
}

/// The reply of a renewal that took effect: 1, or 2 when `MAXHOLD` capped
/// it (so that callers testing `== 1` do not take it for the full TTL).
pub fn renew_reply(capped: bool) -> i64 {
    if capped {
        2
    } else {
        1
    }
}

/// What LOCK.INFO shows of a key's lease, beside its owner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// `lock-delay-ms`: the delay kept with a live lease.
    pub lock_delay: Option<i64>,
    /// `hold-until` (Unix ms): no renewal goes past it.
    pub hold_until: Option<i64>,
    /// `lease-end` (Unix ms): when a live lease ends, when the value says
    /// (with a delay; else the key's expiry is the lease end).
    pub lease_end: Option<i64>,
    /// `delayed-until` (Unix ms): the key is in its lock-delay until then.
    pub delayed_until: Option<i64>,
}

/// What LOCK.INFO shows, read-only (also on a replica, which never
/// settles a key itself): the value as it is or, if its lease ended, as it
/// will be once settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shown {
    /// The key is gone (settling deletes it).
    Absent,
    /// Describe these bytes (the value, or its tombstone), with `view`.
    Value { bytes: Option<Vec<u8>>, view: View },
}

/// LOCK.INFO's reading of `value` (expiring at `pxat`) at `now`. `bytes`
/// is `None` when the stored value itself is described.
pub fn show(value: &[u8], pxat: Option<i64>, now: i64) -> Shown {
    if let Some(until) = value::parse_tombstone(value) {
        let view = View { delayed_until: Some(pxat.unwrap_or(until)), ..View::default() };
        return Shown::Value { bytes: None, view };
    }
    let Some(v) = value::parse(value).filter(|_| may_have_lease(value)) else {
        return Shown::Value { bytes: None, view: View::default() };
    };
    match settle_stored(&v, pxat, now) {
        Settle::Keep => Shown::Value {
            bytes: None,
            view: View {
                lock_delay: v.delay.map(|d| d.lock_delay),
                hold_until: v.hold_until,
                lease_end: v.delay.map(|d| d.lease_end),
                delayed_until: None,
            },
        },
        Settle::Tombstone { until } => Shown::Value {
            bytes: Some(value::tombstone(until)),
            view: View { delayed_until: Some(until), ..View::default() },
        },
        Settle::Delete => Shown::Absent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    fn terms(lock_delay: Option<i64>, max_hold: Option<i64>) -> Terms {
        Terms { lock_delay, max_hold }
    }

    #[test]
    fn a_plain_grant_stores_no_field() {
        assert_eq!(
            grant(NOW, 30_000, Terms::default()),
            Ok(Grant { hold_until: None, delay: None, pxat: NOW + 30_000 })
        );
        assert!(!terms(Some(0), None).stores_fields());
        assert_eq!(grant(NOW, 30_000, terms(Some(0), None)).map(|g| g.delay), Ok(None));
        assert_eq!(granted(Stored::owned_by("t"), NOW, 10, Terms::default()), Ok((None, NOW + 10)));
        assert_eq!(
            granted(Stored { run_id: Some("r".into()), ..Stored::owned_by("t") }, NOW, 10, Terms::default()),
            Ok((Some(br#"{"owner":"t","runId":"r"}"#.to_vec()), NOW + 10))
        );
    }

    #[test]
    fn a_delayed_grant_expires_after_its_delay() {
        let g = grant(NOW, 30_000, terms(Some(5_000), Some(90_000))).unwrap();
        assert_eq!(g.hold_until, Some(NOW + 90_000));
        assert_eq!(g.delay, Some(Delay { lock_delay: 5_000, lease_end: NOW + 30_000 }));
        assert_eq!(g.pxat, NOW + 35_000);
        let (value, pxat) = granted(Stored::owned_by("t"), NOW, 30_000, terms(Some(5_000), Some(90_000))).unwrap();
        assert_eq!(pxat, NOW + 35_000);
        let value = value.unwrap();
        assert_eq!(
            String::from_utf8(value.clone()).unwrap(),
            format!(r#"{{"owner":"t","holdUntil":{},"lockDelay":5000,"leaseEnd":{}}}"#, NOW + 90_000, NOW + 30_000)
        );
        assert_eq!(value::parse(&value).map(|v| v.owner), Some("t".into()));
        // MAXHOLD alone: the key expires with the lease.
        assert_eq!(grant(NOW, 30_000, terms(None, Some(30_000))).map(|g| g.pxat), Ok(NOW + 30_000));
    }

    #[test]
    fn times_that_do_not_fit_the_clock_are_errors() {
        assert_eq!(grant(NOW, i64::MAX, Terms::default()), Err(ArgError::TtlTooLarge));
        assert_eq!(grant(NOW, 1, terms(None, Some(i64::MAX))), Err(ArgError::MaxHoldTooLarge));
        assert_eq!(grant(NOW, i64::MAX - NOW - 10, terms(Some(60_000), None)), Err(ArgError::TtlTooLarge));
        let v = Stored { delay: Some(Delay { lock_delay: 60_000, lease_end: NOW + 1 }), ..Stored::owned_by("t") };
        assert_eq!(renew(&v, NOW, i64::MAX - NOW - 10), Err(ArgError::TtlTooLarge));
    }

    #[test]
    fn renewals_stop_at_the_hold_limit() {
        let v = Stored { hold_until: Some(NOW + 50_000), ..Stored::owned_by("t") };
        let r = renew(&v, NOW, 30_000).unwrap().unwrap();
        assert_eq!(r, Renewed { lease_end: NOW + 30_000, capped: false, pxat: NOW + 30_000, value: None });
        let r = renew(&v, NOW + 20_000, 30_000).unwrap().unwrap();
        assert_eq!(r, Renewed { lease_end: NOW + 50_000, capped: false, pxat: NOW + 50_000, value: None });
        let r = renew(&v, NOW + 20_001, 30_000).unwrap().unwrap();
        assert_eq!(r, Renewed { lease_end: NOW + 50_000, capped: true, pxat: NOW + 50_000, value: None });
        assert_eq!((renew_reply(r.capped), renew_reply(false)), (2, 1));
        assert_eq!(renew(&Stored::owned_by("t"), NOW, 1), Ok(None));
        assert_eq!(renew(&Stored { run_id: Some("r".into()), ..Stored::owned_by("t") }, NOW, 1), Ok(None));
    }

    #[test]
    fn renewals_move_the_lease_end_and_the_delay_with_it() {
        let v = Stored {
            hold_until: Some(NOW + 40_000),
            delay: Some(Delay { lock_delay: 5_000, lease_end: NOW + 10_000 }),
            ..Stored::owned_by("t")
        };
        let r = renew(&v, NOW + 1_000, 30_000).unwrap().unwrap();
        assert_eq!((r.lease_end, r.capped, r.pxat), (NOW + 31_000, false, NOW + 36_000));
        let stored = value::parse(r.value.as_deref().unwrap()).unwrap();
        assert_eq!(stored.delay, Some(Delay { lock_delay: 5_000, lease_end: NOW + 31_000 }));
        assert_eq!(stored.hold_until, Some(NOW + 40_000));
        assert_eq!(stored.owner, "t");
        let r = renew(&v, NOW + 30_000, 30_000).unwrap().unwrap();
        assert_eq!((r.lease_end, r.capped, r.pxat), (NOW + 40_000, true, NOW + 45_000));
    }

    #[test]
    fn an_ended_lease_settles_to_its_tombstone_with_the_same_expiry() {
        let v = Stored { delay: Some(Delay { lock_delay: 5_000, lease_end: NOW }), ..Stored::owned_by("t") };
        let bytes = v.encode();
        assert_eq!(settle(&bytes, Some(NOW + 5_000), NOW - 1), Settle::Keep);
        assert_eq!(settle(&bytes, Some(NOW + 5_000), NOW), Settle::Tombstone { until: NOW + 5_000 });
        assert_eq!(settle(&bytes, Some(NOW + 5_000), NOW + 4_999), Settle::Tombstone { until: NOW + 5_000 });
        // An expiry someone moved is kept; a persistent key ends as the value says.
        assert_eq!(settle(&bytes, Some(NOW + 60_000), NOW + 1), Settle::Tombstone { until: NOW + 60_000 });
        assert_eq!(settle(&bytes, None, NOW + 1), Settle::Tombstone { until: NOW + 5_000 });
        assert_eq!(settle(&bytes, None, NOW + 5_000), Settle::Delete);
        // The hold limit ends the lease too, with or without a delay.
        let held = Stored {
            hold_until: Some(NOW),
            delay: Some(Delay { lock_delay: 5_000, lease_end: NOW + 9_000 }),
            ..Stored::owned_by("t")
        };
        assert_eq!(settle(&held.encode(), Some(NOW + 14_000), NOW), Settle::Tombstone { until: NOW + 14_000 });
        let capped_only = Stored { hold_until: Some(NOW), ..Stored::owned_by("t") };
        assert_eq!(settle(&capped_only.encode(), Some(NOW + 30_000), NOW - 1), Settle::Keep);
        assert_eq!(settle(&capped_only.encode(), Some(NOW + 30_000), NOW), Settle::Delete);
    }

    #[test]
    fn only_canonical_values_settle() {
        for v in [
            &b"tok"[..],
            br#"{"owner":"t","runId":"r"}"#,
            br#"{"owner":"t","lockDelay":5000,"leaseEnd":1}"#.as_slice(),
            br#"{"owner":"t", "lockDelay":5000,"leaseEnd":1}"#,
            br#"{"leaseEnd":1,"owner":"t","lockDelay":5000}"#,
            br#"{"owner":null,"delayedUntil":1}"#,
            b"",
        ] {
            let delayed = value::parse(v).is_some_and(|v| v.delay.is_some());
            let want = if delayed { Settle::Tombstone { until: NOW + 1 } } else { Settle::Keep };
            assert_eq!(settle(v, Some(NOW + 1), NOW), want, "{}", String::from_utf8_lossy(v));
        }
    }

    #[test]
    fn an_election_keeps_its_fields_beside_the_lease() {
        let base = Stored {
            election: Some(crate::value::Election { term: 7, rev: 7, value: "v".into() }),
            ..Stored::owned_by("t")
        };
        let g = grant(NOW, 1_000, terms(Some(2_000), Some(5_000))).unwrap();
        let v = value::parse(&encode_with(base.clone(), &g)).unwrap();
        assert_eq!((v.election, v.hold_until, v.delay), (base.election.clone(), g.hold_until, g.delay));
        assert_eq!(encode_with(base.clone(), &grant(NOW, 1, Terms::default()).unwrap()), base.encode());
    }

    #[test]
    fn a_lease_is_held_until_its_end_not_its_keys() {
        let v = Stored { delay: Some(Delay { lock_delay: 5_000, lease_end: NOW }), ..Stored::owned_by("t") };
        assert_eq!(held_until(&v.encode(), Some(NOW + 5_000)), Some(NOW));
        let capped = Stored { hold_until: Some(NOW + 9), ..Stored::owned_by("t") };
        assert_eq!(held_until(&capped.encode(), Some(NOW + 5)), Some(NOW + 5));
        assert_eq!(held_until(b"tok", Some(NOW + 5)), Some(NOW + 5));
        assert_eq!(held_until(b"tok", None), None);
    }

    #[test]
    fn the_tail_test_passes_every_lease_value() {
        for (hold_until, delay) in [
            (Some(1), None),
            (None, Some(Delay { lock_delay: 1, lease_end: 0 })),
            (Some(7), Some(Delay { lock_delay: 1, lease_end: 99 })),
        ] {
            let v = Stored { hold_until, delay, run_id: Some("r".into()), ..Stored::owned_by("t") };
            assert!(may_have_lease(&v.encode()));
        }
        for v in [&b"tok"[..], b"}", b"1}", br#"{"owner":"t","runId":"r"}"#, br#"{"owner":"t","leaseEnd":}"#, b""] {
            assert!(!may_have_lease(v), "{}", String::from_utf8_lossy(v));
        }
    }

    #[test]
    fn info_shows_the_lease_and_an_ended_one_as_its_tombstone() {
        let live = Stored {
            hold_until: Some(NOW + 90_000),
            delay: Some(Delay { lock_delay: 5_000, lease_end: NOW + 10_000 }),
            ..Stored::owned_by("t")
        };
        let view = View {
            lock_delay: Some(5_000),
            hold_until: Some(NOW + 90_000),
            lease_end: Some(NOW + 10_000),
            delayed_until: None,
        };
        assert_eq!(show(&live.encode(), Some(NOW + 15_000), NOW), Shown::Value { bytes: None, view });
        assert_eq!(
            show(&live.encode(), Some(NOW + 15_000), NOW + 10_000),
            Shown::Value {
                bytes: Some(value::tombstone(NOW + 15_000)),
                view: View { delayed_until: Some(NOW + 15_000), ..View::default() }
            }
        );
        assert_eq!(
            show(&value::tombstone(NOW + 5), Some(NOW + 5), NOW),
            Shown::Value { bytes: None, view: View { delayed_until: Some(NOW + 5), ..View::default() } }
        );
        assert_eq!(show(b"tok", Some(NOW + 5), NOW), Shown::Value { bytes: None, view: View::default() });
        let capped = Stored { hold_until: Some(NOW), ..Stored::owned_by("t") };
        assert_eq!(show(&capped.encode(), Some(NOW + 5), NOW), Shown::Absent);
    }
}
