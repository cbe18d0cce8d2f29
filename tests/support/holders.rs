//! Semaphores and read-write locks in tests: plain calls, the stored
//! sorted set, waiters on threads, and a randomized run against a model.
//!
//! The model (`Model`) is written from the README's rules, not from the
//! module's code: at most `limit` holders (a semaphore), readers together or
//! one writer (a read-write lock), one FIFO queue in which nobody is passed,
//! a lease per holder that ends at its own deadline.
//!
//! **Time.** The test shares the server's clock. Events the server makes by
//! itself — a lease that ends while someone waits (the queue's timer), a
//! wait that times out — happen at known times: a lease end `d` is read
//! from the stored score, a timeout from when the wait was sent and seen
//! blocked. The driver sends a command only when no such event is due
//! within [`BUDGET_MS`]; otherwise it sleeps past the event and sends a
//! `PING` (*barrier*): the server runs every module timer that is due before
//! it reads the next command, so once the `PONG` is back, every event due
//! before the `PING` has happened. The model then applies them in due
//! order and the driver waits for exactly the replies they cause. A step
//! whose command took so long that an event fell due meanwhile (a loaded
//! machine) cannot be ordered; it is *resynchronised* from what the server
//! then shows (replies, stored set), its invariants still checked, and the
//! run asserts that such steps stay rare.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;
use redis_lock_harness::Server;

/// A reply, with errors as `"CODE detail"`.
#[derive(Clone, Debug, PartialEq)]
pub enum R {
    Int(i64),
    Nil,
    Err(String),
    Other(Value),
}

fn err_text(e: &redis::RedisError) -> String {
    format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""))
}

fn reply_of(r: redis::RedisResult<Value>) -> R {
    match r {
        Ok(Value::Int(n)) => R::Int(n),
        Ok(Value::Nil) => R::Nil,
        Ok(Value::ServerError(e)) => R::Err(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        Ok(v) => R::Other(v),
        Err(e) => R::Err(err_text(&e)),
    }
}

/// Runs a command given as words.
pub fn call(c: &mut redis::Connection, args: &[&str]) -> R {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    reply_of(cmd.query::<Value>(c))
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_millis() as i64
}

/// The stored sorted set: the tag's score (if any) and the holders with
/// their lease ends, in score order.
pub type Stored = (Option<i64>, Vec<(String, i64)>);

/// The key's [`Stored`] set.
pub fn stored(c: &mut redis::Connection, key: &str) -> Stored {
    parse_stored(zrange(key).query(c).expect("zrange"))
}

fn zrange(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("ZRANGE");
    cmd.arg(key).arg(0).arg(-1).arg("WITHSCORES");
    cmd
}

/// [`stored`] and `then`'s reply, read in one `EXEC` (no timer runs
/// between them).
fn stored_and<T: redis::FromRedisValue>(c: &mut redis::Connection, key: &str, then: redis::Cmd) -> (Stored, T) {
    let (flat, t): (Vec<(Vec<u8>, f64)>, T) =
        redis::pipe().atomic().add_command(zrange(key)).add_command(then).query(c).expect("zrange in an EXEC");
    (parse_stored(flat), t)
}

/// [`stored`] and the key's `PEXPIRETIME`, read in one `EXEC` (a grant by
/// the queue's timer cannot fall between the two reads).
pub fn stored_and_expiry(c: &mut redis::Connection, key: &str) -> (Stored, i64) {
    let mut exp = redis::cmd("PEXPIRETIME");
    exp.arg(key);
    stored_and(c, key, exp)
}

/// `INFO lock`'s `lock_waiting` and [`stored`], read in one `EXEC`.
fn waiting_and_stored(c: &mut redis::Connection, key: &str) -> (usize, Vec<(String, i64)>) {
    let mut info = redis::cmd("INFO");
    info.arg("lock");
    let (stored, info): (Stored, String) = stored_and(c, key, info);
    let waiting = super::parse_lock_info(&info).get("waiting").and_then(|v| v.parse().ok()).expect("lock_waiting");
    (waiting, stored.1)
}

fn parse_stored(flat: Vec<(Vec<u8>, f64)>) -> Stored {
    let mut tag = None;
    let mut holders = Vec::new();
    for (member, score) in flat {
        if member.is_empty() {
            tag = Some(score as i64);
        } else {
            holders.push((String::from_utf8(member).expect("utf-8 token"), score as i64));
        }
    }
    (tag, holders)
}

pub fn pexpiretime(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).expect("pexpiretime")
}

pub fn lock_info(c: &mut redis::Connection, name: &str) -> u64 {
    super::info_field(c, name)
}

/// Starts `args` on a new connection in a thread; its reply arrives on the
/// channel with its tag and the instant it arrived.
pub fn spawn_call(
    server: &Server,
    tag: &str,
    args: &[&str],
    tx: Sender<(String, R, Instant)>,
) -> thread::JoinHandle<()> {
    let mut c = server.conn();
    let tag = tag.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    thread::spawn(move || {
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = call(&mut c, &words);
        let _ = tx.send((tag, r, Instant::now()));
    })
}

// --- the model ----------------------------------------------------------

/// Which commands a run drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Semaphore { limit: u64 },
    ReadWrite,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Permit,
    Read,
    Write,
}

#[derive(Clone, Debug)]
struct Holder {
    token: String,
    mode: Mode,
    ttl: i64,
    /// The lease end; exact once read from the stored set (`known`).
    deadline: i64,
    known: bool,
    /// Bounds the stored lease end must lie in, until it is known.
    bounds: (i64, i64),
    /// Whose it is: an actor that may renew or release it, or nobody (its
    /// client died: the permit frees at its lease end).
    owner: Option<usize>,
    /// The lease end (+1 ms) that freed its place, for a queued grant.
    freed_at: Option<i64>,
}

