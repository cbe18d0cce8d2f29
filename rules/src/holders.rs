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

/// One holder: its token and the end of its lease (Unix ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: Vec<u8>,
    pub deadline: i64,
}

/// A stored semaphore or read-write lock, holders in lease order (earliest
/// end first, as the sorted set keeps them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holders {
    pub kind: Kind,
    pub holders: Vec<Holder>,
}

/// The key is not one of this family's (another type, a sorted set without
/// a valid tag, or the other family).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotOurs;

impl Holders {
    /// Reads a sorted set's members (score order). A score that is not an
    /// integer is read as its integer part (only a hand-edited set has one).
    pub fn parse(members: impl IntoIterator<Item = (Vec<u8>, f64)>) -> Result<Holders, NotOurs> {
        let mut kind = None;
        let mut holders = Vec::new();
        for (member, score) in members {
            if member == TAG {
                kind = Some(Kind::from_score(score).ok_or(NotOurs)?);
            } else {
                // `as` saturates: ±inf become the i64 bounds, NaN cannot be stored.
                holders.push(Holder { token: member, deadline: score as i64 });
            }
        }
        // Equal deadlines sort by member, as the sorted set does: keep its order.
        Ok(Holders { kind: kind.ok_or(NotOurs)?, holders })
    }

    /// Removes and returns the holders whose lease ended before `now`.
    pub fn prune(&mut self, now: i64) -> Vec<Holder> {
        let (live, expired): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.holders).into_iter().partition(|h| h.deadline >= now);
        self.holders = live;
        expired
    }

    pub fn holds(&self, token: &[u8]) -> bool {
        self.holders.iter().any(|h| h.token == token)
    }

    /// The earliest lease end: when the next permit frees up by itself.
    pub fn first_deadline(&self) -> Option<i64> {
        self.holders.iter().map(|h| h.deadline).min()
    }

    /// The latest lease end: the key's own expiry (it must not end earlier).
    pub fn last_deadline(&self) -> Option<i64> {
        self.holders.iter().map(|h| h.deadline).max()
    }

    /// Adds `token` (a grant `admit` allowed), or moves its lease (renew).
    pub fn put(&mut self, token: &[u8], deadline: i64) {
        self.holders.retain(|h| h.token != token);
        let at = self
            .holders
            .iter()
            .position(|h| (h.deadline, h.token.as_slice()) > (deadline, token))
            .unwrap_or(self.holders.len());
        self.holders.insert(at, Holder { token: token.to_vec(), deadline });
    }

    /// Removes `token`; whether it held.
    pub fn remove(&mut self, token: &[u8]) -> bool {
        let before = self.holders.len();
        self.holders.retain(|h| h.token != token);
        self.holders.len() != before
    }
}

/// The decision on an acquirer, made on the live holders (after
/// [`Holders::prune`]); `None` is a free key.
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

