//! Where a cluster wait goes next: the router of one `LOCK.ACQUIRE … WAIT`
//! as it moves between nodes, a state machine without I/O (as redis-rs
//! keeps its routing apart from its connections). The driver
//! (`waiting.rs`) sends; it hands each failure here with `now`, and the
//! router answers with an [`Action`]: whether the connection is still good,
//! whether a grant may have been made (release it first), what the client
//! learned about the slot's owner and the nodes ([`Note`]s, for it to
//! record), and then re-issue where after which pause, give up, or fail.

use std::time::{Duration, Instant};

use redis::{RedisError, ServerErrorKind};

use crate::cluster::urls::{parse_addr, Addr};
use crate::retry;
use crate::wait;

/// Redirects one wait may follow before giving up: a slot moving back and
/// forth faster than this is not a cluster to wait in.
const MAX_REDIRECTS: usize = 16;

/// Pause before re-issuing a wait the node could not serve just now
/// (`TRYAGAIN`, `CLUSTERDOWN`, `UNBLOCKED`, a dropped connection).
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// What to do after an error reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// `MOVED`: the slot's owner is this node; re-issue there.
    Moved(Addr),
    /// `ASK`: re-issue once on this (importing) node, after `ASKING`.
    Ask(Addr),
    /// `TRYAGAIN`, `CLUSTERDOWN`, `UNBLOCKED` (and `LOADING`, `MASTERDOWN`):
    /// the node cannot serve it now; re-issue after a pause.
    Later,
    /// Anything else ends the wait with the error.
    Fail,
}

pub(crate) fn next_after(e: &RedisError) -> Next {
    if let Some((addr, _slot)) = e.redirect_node() {
        let Some(addr) = parse_addr(addr) else { return Next::Fail };
        return match e.kind() {
            redis::ErrorKind::Server(ServerErrorKind::Ask) => Next::Ask(addr),
            _ => Next::Moved(addr),
        };
    }
    match e.code() {
        Some("TRYAGAIN" | "CLUSTERDOWN" | "UNBLOCKED" | "LOADING" | "MASTERDOWN") => Next::Later,
        _ => Next::Fail,
    }
}

/// What a step of the wait learned, for the client to keep for later waits.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Note {
    /// This node owns the slot.
    Owner(Addr),
    /// This node is not (or no longer) known to own the slot.
    NotOwner(Addr),
    /// This node closed or refused a connection: its idle ones are stale.
    NodeDown(Addr),
}

/// After the notes, what the wait does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Then {
    /// Re-issue at [`Router::addr`] after this pause (zero: at once).
    Retry(Duration),
    /// The wait is over without a grant.
    GiveUp,
    /// End the wait with the error.
    Fail,
}

/// The router's answer to one failure.
#[derive(Debug)]
pub(crate) struct Action {
    /// The connection can serve another wait (pool it).
    pub(crate) keep_connection: bool,
    /// The wait may have been granted: release the token before anything else.
    pub(crate) release_first: bool,
    pub(crate) notes: Vec<Note>,
    pub(crate) then: Then,
}

/// The state of one wait as it moves between nodes.
#[derive(Debug)]
pub(crate) struct Router<'a> {
    seeds: &'a [Addr],
    deadline: Instant,
    addr: Addr,
    asking: bool,
    redirects: usize,
    /// Nodes that refused a connection or dropped one during this wait.
    down: Vec<Addr>,
    /// Times the wait started over (`settle`).
    settled: usize,
}

/// Where a wait starts: the slot's last known owner, else the first seed
/// not known to be down.
fn target(seeds: &[Addr], known: Option<&Addr>, down: &[Addr]) -> Option<Addr> {
    known.filter(|a| !down.contains(a)).or_else(|| seeds.iter().find(|s| !down.contains(s))).cloned()
}

impl<'a> Router<'a> {
    /// A wait of `left` from `now`; `known`: the slot's last known owner.
    /// `None` without any node to start from.
    pub(crate) fn new(seeds: &'a [Addr], known: Option<Addr>, now: Instant, left: Duration) -> Option<Self> {
        let deadline = now.checked_add(left).unwrap_or_else(|| now + Duration::from_secs(86_400 * 365));
        let addr = target(seeds, known.as_ref(), &[])?;
        Some(Router { seeds, deadline, addr, asking: false, redirects: 0, down: Vec::new(), settled: 0 })
    }

    /// The node to send to.
    pub(crate) fn addr(&self) -> &Addr {
        &self.addr
    }