impl Holder {
    /// When the server can end its lease: one ms after the lease end (a
    /// window while the end is not read yet).
    fn end_window(&self) -> (i64, i64) {
        if self.known {
            (self.deadline + 1, self.deadline + 1)
        } else {
            (self.bounds.0 + 1, self.bounds.1 + 1)
        }
    }

    fn earliest_end(&self) -> i64 {
        self.end_window().0
    }
}

#[derive(Clone, Debug)]
struct Waiter {
    actor: usize,
    token: String,
    mode: Mode,
    ttl: i64,
    fence: bool,
    /// When its timeout can fall due: [sent + timeout, seen blocked + timeout].
    timeout: Option<(i64, i64)>,
}

impl Holder {
    /// Waiter `w` granted, its lease end `d` read from the server (a
    /// redis-cli waiter exits once granted: a dead holder).
    fn seen(w: Waiter, d: i64) -> Holder {
        let owner = (w.actor < CHILD).then_some(w.actor);
        Holder {
            token: w.token,
            mode: w.mode,
            ttl: w.ttl,
            deadline: d,
            known: true,
            bounds: (d, d),
            owner,
            freed_at: None,
        }
    }
}

#[derive(Clone, Debug)]
struct Model {
    family: Family,
    holders: Vec<Holder>,
    /// Holders whose lease ended and that no write has pruned yet: they may
    /// still be in the stored set.
    maybe: Vec<String>,
    queue: VecDeque<Waiter>,
}

/// What an event or command does to a waiter.
#[derive(Clone, Debug)]
enum Outcome {
    /// Granted at or after `at` (Unix ms, the event that freed its place;
    /// `lease_end`: that event was a lease ending).
    Granted {
        waiter: Waiter,
        at: i64,
        lease_end: bool,
    },
    TimedOut {
        waiter: Waiter,
    },
}

impl Model {
    fn admits(&self, mode: Mode) -> bool {
        if self.holders.is_empty() {
            return true;
        }
        match (self.family, mode) {
            (Family::Semaphore { limit }, _) => (self.holders.len() as u64) < limit,
            (Family::ReadWrite, Mode::Read) => self.holders.iter().all(|h| h.mode == Mode::Read),
            _ => false,
        }
    }

    fn grant(&mut self, token: &str, mode: Mode, ttl: i64, bounds: (i64, i64), owner: Option<usize>) {
        self.holders.push(Holder {
            token: token.to_string(),
            mode,
            ttl,
            deadline: bounds.1 + ttl,
            known: false,
            bounds: (bounds.0 + ttl, bounds.1 + ttl),
            owner,
            freed_at: None,
        });
    }

    /// Serves the queue's head while it is admitted (a grant at `at`,
    /// seen by `upto`). A redis-cli waiter exits once granted: a dead holder.
    fn serve(&mut self, at: i64, upto: i64, lease_end: bool, out: &mut Vec<Outcome>) {
        while let Some(w) = self.queue.front() {
            if !self.admits(w.mode) {
                return;
            }
            let w = self.queue.pop_front().expect("head");
            self.grant(&w.token, w.mode, w.ttl, (at, upto), (w.actor < CHILD).then_some(w.actor));
            if lease_end {
                if let Some(h) = self.holders.last_mut() {
                    h.freed_at = Some(at);
                }
            }
            out.push(Outcome::Granted { waiter: w, at, lease_end });
        }
    }

    /// A write command at the server pruned every ended lease.
    fn pruned(&mut self) {
        self.maybe.clear();
    }

    /// When the events the server makes by itself can fall due: a lease
    /// end (one ms after it; a window while the end is not read yet), a
    /// wait's timeout.
    fn event_windows(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        let leases = self.holders.iter().map(Holder::end_window);
        leases.chain(self.queue.iter().filter_map(|w| w.timeout))
    }

    /// The window of the next event.
    fn next_event(&self) -> Option<(i64, i64)> {
        self.event_windows().min()
    }

    fn events_between(&self, from: i64, to: i64) -> bool {
        self.event_windows().any(|(lo, hi)| lo <= to && hi >= from)
    }

    /// Applies every event due by `t`, in due order. `Err` when two
    /// events' windows are too close to order. `pong`: when the barrier's
    /// reply came back, the latest a timer due by `t` can have run.
    fn advance(&mut self, t: i64, pong: i64, out: &mut Vec<Outcome>) -> Result<(), ()> {
        loop {
            let lease = self.holders.iter().filter(|h| h.deadline < t).map(|h| (h.deadline + 1, h.known)).min();
            let timeout = self
                .queue
                .iter()
                .enumerate()
                .filter_map(|(i, w)| w.timeout.map(|(lo, hi)| (lo, hi, i)))
                .filter(|&(lo, _, _)| lo <= t)
                .min();
            match (lease, timeout) {
                (None, None) => return Ok(()),
                (Some((due, known)), to) if to.is_none_or(|(lo, _, _)| due < lo - 2) => {
                    if !known {
                        return Err(());
                    }
                    // Ends every lease due by then; a queue's timer prunes them.
                    let (ended, live): (Vec<_>, Vec<_>) =
                        std::mem::take(&mut self.holders).into_iter().partition(|h| h.deadline < due);
                    self.holders = live;
                    self.maybe.extend(ended.into_iter().map(|h| h.token));
                    if !self.queue.is_empty() {
                        self.pruned();
                        self.serve(due, t, true, out);
                    }
                }
                (lease, Some((lo, hi, i))) => {
                    // A timer the server runs late (a loaded machine: as
                    // late as our PING) settles every lease ended by then,
                    // not only the one it was due for; a place freed so can
                    // go to this waiter before its own timeout runs. (Seen
                    // on valkey 8.1: a lease end due 352 run at 366 also
                    // ended one due 363 and granted a waiter whose timeout
                    // was due by 360.) So a timeout is certain only while no
                    // lease can end by the time the PONG came back.
                    let overtaken = self.holders.iter().any(|h| h.earliest_end() <= pong + 1);
                    if lease.is_some_and(|(due, _)| due <= hi + 2) || hi > t || overtaken {
                        return Err(());
                    }
                    let w = self.queue.remove(i).expect("waiter");
                    out.push(Outcome::TimedOut { waiter: w });
                    if i == 0 {
                        self.serve(lo, t, false, out);
                    }
                }
                (Some(_), None) => unreachable!(),
            }
        }
    }
}

