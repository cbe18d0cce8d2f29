//! The decisions on a lock held by a session (docs/sessions.md), pure and
//! taking `now`: what a grant stores, and settling a lock whose session
//! ended, as `crate::lease` settles an ended lease.
//!
//! A session-held lock's key has no expiry (the session keeps it) unless
//! it was granted with `MAXHOLD`: then it expires at `holdUntil` plus the
//! session's lock-delay, so that the hold limit ends it as it ends a lease.

use crate::args::{ArgError, GrantOptions};
use crate::lease::Settle;
use crate::revoke::{self, Options};
use crate::value::Held;

/// What this node knows of a session, when a command opens one of its locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionState {
    /// Granted here and its deadline is still ahead.
    Alive { lock_delay: i64 },
    /// Its deadline passed at `at` (involuntary: its locks get the
    /// lock-delay), or it was revoked (voluntary: none).
    Ended { at: i64, lock_delay: i64, revoked: bool },
    /// Not a session of this node: a key moved here from another node, or
    /// written by hand. Held as it is: nobody but its token gets it.
    Unknown,
}

/// The checks of an acquire's options with `SESSION`: the lock-delay is the
/// session's, so a lock's own `LOCKDELAY` is refused.
pub fn check_options(opts: &GrantOptions) -> Result<(), ArgError> {
    if opts.lock_delay.is_some() {
        return Err(ArgError::SessionLockDelay);
    }
    Ok(())
}

/// A grant at `now` to `token` in session `session` (whose lock-delay is
/// `lock_delay`), with `MAXHOLD` `max_hold`: the value, and the key's
/// expiry (none without a hold limit).
pub fn grant(
    session: &str,
    token: &str,
    lock_delay: i64,
    now: i64,
    max_hold: Option<i64>,
) -> Result<(Vec<u8>, Option<i64>), ArgError> {
    let hold_until = match max_hold {
        Some(max) => Some(now.checked_add(max).ok_or(ArgError::MaxHoldTooLarge)?),
        None => None,
    };
    let pxat = match hold_until {
        Some(h) => Some(h.checked_add(lock_delay).ok_or(ArgError::MaxHoldTooLarge)?),
        None => None,
    };
    let value =
        Held { session: session.to_owned(), token: token.to_owned(), election: None, revoked: None, hold_until }
            .encode();
    Ok((value, pxat))
}

/// What the key holding `held` (expiring at `pxat`) becomes at `now`,
/// given its session's `state`.
pub fn settle(held: &Held, state: SessionState, pxat: Option<i64>, now: i64) -> Settle {
    if let Some(h) = held.hold_until.filter(|&h| h <= now) {
        // The hold limit ended it first: its delay runs to the key's expiry.
        return tombstone_until(pxat.unwrap_or(h), now);
    }
    match state {
        SessionState::Alive { .. } | SessionState::Unknown => Settle::Keep,
        SessionState::Ended { revoked: true, .. } => Settle::Delete,
        SessionState::Ended { at, lock_delay, revoked: false } => {
            // With a hold limit that ends sooner, the key's expiry says so.
            let until = at.saturating_add(lock_delay);
            tombstone_until(pxat.map_or(until, |p| p.min(until)), now)
        }
    }
}

/// The end an orphan gets at `now`: a hold of a session this node does
/// not know (`state`; a key moved here from another node, a restore of an
/// old RDB) whose key has no expiry (`pxat`) ends `grace` ms from now
/// unless a live holder adopts it first (`SESSION.ADOPT`,
/// docs/sessions.md, "A key moved to another node"); `None`: it keeps
/// what it has (its session is known, it has an end already, or `grace`
/// is 0: orphans are held as they are).
pub fn orphan_end(state: SessionState, pxat: Option<i64>, now: i64, grace: i64) -> Option<i64> {
    (state == SessionState::Unknown && pxat.is_none() && grace > 0).then(|| now.saturating_add(grace))
}