    /// Whether to send `ASKING` first.
    pub(crate) fn asking(&self) -> bool {
        self.asking
    }

    pub(crate) fn left(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// The wait was granted at [`addr`](Router::addr): its owner, unless
    /// reached by `ASK`.
    pub(crate) fn granted(&self) -> Option<Note> {
        (!self.asking).then(|| Note::Owner(self.addr.clone()))
    }

    /// No connection to [`addr`](Router::addr) could be opened. `known`:
    /// the slot's owner as the client knows it now; `jitter` uniform in
    /// [0, 1).
    pub(crate) fn unreachable(&mut self, now: Instant, jitter: f64, mut known: Option<Addr>) -> Action {
        let mut notes = Vec::new();
        let then = if self.node_down(&mut known, &mut notes) {
            Then::Retry(Duration::ZERO)
        } else {
            self.settle(now, jitter, &mut known, &mut notes)
        };
        Action { keep_connection: false, release_first: false, notes, then }
    }

    /// The wait failed with `e` on a connection (`reused`: an idle one
    /// from the pool).
    pub(crate) fn failed(
        &mut self,
        e: &RedisError,
        reused: bool,
        now: Instant,
        jitter: f64,
        mut known: Option<Addr>,
    ) -> Action {
        let mut notes = Vec::new();
        let (keep_connection, release_first, then) = match next_after(e) {
            n @ (Next::Moved(_) | Next::Ask(_)) => {
                let then = if self.redirect(n, &mut known, &mut notes) {
                    Then::Retry(Duration::ZERO)
                } else {
                    self.settle(now, jitter, &mut known, &mut notes)
                };
                (true, false, then)
            }
            Next::Later => (true, false, self.pause(now)),
            Next::Fail if !wait::outcome_unknown(e) => (false, false, Then::Fail),
            Next::Fail if wait::stale(e, reused) => {
                notes.push(Note::NodeDown(self.addr.clone()));
                (false, true, Then::Retry(Duration::ZERO))
            }
            Next::Fail if e.is_timeout() => (false, true, Then::Fail),
            // A dropped connection (a failover?): on to another node.
            Next::Fail => {
                let then = if self.node_down(&mut known, &mut notes) {
                    self.pause(now)
                } else {
                    self.settle(now, jitter, &mut known, &mut notes)
                };
                (false, true, then)
            }
        };
        Action { keep_connection, release_first, notes, then }
    }

    fn forget_owner(&self, known: &mut Option<Addr>, notes: &mut Vec<Note>) {
        notes.push(Note::NotOwner(self.addr.clone()));
        if known.as_ref() == Some(&self.addr) {
            *known = None;
        }
    }

    /// Follows a redirect; false when there have been too many.
    fn redirect(&mut self, next: Next, known: &mut Option<Addr>, notes: &mut Vec<Note>) -> bool {
        self.redirects += 1;
        match next {
            Next::Moved(a) => {
                notes.push(Note::Owner(a.clone()));
                *known = Some(a.clone());
                self.addr = a;
                self.asking = false;
            }
            Next::Ask(a) => {
                self.addr = a;
                self.asking = true;
            }
            Next::Later | Next::Fail => {}
        }
        self.redirects <= MAX_REDIRECTS
    }

    /// The node at `addr` is unreachable: start again from another; false
    /// when none is left.
    fn node_down(&mut self, known: &mut Option<Addr>, notes: &mut Vec<Note>) -> bool {
        self.forget_owner(known, notes);
        notes.push(Note::NodeDown(self.addr.clone()));
        self.down.push(self.addr.clone());
        self.asking = false;
        match target(self.seeds, known.as_ref(), &self.down) {
            Some(a) => {
                self.addr = a;
                true
            }
            None => false,
        }
    }

    /// Too many redirects, or no node left to try: the topology is
    /// changing under the wait (a failover in progress). Start again from
    /// the seeds after a growing pause, until the wait is over.
    fn settle(&mut self, now: Instant, jitter: f64, known: &mut Option<Addr>, notes: &mut Vec<Note>) -> Then {
        let left = self.left(now);
        if left.is_zero() {
            return Then::GiveUp;
        }
        let pause = retry::pause(self.settled, jitter).min(left);
        self.settled += 1;
        self.forget_owner(known, notes);
        self.redirects = 0;
        self.down.clear();
        self.asking = false;
        match target(self.seeds, known.as_ref(), &[]) {
            Some(a) => {
                self.addr = a;
                Then::Retry(pause)
            }
            None => Then::GiveUp,
        }
    }

    /// A pause before re-issuing, cut to the deadline, until the wait is over.
    fn pause(&self, now: Instant) -> Then {
        let left = self.left(now);
        if left.is_zero() {
            return Then::GiveUp;
        }
        Then::Retry(RETRY_PAUSE.min(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(line: &str) -> RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(redis::Value::extract_error).unwrap_err()
    }

    fn node(port: u16) -> Addr {
        ("127.0.0.1".into(), port)
    }

    #[test]
    fn wait_errors_are_followed_or_retried() {
        assert_eq!(next_after(&server("MOVED 3999 127.0.0.1:6381")), Next::Moved(("127.0.0.1".into(), 6381)));
        assert_eq!(next_after(&server("ASK 3999 127.0.0.1:6382")), Next::Ask(("127.0.0.1".into(), 6382)));
        assert_eq!(next_after(&server("TRYAGAIN Multiple keys request during rehashing of slot")), Next::Later);
        assert_eq!(next_after(&server("CLUSTERDOWN The cluster is down")), Next::Later);
        assert_eq!(next_after(&server("UNBLOCKED client unblocked via CLIENT UNBLOCK")), Next::Later);
        assert_eq!(next_after(&server("ERR syntax error")), Next::Fail);
    }

    #[test]
    fn a_wait_follows_redirects_and_moves_on_from_dead_nodes() {
        let seeds = [node(1), node(2)];
        let t0 = Instant::now();
        let mut r = Router::new(&seeds, None, t0, Duration::from_secs(1)).unwrap();
        assert_eq!(r.addr(), &node(1), "no known owner: the first seed");
        let a = r.failed(&server("MOVED 7 127.0.0.1:3"), false, t0, 0.5, None);
        assert_eq!((a.keep_connection, a.release_first, &a.then), (true, false, &Then::Retry(Duration::ZERO)));
        assert_eq!(a.notes, [Note::Owner(node(3))]);
        assert_eq!((r.addr(), r.asking()), (&node(3), false));
        r.failed(&server("ASK 7 127.0.0.1:4"), false, t0, 0.5, Some(node(3)));
        assert_eq!((r.addr(), r.asking()), (&node(4), true));
        assert_eq!(r.granted(), None, "an ASK target does not own the slot yet");
        // A dropped connection: maybe granted, so released first; on to the next node.
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let a = r.failed(&reset, false, t0, 0.5, Some(node(3)));
        assert!(!a.keep_connection && a.release_first);
        assert_eq!(a.notes, [Note::NotOwner(node(4)), Note::NodeDown(node(4))]);
        assert_eq!((r.addr(), &a.then), (&node(3), &Then::Retry(RETRY_PAUSE)));
        let a = r.failed(&server("TRYAGAIN busy"), false, t0 + Duration::from_millis(990), 0.5, Some(node(3)));
        assert_eq!(a.then, Then::Retry(Duration::from_millis(10)), "cut to the deadline");
        let a = r.failed(&server("TRYAGAIN busy"), false, t0 + Duration::from_secs(1), 0.5, Some(node(3)));
        assert_eq!(a.then, Then::GiveUp);
        assert_eq!(r.failed(&server("ERR syntax error"), false, t0, 0.5, None).then, Then::Fail);
    }

    #[test]
    fn with_every_node_down_a_wait_starts_over_from_the_seeds_after_a_pause() {
        let seeds = [node(1), node(2)];
        let t0 = Instant::now();
        let mut r = Router::new(&seeds, Some(node(9)), t0, Duration::from_secs(10)).unwrap();
        assert_eq!(r.addr(), &node(9), "the known owner first");
        assert_eq!(r.unreachable(t0, 0.5, Some(node(9))).then, Then::Retry(Duration::ZERO));
        assert_eq!(r.addr(), &node(1));
        r.unreachable(t0, 0.5, None);
        assert_eq!(r.addr(), &node(2));
        let a = r.unreachable(t0, 0.5, None);
        assert_eq!(a.then, Then::Retry(retry::pause(0, 0.5)));
        assert_eq!(r.addr(), &node(1), "from the seeds again");
        for _ in 0..=MAX_REDIRECTS {
            r.failed(&server("MOVED 7 127.0.0.1:1"), false, t0, 0.5, None);
        }
        assert_eq!(r.redirects, 0, "too many redirects start over too");
        assert_eq!(r.settled, 2);
    }
}
