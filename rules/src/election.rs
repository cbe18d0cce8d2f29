//! Leader election on the exclusive lock's key: what LOCK.ELECT,
//! LOCK.PROCLAIM, LOCK.LEADER and LOCK.OBSERVE decide, given what the key
//! holds. No Redis types; the module (`src/election.rs`) applies.
//!
//! A leader is the owner of an election value the module wrote in its
//! canonical form ([`crate::value`]): `{"owner":T,"term":N,"rev":N,"value":V}`
//! (with or without the lease groups). The term is the fence of the grant;
//! the revision is the fence of the latest change of value (the grant, then
//! each proclaim), so every state a key passes through while led has a
//! revision no earlier state had. Anything else — an absent key, a plain
//! lock, a value written by hand in any other spelling, a term or
//! revision of 0 (no fence is 0) — is *leaderless*, and reads as revision 0.

use crate::args::{check_utf8, parse_fence, parse_timeout, ArgError};
use crate::value::{self, Election, Stored};

/// Who leads a key, and since which change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    pub value: String,
    pub term: u64,
    pub rev: u64,
}

/// The leadership a stored string stands for, if any.
pub fn leadership(stored: &[u8]) -> Option<Leadership> {
    // Only a value that can be canonical is parsed: a bare token (the
    // common plain lock) costs one byte's look.
    if stored.first() != Some(&b'{') {
        return None;
    }
    // A session's leader (`LOCK.ELECT … SESSION id`) or a lease's.
    let election = match value::parse_held(stored) {
        Some(held) => held.election,
        None => value::parse(stored)?.election,
    };
    let Election { term, rev, value } = election?;
    (term > 0 && rev > 0).then_some(Leadership { value, term, rev })
}

/// The revision an observer compares against its `AFTER`: the leader's
/// revision, or 0 when leaderless (`AFTER 0`: "I last saw no leader").
pub fn seen_rev(current: Option<&Leadership>) -> u64 {
    current.map_or(0, |l| l.rev)
}

/// Whether LOCK.OBSERVE replies at once: without `AFTER`, always; with
/// `AFTER r`, when the key's state differs from what revision `r` names.
pub fn observe_ready(current: Option<&Leadership>, after: Option<u64>) -> bool {
    after.map_or(true, |r| seen_rev(current) != r)
}

/// The value LOCK.ELECT stores for a grant whose fence is `term`: the
/// grant is the term's first revision.
pub fn elected(token: &str, term: u64, value: &str) -> Vec<u8> {
    Stored { election: Some(Election { term, rev: term, value: value.to_owned() }), ..Stored::owned_by(token) }.encode()
}

/// LOCK.PROCLAIM's verdict on what the key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proclaim {
    /// `token` leads: store this value (same term, same other fields,
    /// new revision and value).
    Store(Vec<u8>),
    /// `token` does not lead the key (or nothing leads it): reply 0.
    NotLeader,
}

/// Whether `token` leads the key whose string is `stored`: the stored
/// fields, ready for [`proclaimed`].
pub fn led_by(stored: &[u8], token: &[u8]) -> Option<Stored> {
    leadership(stored)?;
    value::parse(stored).filter(|s| s.owner.as_bytes() == token)
}

/// Whether `token` leads a session's election (`stored`, a
/// [`value::Held`] with an election; `None` for any other value).
pub fn held_led_by(stored: &[u8], token: &[u8]) -> Option<bool> {
    value::parse_held(stored)?.election?;
    Some(crate::lock::owns(stored, token))
}

/// LOCK.PROCLAIM of `value` at revision `rev` on a session's leader
/// `stored` (see [`held_led_by`]): the value to store, as [`proclaimed`].
pub fn proclaimed_held(stored: &[u8], value: &str, rev: u64) -> Proclaim {
    let Some(mut held) = value::parse_held(stored) else { return Proclaim::NotLeader };
    match held.election.as_mut() {
        Some(e) if rev > e.rev => {
            e.rev = rev;
            value.clone_into(&mut e.value);
            Proclaim::Store(held.encode())
        }
        _ => Proclaim::NotLeader,
    }
}

/// The value after a proclaim of `value` at revision `rev` (a new fence).
/// A revision not above the stored one (only a value written by hand with
/// a revision from the future gets here) is refused: observers rely on
/// revisions only growing.
pub fn proclaimed(mut stored: Stored, value: &str, rev: u64) -> Proclaim {
    match stored.election.as_mut() {
        Some(e) if rev > e.rev => {
            e.rev = rev;
            value.clone_into(&mut e.value);
            Proclaim::Store(stored.encode())
        }
        _ => Proclaim::NotLeader,
    }
}

/// An election's value must be a JSON string: UTF-8.
pub fn check_value(value: &[u8]) -> Result<&str, ArgError> {
    check_utf8(value).map_err(|_| ArgError::ValueNotUtf8)
}

/// LOCK.OBSERVE's options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObserveOptions {
    /// `AFTER rev`: the revision the caller last saw (0: no leader).
    pub after: Option<u64>,
    /// `WAIT timeout-ms`: block until the state differs from `after`
    /// (0 = no timeout). Without it the command never blocks.
    pub wait: Option<i64>,
}