/// `SESSION.ADOPT` of `held` by `token` at `now` into the live session
/// `session` (its id's text) whose lock-delay is `lock_delay`, when the
/// hold's own session is `state` here: the new value and the key's
/// expiry (none without a hold limit; with one, the limit plus the new
/// session's lock-delay), or `None` (nothing changes): another token's
/// hold, a session this node knows, a revoked hold, or one whose hold
/// limit has passed.
pub fn adopt(
    held: &Held,
    token: &[u8],
    state: SessionState,
    session: &str,
    lock_delay: i64,
    now: i64,
) -> Option<(Vec<u8>, Option<i64>)> {
    let unclaimed = state == SessionState::Unknown && held.revoked.is_none();
    if !unclaimed || held.token.as_bytes() != token || held.hold_until.is_some_and(|h| h <= now) {
        return None;
    }
    let pxat = held.hold_until.map(|h| h.saturating_add(lock_delay));
    Some((Held { session: session.to_owned(), ..held.clone() }.encode(), pxat))
}

/// How many of a session id's low bits name it in a semaphore's or
/// read-write lock's key ([`session_score`]: a double holds them exactly).
/// No two sessions of a node share them: its table is keyed by them
/// (`crate::session`).
pub const SHORT_BITS: u32 = 51;

/// The low [`SHORT_BITS`] of a session id.
pub fn short(id: u128) -> u64 {
    (id as u64) & ((1 << SHORT_BITS) - 1)
}

/// A semaphore's or read-write lock's holder held by a session
/// (docs/sessions.md): its place is the member `token` as any holder's,
/// scored [`SESSION_PLACE`] (no lease end: the session keeps it), or its
/// hold limit plus the key's delay with `MAXHOLD`; and a second member,
/// [`session_member`] `"\0\0" + token`, scored [`session_score`] of its
/// session's short id ([`short`]). That score lies below
/// every hold-limit member's (`crate::holders::HOLD_FLOOR` and
/// `-MAX_EXACT`), so every range over places or hold limits misses it,
/// and the scan that counts hold members (`(-inf, -2)`) counts it too.
/// No holder's token starts with a NUL byte, so `"\0\0" + token` is no
/// place and no hold member of any token.
pub const SESSION_PLACE: i64 = crate::holders::MAX_EXACT;

/// The member naming `token`'s session.
pub fn session_member(token: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(token.len() + 2);
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(token);
    m
}

/// The token a session member names (`None`: no session member).
pub fn session_token(member: &[u8]) -> Option<&[u8]> {
    member.strip_prefix(&[0, 0][..]).filter(|t| !t.is_empty())
}

const SESSION_BASE: f64 = crate::holders::MAX_EXACT as f64;

/// The score naming the session whose short id is `short` (below 2^51):
/// `-(2^53 + 2 (short + 1))`, an even integer below 2^54 in magnitude,
/// exact as a double.
pub fn session_score(short: u64) -> f64 {
    -(SESSION_BASE + 2.0 * (short as f64 + 1.0))
}

/// The short id a session member's score names ([`ORPHAN`] included).
pub fn session_from_score(score: f64) -> Option<u64> {
    let n = (-score - SESSION_BASE) / 2.0 - 1.0;
    let max = ORPHAN as f64;
    (n >= 0.0 && n <= max && n.fract() == 0.0).then_some(n as u64)
}

/// The "short id" of an orphan this node found and gave its end
/// (docs/sessions.md, "A key moved to another node"): `2^51`, no session's
/// (those are below it), so no session of this node is ever it. Its
/// session member, scored [`session_score`]`(ORPHAN)` = `-(2^53 + 2^52 +
/// 2)`, lies just below every session's, outside the range an orphan walk
/// reads ([`SESSIONS_LOW`] to [`SESSIONS_HIGH`]): once found, a place is
/// never looked at again, and a command reads it as a session's place whose
/// session this node does not know (held by its token, adoptable).
pub const ORPHAN: u64 = 1 << SHORT_BITS;

/// The lowest score a session of this node (or any) names: the highest short id's.
pub const SESSIONS_LOW: f64 = -(SESSION_BASE + 2.0 * ((1u64 << SHORT_BITS) as f64));

/// The highest: short id 0's.
pub const SESSIONS_HIGH: f64 = -(SESSION_BASE + 2.0);

