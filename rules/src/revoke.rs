//! `LOCK.REVOKE` (issue 31): asking a holder to give its hold up by a
//! deadline the server enforces. Pure, taking `now` as an argument.
//!
//! A revocation is a hold limit like `MAXHOLD`'s ([`crate::lease`]): the
//! deadline (now + `GRACE`, never later than a limit already there) caps
//! every renewal and the key's expiry (a lock's `holdUntil` and `PXAT`, a
//! holder's hold member and place), so the server ends the hold at the
//! deadline with the machinery that already ends a lease that runs out:
//! Redis's expiry, the module's settling (lock-delay applies, the tombstone)
//! and its check timers (waiters served in order). What a revocation adds
//! is the mark its holder hears: a lock's value carries `"revoked":REASON`
//! before its `holdUntil`; a holder's hold member is scored half a
//! millisecond past its deadline ([`revoked_hold_score`]). A renewal of a
//! revoked hold replies `-ms` (the time left, always negative: the
//! documented 0/1/2 keep their meaning for every other hold).

use crate::cjson::{decode, Decoded};
use crate::error::ArgError;
use crate::lease::lease_end;
use crate::lock::{owner_of, Owner};
use crate::number::{parse_positive, NotPositive};
use crate::value::{self, Delay, Stored};

/// The longest `REASON` (bytes): it is stored with the hold.
pub const MAX_REASON: usize = 200;

/// `LOCK.REVOKE key [TOKEN t] [GRACE ms] [REASON text]`'s options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options<'a> {
    /// The holder to revoke (required where the key has several).
    pub token: Option<&'a [u8]>,
    /// Milliseconds the holder has before the server ends its hold (0: now).
    pub grace: i64,
    pub reason: &'a str,
}

/// Parses the options (case-insensitive names, any order, the last of a
/// repeated one kept).
pub fn parse_options<'a>(args: impl IntoIterator<Item = &'a [u8]>) -> Result<Options<'a>, ArgError> {
    let mut opts = Options::default();
    let mut args = args.into_iter();
    while let Some(name) = args.next() {
        let value = args.next().ok_or(ArgError::Syntax)?;
        if name.eq_ignore_ascii_case(b"TOKEN") {
            if value.is_empty() {
                return Err(ArgError::KeyOrTokenMissing);
            }
            opts.token = Some(value);
        } else if name.eq_ignore_ascii_case(b"GRACE") {
            opts.grace = match parse_positive(value) {
                Ok(ms) => ms,
                Err(NotPositive::Syntax) if value == b"0" => 0,
                Err(_) => return Err(ArgError::GraceInvalid),
            };
        } else if name.eq_ignore_ascii_case(b"REASON") {
            opts.reason =
                std::str::from_utf8(value).ok().filter(|r| r.len() <= MAX_REASON).ok_or(ArgError::ReasonInvalid)?;
        } else {
            return Err(ArgError::Syntax);
        }
    }
    Ok(opts)
}

/// The deadline of a revocation at `now` with `grace`, never past a hold
/// limit `hold_until` already there (a second revoke never extends one).
pub fn deadline(now: i64, grace: i64, hold_until: Option<i64>) -> Result<i64, ArgError> {
    let asked = now.checked_add(grace).ok_or(ArgError::GraceTooLarge)?;
    Ok(hold_until.map_or(asked, |h| h.min(asked)))
}

/// What becomes of a key when its hold ends (at once, or at the deadline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Store the revoked value with the key's expiry `pxat`.
    Store { value: Stored, pxat: i64 },
    /// The hold ends now and a lock-delay follows: the tombstone until `until`.
    Tombstone { until: i64 },
    /// The hold ends now with no delay: delete the key (its waiters' turn).
    Delete,
}

/// A revoke's verdict on an exclusive lock or election key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockRevoke {
    /// Nobody holds the key (a tombstone, or a value no token owns).
    NoHolder,
    /// `TOKEN` names someone else: nothing changes.
    NotHolder,
    /// Revoked: its holder, the deadline, and the write.
    Revoked { owner: String, deadline: i64, write: Write },
}

