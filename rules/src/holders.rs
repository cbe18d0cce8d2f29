//! Semaphores and read-write locks: one key, several holders, each with its
//! own token and lease. Pure decisions, with `now` an argument; the module
//! stores and replicates what they decide (`src/holders.rs`).
//!
//! **Stored form**: a sorted set (a plain Redis type, so RDB, AOF,
//! replication, `MIGRATE` and `redis-cli` need nothing of the module):
//! every holder is a member `token` whose score is the absolute end of its
//! lease (Unix ms), and one member `""` (no token is empty) tags the kind:
//!
//! | `""`'s score | kind |
//! |---|---|
//! | `limit` ≥ 1 | counting semaphore of `limit` permits |
//! | `0` | read-write lock held by readers |
//! | `-1` | read-write lock held by one writer |
//!
//! A lease is held through its last millisecond, as a key's TTL is: a
//! holder whose deadline is `d` is live while `now <= d`.
//!
//! **Lock-delay** (`LOCKDELAY ms`, issue 22): one delay per key, kept in the
//! tag's score as a fraction, `ms / 100000` (`2.05`: 2 permits, 5,000 ms;
//! `0.05` readers, `-1.05` a writer), so a key without a delay is stored
//! exactly as before and a module that does not know delays reads a delayed
//! key as `WRONGTYPE`, never as something else. A holder's score is then its
//! *place's* end, lease end + delay: every rule that reads scores as places
//! (live holders, pruning, the key's expiry, the queue's timer) is unchanged,
//! and only renew and release read the lease, `score - delay`. A holder
//! whose lease ended keeps its place until the delay passed, and can neither
//! renew nor release it.
//!
//! **Hold limit** (`MAXHOLD ms`, issue 22): one per holder, grant time +
//! `ms`, kept in a second member, `"\0" + token` ([`HOLD_PREFIX`]), scored
//! `-holdUntil`: below [`HOLD_FLOOR`], so below the tag (≥ -1.6) and every
//! place, outside every range that reads places (live holders from `now`
//! up, pruning from `HOLD_FLOOR` up). No renewal ends the lease past it
//! ([`renew`]); the place itself still ends by its score, so nothing else
//! reads the hold limit. Tokens starting with a NUL byte are refused
//! (`args::check_holder_key_and_token`), so no token can forge one. A key
//! without a hold limit has no such member and is stored as before.

use crate::error::ArgError;
use crate::number::{parse_count, parse_positive};

/// The member that tags the kind: tokens are never empty.
pub const TAG: &[u8] = b"";

/// Scores are doubles: integers up to 2^53 are exact, so no deadline and
/// no limit may go beyond (year ~287 000 for a deadline).
pub const MAX_EXACT: i64 = 1 << 53;

/// The first byte of a hold-limit member, `"\0" + token`: no token of a
/// semaphore or read-write lock starts with it (the argument check that
/// refuses such tokens defines it).
pub use crate::args::HOLD_PREFIX;

/// Hold-limit members score below this (`-holdUntil`, and every hold
/// limit is a Unix time far above 2); the tag (≥ -1.6) and places are at
/// or above it.
pub const HOLD_FLOOR: f64 = -2.0;

/// The hold-limit member of `token`.
pub fn hold_member(token: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(token.len() + 1);
    m.push(HOLD_PREFIX);
    m.extend_from_slice(token);
    m
}

/// The score of a hold limit (Unix ms, at most [`MAX_EXACT`]: exact).
pub fn hold_score(hold_until: i64) -> f64 {
    -(hold_until as f64)
}

/// The hold limit a hold member's score stands for: only scores below
/// [`HOLD_FLOOR`] that are integers (what [`hold_score`] writes).
pub fn hold_from_score(score: f64) -> Option<i64> {
    // A revoked holder's limit is its deadline, scored half a ms further
    // (`crate::revoke::revoked_hold_score`).
    let whole = score.fract() == 0.0 || score.fract() == -0.5;
    (score < HOLD_FLOOR && score >= -(MAX_EXACT as f64) && whole).then(|| -score as i64)
}

/// Which family of commands a key belongs to (`SEM.*` or `RWLOCK.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Semaphore,
    ReadWrite,
}

/// The longest lock-delay (ms), as the exclusive lock's (`LOCKDELAY`).
pub const MAX_DELAY: i64 = crate::args::MAX_LOCK_DELAY_MS;

/// A delay is kept as `ms / DELAY_SCALE` in the tag's fractional part.
const DELAY_SCALE: f64 = 100_000.0;

/// The largest semaphore limit that can carry a delay: the fraction must
/// stay exact enough to read back (a double's step at 2^32 is 2^-20, a
/// tenth of a millisecond of delay at this scale).
pub const MAX_LIMIT_WITH_DELAY: u64 = 1 << 32;