/// The place an orphaned holder's place (`place`, its score) gets at `now`
/// when a walk finds it (its session unknown here), on a key whose delay
/// is `delay`, with the orphans' `grace` (ms): a lease ending `grace` from
/// now, followed by the key's delay, as any expired lease's place. `None`:
/// it keeps what it has (a hold limit or a revocation's deadline already
/// ends it, or `grace` is 0: orphans are held as they are).
pub fn orphan_place(place: i64, now: i64, grace: i64, delay: i64) -> Option<i64> {
    if place != SESSION_PLACE || grace <= 0 {
        return None;
    }
    Some(now.saturating_add(grace).saturating_add(delay).min(SESSION_PLACE - 1))
}

/// The place an adopted holder keeps: its hold limit's (`place` as it is,
/// when it has one: `hold`), else none but its session's ([`SESSION_PLACE`]),
/// whatever end a walk gave the orphan.
pub fn adopted_place(place: i64, hold: Option<i64>) -> i64 {
    if hold.is_some() {
        place
    } else {
        SESSION_PLACE
    }
}

/// A session-held holder's place at `now` on a key whose delay is
/// `delay`: [`SESSION_PLACE`], or with `MAXHOLD` the hold limit's place
/// (the limit still ends it). With the hold limit.
pub fn holder_place(now: i64, delay: i64, max_hold: Option<i64>) -> Result<crate::holders::Granted, ArgError> {
    let limit = crate::holders::MAX_EXACT;
    let hold_until = max_hold
        .map(|max| now.checked_add(max).filter(|&h| h <= limit).ok_or(ArgError::MaxHoldTooLarge))
        .transpose()?;
    let at = match hold_until {
        Some(h) => h.checked_add(delay).filter(|&at| at < SESSION_PLACE).ok_or(ArgError::MaxHoldTooLarge)?,
        None => SESSION_PLACE,
    };
    Ok(crate::holders::Granted { at, hold_until })
}

/// Where a session-held holder's place goes when its session ends (`at`,
/// as `state` tells), on a key whose delay is `delay`, at `now`: its place
/// kept until `Some(until)` (the lock-delay after an expiry, never later
/// than it was, `place`), or removed (`None`: a revoke, or the delay over).
pub fn holder_end(state: SessionState, place: i64, delay: i64, now: i64) -> Option<Option<i64>> {
    let SessionState::Ended { at, revoked, .. } = state else { return None };
    if revoked {
        return Some(None);
    }
    let until = at.saturating_add(delay).min(place);
    Some((until >= now).then_some(until))
}

/// A session-held lock's value (`held`, as [`grant`] made it) as an
/// election's leader: its term and first revision `term` (the grant's
/// fence), and `value`. Unchanged if `held` is no such value.
pub fn elected(held: &[u8], term: u64, value: &str) -> Vec<u8> {
    match crate::value::parse_held(held) {
        Some(h) => {
            let election = Some(crate::value::Election { term, rev: term, value: value.to_owned() });
            Held { election, ..h }.encode()
        }
        None => held.to_vec(),
    }
}

/// The lock-delay that follows a session-held lock's involuntary end (its
/// hold limit, its revocation's deadline): its session's; for a session
/// this node does not know, the one its grant put between the hold limit
/// and the key's expiry (none without a hold limit).
pub fn lock_delay(held: &Held, state: SessionState, pxat: Option<i64>) -> i64 {
    match state {
        SessionState::Alive { lock_delay } | SessionState::Ended { lock_delay, .. } => lock_delay,
        SessionState::Unknown => match (held.hold_until, pxat) {
            (Some(h), Some(p)) => p.saturating_sub(h).max(0),
            _ => 0,
        },
    }
}

/// What a revoke does to a session-held lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Revoked {
    /// Store the revoked value (`revoked` and the deadline as its hold
    /// limit) with the key's expiry `pxat`: the deadline plus the lock-delay.
    Store { value: Vec<u8>, pxat: i64 },
    /// The hold ends now and a lock-delay follows: the tombstone until `until`.
    Tombstone { until: i64 },
    /// The hold ends now with no delay: delete the key.
    Delete,
}