/// The verdict on a lock key holding `value` (expiring at `pxat`; `None`:
/// no expiry) at `now`, which the caller has settled (a lease that ended
/// is a tombstone or gone). A canonical value keeps its fields; a bare
/// token becomes `{"owner":token,…}` (the scripts still see the same
/// owner); JSON the module did not write cannot carry the mark.
pub fn revoke_lock(value: &[u8], pxat: Option<i64>, now: i64, opts: &Options) -> Result<LockRevoke, ArgError> {
    if value::parse_tombstone(value).is_some() {
        return Ok(LockRevoke::NoHolder);
    }
    let mut stored = match value::parse(value) {
        Some(s) => s,
        None => match owner_of(value) {
            Owner::Unmatchable => return Ok(LockRevoke::NoHolder),
            Owner::Raw(raw) if matches!(decode(value), Decoded::NotTable) => {
                Stored::owned_by(std::str::from_utf8(raw).map_err(|_| ArgError::NotRevocable)?)
            }
            _ => return Err(ArgError::NotRevocable),
        },
    };
    if opts.token.is_some_and(|t| t != stored.owner.as_bytes()) {
        return Ok(LockRevoke::NotHolder);
    }
    let deadline = deadline(now, opts.grace, stored.hold_until)?;
    // The lease as it stands: its fields, else the key's expiry.
    let end = lease_end(&stored).or(pxat).map_or(deadline, |e| e.min(deadline));
    let lock_delay = stored.delay.map_or(0, |d| d.lock_delay);
    let key_end = end.checked_add(lock_delay).ok_or(ArgError::GraceTooLarge)?;
    let owner = stored.owner.clone();
    let write = if end <= now {
        if lock_delay > 0 {
            Write::Tombstone { until: key_end }
        } else {
            Write::Delete
        }
    } else {
        stored.revoked = Some(opts.reason.to_owned());
        stored.hold_until = Some(deadline);
        stored.delay = stored.delay.map(|d| Delay { lease_end: end, ..d });
        Write::Store { value: stored, pxat: key_end }
    };
    Ok(LockRevoke::Revoked { owner, deadline, write })
}

/// A parsed value's revocation: its reason and deadline, if it was revoked.
pub fn revoked_of(v: &Stored) -> Option<(&str, i64)> {
    Some((v.revoked.as_deref()?, v.hold_until?))
}

/// The reply of a renewal that took effect: `-ms` left before the
/// deadline of a revoked hold (at least 1: at the deadline the lease has
/// ended and the renewal replies 0), else 1, or 2 when a hold limit cut it.
pub fn renew_reply(capped: bool, revoked_until: Option<i64>, now: i64) -> i64 {
    match revoked_until {
        Some(d) => -(d.saturating_sub(now).max(1)),
        None if capped => 2,
        None => 1,
    }
}

/// A revoked holder's hold member score: `-deadline - 0.5`. Still below
/// the hold floor and read back as the same hold limit by
/// [`crate::holders::hold_from_score`]; the half says "revoked". Exact for
/// every deadline below 2^52 ms (year 144,683).
pub fn revoked_hold_score(deadline: i64) -> f64 {
    -(deadline as f64) - 0.5
}