pub fn admit(live: Option<&Holders>, want: Want, token: &[u8]) -> Admit {
    // A key with no live holder is free, whatever it was: its tag goes with
    // its last holder.
    let Some(h) = live.filter(|h| !h.holders.is_empty()) else { return Admit::Grant };
    if h.kind.family() != want.family() {
        return Admit::WrongFamily;
    }
    if let (Kind::Semaphore { limit: stored }, Want::Permit { limit }) = (h.kind, want) {
        if stored != limit {
            return Admit::LimitDiffers(stored);
        }
    }
    if h.holds(token) {
        return Admit::AlreadyHolds;
    }
    let fits = match (h.kind, want) {
        (Kind::Semaphore { limit }, _) => (h.holders.len() as u64) < limit,
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

/// The holders after `want`'s grant to `token` until `deadline`.
pub fn granted(live: Option<Holders>, want: Want, token: &[u8], deadline: i64) -> Holders {
    let mut h = live.filter(|h| !h.holders.is_empty()).unwrap_or(Holders { kind: want.kind(), holders: Vec::new() });
    h.put(token, deadline);
    h
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sem(limit: u64, holders: &[(&str, i64)]) -> Holders {
        let mut h = Holders { kind: Kind::Semaphore { limit }, holders: Vec::new() };
        for (t, d) in holders {
            h.put(t.as_bytes(), *d);
        }
        h
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
    fn parse_needs_exactly_a_valid_tag() {
        let m = |v: &[(&str, f64)]| Holders::parse(v.iter().map(|(t, s)| (t.as_bytes().to_vec(), *s)));
        assert_eq!(m(&[("", 3.0), ("a", 10.0), ("b", 20.0)]), Ok(sem(3, &[("a", 10), ("b", 20)])));
        assert_eq!(m(&[("a", 10.0)]), Err(NotOurs));
        assert_eq!(m(&[("", 0.5), ("a", 10.0)]), Err(NotOurs));
        assert_eq!(m(&[("", -1.0)]).map(|h| h.kind), Ok(Kind::ReadWrite { writer: true }));
        assert_eq!(m(&[("", 2.0), ("a", f64::INFINITY)]).map(|h| h.holders[0].deadline), Ok(i64::MAX));
    }

    #[test]
    fn a_lease_is_held_through_its_last_millisecond() {
        let mut h = sem(3, &[("a", 100), ("b", 101), ("c", 200)]);
        assert!(h.prune(100).is_empty());
        let gone = h.prune(101);
        assert_eq!(gone, vec![Holder { token: b"a".to_vec(), deadline: 100 }]);
        assert_eq!(h, sem(3, &[("b", 101), ("c", 200)]));
        assert_eq!((h.first_deadline(), h.last_deadline()), (Some(101), Some(200)));
    }

    #[test]
    fn a_semaphore_admits_up_to_its_limit_and_names_a_different_one() {
        let p = Want::Permit { limit: 2 };
        assert_eq!(admit(None, p, b"a"), Admit::Grant);
        let one = sem(2, &[("a", 10)]);
        assert_eq!(admit(Some(&one), p, b"b"), Admit::Grant);
        assert_eq!(admit(Some(&one), p, b"a"), Admit::AlreadyHolds);
        let full = sem(2, &[("a", 10), ("b", 10)]);
        assert_eq!(admit(Some(&full), p, b"c"), Admit::Wait);
        assert_eq!(admit(Some(&full), Want::Permit { limit: 3 }, b"c"), Admit::LimitDiffers(2));
        assert_eq!(admit(Some(&full), Want::Read, b"c"), Admit::WrongFamily);
        // No live holder: free, whatever the tag said.
        assert_eq!(admit(Some(&sem(2, &[])), Want::Write, b"c"), Admit::Grant);
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let readers = granted(granted(None, Want::Read, b"r1", 10).into(), Want::Read, b"r2", 20);
        assert_eq!(readers.kind, Kind::ReadWrite { writer: false });
        assert_eq!(admit(Some(&readers), Want::Read, b"r3"), Admit::Grant);
        assert_eq!(admit(Some(&readers), Want::Write, b"w"), Admit::Wait);
        assert_eq!(admit(Some(&readers), Want::Permit { limit: 1 }, b"w"), Admit::WrongFamily);
        let writer = granted(None, Want::Write, b"w", 10);
        assert_eq!(writer.kind, Kind::ReadWrite { writer: true });
        assert_eq!(admit(Some(&writer), Want::Read, b"r"), Admit::Wait);
        assert_eq!(admit(Some(&writer), Want::Write, b"w2"), Admit::Wait);
        assert_eq!(admit(Some(&writer), Want::Write, b"w"), Admit::AlreadyHolds);
    }

    #[test]
    fn holders_keep_the_sorted_sets_order() {
        let mut h = sem(5, &[("b", 10), ("a", 10), ("c", 5)]);
        assert_eq!(h.holders.iter().map(|x| x.token.as_slice()).collect::<Vec<_>>(), [&b"c"[..], b"a", b"b"]);
        h.put(b"c", 11);
        assert_eq!(h.holders.iter().map(|x| x.token.as_slice()).collect::<Vec<_>>(), [&b"a"[..], b"b", b"c"]);
        assert!(h.remove(b"a") && !h.remove(b"a"));
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
    }
}