/// What the tag says: the kind, and the key's lock-delay (ms, 0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub kind: Kind,
    pub delay: i64,
}

impl Tag {
    /// The tag's score: the kind's, plus the delay as a fraction away from
    /// zero (`limit + ms/100000`, `ms/100000`, `-1 - ms/100000`).
    pub fn score(self) -> f64 {
        let base = self.kind.score() as f64;
        let frac = self.delay as f64 / DELAY_SCALE;
        match self.kind {
            Kind::ReadWrite { writer: true } => base - frac,
            _ => base + frac,
        }
    }

    /// The tag a score stands for: only scores [`Tag::score`] writes (a
    /// delay of 0 to [`MAX_DELAY`] that reads back to the same double).
    pub fn from_score(score: f64) -> Option<Tag> {
        if !score.is_finite() {
            return None;
        }
        let (kind, frac) = if score >= 1.0 {
            let limit = score.floor();
            (Kind::from_score(limit)?, score - limit)
        } else if score >= 0.0 {
            (Kind::ReadWrite { writer: false }, score)
        } else if score <= -1.0 {
            (Kind::ReadWrite { writer: true }, -1.0 - score)
        } else {
            return None;
        };
        let delay = (frac * DELAY_SCALE).round();
        if !(0.0..=MAX_DELAY as f64).contains(&delay) {
            return None;
        }
        let tag = Tag { kind, delay: delay as i64 };
        (tag.score() == score).then_some(tag)
    }

    pub fn family(self) -> Family {
        self.kind.family()
    }
}

/// The error of a grant of `want` with `delay` that its tag could not carry.
pub fn check_tag(want: Want, delay: i64) -> Result<(), ArgError> {
    match want {
        Want::Permit { limit } if delay > 0 && limit > MAX_LIMIT_WITH_DELAY => Err(ArgError::LimitTooLargeForDelay),
        _ => Ok(()),
    }
}

/// The kind of a tag without a delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Semaphore { limit: u64 },
    ReadWrite { writer: bool },
}

impl Kind {
    /// The tag's score.
    pub fn score(self) -> i64 {
        match self {
            // limit <= 2^53 (parse_limit), so the cast is exact.
            Kind::Semaphore { limit } => limit as i64,
            Kind::ReadWrite { writer: false } => 0,
            Kind::ReadWrite { writer: true } => -1,
        }
    }

    /// The kind a tag's score stands for; `None` for any other score (the
    /// sorted set is then not one of ours: `WRONGTYPE`).
    pub fn from_score(score: f64) -> Option<Kind> {
        if score == 0.0 {
            Some(Kind::ReadWrite { writer: false })
        } else if score == -1.0 {
            Some(Kind::ReadWrite { writer: true })
        } else if score >= 1.0 && score <= MAX_EXACT as f64 && score.fract() == 0.0 {
            Some(Kind::Semaphore { limit: score as u64 })
        } else {
            None
        }
    }

    pub fn family(self) -> Family {
        match self {
            Kind::Semaphore { .. } => Family::Semaphore,
            Kind::ReadWrite { .. } => Family::ReadWrite,
        }
    }
}

/// What an acquirer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// One of `limit` permits (`SEM.ACQUIRE`).
    Permit { limit: u64 },
    /// A shared hold (`RWLOCK.ACQUIRE … READ`).
    Read,
    /// The exclusive hold (`RWLOCK.ACQUIRE … WRITE`).
    Write,
}

impl Want {
    /// The tag a grant of this with `delay` stores as the key's first holder.
    pub fn tag(self, delay: i64) -> Tag {
        Tag { kind: self.kind(), delay }
    }

    /// The kind a grant of this stores when it is the key's first holder.
    pub fn kind(self) -> Kind {
        match self {
            Want::Permit { limit } => Kind::Semaphore { limit },
            Want::Read => Kind::ReadWrite { writer: false },
            Want::Write => Kind::ReadWrite { writer: true },
        }
    }

    pub fn family(self) -> Family {
        self.kind().family()
    }
}

/// The most ended leases one command removes. A key whose leases ended by
/// the hundred thousand at once (a crashed fleet) is cleaned up by the next
/// commands a bound at a time, so no single command stalls the server; the
/// decisions stay exact meanwhile, because the ones left are counted (in
/// O(log N), see [`Summary::live`]), not assumed gone.
pub const PRUNE_BOUND: usize = 1000;