// --- actors --------------------------------------------------------------

/// A message from an actor: its id, the reply, and its connection's client
/// id now (changed after it was killed and reconnected).
struct Msg {
    actor: usize,
    reply: R,
    client_id: i64,
}

struct Actor {
    tx: Sender<Vec<String>>,
    client_id: i64,
    busy: bool,
}

fn start_actor(server: &Server, actor: usize, out: Sender<Msg>) -> Actor {
    let (tx, rx) = mpsc::channel::<Vec<String>>();
    let client = server.client();
    let mut c = client.get_connection().expect("connect");
    let client_id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).expect("client id");
    thread::spawn(move || {
        let mut client_id = client_id;
        for args in rx {
            let words: Vec<&str> = args.iter().map(String::as_str).collect();
            let reply = call(&mut c, &words);
            if matches!(&reply, R::Err(e) if !e.starts_with("ERR") && !e.starts_with("WRONGTYPE")) {
                // Killed (CLIENT KILL): a new connection, as a client would make.
                // (A server gone at the end of a failed test ends the actor.)
                let Ok(nc) = client.get_connection() else { return };
                c = nc;
                let Ok(id) = redis::cmd("CLIENT").arg("ID").query(&mut c) else { return };
                client_id = id;
            }
            if out.send(Msg { actor, reply, client_id }).is_err() {
                return;
            }
        }
    });
    Actor { tx, client_id, busy: false }
}

/// Actor ids from here up are `redis-cli` processes (killed with SIGKILL).
const CHILD: usize = 1000;

// --- the run -------------------------------------------------------------

/// No command is sent within this many ms of an event the server makes
/// by itself.
pub const BUDGET_MS: i64 = 25;

pub struct Report {
    pub ops: usize,
    pub resyncs: usize,
    pub timer_grants: usize,
    pub max_lateness_ms: i64,
    pub fences: usize,
}

struct Run<'a> {
    server: &'a Server,
    key: String,
    c: redis::Connection,
    model: Model,
    actors: Vec<Actor>,
    children: HashMap<usize, Child>,
    rx: Receiver<Msg>,
    tx: Sender<Msg>,
    /// Replies that arrived before the driver asked for them.
    early: Vec<Msg>,
    rng: StdRng,
    next_token: u64,
    last_fence: i64,
    report: Report,
    /// The stored set must have been pruned (a write ran since the last event).
    lateness: Vec<i64>,
    /// The waiter this step killed: the server may have granted it just
    /// before it saw the kill (then the step is late and `resync` finds
    /// it stored, a holder whose reply nobody read).
    killed: Option<Waiter>,
}