/// A revoke at `now` of the lock `held` (settled: still held), whose
/// involuntary end is followed by `lock_delay` ([`lock_delay`]): the
/// deadline (now + `GRACE`, never past a hold limit already there) and
/// the write. The hold stays its session's until the deadline; only that
/// one hold is revoked, not the session.
pub fn revoke(held: &Held, lock_delay: i64, now: i64, opts: &Options) -> Result<(i64, Revoked), ArgError> {
    let deadline = revoke::deadline(now, opts.grace, held.hold_until)?;
    let key_end = deadline.checked_add(lock_delay).ok_or(ArgError::GraceTooLarge)?;
    if deadline <= now {
        return Ok((deadline, if lock_delay > 0 { Revoked::Tombstone { until: key_end } } else { Revoked::Delete }));
    }
    let value = Held { revoked: Some(opts.reason.to_owned()), hold_until: Some(deadline), ..held.clone() };
    Ok((deadline, Revoked::Store { value: value.encode(), pxat: key_end }))
}

/// A session-held value's revocation: its reason and deadline, if revoked.
pub fn revoked_of(held: &Held) -> Option<(&str, i64)> {
    Some((held.revoked.as_deref()?, held.hold_until?))
}

fn tombstone_until(until: i64, now: i64) -> Settle {
    if until > now {
        Settle::Tombstone { until }
    } else {
        Settle::Delete
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::parse_held;

    const NOW: i64 = 1_700_000_000_000;
    const ID: &str = "0123456789abcdef0123456789abcdef";

    fn held(hold_until: Option<i64>) -> Held {
        Held { session: ID.into(), token: "t".into(), election: None, revoked: None, hold_until }
    }

    #[test]
    fn a_session_members_score_names_the_session_below_every_hold_limit() {
        use crate::holders::{hold_from_score, HOLD_FLOOR};
        let max = (1u64 << SHORT_BITS) - 1;
        for short in [0, 1, 12_345, max] {
            let score = session_score(short);
            assert!(score < HOLD_FLOOR && score < -(crate::holders::MAX_EXACT as f64));
            assert_eq!(hold_from_score(score), None);
            assert_eq!(session_from_score(score), Some(short));
            assert_eq!(session_from_score(format!("{score}").parse().unwrap()), Some(short));
        }
        assert_eq!(session_from_score(-3.0), None);
        assert_eq!(session_from_score(-(crate::holders::MAX_EXACT as f64)), None);
        assert_eq!(session_member(b"t"), b"\0\0t".to_vec());
        assert_eq!(session_token(b"\0\0t"), Some(&b"t"[..]));
        assert_eq!(session_token(b"\0t"), None, "a hold limit's member");
        assert_eq!(session_token(b"\0\0"), None);
    }

    #[test]
    fn an_orphans_member_lies_below_every_session_and_reads_as_unknown() {
        let orphan = session_score(ORPHAN);
        assert_eq!(orphan, -(2f64.powi(53) + 2f64.powi(52) + 2.0));
        assert_eq!(session_from_score(orphan), Some(ORPHAN));
        assert_eq!(session_from_score(format!("{orphan}").parse().unwrap()), Some(ORPHAN));
        assert!(orphan < SESSIONS_LOW && SESSIONS_LOW < SESSIONS_HIGH);
        assert_eq!(SESSIONS_LOW, session_score(ORPHAN - 1));
        assert_eq!(SESSIONS_HIGH, session_score(0));
        assert_eq!(session_from_score(orphan - 2.0), None, "below the orphans' score: nothing");
    }

    #[test]
    fn an_orphaned_place_ends_a_grace_and_the_keys_delay_from_when_it_is_found() {
        assert_eq!(orphan_place(SESSION_PLACE, NOW, 300, 50), Some(NOW + 350));
        assert_eq!(orphan_place(NOW + 10, NOW, 300, 50), None, "a hold limit keeps its end");
        assert_eq!(orphan_place(SESSION_PLACE, NOW, 0, 50), None, "0: held as it is");
        assert_eq!(orphan_place(SESSION_PLACE, i64::MAX - 5, 300, 0), Some(SESSION_PLACE - 1));
        assert_eq!(adopted_place(NOW + 350, None), SESSION_PLACE, "adopted: its session keeps it again");
        assert_eq!(adopted_place(NOW + 60, Some(NOW + 10)), NOW + 60);
    }

    #[test]
    fn a_session_held_holder_has_no_lease_end_but_its_hold_limit() {
        assert_eq!(holder_place(NOW, 50, None).map(|g| (g.at, g.hold_until)), Ok((SESSION_PLACE, None)));
        assert_eq!(holder_place(NOW, 50, Some(10)).map(|g| (g.at, g.hold_until)), Ok((NOW + 60, Some(NOW + 10))));
        assert_eq!(holder_place(NOW, 0, Some(i64::MAX)).map(|g| g.at), Err(ArgError::MaxHoldTooLarge));
        let ended = |revoked| SessionState::Ended { at: NOW, lock_delay: 9, revoked };
        assert_eq!(holder_end(SessionState::Alive { lock_delay: 0 }, SESSION_PLACE, 50, NOW), None);
        assert_eq!(holder_end(SessionState::Unknown, SESSION_PLACE, 50, NOW), None);
        assert_eq!(holder_end(ended(true), SESSION_PLACE, 50, NOW), Some(None));
        assert_eq!(holder_end(ended(false), SESSION_PLACE, 50, NOW + 1), Some(Some(NOW + 50)));
        assert_eq!(holder_end(ended(false), NOW + 20, 50, NOW + 1), Some(Some(NOW + 20)));
        assert_eq!(holder_end(ended(false), SESSION_PLACE, 0, NOW + 1), Some(None));
    }

    fn opts(grace: i64) -> Options<'static> {
        Options { token: None, grace, reason: "drain" }
    }

    #[test]
    fn a_revoke_caps_one_hold_with_the_sessions_lock_delay() {
        let (deadline, w) = revoke(&held(None), 5_000, NOW, &opts(3_000)).unwrap();
        assert_eq!(deadline, NOW + 3_000);
        let Revoked::Store { value, pxat } = w else { panic!("{w:?}") };
        assert_eq!(pxat, NOW + 8_000, "the key lives on for the lock-delay after the deadline");
        let stored = parse_held(&value).unwrap();
        assert_eq!(revoked_of(&stored), Some(("drain", NOW + 3_000)));
        assert_eq!((stored.session.as_str(), stored.token.as_str()), (ID, "t"));
        // Settled as a hold limit: held until the deadline, then the delay.
        let alive = SessionState::Alive { lock_delay: 5_000 };
        assert_eq!(settle(&stored, alive, Some(pxat), NOW + 2_999), Settle::Keep);
        assert_eq!(settle(&stored, alive, Some(pxat), NOW + 3_000), Settle::Tombstone { until: NOW + 8_000 });
        // A second revoke, or a MAXHOLD, is never extended.
        assert_eq!(revoke(&stored, 5_000, NOW + 1, &opts(60_000)).unwrap().0, NOW + 3_000);
        assert_eq!(revoke(&held(Some(NOW + 10)), 0, NOW, &opts(60_000)).unwrap().0, NOW + 10);
        // Without grace it ends now: the delay's tombstone, or a delete.
        assert_eq!(revoke(&held(None), 5_000, NOW, &opts(0)), Ok((NOW, Revoked::Tombstone { until: NOW + 5_000 })));
        assert_eq!(revoke(&held(None), 0, NOW, &opts(0)), Ok((NOW, Revoked::Delete)));
        assert_eq!(revoke(&held(None), 0, NOW, &opts(i64::MAX)), Err(ArgError::GraceTooLarge));
    }

    #[test]
    fn an_unknown_sessions_lock_delay_is_what_its_grant_left() {
        let unknown = SessionState::Unknown;
        assert_eq!(lock_delay(&held(Some(NOW)), unknown, Some(NOW + 700)), 700);
        assert_eq!(lock_delay(&held(None), unknown, None), 0);
        assert_eq!(lock_delay(&held(None), SessionState::Alive { lock_delay: 9 }, None), 9);
        let ended = SessionState::Ended { at: NOW, lock_delay: 4, revoked: false };
        assert_eq!(lock_delay(&held(None), ended, None), 4);
    }

    #[test]
    fn a_grant_has_no_expiry_without_a_hold_limit() {
        let (v, pxat) = grant(ID, "t", 5_000, NOW, None).unwrap();
        assert_eq!(pxat, None);
        assert_eq!(parse_held(&v), Some(held(None)));
        let (v, pxat) = grant(ID, "t", 5_000, NOW, Some(60_000)).unwrap();
        assert_eq!(pxat, Some(NOW + 65_000));
        assert_eq!(parse_held(&v), Some(held(Some(NOW + 60_000))));
        assert_eq!(grant(ID, "t", 0, NOW, Some(i64::MAX)), Err(ArgError::MaxHoldTooLarge));
        assert_eq!(grant(ID, "t", 5_000, NOW, Some(i64::MAX - NOW - 1)), Err(ArgError::MaxHoldTooLarge));
    }

    #[test]
    fn lockdelay_comes_from_the_session() {
        let opts = GrantOptions { lock_delay: Some(0), ..GrantOptions::default() };
        assert_eq!(check_options(&opts), Err(ArgError::SessionLockDelay));
        assert_eq!(check_options(&GrantOptions { max_hold: Some(1), ..GrantOptions::default() }), Ok(()));
    }

    #[test]
    fn an_orphan_without_an_end_gets_the_grace_and_the_right_token_adopts_it() {
        let unknown = SessionState::Unknown;
        assert_eq!(orphan_end(unknown, None, NOW, 60_000), Some(NOW + 60_000));
        assert_eq!(orphan_end(unknown, Some(NOW + 5), NOW, 60_000), None, "it has an end");
        assert_eq!(orphan_end(unknown, None, NOW, 0), None, "0: held as it is");
        assert_eq!(orphan_end(SessionState::Alive { lock_delay: 0 }, None, NOW, 60_000), None);
        let other = "fedcba9876543210fedcba9876543210";
        let (v, pxat) = adopt(&held(None), b"t", unknown, other, 700, NOW).expect("adopted");
        assert_eq!(pxat, None, "the session keeps it: no expiry");
        assert_eq!(parse_held(&v), Some(Held { session: other.into(), ..held(None) }));
        let (_, pxat) = adopt(&held(Some(NOW + 10)), b"t", unknown, other, 700, NOW).expect("adopted");
        assert_eq!(pxat, Some(NOW + 710), "its hold limit, then the new session's delay");
        assert_eq!(adopt(&held(None), b"u", unknown, other, 0, NOW), None, "another token");
        assert_eq!(adopt(&held(None), b"t", SessionState::Alive { lock_delay: 0 }, other, 0, NOW), None);
        assert_eq!(adopt(&held(Some(NOW)), b"t", unknown, other, 0, NOW), None, "its hold limit passed");
        let revoked = Held { revoked: Some("r".into()), ..held(Some(NOW + 10)) };
        assert_eq!(adopt(&revoked, b"t", unknown, other, 0, NOW), None);
    }

    #[test]
    fn a_live_or_unknown_session_keeps_its_lock() {
        for state in [SessionState::Alive { lock_delay: 5 }, SessionState::Unknown] {
            assert_eq!(settle(&held(None), state, None, NOW), Settle::Keep);
            assert_eq!(settle(&held(Some(NOW + 1)), state, Some(NOW + 6), NOW), Settle::Keep);
        }
    }

    #[test]
    fn an_expired_session_leaves_its_delay_and_a_revoked_one_none() {
        let ended = |at, lock_delay| SessionState::Ended { at, lock_delay, revoked: false };
        assert_eq!(settle(&held(None), ended(NOW, 5_000), None, NOW), Settle::Tombstone { until: NOW + 5_000 });
        assert_eq!(settle(&held(None), ended(NOW - 5_000, 5_000), None, NOW), Settle::Delete);
        assert_eq!(settle(&held(None), ended(NOW, 0), None, NOW), Settle::Delete);
        let revoked = SessionState::Ended { at: NOW, lock_delay: 5_000, revoked: true };
        assert_eq!(settle(&held(None), revoked, None, NOW), Settle::Delete);
        // A hold limit that ended first keeps the key's expiry as its delay's end.
        assert_eq!(
            settle(&held(Some(NOW - 10)), SessionState::Alive { lock_delay: 5_000 }, Some(NOW + 4_990), NOW),
            Settle::Tombstone { until: NOW + 4_990 }
        );
        assert_eq!(settle(&held(Some(NOW)), SessionState::Unknown, Some(NOW), NOW), Settle::Delete);
        // The session ended after the grant, before the hold limit: the
        // delay counts from the session's end.
        assert_eq!(
            settle(&held(Some(NOW + 50_000)), ended(NOW, 5_000), Some(NOW + 55_000), NOW + 1),
            Settle::Tombstone { until: NOW + 5_000 }
        );
    }
}