/// Parses `[AFTER rev] [WAIT timeout-ms]` (case-insensitive, any order;
/// repeating one keeps the last).
pub fn parse_observe_options<'a>(args: impl IntoIterator<Item = &'a [u8]>) -> Result<ObserveOptions, ArgError> {
    let mut opts = ObserveOptions::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg.eq_ignore_ascii_case(b"AFTER") {
            let rev = args.next().ok_or(ArgError::Syntax)?;
            opts.after = Some(parse_fence(rev).map_err(|_| ArgError::RevInvalid)?);
        } else if arg.eq_ignore_ascii_case(b"WAIT") {
            opts.wait = Some(parse_timeout(args.next().ok_or(ArgError::Syntax)?)?);
        } else {
            return Err(ArgError::Syntax);
        }
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Delay;

    fn led(value: &str, term: u64, rev: u64) -> Leadership {
        Leadership { value: value.into(), term, rev }
    }

    #[test]
    fn only_canonical_election_values_have_a_leader() {
        let v = elected("tok", 7, "10.0.0.1:80");
        assert_eq!(v, br#"{"owner":"tok","term":7,"rev":7,"value":"10.0.0.1:80"}"#);
        assert_eq!(leadership(&v), Some(led("10.0.0.1:80", 7, 7)));
        for plain in [
            &b"tok"[..],
            br#"{"owner":"tok","runId":"r"}"#,
            br#"{"owner":"tok", "term":7,"rev":7,"value":"v"}"#,
            br#"{"owner":"tok","rev":7,"term":7,"value":"v"}"#,
            br#"{"owner":"tok","term":0,"rev":0,"value":"v"}"#,
            br#"{"owner":"tok","term":7,"rev":0,"value":"v"}"#,
            br#"{"owner":null,"delayedUntil":5}"#,
            b"",
        ] {
            assert_eq!(leadership(plain), None, "{}", String::from_utf8_lossy(plain));
        }
        // The lease groups (H2's) do not hide the leader.
        let with_lease = Stored {
            election: Some(Election { term: 3, rev: 9, value: "x".into() }),
            hold_until: Some(100),
            delay: Some(Delay { lock_delay: 5, lease_end: 50 }),
            ..Stored::owned_by("t")
        };
        assert_eq!(leadership(&with_lease.encode()), Some(led("x", 3, 9)));
    }

    #[test]
    fn observers_wake_on_any_other_revision_and_after_zero_means_no_leader() {
        let l = led("a", 5, 8);
        assert!(observe_ready(None, None));
        assert!(observe_ready(Some(&l), None));
        assert!(!observe_ready(Some(&l), Some(8)), "unchanged");
        assert!(observe_ready(Some(&l), Some(5)), "a proclaim since the grant");
        assert!(observe_ready(Some(&l), Some(9)), "another server's or a lost revision");
        assert!(observe_ready(Some(&l), Some(0)), "a leader where none was");
        assert!(!observe_ready(None, Some(0)), "still no leader");
        assert!(observe_ready(None, Some(8)), "the leader went away");
        assert_eq!((seen_rev(None), seen_rev(Some(&l))), (0, 8));
    }

    #[test]
    fn only_the_leader_proclaims_and_it_keeps_the_term_and_the_lease() {
        let v = elected("tok", 7, "old");
        assert_eq!(led_by(&v, b"other"), None);
        assert_eq!(led_by(b"tok", b"tok"), None, "a plain lock's holder leads nothing");
        assert_eq!(led_by(br#"{"owner":"tok","runId":"r"}"#, b"tok"), None);
        let stored = led_by(&v, b"tok").expect("tok leads");
        let Proclaim::Store(new) = proclaimed(stored.clone(), "new", 12) else { panic!("refused") };
        assert_eq!(leadership(&new), Some(led("new", 7, 12)));
        assert_eq!(proclaimed(stored.clone(), "new", 7), Proclaim::NotLeader, "revisions only grow");
        assert_eq!(proclaimed(stored, "new", 3), Proclaim::NotLeader);
        let lease = Stored {
            election: Some(Election { term: 3, rev: 3, value: "x".into() }),
            hold_until: Some(100),
            ..Stored::owned_by("t")
        };
        let Proclaim::Store(new) = proclaimed(led_by(&lease.encode(), b"t").expect("leads"), "y", 4) else {
            panic!("refused")
        };
        let parsed = value::parse(&new).expect("canonical");
        assert_eq!(
            (parsed.hold_until, parsed.election.map(|e| (e.term, e.rev, e.value))),
            (Some(100), Some((3, 4, "y".into())))
        );
    }

    #[test]
    fn observe_options() {
        let parse = |args: &[&[u8]]| parse_observe_options(args.iter().copied());
        assert_eq!(parse(&[]), Ok(ObserveOptions::default()));
        assert_eq!(parse(&[b"after", b"0"]), Ok(ObserveOptions { after: Some(0), wait: None }));
        assert_eq!(parse(&[b"WAIT", b"0", b"After", b"42"]), Ok(ObserveOptions { after: Some(42), wait: Some(0) }));
        assert_eq!(parse(&[b"AFTER", b"1", b"AFTER", b"2"]), Ok(ObserveOptions { after: Some(2), wait: None }));
        for bad in [&b"-1"[..], b"x", b"01", b"1.5", b""] {
            assert_eq!(parse(&[b"AFTER", bad]), Err(ArgError::RevInvalid), "{bad:?}");
        }
        assert_eq!(parse(&[b"AFTER"]), Err(ArgError::Syntax));
        assert_eq!(parse(&[b"WAIT"]), Err(ArgError::Syntax));
        assert_eq!(parse(&[b"WAIT", b"-5"]), Err(ArgError::TimeoutInvalid));
        assert_eq!(parse(&[b"FENCE"]), Err(ArgError::Syntax));
    }

    #[test]
    fn values_are_utf8() {
        assert_eq!(check_value(b"10.0.0.1:6379"), Ok("10.0.0.1:6379"));
        assert_eq!(check_value("h\u{e9}".as_bytes()), Ok("h\u{e9}"));
        assert_eq!(check_value(b"\xff"), Err(ArgError::ValueNotUtf8));
    }
}