impl Run<'_> {
    fn acquire_args(&self, token: &str, mode: Mode, ttl: i64, fence: bool, wait: Option<i64>) -> Vec<String> {
        let mut a = match self.model.family {
            Family::Semaphore { limit } => {
                vec!["SEM.ACQUIRE".to_string(), self.key.clone(), token.to_string(), limit.to_string()]
            }
            Family::ReadWrite => vec![
                "RWLOCK.ACQUIRE".to_string(),
                self.key.clone(),
                token.to_string(),
                if mode == Mode::Read { "READ".into() } else { "WRITE".into() },
            ],
        };
        a.push(ttl.to_string());
        if fence {
            a.push("FENCE".into());
        }
        if let Some(t) = wait {
            a.push("WAIT".into());
            a.push(t.to_string());
        }
        a
    }

    fn prefix(&self) -> &'static str {
        match self.model.family {
            Family::Semaphore { .. } => "SEM.",
            Family::ReadWrite => "RWLOCK.",
        }
    }

    /// The next message of `actor`, keeping others for later.
    fn recv_from(&mut self, actor: usize) -> Msg {
        if let Some(i) = self.early.iter().position(|m| m.actor == actor) {
            return self.early.remove(i);
        }
        loop {
            let m = self
                .rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no reply from actor {actor}; model {:#?}", self.model));
            if m.actor == actor {
                return m;
            }
            self.early.push(m);
        }
    }

    /// A sync call on an idle actor.
    fn sync_call(&mut self, actor: usize, args: Vec<String>) -> R {
        self.actors[actor].tx.send(args).expect("actor alive");
        let m = self.recv_from(actor);
        self.actors[actor].client_id = m.client_id;
        m.reply
    }

    /// Every module timer due by the returned time has run (see the module doc;
    /// 3 ms for the timers' ms rounding and a check re-armed 1 ms later).
    /// Also returns when the PONG came back.
    fn barrier(&mut self) -> (i64, i64) {
        let t = now_ms();
        let _: String = redis::cmd("PING").query(&mut self.c).expect("ping");
        (t - 3, now_ms())
    }

    /// Sleeps past the events due soon, lets the server make them, and
    /// checks their outcomes. Returns false if they could not be ordered.
    fn settle(&mut self) -> bool {
        loop {
            let now = now_ms();
            match self.model.next_event() {
                Some((e, hi)) if e <= now + BUDGET_MS => {
                    let wait = (hi + 4 - now).max(0);
                    thread::sleep(Duration::from_millis(wait as u64));
                    let (t, pong) = self.barrier();
                    let mut out = Vec::new();
                    let ordered = self.model.advance(t, pong, &mut out);
                    // The events before one that could not be ordered did
                    // happen; their grants were made before the PONG came back.
                    self.expect_outcomes(out);
                    if ordered.is_err() {
                        return false;
                    }
                }
                _ => return true,
            }
        }
    }

    /// Waits for the replies `out` predicts and checks them.
    fn expect_outcomes(&mut self, out: Vec<Outcome>) {
        for o in out {
            match o {
                Outcome::Granted { waiter, at, lease_end } => {
                    let m = self.recv_waiter(waiter.actor);
                    // The grant was made before its reply arrived, however
                    // late a timer ran it (a reader freed by a killed writer
                    // is granted from a timer that can run after our PING).
                    let observed_by = now_ms();
                    self.check_grant_reply(
                        &m,
                        waiter.fence,
                        &format!("queued {} granted after an event at {at}", waiter.token),
                    );
                    self.report.timer_grants += usize::from(lease_end);
                    if let Some(h) = self.model.holders.iter_mut().find(|h| h.token == waiter.token) {
                        // Granted no earlier than the event that freed the place.
                        h.bounds = (at + h.ttl, observed_by.max(at) + 1 + h.ttl);
                    }
                }
                Outcome::TimedOut { waiter } => {
                    let m = self.recv_waiter(waiter.actor);
                    let want = if waiter.fence { R::Nil } else { R::Int(0) };
                    assert_eq!(m.reply, want, "{} timed out", waiter.token);
                }
            }
        }
    }

    fn recv_waiter(&mut self, actor: usize) -> Msg {
        let m = self.recv_from(actor);
        if actor >= CHILD {
            self.children.remove(&actor);
        } else {
            self.actors[actor].busy = false;
            self.actors[actor].client_id = m.client_id;
        }
        m
    }

    fn check_grant_reply(&mut self, m: &Msg, fence: bool, what: &str) {
        if fence {
            let R::Int(f) = m.reply else { panic!("{what}: expected a fence, got {:?}", m.reply) };
            assert!(f > self.last_fence, "{what}: fence {f} not above {}", self.last_fence);
            self.last_fence = f;
            self.report.fences += 1;
        } else {
            assert_eq!(m.reply, R::Int(1), "{what}");
        }
    }

    /// Compares the stored set with the model; learns lease ends.
    fn check_store(&mut self, what: &str) {
        let checked_from = now_ms();
        let ((tag, stored), exp) = stored_and_expiry(&mut self.c, &self.key);
        // A stored token the model still has in its queue: the server
        // granted that waiter before the model served it (on a loaded
        // machine a lease's end, a release and a grant can follow too
        // closely to order from here). Read the state from the server
        // instead; `resync` still checks the fences and that the holders
        // never exceed what the key admits.
        let early = stored.iter().any(|(t, _)| {
            let m = &self.model;
            !m.holders.iter().any(|h| &h.token == t) && !m.maybe.contains(t) && m.queue.iter().any(|w| &w.token == t)
        });
        if early {
            self.resync();
            return;
        }
        // An event that fell due before these reads may have changed the
        // set already: the replies of a step's grants can come from a timer
        // the server ran late, and waiting for them can outlast the next
        // lease end (valkey 8.1 at load 15: a grant's reply 50 ms after
        // the step, and the lease that ended meanwhile was pruned before
        // the set was read). Judged from what the server shows instead.
        if self.model.next_event().is_some_and(|(lo, _)| lo <= now_ms() + 3) {
            self.resync();
            return;
        }
        let m = &mut self.model;
        for (token, d) in &stored {
            match m.holders.iter_mut().find(|h| &h.token == token) {
                Some(h) if h.known => assert_eq!(h.deadline, *d, "{what}: lease end of {token}"),
                Some(h) => {
                    // The server's millisecond clock and ours, each read
                    // once: 1 ms either side (valkey 9.1 stored a renewal's
                    // lease end 1 ms past the reply's arrival + ttl).
                    assert!(
                        *d >= h.bounds.0 - 1 && *d <= h.bounds.1 + 1,
                        "{what}: lease end of {token} {d} outside {:?}",
                        h.bounds
                    );
                    if let Some(due) = h.freed_at {
                        // Granted (at d - ttl) after the lease end that freed
                        // its place: never before it, and how long after.
                        assert!(*d - h.ttl >= due, "{what}: {token} granted before the lease end that freed it");
                        self.lateness.push(*d - h.ttl - due);
                    }
                    h.deadline = *d;
                    h.known = true;
                }
                None => assert!(
                    m.maybe.contains(token),
                    "{what}: stored {token} is neither a holder nor an ended lease; model {m:#?}"
                ),
            }
        }
        for h in &m.holders {
            assert!(stored.iter().any(|(t, _)| t == &h.token), "{what}: holder {} missing from {stored:?}", h.token);
        }
        if m.holders.is_empty() {
            assert!(stored.is_empty() || tag.is_some(), "{what}");
        } else {
            let want_tag = match m.family {
                Family::Semaphore { limit } => limit as i64,
                Family::ReadWrite => {
                    if m.holders[0].mode == Mode::Write {
                        -1
                    } else {
                        0
                    }
                }
            };
            assert_eq!(tag, Some(want_tag), "{what}: tag");
            let last = stored.iter().map(|(_, d)| *d).max().expect("holders");
            assert_eq!(exp, last, "{what}: the key ends with its last lease");
        }
        // The invariants, on what the server stores.
        let live: Vec<&Holder> = m.holders.iter().collect();
        match m.family {
            Family::Semaphore { limit } => {
                assert!(live.len() as u64 <= limit, "{what}: {} holders > {limit}", live.len())
            }
            Family::ReadWrite => {
                assert!(live.iter().all(|h| h.mode == Mode::Read) || live.len() == 1, "{what}: a writer beside others")
            }
        }
        let waiting = lock_info(&mut self.c, "waiting") as usize;
        // An event may have fallen due while this check read the server (a
        // short lease's end, a timeout: a loaded machine can take that
        // long); the queue is then judged at the next step, once the model
        // has applied it.
        if self.model.events_between(checked_from, now_ms() + 3) {
            return;
        }
        assert_eq!(waiting, self.model.queue.len(), "{what}: waiters in the server");
        assert!(
            self.early.is_empty(),
            "{what}: unexpected replies {:?}",
            self.early.iter().map(|m| (m.actor, m.reply.clone())).collect::<Vec<_>>()
        );
    }

    /// After a step that could not be ordered: take what the server shows.
    fn resync(&mut self) {
        self.report.resyncs += 1;
        // Let everything due soon happen, then read the outcome.
        thread::sleep(Duration::from_millis(BUDGET_MS as u64 + 20));
        self.barrier();
        // The server's line and set, read at once, agree with the replies
        // that arrived: as many waiting as the model's waiters not yet
        // answered, and no stored holder among those (its grant's reply is
        // still on its way). A count alone can agree by chance: Valkey 8.1
        // frees a killed redis-cli waiter late, so it still counts one
        // waiter while a grant's reply is on its way (then a granted token
        // was taken for an ended lease and stayed queued in the model).
        let deadline = Instant::now() + Duration::from_secs(30);
        let (waiting, stored) = loop {
            let (w, stored) = waiting_and_stored(&mut self.c, &self.key);
            let arrived: Vec<usize> = self.early.iter().map(|m| m.actor).collect();
            let unanswered: Vec<&Waiter> = self.model.queue.iter().filter(|w| !arrived.contains(&w.actor)).collect();
            let granted_unheard = stored.iter().any(|(t, _)| unanswered.iter().any(|w| &w.token == t));
            if unanswered.len() == w && !granted_unheard {
                break (w, stored);
            }
            assert!(Instant::now() < deadline, "resync: {w} waiting, model {unanswered:?}, stored {stored:?}");
            if let Ok(m) = self.rx.recv_timeout(Duration::from_millis(5)) {
                self.early.push(m);
            }
        };
        let now = now_ms();
        let mut fences = Vec::new();
        // A waiter killed as the server granted it holds the place (kept
        // below as any holder).
        if let Some(w) = self.killed.take() {
            if let Some(&(_, d)) = stored.iter().find(|(t, _)| t == &w.token) {
                self.model.holders.push(Holder::seen(w, d));
            }
        }
        for m in std::mem::take(&mut self.early) {
            let i = self
                .model
                .queue
                .iter()
                .position(|w| w.actor == m.actor)
                .unwrap_or_else(|| panic!("reply from {} that waited for nothing: {:?}", m.actor, m.reply));
            let w = self.model.queue.remove(i).expect("waiter");
            if m.actor >= CHILD {
                self.children.remove(&m.actor);
            } else {
                self.actors[m.actor].busy = false;
                self.actors[m.actor].client_id = m.client_id;
            }
            match m.reply {
                R::Int(0) | R::Nil => {}
                R::Int(f) => {
                    if w.fence {
                        fences.push(f);
                    }
                    let d = stored.iter().find(|(t, _)| t == &w.token).map(|(_, d)| *d);
                    self.model.holders.push(Holder::seen(w, d.unwrap_or(now - 1)));
                }
                other => panic!("waiter {} answered {other:?}", w.token),
            }
        }
        fences.sort();
        for f in fences {
            assert!(f > self.last_fence, "fence {f} not above {}", self.last_fence);
            self.last_fence = f;
        }
        assert_eq!(waiting, self.model.queue.len());
        // Holders: what is stored with a lease not yet ended.
        let keep: Vec<Holder> = std::mem::take(&mut self.model.holders)
            .into_iter()
            .filter_map(|mut h| {
                let d = stored.iter().find(|(t, _)| t == &h.token).map(|(_, d)| *d)?;
                h.deadline = d;
                h.known = true;
                h.bounds = (d, d);
                // A lease that ended while someone waits is still an event
                // to come: the queue's timer prunes it and serves the line
                // (its end fell after the barrier, or a loaded server runs
                // the timer late). Only without waiters does it stay until
                // the next write prunes it.
                (d >= now || !self.model.queue.is_empty()).then_some(h)
            })
            .collect();
        self.model.maybe =
            stored.iter().map(|(t, _)| t.clone()).filter(|t| !keep.iter().any(|h| &h.token == t)).collect();
        self.model.holders = keep;
        // Exclusion, whatever the order of events was.
        let holders = &self.model.holders;
        match self.model.family {
            Family::Semaphore { limit } => {
                assert!(holders.len() as u64 <= limit, "{} holders of {limit} permits: {holders:?}", holders.len())
            }
            Family::ReadWrite => assert!(
                holders.len() <= 1 || holders.iter().all(|h| h.mode == Mode::Read),
                "a writer beside others: {holders:?}"
            ),
        }
    }

    fn idle_actor(&mut self) -> Option<usize> {
        let idle: Vec<usize> = (0..self.actors.len()).filter(|&i| !self.actors[i].busy).collect();
        (!idle.is_empty()).then(|| idle[self.rng.gen_range(0..idle.len())])
    }

    fn mode(&mut self) -> Mode {
        match self.model.family {
            Family::Semaphore { .. } => Mode::Permit,
            Family::ReadWrite => {
                if self.rng.gen_bool(0.6) {
                    Mode::Read
                } else {
                    Mode::Write
                }
            }
        }
    }

    fn token(&mut self) -> String {
        self.next_token += 1;
        format!("t{}", self.next_token)
    }

    /// Whether a command sent at `t0` and answered at `t1` may have been
    /// overtaken by an event (then its reply is not checked: resync).
    fn late(&self, t0: i64, t1: i64) -> bool {
        t1 > t0 + BUDGET_MS && self.model.events_between(t0 + BUDGET_MS, t1 + 3)
    }

    /// A live holder's token that has an owner, or (sometimes, or when
    /// there is none) one that holds nothing.
    fn pick_token(&mut self) -> (String, bool) {
        let owned: Vec<usize> =
            (0..self.model.holders.len()).filter(|&i| self.model.holders[i].owner.is_some()).collect();
        if owned.is_empty() || self.rng.gen_bool(0.1) {
            (self.model.maybe.first().cloned().unwrap_or_else(|| "nobody".into()), false)
        } else {
            (self.model.holders[owned[self.rng.gen_range(0..owned.len())]].token.clone(), true)
        }
    }

    /// Sends an acquire with WAIT and returns once it is answered or seen
    /// blocked: Some(reply) or None.
    fn send_wait(&mut self, actor: usize, args: Vec<String>, what: &str) -> Option<R> {
        // Blocking is counted in waits_started, which only grows.
        let before = lock_info(&mut self.c, "waits_started");
        if actor < CHILD {
            self.actors[actor].busy = true;
            self.actors[actor].tx.send(args).expect("actor");
        } else {
            let cli = std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
            let child = Command::new(cli)
                .arg("-p")
                .arg(self.server.port().to_string())
                .args(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-cli");
            self.spawn_child_reader(actor, child);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            while let Ok(m) = self.rx.try_recv() {
                self.early.push(m);
            }
            if self.early.iter().any(|m| m.actor == actor) {
                return Some(self.recv_waiter(actor).reply);
            }
            if lock_info(&mut self.c, "waits_started") == before + 1 {
                return None;
            }
            assert!(Instant::now() < deadline, "{what}: neither answered nor blocked");
            thread::sleep(Duration::from_micros(200));
        }
    }

    /// What an acquire with WAIT sent at `sent.0` did: granted at once
    /// (`reply`, as `grant` predicted), or queued (`None`).
    fn waited(&mut self, reply: Option<R>, w: Waiter, grant: bool, sent: (i64, i64), owner: Option<usize>, desc: &str) {
        let late = self.late(sent.0, sent.1);
        match reply {
            Some(r) => {
                if !late {
                    assert!(grant, "{desc}: answered {r:?} instead of waiting");
                    self.check_grant_reply(&Msg { actor: w.actor, reply: r.clone(), client_id: 0 }, w.fence, desc);
                }
                if !matches!(r, R::Nil | R::Int(0)) {
                    self.model.grant(&w.token, w.mode, w.ttl, sent, owner);
                }
            }
            None => {
                assert!(late || !grant, "{desc}: waits instead of being granted");
                self.model.queue.push_back(w);
            }
        }
    }

    /// One random operation; returns a description ("none": nothing done).
    fn step(&mut self) -> String {
        self.killed = None;
        let t0 = now_ms();
        let roll = self.rng.gen_range(0..100);
        let desc;
        let mut out = Vec::new();
        let mut wrote = true;
        let t1;
        if roll < 22 {
            // Acquire, no WAIT. A short lease is a holder that dies at once:
            // nobody renews it, and its permit must free at its lease end.
            let Some(a) = self.idle_actor() else { return "none".into() };
            let (token, mode, fence) = (self.token(), self.mode(), self.rng.gen_bool(0.5));
            let short = self.rng.gen_bool(0.15);
            let ttl = if short { self.rng.gen_range(150..400) } else { 60_000 };
            let r = self.sync_call(a, self.acquire_args(&token, mode, ttl, fence, None));
            t1 = now_ms();
            let grant = self.model.queue.is_empty() && self.model.admits(mode);
            desc = format!("acquire {token} {mode:?} ttl {ttl}: {r:?}");
            let granted = !matches!(r, R::Nil | R::Int(0));
            if !self.late(t0, t1) {
                if grant {
                    self.check_grant_reply(&Msg { actor: a, reply: r, client_id: 0 }, fence, &desc);
                } else {
                    assert_eq!(r, if fence { R::Nil } else { R::Int(0) }, "{desc}");
                }
            }
            if granted {
                self.model.grant(&token, mode, ttl, (t0, t1), (!short).then_some(a));
            }
        } else if roll < 42 || (roll < 45 && self.children.len() >= 2) {
            // Acquire with WAIT: forever, long, or a short timeout.
            let Some(a) = self.idle_actor() else { return "none".into() };
            let (token, mode, fence) = (self.token(), self.mode(), self.rng.gen_bool(0.7));
            let timeout = match self.rng.gen_range(0..10) {
                0..=5 => 0,
                6..=7 => 120_000,
                _ => self.rng.gen_range(60..400),
            };
            let ttl = if self.rng.gen_bool(0.2) { self.rng.gen_range(300..600) } else { 60_000 };
            let grant = self.model.queue.is_empty() && self.model.admits(mode);
            desc = format!("acquire {token} {mode:?} ttl {ttl} WAIT {timeout}");
            let r = self.send_wait(a, self.acquire_args(&token, mode, ttl, fence, Some(timeout)), &desc);
            t1 = now_ms();
            let timeout = (timeout > 0).then_some((t0 + timeout, t1 + timeout));
            let w = Waiter { actor: a, token, mode, ttl, fence, timeout };
            self.waited(r, w, grant, (t0, t1), (ttl == 60_000).then_some(a), &desc);
        } else if roll < 45 {
            // A redis-cli process waits; killed -9 later, or granted (then it
            // exits at once: a dead holder, freed at its lease end).
            let id = CHILD + self.next_token as usize;
            let (token, mode) = (self.token(), self.mode());
            let ttl = self.rng.gen_range(300..600);
            let grant = self.model.queue.is_empty() && self.model.admits(mode);
            let args = self.acquire_args(&token, mode, ttl, true, Some(0));
            desc = format!("redis-cli {token} {mode:?} ttl {ttl} WAIT 0");
            let r = self.send_wait(id, args, &desc);
            t1 = now_ms();
            let w = Waiter { actor: id, token, mode, ttl, fence: true, timeout: None };
            self.waited(r, w, grant, (t0, t1), None, &desc);
        } else if roll < 62 {
            // Renew a live holder (or a token that holds nothing).
            let Some(a) = self.idle_actor() else { return "none".into() };
            let (token, holds) = self.pick_token();
            let r = self
                .sync_call(a, vec![format!("{}RENEW", self.prefix()), self.key.clone(), token.clone(), "60000".into()]);
            t1 = now_ms();
            desc = format!("renew {token}: {r:?}");
            if !self.late(t0, t1) {
                assert_eq!(r, R::Int(i64::from(holds)), "{desc}");
            }
            if r == R::Int(1) {
                if let Some(h) = self.model.holders.iter_mut().find(|h| h.token == token) {
                    (h.known, h.ttl, h.bounds, h.deadline, h.freed_at) =
                        (false, 60_000, (t0 + 60_000, t1 + 60_000), t1 + 60_000, None);
                }
            }
        } else if roll < 80 {
            // Release a live holder (or a token that holds nothing): the
            // place goes to the head of the line in the same command.
            let Some(a) = self.idle_actor() else { return "none".into() };
            let (token, holds) = self.pick_token();
            let r = self.sync_call(a, vec![format!("{}RELEASE", self.prefix()), self.key.clone(), token.clone()]);
            t1 = now_ms();
            desc = format!("release {token}: {r:?}");
            if !self.late(t0, t1) {
                assert_eq!(r, R::Int(i64::from(holds)), "{desc}");
            }
            if r == R::Int(1) {
                self.model.holders.retain(|h| h.token != token);
                self.model.pruned();
                self.model.serve(t0, t1, false, &mut out);
            }
        } else if roll < 86 {
            // A waiter's client vanishes (CLIENT KILL), or a redis-cli waiter is killed -9.
            if self.model.queue.is_empty() {
                return "none".into();
            }
            let i = self.rng.gen_range(0..self.model.queue.len());
            let w = self.model.queue[i].clone();
            desc = format!("kill waiter {} (actor {})", w.token, w.actor);
            let m = if w.actor >= CHILD {
                let mut child = self.children.remove(&w.actor).expect("child");
                let _ = child.kill();
                let _ = child.wait();
                self.recv_from(w.actor)
            } else {
                let id = self.actors[w.actor].client_id;
                let _: Value =
                    redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query(&mut self.c).expect("client kill");
                self.recv_waiter(w.actor)
            };
            // Granted before the server saw the kill: only by an event
            // after this step began (`settle` ran every earlier one), so
            // the step is late and `resync` takes the grant from the server.
            if !matches!(m.reply, R::Err(_)) {
                assert!(self.late(t0, now_ms()), "{desc}: a killed waiter was answered {:?}", m.reply);
                if let (true, R::Int(f)) = (w.fence, &m.reply) {
                    assert!(*f > self.last_fence, "{desc}: fence {f} not above {}", self.last_fence);
                    self.last_fence = *f;
                }
            }
            self.killed = Some(w.clone());
            // The server notices a closed socket on its own, and may free a
            // killed client later (Valkey 8.1 does): wait until it has.
            let deadline = Instant::now() + Duration::from_secs(20);
            while lock_info(&mut self.c, "waiting") as usize >= self.model.queue.len() {
                assert!(Instant::now() < deadline, "{desc}: the server kept the waiter");
                thread::sleep(Duration::from_micros(200));
            }
            self.model.queue.remove(i);
            // Those it unblocks (readers behind a writer) are granted from a timer.
            let (t, _) = self.barrier();
            t1 = now_ms();
            if i == 0 {
                self.model.serve(t0, t + 3, false, &mut out);
            }
            wrote = !out.is_empty();
        } else if roll < 90 {
            // A holder's client dies: nobody renews or releases it again.
            let owned: Vec<usize> = (0..self.model.holders.len())
                .filter(|&i| self.model.holders[i].owner.is_some() && self.model.holders[i].ttl < 60_000)
                .collect();
            if owned.is_empty() {
                return "none".into();
            }
            let i = owned[self.rng.gen_range(0..owned.len())];
            self.model.holders[i].owner = None;
            desc = format!("holder {} dies", self.model.holders[i].token);
            wrote = false;
            t1 = now_ms();
        } else if roll < 95 {
            // INFO, as the README describes it.
            let Some(a) = self.idle_actor() else { return "none".into() };
            let r = self.sync_call(a, vec![format!("{}INFO", self.prefix()), self.key.clone()]);
            t1 = now_ms();
            desc = format!("info: {r:?}");
            if !self.late(t0, t1) {
                self.check_info(&r, t0, t1, &desc);
            }
            wrote = false;
        } else {
            let ms = self.rng.gen_range(1..40);
            thread::sleep(Duration::from_millis(ms));
            desc = format!("sleep {ms}");
            return desc;
        }
        if wrote {
            self.model.pruned();
        }
        if self.late(t0, now_ms().max(t1)) {
            // Too slow to tell what came first: collect and resynchronise.
            for o in out.into_iter().rev() {
                if let Outcome::Granted { waiter, .. } = o {
                    self.model.holders.retain(|h| h.token != waiter.token);
                    self.model.queue.push_front(waiter);
                }
            }
            self.resync();
            return desc;
        }
        self.expect_outcomes(out);
        self.check_store(&desc);
        desc
    }

    fn check_info(&mut self, r: &R, t0: i64, t1: i64, what: &str) {
        if self.model.holders.is_empty() {
            assert_eq!(r, &R::Nil, "{what}");
            return;
        }
        let R::Other(Value::Array(items)) = r else { panic!("{what}") };
        let field = |name: &str| {
            items
                .iter()
                .position(|v| v == &Value::BulkString(name.as_bytes().to_vec()))
                .map(|i| items[i + 1].clone())
                .unwrap_or_else(|| panic!("{what}: no {name}"))
        };
        match self.model.family {
            Family::Semaphore { limit } => assert_eq!(field("limit"), Value::Int(limit as i64), "{what}"),
            Family::ReadWrite => {
                let writer = self.model.holders[0].mode == Mode::Write;
                assert_eq!(
                    field("mode"),
                    Value::BulkString(if writer { b"write".to_vec() } else { b"read".to_vec() }),
                    "{what}"
                );
            }
        }
        assert_eq!(field("waiters"), Value::Int(self.model.queue.len() as i64), "{what}");
        let Value::Array(flat) = field("holders") else { panic!("{what}: holders") };
        assert_eq!(flat.len(), 2 * self.model.holders.len(), "{what}: holders");
        for pair in flat.chunks(2) {
            let (Value::BulkString(t), Value::Int(ttl)) = (&pair[0], &pair[1]) else { panic!("{what}: {pair:?}") };
            let t = String::from_utf8(t.clone()).expect("utf-8");
            let h =
                self.model.holders.iter().find(|h| h.token == t).unwrap_or_else(|| panic!("{what}: {t} holds nothing"));
            let (lo, hi) = if h.known { (h.deadline, h.deadline) } else { h.bounds };
            assert!(*ttl >= lo - t1 - 1 && *ttl <= hi - t0 + 1, "{what}: ttl {ttl} of {t}, lease end in [{lo}, {hi}]");
        }
    }

    fn spawn_child_reader(&mut self, id: usize, mut child: Child) {
        let stdout = child.stdout.take().expect("piped");
        let tx = self.tx.clone();
        thread::spawn(move || {
            use std::io::Read;
            let mut s = String::new();
            let mut stdout = stdout;
            let _ = stdout.read_to_string(&mut s);
            let s = s.trim();
            let reply = match s.parse::<i64>() {
                Ok(n) => R::Int(n),
                Err(_) if s.is_empty() => R::Err("killed".into()),
                Err(_) => R::Err(s.to_string()),
            };
            let _ = tx.send(Msg { actor: id, reply, client_id: 0 });
        });
        self.children.insert(id, child);
    }
}

/// A randomized run of `ops` operations on one key (see the module doc).
pub fn random_run(server: &Server, family: Family, ops: usize, seed: u64) -> Report {
    let (tx, rx) = mpsc::channel();
    let actors = (0..8).map(|i| start_actor(server, i, tx.clone())).collect();
    let mut run = Run {
        server,
        key: "rand".into(),
        c: server.conn(),
        model: Model { family, holders: Vec::new(), maybe: Vec::new(), queue: VecDeque::new() },
        actors,
        children: HashMap::new(),
        rx,
        tx,
        early: Vec::new(),
        rng: StdRng::seed_from_u64(seed),
        next_token: 0,
        last_fence: 0,
        report: Report { ops: 0, resyncs: 0, timer_grants: 0, max_lateness_ms: 0, fences: 0 },
        lateness: Vec::new(),
        killed: None,
    };
    let mut done = 0;
    let mut history: VecDeque<String> = VecDeque::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        while done < ops {
            if !run.settle() {
                history.push_back("(resync after events too close to order)".into());
                run.resync();
                continue;
            }
            let desc = run.step();
            if desc != "none" {
                done += 1;
                history.push_back(format!("{} {desc}", now_ms()));
                if history.len() > 30 {
                    history.pop_front();
                }
            }
        }
    }));
    if let Err(e) = result {
        eprintln!(
            "seed {seed}, after {done} ops; the last steps:\n{}\nmodel: {:#?}",
            Vec::from(history).join("\n"),
            run.model
        );
        std::panic::resume_unwind(e);
    }
    // Everyone leaves: waiters vanish, holders release.
    for (_, mut child) in run.children.drain() {
        let _ = child.kill();
        let _ = child.wait();
    }
    run.report.ops = done;
    run.lateness.sort();
    run.report.max_lateness_ms = run.lateness.last().copied().unwrap_or(0);
    eprintln!(
        "random run ({family:?}, seed {seed}): {} ops, {} resynchronised, {} grants by the queue's timer or a handover, {} fences; grant after the freeing event: median {} ms, max {} ms",
        done,
        run.report.resyncs,
        run.report.timer_grants,
        run.report.fences,
        run.lateness.get(run.lateness.len() / 2).copied().unwrap_or(0),
        run.report.max_lateness_ms
    );
    Report { ..run.report }
}