/// What a decision needs to know of a key, read without walking its holders
/// (every part is a lookup by member or by score: O(log N) in the holders).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// What the tag says (also when no lease is live any more).
    pub kind: Kind,
    /// The key's lock-delay (ms; 0: none), from the tag.
    pub delay: i64,
    /// The holders whose place has not ended (their lease, or the delay
    /// after it): the set's members minus the tag minus the ended ones,
    /// whether or not they are pruned yet.
    pub live: u64,
    /// The caller's place end (its score), when it holds a place.
    pub own: Option<i64>,
    /// The last place end (`None` when `live` is 0): the key's expiry.
    pub last: Option<i64>,
    /// The caller's hold limit (`MAXHOLD`: grant time + ms), when its
    /// member is there (also for a place that ended and is not pruned yet).
    pub hold: Option<i64>,
    /// The caller's hold was revoked (`LOCK.REVOKE`): `hold` is its deadline.
    pub revoked: bool,
    /// The short id of the session holding the caller's place, if a
    /// session holds it (`crate::held::session_member`).
    pub session: Option<u64>,
}

impl Summary {
    pub fn tag(&self) -> Tag {
        Tag { kind: self.kind, delay: self.delay }
    }

    /// The caller's lease end, when its lease has not ended at `now` (a
    /// place in its delay is held, but no longer the caller's to renew or
    /// release).
    pub fn own_lease(&self, now: i64) -> Option<i64> {
        self.own.map(|end| end.saturating_sub(self.delay)).filter(|&lease| lease >= now)
    }
}

/// The key is not one of this family's (another type, a sorted set without
/// a valid tag, or the other family).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotOurs;

/// The decision on an acquirer, made on the live holders; `None` is an
/// absent key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Granted now (if nobody waits ahead: the caller checks the queue).
    Grant,
    /// Not now: wait in line, or refuse without `WAIT`.
    Wait,
    /// The token already holds this key: refused at once, even with `WAIT`
    /// (it would wait for itself); renew it instead.
    AlreadyHolds,
    /// A semaphore whose stored limit differs from the one asked for: an
    /// error naming the stored limit, so no caller exceeds it unknowingly.
    LimitDiffers(u64),
    /// The key belongs to the other family: `WRONGTYPE`.
    WrongFamily,
    /// A key whose stored lock-delay (ms) differs from the one asked for:
    /// an error naming it, as for the limit.
    DelayDiffers(i64),
}

/// The error an acquirer of `want` with lock-delay `delay` gets from a key
/// tagged `stored`, if any.
pub fn conflict(stored: Tag, want: Want, delay: i64) -> Option<Admit> {
    if stored.family() != want.family() {
        return Some(Admit::WrongFamily);
    }
    match (stored.kind, want) {
        (Kind::Semaphore { limit: stored }, Want::Permit { limit }) if stored != limit => {
            Some(Admit::LimitDiffers(stored))
        }
        _ if stored.delay != delay => Some(Admit::DelayDiffers(stored.delay)),
        _ => None,
    }
}

pub fn admit(key: Option<&Summary>, want: Want, delay: i64) -> Admit {
    // A key with no live holder is free, whatever it was: its tag goes with
    // its last holder.
    let Some(s) = key.filter(|s| s.live > 0) else { return Admit::Grant };
    if let Some(error) = conflict(s.tag(), want, delay) {
        return error;
    }
    if s.own.is_some() {
        return Admit::AlreadyHolds;
    }
    let fits = match (s.kind, want) {
        (Kind::Semaphore { limit }, _) => s.live < limit,
        (Kind::ReadWrite { writer }, Want::Read) => !writer,
        // A writer needs the key to itself; it has holders here.
        _ => false,
    };
    if fits {
        Admit::Grant
    } else {
        Admit::Wait
    }
}

/// The error a newcomer gets before anything is written (before the queue
/// is served): from the live holders' kind, or, while others wait, from
/// the stored tag even if every lease has ended — the queue is about to
/// grant the key under it, and the newcomer would only be served after.
pub fn refused_early(key: Option<&Summary>, want: Want, delay: i64, queued: bool) -> Option<Admit> {
    key.filter(|s| s.live > 0 || queued).and_then(|s| conflict(s.tag(), want, delay))
}

/// The tag a grant of `want` with `delay` writes: on an absent key, or on
/// one whose places all ended and whose tag says another kind or delay.
/// `None`: it stays.
pub fn tag_after_grant(key: Option<&Summary>, want: Want, delay: i64) -> Option<Tag> {
    match key {
        Some(s) if s.live > 0 || s.tag() == want.tag(delay) => None,
        _ => Some(want.tag(delay)),
    }
}

/// What a command does to the caller's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing (a refusal): only ended leases go.
    Keep,
    /// A grant or a renewal: the caller's lease now ends then.
    Put(i64),
    /// A release of the caller's live lease.
    Remove,
}

/// The key's last lease end after a change, which is its expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Last {
    /// No live holder is left: the key goes.
    Gone,
    At(i64),
    /// The caller's lease was the last and moved down or left: the next
    /// one is read from the set (one more O(log N) lookup).
    Read,
}