/// Whether a hold member's score marks a revocation.
pub fn is_revoked_score(score: f64) -> bool {
    score.fract() == -0.5
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holders::hold_from_score;
    use crate::lock::owns;
    use crate::value::Election;

    const NOW: i64 = 1_700_000_000_000;

    fn opts(token: Option<&'static [u8]>, grace: i64) -> Options<'static> {
        Options { token, grace, reason: "drain" }
    }

    #[test]
    fn options_parse_strictly() {
        let args = |a: &[&'static str]| a.iter().map(|s| s.as_bytes()).collect::<Vec<_>>();
        let o = parse_options(args(&["token", "t", "GRACE", "500", "Reason", "why"])).unwrap();
        assert_eq!(o, Options { token: Some(b"t"), grace: 500, reason: "why" });
        assert_eq!(parse_options(args(&["GRACE", "0"])).unwrap().grace, 0);
        assert_eq!(parse_options(args(&[])).unwrap(), Options::default());
        for (bad, e) in [
            (args(&["GRACE", "-1"]), ArgError::GraceInvalid),
            (args(&["GRACE", "01"]), ArgError::GraceInvalid),
            (args(&["GRACE", "99999999999999999999"]), ArgError::GraceInvalid),
            (args(&["GRACE"]), ArgError::Syntax),
            (args(&["WAIT", "1"]), ArgError::Syntax),
            (args(&["TOKEN", ""]), ArgError::KeyOrTokenMissing),
        ] {
            assert_eq!(parse_options(bad), Err(e));
        }
        let long = "x".repeat(MAX_REASON + 1);
        assert_eq!(parse_options([&b"REASON"[..], long.as_bytes()]), Err(ArgError::ReasonInvalid));
        assert_eq!(parse_options([&b"REASON"[..], b"\xff"]), Err(ArgError::ReasonInvalid));
        assert_eq!(deadline(i64::MAX - 1, 5, None), Err(ArgError::GraceTooLarge));
    }

    #[test]
    fn a_bare_token_is_revoked_with_its_expiry_capped() {
        let r = revoke_lock(b"tok", Some(NOW + 30_000), NOW, &opts(None, 5_000)).unwrap();
        let LockRevoke::Revoked { owner, deadline, write: Write::Store { value, pxat } } = r else { panic!("{r:?}") };
        assert_eq!((owner.as_str(), deadline, pxat), ("tok", NOW + 5_000, NOW + 5_000));
        let bytes = value.encode();
        assert_eq!(bytes, format!(r#"{{"owner":"tok","revoked":"drain","holdUntil":{}}}"#, NOW + 5_000).as_bytes());
        // The scripts still see its owner; the module parses it back.
        assert!(owns(&bytes, b"tok"));
        assert_eq!(value::parse(&bytes), Some(value));
        // A lease ending before the deadline keeps its own end.
        let r = revoke_lock(b"tok", Some(NOW + 1_000), NOW, &opts(None, 5_000)).unwrap();
        assert!(matches!(r, LockRevoke::Revoked { write: Write::Store { pxat, .. }, .. } if pxat == NOW + 1_000));
        // No expiry at all: the deadline is the key's.
        let r = revoke_lock(b"tok", None, NOW, &opts(None, 5_000)).unwrap();
        assert!(matches!(r, LockRevoke::Revoked { write: Write::Store { pxat, .. }, .. } if pxat == NOW + 5_000));
    }

    #[test]
    fn the_token_must_be_the_holders() {
        assert_eq!(revoke_lock(b"tok", None, NOW, &opts(Some(b"other"), 0)), Ok(LockRevoke::NotHolder));
        let r = revoke_lock(b"tok", None, NOW, &opts(Some(b"tok"), 0)).unwrap();
        assert!(matches!(r, LockRevoke::Revoked { write: Write::Delete, .. }));
        let tomb = value::tombstone(NOW + 5);
        assert_eq!(revoke_lock(&tomb, Some(NOW + 5), NOW, &opts(None, 0)), Ok(LockRevoke::NoHolder));
        assert_eq!(revoke_lock(br#"{"owner":true}"#, None, NOW, &opts(None, 0)), Ok(LockRevoke::NoHolder));
        assert_eq!(revoke_lock(b"\xff", None, NOW, &opts(None, 0)), Err(ArgError::NotRevocable));
        assert_eq!(revoke_lock(br#"{"owner":"t","x":1}"#, None, NOW, &opts(None, 0)), Err(ArgError::NotRevocable));
    }

    #[test]
    fn a_delay_follows_the_deadline_and_applies_at_once_without_grace() {
        let v = Stored {
            hold_until: Some(NOW + 60_000),
            delay: Some(Delay { lock_delay: 2_000, lease_end: NOW + 10_000 }),
            ..Stored::owned_by("t")
        };
        let r = revoke_lock(&v.encode(), Some(NOW + 12_000), NOW, &opts(None, 3_000)).unwrap();
        let LockRevoke::Revoked { write: Write::Store { value, pxat }, deadline, .. } = r else { panic!() };
        assert_eq!((deadline, pxat), (NOW + 3_000, NOW + 5_000));
        assert_eq!(value.delay, Some(Delay { lock_delay: 2_000, lease_end: NOW + 3_000 }));
        let r = revoke_lock(&v.encode(), Some(NOW + 12_000), NOW, &opts(None, 0)).unwrap();
        assert!(matches!(r, LockRevoke::Revoked { write: Write::Tombstone { until }, .. } if until == NOW + 2_000));
    }

    #[test]
    fn a_second_revoke_never_extends_the_deadline() {
        let first = revoke_lock(b"t", Some(NOW + 30_000), NOW, &opts(None, 5_000)).unwrap();
        let LockRevoke::Revoked { write: Write::Store { value, pxat }, .. } = first else { panic!() };
        let again = revoke_lock(&value.encode(), Some(pxat), NOW + 1, &opts(None, 60_000)).unwrap();
        assert!(matches!(again, LockRevoke::Revoked { deadline, .. } if deadline == NOW + 5_000));
        // An election keeps its fields.
        let e = Stored { election: Some(Election { term: 3, rev: 4, value: "v".into() }), ..Stored::owned_by("t") };
        let r = revoke_lock(&e.encode(), Some(NOW + 9), NOW, &opts(None, 5)).unwrap();
        assert!(
            matches!(r, LockRevoke::Revoked { write: Write::Store { ref value, .. }, .. } if value.election == e.election)
        );
    }

    #[test]
    fn renewal_replies_tell_a_revoked_holder_apart() {
        assert_eq!(renew_reply(false, None, NOW), 1);
        assert_eq!(renew_reply(true, None, NOW), 2);
        assert_eq!(renew_reply(true, Some(NOW + 1_500), NOW), -1_500);
        assert_eq!(renew_reply(true, Some(NOW), NOW), -1);
    }

    #[test]
    fn a_revoked_hold_score_reads_back_as_its_limit() {
        let s = revoked_hold_score(NOW + 5);
        assert!(is_revoked_score(s));
        assert!(!is_revoked_score(-(NOW as f64)));
        assert_eq!(hold_from_score(s), Some(NOW + 5));
        assert_eq!(format!("{s}").parse::<f64>().unwrap(), s);
    }
}
