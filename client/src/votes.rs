//! A quorum lock's votes (docs/sessions.md, "Quorum locks"): on each of
//! its servers, its grant is held by that server's session, by a lease of
//! its own, or not at all. The lock is held while a majority of votes are
//! alive, and surely valid until the quorum-th latest of their ends, less
//! the drift allowance. Pure: every reading takes `now` or reads the
//! sessions' own state; the quorum client (`quorum/sessions.rs`) decides what
//! to send, and applies the answers here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attach::SessionLease;
use crate::loss::LossReason;

/// One server's vote for a lock.
#[derive(Clone, Debug)]
pub(crate) enum Vote {
    /// No grant there: refused, failed, or its hold ended there.
    None,
    /// Held there by its own lease, surely until this instant (the sending
    /// of its last grant or renewal there, plus the TTL).
    Own(Instant),
    /// Held there by that server's session: its validity is the session's,
    /// and the session's end is the vote's.
    Session(Arc<SessionLease>),
    /// Not counted, on a server with sessions: asked with this session
    /// and unanswered when the acquire was decided, or refused there since
    /// (its key not ours; taken again with that server's session where the
    /// quorum takes votes again). A renewal there that says the key is
    /// ours makes it this session's.
    Pending(Arc<SessionLease>),
}

impl Vote {
    /// Until when the vote surely holds; `None`: no vote (never granted,
    /// dropped, or its session ended).
    fn until(&self) -> Option<Instant> {
        match self {
            Vote::None | Vote::Pending(_) => None,
            Vote::Own(t) => Some(*t),
            Vote::Session(s) if s.ended() => None,
            Vote::Session(s) => Some(s.valid_until()),
        }
    }

    /// Whether the vote needs to be taken again at `now` (none, or a
    /// session that ended or whose validity ran out).
    pub(crate) fn gone(&self, now: Instant) -> bool {
        match self {
            Vote::None | Vote::Pending(_) => true,
            Vote::Own(t) => *t <= now,
            Vote::Session(s) => !s.usable(now),
        }
    }
}

/// A quorum lock's votes, one per server (indexed like the client's).
#[derive(Debug)]
pub(crate) struct Votes {
    slots: Vec<Vote>,
    quorum: usize,
    drift: Duration,
    /// The TTL of its sessions, for a vote taken again with one.
    pub(crate) session_ttl: Duration,
    /// When its session-held votes are next checked one by one (`None`:
    /// never).
    pub(crate) next_check: Option<Instant>,
}

impl Votes {
    /// Votes of a grant, counted `quorum` strong; each held session's
    /// count of locks is its own business (see [`Votes::hold_all`]).
    pub(crate) fn new(
        slots: Vec<Vote>,
        quorum: usize,
        drift: Duration,
        session_ttl: Duration,
        next_check: Option<Instant>,
    ) -> Votes {
        Votes { slots, quorum, drift, session_ttl, next_check }
    }

    pub(crate) fn slots(&self) -> &[Vote] {
        &self.slots
    }

    /// The sessions that hold some of its votes.
    pub(crate) fn sessions(&self) -> impl Iterator<Item = &Arc<SessionLease>> {
        self.slots.iter().filter_map(|v| match v {
            Vote::Session(s) => Some(s),
            _ => None,
        })
    }

    /// Counts the lock in each of its sessions (`on`), or out of them.
    pub(crate) fn hold_all(&self, on: bool) {
        for s in self.sessions() {
            if on {
                s.hold()
            } else {
                s.let_go()
            }
        }
    }

    /// Replaces server `i`'s vote, keeping the sessions' counts of held
    /// locks right; `Some(lease)`: a session it is newly held by.
    pub(crate) fn set(&mut self, i: usize, vote: Vote) -> Option<Arc<SessionLease>> {
        let slot = self.slots.get_mut(i)?;
        let same = matches!((&*slot, &vote), (Vote::Session(a), Vote::Session(b)) if Arc::ptr_eq(a, b));
        if same {
            return None;
        }
        if let Vote::Session(old) = &*slot {
            old.let_go();
        }
        *slot = vote;
        match slot {
            Vote::Session(new) => {
                new.hold();
                Some(new.clone())
            }
            _ => None,
        }
    }