pub fn last_after(key: Option<&Summary>, change: Change) -> Last {
    let (live, own, last) = key.map_or((0, None, None), |s| (s.live, s.own, s.last));
    let own_was_last = own.is_some() && own == last;
    match change {
        Change::Keep => last.map_or(Last::Gone, Last::At),
        Change::Put(at) => match last {
            Some(l) if own_was_last && at < l && live > 1 => Last::Read,
            Some(l) if !own_was_last => Last::At(l.max(at)),
            _ => Last::At(at),
        },
        Change::Remove if live <= 1 => Last::Gone,
        Change::Remove if own_was_last => Last::Read,
        Change::Remove => last.map_or(Last::Gone, Last::At),
    }
}

/// The end of a lease of `ttl_ms` granted or renewed at `now_ms`: it must
/// fit a score exactly (see [`MAX_EXACT`]).
pub fn lease_end(now_ms: i64, ttl_ms: i64) -> Result<i64, ArgError> {
    place_end(now_ms, ttl_ms, 0)
}

/// The score of a lease of `ttl_ms` granted or renewed at `now_ms` on a key
/// with lock-delay `delay`: the end of its place, lease end + delay.
pub fn place_end(now_ms: i64, ttl_ms: i64, delay: i64) -> Result<i64, ArgError> {
    now_ms
        .checked_add(ttl_ms)
        .and_then(|at| at.checked_add(delay))
        .filter(|&at| at <= MAX_EXACT)
        .ok_or(ArgError::TtlTooLarge)
}

/// What a grant at `now` stores: its place's score, and its hold limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    /// The place's end: lease end (never past `hold_until`) + the delay.
    pub at: i64,
    /// grant time + `MAXHOLD`, when asked.
    pub hold_until: Option<i64>,
}

/// The grant at `now` of a lease of `ttl_ms` on a key with lock-delay
/// `delay`, with `max_hold` (`MAXHOLD ms`, at least `ttl_ms`: checked
/// before, by `args::check_lease_terms`). Errors when a time does not fit
/// a score exactly (nothing is written).
pub fn grant(now_ms: i64, ttl_ms: i64, delay: i64, max_hold: Option<i64>) -> Result<Granted, ArgError> {
    // The lease first, as the exclusive lock's grant checks it.
    let lease = lease_end(now_ms, ttl_ms)?;
    let hold_until = max_hold
        .map(|max| now_ms.checked_add(max).filter(|&h| h <= MAX_EXACT).ok_or(ArgError::MaxHoldTooLarge))
        .transpose()?;
    let lease = hold_until.map_or(lease, |h| lease.min(h));
    Ok(Granted { at: place_end(lease, 0, delay)?, hold_until })
}

/// What a renewal does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Reply 0: the caller holds no live lease here (none, ended, in its
    /// delay, or its hold limit reached).
    Refused,
    /// The caller's place now ends at `at`; `capped`: the hold limit cut
    /// the lease short of now + ttl-ms (reply 2).
    Renewed { at: i64, capped: bool },
}

/// The renewal at `now` for `ttl_ms` by the caller `s` was scanned for:
/// new lease end = min(now + ttl-ms, its hold limit), + the key's delay.
/// A renewal at or after the hold limit is refused: the lease was capped
/// there, so it has ended (or ends this millisecond) anyway.
pub fn renew(s: &Summary, now_ms: i64, ttl_ms: i64) -> Result<Renewal, ArgError> {
    if s.own_lease(now_ms).is_none() || s.hold.is_some_and(|h| h <= now_ms) {
        return Ok(Renewal::Refused);
    }
    let lease = lease_end(now_ms, ttl_ms)?;
    let (lease, capped) = match s.hold {
        Some(h) if h < lease => (h, true),
        _ => (lease, false),
    };
    Ok(Renewal::Renewed { at: place_end(lease, 0, s.delay)?, capped })
}

/// Whether an acquirer the key made wait ([`Admit::Wait`]) would have been
/// admitted without the `in_delay` places that are in their lock-delay
/// (lease ended, place not yet: scores in `[now, now + delay)`): counted
/// as a delayed acquire.
pub fn held_off_by_delay(s: &Summary, want: Want, delay: i64, in_delay: u64) -> bool {
    let without = Summary { live: s.live.saturating_sub(in_delay), ..*s };
    in_delay > 0 && admit(Some(&without), want, delay) == Admit::Grant
}

/// `limit`: a positive integer in Redis's strict syntax, at most 2^53.
pub fn parse_limit(arg: &[u8]) -> Result<u64, ArgError> {
    match parse_positive(arg) {
        Ok(n) if n <= MAX_EXACT => Ok(n as u64),
        _ => Err(ArgError::LimitInvalid),
    }
}

