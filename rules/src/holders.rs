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

use crate::args::ArgError;

/// The member that tags the kind: tokens are never empty.
pub const TAG: &[u8] = b"";

/// Scores are doubles: integers up to 2^53 are exact, so no deadline and
/// no limit may go beyond (year ~287 000 for a deadline).
pub const MAX_EXACT: i64 = 1 << 53;

/// Which family of commands a key belongs to (`SEM.*` or `RWLOCK.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Semaphore,
    ReadWrite,
}

/// What the tag says.
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
    /// The holders whose lease has not ended: the set's members minus the
    /// tag minus the ended leases, whether or not they are pruned yet.
    pub live: u64,
    /// The caller's lease end, when it holds a live lease.
    pub own: Option<i64>,
    /// The last live lease end (`None` when `live` is 0): the key's expiry.
    pub last: Option<i64>,
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
}

/// The error an acquirer of `want` gets from a key of `kind`, if any.
pub fn conflict(kind: Kind, want: Want) -> Option<Admit> {
    if kind.family() != want.family() {
        return Some(Admit::WrongFamily);
    }
    match (kind, want) {
        (Kind::Semaphore { limit: stored }, Want::Permit { limit }) if stored != limit => {
            Some(Admit::LimitDiffers(stored))
        }
        _ => None,
    }
}

pub fn admit(key: Option<&Summary>, want: Want) -> Admit {
    // A key with no live holder is free, whatever it was: its tag goes with
    // its last holder.
    let Some(s) = key.filter(|s| s.live > 0) else { return Admit::Grant };
    if let Some(error) = conflict(s.kind, want) {
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
pub fn refused_early(key: Option<&Summary>, want: Want, queued: bool) -> Option<Admit> {
    key.filter(|s| s.live > 0 || queued).and_then(|s| conflict(s.kind, want))
}

/// The tag a grant of `want` writes: on an absent key, or on one whose
/// leases all ended and whose tag says another kind. `None`: it stays.
pub fn tag_after_grant(key: Option<&Summary>, want: Want) -> Option<Kind> {
    match key {
        Some(s) if s.live > 0 || s.kind == want.kind() => None,
        _ => Some(want.kind()),
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
    now_ms.checked_add(ttl_ms).filter(|&at| at <= MAX_EXACT).ok_or(ArgError::TtlTooLarge)
}

/// `limit`: a positive integer in Redis's strict syntax, at most 2^53.
pub fn parse_limit(arg: &[u8]) -> Result<u64, ArgError> {
    match crate::args::parse_ttl(arg) {
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
        let n = crate::args::parse_ttl(n).map_err(|_| ArgError::CountInvalid)?;
        count = Some(usize::try_from(n).unwrap_or(usize::MAX));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sem(limit: u64, live: u64, own: Option<i64>, last: Option<i64>) -> Summary {
        Summary { kind: Kind::Semaphore { limit }, live, own, last }
    }

    fn rw(writer: bool, live: u64, own: Option<i64>) -> Summary {
        Summary { kind: Kind::ReadWrite { writer }, live, own, last: Some(100) }
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
        assert_eq!(admit(None, p), Admit::Grant);
        let one = sem(2, 1, None, Some(10));
        assert_eq!(admit(Some(&one), p), Admit::Grant);
        assert_eq!(admit(Some(&sem(2, 1, Some(10), Some(10))), p), Admit::AlreadyHolds);
        let full = sem(2, 2, None, Some(10));
        assert_eq!(admit(Some(&full), p), Admit::Wait);
        assert_eq!(admit(Some(&full), Want::Permit { limit: 3 }), Admit::LimitDiffers(2));
        assert_eq!(admit(Some(&full), Want::Read), Admit::WrongFamily);
        // No live holder: free, whatever the tag said.
        assert_eq!(admit(Some(&sem(2, 0, None, None)), Want::Write), Admit::Grant);
        assert_eq!(admit(Some(&sem(2, 0, None, None)), Want::Permit { limit: 3 }), Admit::Grant);
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let readers = rw(false, 2, None);
        assert_eq!(admit(Some(&readers), Want::Read), Admit::Grant);
        assert_eq!(admit(Some(&readers), Want::Write), Admit::Wait);
        assert_eq!(admit(Some(&readers), Want::Permit { limit: 1 }), Admit::WrongFamily);
        let writer = rw(true, 1, None);
        assert_eq!(admit(Some(&writer), Want::Read), Admit::Wait);
        assert_eq!(admit(Some(&writer), Want::Write), Admit::Wait);
        assert_eq!(admit(Some(&rw(true, 1, Some(100))), Want::Write), Admit::AlreadyHolds);
    }

    #[test]
    fn errors_are_judged_before_the_queue_is_served() {
        let ended = sem(1, 0, None, None);
        let p2 = Want::Permit { limit: 2 };
        // Free and nobody waits: any limit starts it anew.
        assert_eq!(refused_early(Some(&ended), p2, false), None);
        // Free but others wait: the queue grants under the stored tag first.
        assert_eq!(refused_early(Some(&ended), p2, true), Some(Admit::LimitDiffers(1)));
        assert_eq!(refused_early(Some(&ended), Want::Write, true), Some(Admit::WrongFamily));
        assert_eq!(refused_early(Some(&sem(2, 1, None, Some(5))), Want::Read, false), Some(Admit::WrongFamily));
        assert_eq!(refused_early(Some(&sem(2, 1, None, Some(5))), p2, true), None);
        assert_eq!(refused_early(None, p2, true), None);
    }

    #[test]
    fn a_grant_writes_the_tag_only_when_it_changes() {
        let p = Want::Permit { limit: 2 };
        assert_eq!(tag_after_grant(None, p), Some(Kind::Semaphore { limit: 2 }));
        assert_eq!(tag_after_grant(Some(&sem(2, 1, None, Some(5))), p), None);
        assert_eq!(tag_after_grant(Some(&sem(2, 0, None, None)), p), None);
        assert_eq!(tag_after_grant(Some(&sem(3, 0, None, None)), p), Some(Kind::Semaphore { limit: 2 }));
        // Readers after a writer whose lease ended.
        assert_eq!(tag_after_grant(Some(&rw(true, 0, None)), Want::Read), Some(Kind::ReadWrite { writer: false }));
        assert_eq!(tag_after_grant(Some(&rw(false, 3, None)), Want::Read), None);
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