    /// Whether some vote is not known yet (`Vote::Pending`): the lock's
    /// first renewal, which learns it, is then due at once.
    pub(crate) fn unsure(&self) -> bool {
        self.slots.iter().any(|v| matches!(v, Vote::Pending(_)))
    }

    /// Votes alive: not dropped, and not of an ended session.
    pub(crate) fn alive(&self) -> usize {
        self.slots.iter().filter(|v| v.until().is_some()).count()
    }

    /// Until when a majority surely holds it: the quorum-th latest end of
    /// a vote, less the drift allowance (`None`: fewer votes than that).
    pub(crate) fn until(&self) -> Option<Instant> {
        let mut ends: Vec<Instant> = self.slots.iter().filter_map(Vote::until).collect();
        ends.sort_unstable_by(|a, b| b.cmp(a));
        let end = *ends.get(self.quorum.checked_sub(1)?)?;
        Some(end.checked_sub(self.drift).unwrap_or(end))
    }

    /// Why the lock is lost whatever the time, if it is: fewer votes alive
    /// than the quorum. A session's end among them names the loss, as the
    /// server told it (the other votes were refused by their servers).
    pub(crate) fn lost(&self) -> Option<LossReason> {
        if self.alive() >= self.quorum {
            return None;
        }
        let ended = self.slots.iter().find_map(|v| match v {
            Vote::Session(s) | Vote::Pending(s) => s.end_reason(),
            _ => None,
        });
        Some(ended.unwrap_or(LossReason::NotOwner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_majority_of_live_votes_holds_the_lock_until_its_quorum_th_end() {
        let t0 = Instant::now();
        let s = |sent: Instant| Arc::new(SessionLease::new("id".into(), ms(300), sent));
        let (a, b) = (s(t0), s(t0 + ms(100)));
        let slots = vec![Vote::Session(a.clone()), Vote::Own(t0 + ms(250)), Vote::Session(b.clone())];
        let mut v = Votes::new(slots, 2, ms(10), ms(300), None);
        v.hold_all(true);
        assert_eq!((a.held(), b.held()), (1, 1));
        // Ends: 300, 250, 400: the second latest, less the drift.
        assert_eq!(v.until(), Some(t0 + ms(290)));
        assert_eq!((v.alive(), v.lost()), (3, None));
        // One session ends: its vote goes, a majority is left.
        b.end(LossReason::SessionExpired, None);
        assert_eq!((v.alive(), v.lost()), (2, None));
        assert_eq!(v.until(), Some(t0 + ms(240)));
        assert!(v.slots()[2].gone(t0) && !v.slots()[0].gone(t0));
        // Taken again with a new session: counted in it, out of the old one.
        let c = s(t0 + ms(200));
        assert!(v.set(2, Vote::Session(c.clone())).is_some());
        assert_eq!((b.held(), c.held()), (0, 1));
        assert!(v.set(2, Vote::Session(c.clone())).is_none(), "the same session: nothing new");
        assert_eq!(c.held(), 1);
        // Two votes gone: lost, as its session's end.
        a.end(LossReason::SessionRevoked, None);
        v.set(1, Vote::None);
        assert_eq!(v.lost(), Some(LossReason::SessionRevoked), "the first ended vote's end");
        assert_eq!(v.until(), None);
        // Refused votes alone: not the owner.
        let mut w = Votes::new(vec![Vote::Own(t0), Vote::None, Vote::None], 2, ms(0), ms(300), None);
        assert_eq!(w.lost(), Some(LossReason::NotOwner));
        w.set(1, Vote::Own(t0 + ms(5)));
        assert_eq!((w.lost(), w.until()), (None, Some(t0)));
    }
}