/// `READ` or `WRITE`, case-insensitive.
pub fn parse_mode(arg: &[u8]) -> Result<Want, ArgError> {
    if arg.eq_ignore_ascii_case(b"READ") {
        Ok(Want::Read)
    } else if arg.eq_ignore_ascii_case(b"WRITE") {
        Ok(Want::Write)
    } else {
        Err(ArgError::ModeInvalid)
    }
}

/// `INFO key [COUNT n]`'s options: how many holders to list (`None`: all).
pub fn parse_info_options<'a>(options: impl IntoIterator<Item = &'a [u8]>) -> Result<Option<usize>, ArgError> {
    let mut it = options.into_iter();
    let mut count = None;
    while let Some(option) = it.next() {
        if !option.eq_ignore_ascii_case(b"COUNT") {
            return Err(ArgError::Syntax);
        }
        let n = it.next().ok_or(ArgError::Syntax)?;
        count = Some(parse_count(n).ok_or(ArgError::CountInvalid)?);
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sem(limit: u64, live: u64, own: Option<i64>, last: Option<i64>) -> Summary {
        Summary {
            kind: Kind::Semaphore { limit },
            delay: 0,
            live,
            own,
            last,
            hold: None,
            revoked: false,
            session: None,
        }
    }

    fn rw(writer: bool, live: u64, own: Option<i64>) -> Summary {
        Summary {
            kind: Kind::ReadWrite { writer },
            delay: 0,
            live,
            own,
            last: Some(100),
            hold: None,
            revoked: false,
            session: None,
        }
    }

    #[test]
    fn hold_members_score_below_every_tag_and_place() {
        assert_eq!(hold_member(b"tok"), b"\0tok".to_vec());
        for h in [3, 1_700_000_000_000, MAX_EXACT] {
            assert!(hold_score(h) < HOLD_FLOOR);
            assert_eq!(hold_from_score(hold_score(h)), Some(h));
            // What a replica parses from the replicated integer.
            assert_eq!(hold_from_score(format!("{}", -h).parse().unwrap()), Some(h));
        }
        // Tags (down to a writer with the longest delay) are above the floor.
        assert!(Tag { kind: Kind::ReadWrite { writer: true }, delay: MAX_DELAY }.score() > HOLD_FLOOR);
        for bad in [-2.0, -1.6, 0.0, 5.0, -2.25, f64::NEG_INFINITY, f64::NAN, -(MAX_EXACT as f64) * 2.0] {
            assert_eq!(hold_from_score(bad), None, "{bad}");
        }
        // Half a ms past a limit: a revoked holder's deadline (crate::revoke).
        assert_eq!(hold_from_score(-2.5), Some(2));
    }

    #[test]
    fn a_hold_limit_counts_from_the_grant_and_caps_renewals() {
        // Granted at 1,000 for 100 ms with MAXHOLD 250, delay 50.
        let g = grant(1_000, 100, 50, Some(250)).unwrap();
        assert_eq!(g, Granted { at: 1_150, hold_until: Some(1_250) });
        assert_eq!(grant(1_000, 100, 0, None), Ok(Granted { at: 1_100, hold_until: None }));
        // A hold limit below the ttl (refused before) caps the grant itself.
        assert_eq!(grant(1_000, 100, 0, Some(40)), Ok(Granted { at: 1_040, hold_until: Some(1_040) }));
        assert_eq!(grant(MAX_EXACT - 10, 5, 0, Some(11)), Err(ArgError::MaxHoldTooLarge));
        assert_eq!(grant(0, 5, 0, Some(MAX_EXACT)).map(|g| g.hold_until), Ok(Some(MAX_EXACT)));
        assert_eq!(grant(1, 5, 0, Some(i64::MAX)), Err(ArgError::MaxHoldTooLarge));
        assert_eq!(grant(0, MAX_EXACT, 1, None), Err(ArgError::TtlTooLarge));
        assert_eq!(grant(1, MAX_EXACT, 0, Some(MAX_EXACT)), Err(ArgError::TtlTooLarge));
        let holder = |own, hold| Summary { delay: 50, hold, ..sem(2, 1, Some(own), Some(own)) };
        // Renewed in full while the limit is far.
        assert_eq!(renew(&holder(1_150, Some(1_250)), 1_050, 100), Ok(Renewal::Renewed { at: 1_200, capped: false }));
        // Cut at the limit: the place ends at limit + delay.
        assert_eq!(renew(&holder(1_150, Some(1_250)), 1_100, 200), Ok(Renewal::Renewed { at: 1_300, capped: true }));
        // Exactly reaching it is not a cut.
        assert_eq!(renew(&holder(1_250, Some(1_250)), 1_150, 100), Ok(Renewal::Renewed { at: 1_300, capped: false }));
        // At or after the limit: refused (the lease was capped there).
        assert_eq!(renew(&holder(1_300, Some(1_250)), 1_250, 100), Ok(Renewal::Refused));
        // No hold limit: as before.
        assert_eq!(renew(&holder(1_150, None), 1_100, 200), Ok(Renewal::Renewed { at: 1_350, capped: false }));
        // A lease that ended (its place in the delay) or no place: refused.
        assert_eq!(renew(&holder(1_120, Some(5_000)), 1_100, 100), Ok(Renewal::Refused));
        assert_eq!(renew(&Summary { own: None, ..holder(1, None) }, 1_100, 100), Ok(Renewal::Refused));
        assert_eq!(renew(&holder(1_150, None), 1_100, MAX_EXACT), Err(ArgError::TtlTooLarge));
    }

    #[test]
    fn places_in_their_delay_that_fill_the_key_hold_off_an_acquirer() {
        let p = Want::Permit { limit: 2 };
        let full = Summary { delay: 50, ..sem(2, 2, None, Some(160)) };
        assert_eq!(admit(Some(&full), p, 50), Admit::Wait);
        assert!(held_off_by_delay(&full, p, 50, 1));
        assert!(held_off_by_delay(&full, p, 50, 2));
        assert!(!held_off_by_delay(&full, p, 50, 0));
        let three = Summary { live: 3, ..full };
        // Over the limit by more than the delayed places: not the delay's doing.
        assert!(!held_off_by_delay(
            &Summary { kind: Kind::Semaphore { limit: 1 }, ..three },
            Want::Permit { limit: 1 },
            50,
            1
        ));
        // A writer in its delay holds off readers and writers.
        let writer = Summary { delay: 50, ..rw(true, 1, None) };
        assert!(held_off_by_delay(&writer, Want::Read, 50, 1));
        assert!(held_off_by_delay(&writer, Want::Write, 50, 1));
        // Readers, one of them delayed: a writer still waits for the other.
        let readers = Summary { delay: 50, ..rw(false, 2, None) };
        assert!(!held_off_by_delay(&readers, Want::Write, 50, 1));
        assert!(held_off_by_delay(&readers, Want::Write, 50, 2));
    }

    #[test]
    fn tags_round_trip_and_reject_other_scores() {
        for kind in [
            Kind::Semaphore { limit: 1 },
            Kind::Semaphore { limit: 7 },
            Kind::Semaphore { limit: 1 << 53 },
            Kind::ReadWrite { writer: false },
            Kind::ReadWrite { writer: true },
        ] {
            assert_eq!(Kind::from_score(kind.score() as f64), Some(kind));
        }
        for bad in [0.5, -2.0, 2.5, f64::INFINITY, f64::NEG_INFINITY, (1u64 << 54) as f64] {
            assert_eq!(Kind::from_score(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_semaphore_admits_up_to_its_limit_and_names_a_different_one() {
        let p = Want::Permit { limit: 2 };
        assert_eq!(admit(None, p, 0), Admit::Grant);
        let one = sem(2, 1, None, Some(10));
        assert_eq!(admit(Some(&one), p, 0), Admit::Grant);
        assert_eq!(admit(Some(&sem(2, 1, Some(10), Some(10))), p, 0), Admit::AlreadyHolds);
        let full = sem(2, 2, None, Some(10));
        assert_eq!(admit(Some(&full), p, 0), Admit::Wait);
        assert_eq!(admit(Some(&full), Want::Permit { limit: 3 }, 0), Admit::LimitDiffers(2));
        assert_eq!(admit(Some(&full), Want::Read, 0), Admit::WrongFamily);
        // No live holder: free, whatever the tag said.
        assert_eq!(admit(Some(&sem(2, 0, None, None)), Want::Write, 0), Admit::Grant);
        assert_eq!(admit(Some(&sem(2, 0, None, None)), Want::Permit { limit: 3 }, 0), Admit::Grant);
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let readers = rw(false, 2, None);
        assert_eq!(admit(Some(&readers), Want::Read, 0), Admit::Grant);
        assert_eq!(admit(Some(&readers), Want::Write, 0), Admit::Wait);
        assert_eq!(admit(Some(&readers), Want::Permit { limit: 1 }, 0), Admit::WrongFamily);
        let writer = rw(true, 1, None);
        assert_eq!(admit(Some(&writer), Want::Read, 0), Admit::Wait);
        assert_eq!(admit(Some(&writer), Want::Write, 0), Admit::Wait);
        assert_eq!(admit(Some(&rw(true, 1, Some(100))), Want::Write, 0), Admit::AlreadyHolds);
    }

    #[test]
    fn errors_are_judged_before_the_queue_is_served() {
        let ended = sem(1, 0, None, None);
        let p2 = Want::Permit { limit: 2 };
        // Free and nobody waits: any limit starts it anew.
        assert_eq!(refused_early(Some(&ended), p2, 0, false), None);
        // Free but others wait: the queue grants under the stored tag first.
        assert_eq!(refused_early(Some(&ended), p2, 0, true), Some(Admit::LimitDiffers(1)));
        assert_eq!(refused_early(Some(&ended), Want::Write, 0, true), Some(Admit::WrongFamily));
        assert_eq!(refused_early(Some(&sem(2, 1, None, Some(5))), Want::Read, 0, false), Some(Admit::WrongFamily));
        assert_eq!(refused_early(Some(&sem(2, 1, None, Some(5))), p2, 0, true), None);
        assert_eq!(refused_early(None, p2, 0, true), None);
    }

    #[test]
    fn a_grant_writes_the_tag_only_when_it_changes() {
        let p = Want::Permit { limit: 2 };
        assert_eq!(tag_after_grant(None, p, 0), Some(Tag { kind: Kind::Semaphore { limit: 2 }, delay: 0 }));
        assert_eq!(tag_after_grant(Some(&sem(2, 1, None, Some(5))), p, 0), None);
        assert_eq!(tag_after_grant(Some(&sem(2, 0, None, None)), p, 0), None);
        assert_eq!(
            tag_after_grant(Some(&sem(3, 0, None, None)), p, 0),
            Some(Tag { kind: Kind::Semaphore { limit: 2 }, delay: 0 })
        );
        // Readers after a writer whose lease ended.
        assert_eq!(
            tag_after_grant(Some(&rw(true, 0, None)), Want::Read, 0),
            Some(Tag { kind: Kind::ReadWrite { writer: false }, delay: 0 })
        );
        assert_eq!(tag_after_grant(Some(&rw(false, 3, None)), Want::Read, 0), None);
    }

    #[test]
    fn the_last_lease_end_follows_every_change() {
        assert_eq!(last_after(None, Change::Put(50)), Last::At(50));
        assert_eq!(last_after(Some(&sem(2, 0, None, None)), Change::Put(50)), Last::At(50));
        assert_eq!(last_after(Some(&sem(2, 0, None, None)), Change::Keep), Last::Gone);
        let two = sem(5, 2, None, Some(100));
        assert_eq!(last_after(Some(&two), Change::Put(50)), Last::At(100));
        assert_eq!(last_after(Some(&two), Change::Put(150)), Last::At(150));
        assert_eq!(last_after(Some(&two), Change::Keep), Last::At(100));
        // The caller's lease is the last: longer is known, shorter needs the next one.
        let mine = sem(5, 2, Some(100), Some(100));
        assert_eq!(last_after(Some(&mine), Change::Put(150)), Last::At(150));
        assert_eq!(last_after(Some(&mine), Change::Put(50)), Last::Read);
        assert_eq!(last_after(Some(&mine), Change::Remove), Last::Read);
        let alone = sem(5, 1, Some(100), Some(100));
        assert_eq!(last_after(Some(&alone), Change::Put(50)), Last::At(50));
        assert_eq!(last_after(Some(&alone), Change::Remove), Last::Gone);
        let early = sem(5, 3, Some(40), Some(100));
        assert_eq!(last_after(Some(&early), Change::Put(60)), Last::At(100));
        assert_eq!(last_after(Some(&early), Change::Remove), Last::At(100));
    }

    #[test]
    fn delays_ride_on_the_tag_and_read_back_exactly() {
        for kind in [
            Kind::Semaphore { limit: 1 },
            Kind::Semaphore { limit: 7 },
            Kind::Semaphore { limit: MAX_LIMIT_WITH_DELAY },
            Kind::ReadWrite { writer: false },
            Kind::ReadWrite { writer: true },
        ] {
            for delay in [0, 1, 7, 5_000, 33_333, MAX_DELAY] {
                let tag = Tag { kind, delay };
                assert_eq!(Tag::from_score(tag.score()), Some(tag), "{tag:?}");
                // What a replica parses from the replicated decimal.
                assert_eq!(Tag::from_score(format!("{}", tag.score()).parse().unwrap()), Some(tag));
            }
        }
        // No delay: the same scores as before delays existed.
        assert_eq!(Tag { kind: Kind::Semaphore { limit: 2 }, delay: 0 }.score(), 2.0);
        assert_eq!(Tag { kind: Kind::ReadWrite { writer: true }, delay: 0 }.score(), -1.0);
        assert_eq!(Tag { kind: Kind::Semaphore { limit: 2 }, delay: 5_000 }.score(), 2.05);
        assert_eq!(Tag { kind: Kind::ReadWrite { writer: true }, delay: 5_000 }.score(), -1.05);
        assert_eq!(Tag::from_score(1.0 + 1.0 / 3.0), None);
        for bad in [-0.5, -2.5, 0.7, 2.61, 2.000001, f64::NAN, f64::INFINITY, (1u64 << 54) as f64] {
            assert_eq!(Tag::from_score(bad), None, "{bad}");
        }
        assert_eq!(check_tag(Want::Permit { limit: MAX_LIMIT_WITH_DELAY }, 1), Ok(()));
        assert_eq!(
            check_tag(Want::Permit { limit: MAX_LIMIT_WITH_DELAY + 1 }, 1),
            Err(ArgError::LimitTooLargeForDelay)
        );
        assert_eq!(check_tag(Want::Permit { limit: MAX_EXACT as u64 }, 0), Ok(()));
    }

    #[test]
    fn a_place_in_its_delay_is_held_but_not_the_holders_any_more() {
        let p = Want::Permit { limit: 2 };
        // Scores are place ends: lease end + delay. Now = 100, delay 50.
        let delayed = Summary { delay: 50, ..sem(2, 2, Some(120), Some(160)) };
        assert_eq!(delayed.own_lease(100), None);
        assert_eq!(delayed.own_lease(70), Some(70));
        assert_eq!(Summary { own: Some(150), ..delayed }.own_lease(100), Some(100));
        assert_eq!(Summary { own: None, ..delayed }.own_lease(0), None);
        // Both places are taken, one of them by its own delay: a newcomer
        // waits, the former holder is refused as holding (it would wait for itself).
        assert_eq!(admit(Some(&Summary { own: None, ..delayed }), p, 50), Admit::Wait);
        assert_eq!(admit(Some(&delayed), p, 50), Admit::AlreadyHolds);
        // The delay is the key's, like the limit: another one is an error.
        assert_eq!(admit(Some(&delayed), p, 0), Admit::DelayDiffers(50));
        assert_eq!(admit(Some(&delayed), Want::Permit { limit: 3 }, 0), Admit::LimitDiffers(2));
        assert_eq!(refused_early(Some(&delayed), p, 49, false), Some(Admit::DelayDiffers(50)));
        let ended = Summary { delay: 50, ..sem(2, 0, None, None) };
        assert_eq!(refused_early(Some(&ended), p, 0, false), None);
        assert_eq!(refused_early(Some(&ended), p, 0, true), Some(Admit::DelayDiffers(50)));
        // A free key takes the newcomer's delay.
        assert_eq!(admit(Some(&ended), p, 0), Admit::Grant);
        assert_eq!(tag_after_grant(Some(&ended), p, 0), Some(Tag { kind: Kind::Semaphore { limit: 2 }, delay: 0 }));
        assert_eq!(tag_after_grant(Some(&ended), p, 50), None);
        assert_eq!(
            tag_after_grant(None, Want::Read, 9),
            Some(Tag { kind: Kind::ReadWrite { writer: false }, delay: 9 })
        );
        assert_eq!(place_end(1_000, 500, 50), Ok(1_550));
        assert_eq!(place_end(0, MAX_EXACT - 5, 5), Ok(MAX_EXACT));
        assert_eq!(place_end(0, MAX_EXACT - 5, 6), Err(ArgError::TtlTooLarge));
    }

    #[test]
    fn arguments() {
        assert_eq!(parse_limit(b"1"), Ok(1));
        assert_eq!(parse_limit(b"9007199254740992"), Ok(1 << 53));
        for bad in [&b"0"[..], b"-1", b"01", b"x", b"9007199254740993", b"99999999999999999999"] {
            assert_eq!(parse_limit(bad), Err(ArgError::LimitInvalid));
        }
        assert_eq!(parse_mode(b"read"), Ok(Want::Read));
        assert_eq!(parse_mode(b"Write"), Ok(Want::Write));
        assert_eq!(parse_mode(b"rw"), Err(ArgError::ModeInvalid));
        assert_eq!(lease_end(1000, 500), Ok(1500));
        assert_eq!(lease_end(0, MAX_EXACT), Ok(MAX_EXACT));
        assert_eq!(lease_end(1, MAX_EXACT), Err(ArgError::TtlTooLarge));
        let opts = |v: &[&str]| parse_info_options(v.iter().map(|s| s.as_bytes()));
        assert_eq!(opts(&[]), Ok(None));
        assert_eq!(opts(&["count", "10"]), Ok(Some(10)));
        assert_eq!(opts(&["COUNT", "5", "COUNT", "7"]), Ok(Some(7)));
        for bad in [&["COUNT", "0"][..], &["COUNT", "-1"], &["COUNT", "x"], &["COUNT", "99999999999999999999"]] {
            assert_eq!(opts(bad), Err(ArgError::CountInvalid), "{bad:?}");
        }
        assert_eq!(opts(&["COUNT"]), Err(ArgError::Syntax));
        assert_eq!(opts(&["LIMIT", "5"]), Err(ArgError::Syntax));
    }
}