/// `cmd` run inside one `EXEC` right after the lease of `key`'s one holder
/// (`ttl_ms` long) ended, while a waiter is due its place: the queue's
/// timer cannot fire inside `EXEC`, so only `cmd` itself could serve the
/// waiter. Returns the set before, `cmd`'s reply and the set after; `None`
/// when the machine was too slow to set this up (the lease had already
/// ended when `EXEC` ran).
pub fn just_after_the_lease_ends(
    c: &mut redis::Connection,
    key: &str,
    ttl_ms: i64,
    cmd: &[&str],
) -> Option<(Value, R, Value)> {
    let zrange = || redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").clone();
    let mut inner = redis::cmd(cmd[0]);
    for a in &cmd[1..] {
        inner.arg(*a);
    }
    let _: () = redis::cmd("MULTI").query(c).expect("MULTI");
    for queued in [
        zrange(),
        redis::cmd("PTTL").arg(key).clone(),
        // Longer than the lease's remaining time (PTTL <= ttl_ms).
        redis::cmd("DEBUG").arg("SLEEP").arg(format!("{:.3}", (ttl_ms + 100) as f64 / 1000.0)).clone(),
        inner,
        zrange(),
    ] {
        let _: Value = queued.query(c).expect("queued");
    }
    // Not `query`: that turns an error anywhere in EXEC's reply into Err.
    let exec = redis::ConnectionLike::req_command(c, &redis::cmd("EXEC")).expect("EXEC");
    let replies = [exec];
    let Some(Value::Array(exec)) = replies.last() else { panic!("EXEC: {replies:?}") };
    let [before, Value::Int(pttl), _, reply, after] = &exec[..] else { panic!("EXEC: {exec:?}") };
    (*pttl > 0).then(|| (before.clone(), reply_of(Ok(reply.clone())), after.clone()))
}
