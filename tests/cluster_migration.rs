//! Atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`) with the
//! module loaded on every node: the server accepts it (the module declares
//! `HANDLE_ATOMIC_SLOT_MIGRATION`), locks, semaphores, read-write locks and
//! elections arrive intact on the target, fences never go back, clients
//! blocked on the source are sent `MOVED` at the hand-over, an aborted
//! migration (cancelled, or its target killed) changes nothing, and 100
//! migrations back and forth under the client's traffic lose nothing.
//!
//! Servers without atomic slot migration (Redis 7.0, 8.2, Valkey 8.1) skip
//! the cluster part with a printed reason, after checking that the module
//! loads there and the command does not exist.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;
use redis_lock_client::{Error, LockClient};
use redis_lock_harness::{server_version, Cluster, Server};

mod support;
use support::*;

/// Whether this server has atomic slot migration; if not, says so and
/// checks what can be checked: the module loaded (its option bits did not
/// make the server refuse it) and the server has no `MIGRATESLOTS`.
fn has_atomic_migration(test: &str) -> bool {
    let v = server_version();
    if v.is_valkey() && v.major >= 9 {
        return true;
    }
    let s = Server::start();
    let mut c = s.conn();
    let modules: Value = redis::cmd("MODULE").arg("LIST").query(&mut c).unwrap();
    assert!(format!("{modules:?}").contains("lock"), "the module is loaded: {modules:?}");
    assert_eq!(acquire(&mut c, "k", "t"), 1);
    let help: redis::RedisResult<Vec<String>> = redis::cmd("CLUSTER").arg("HELP").query(&mut c);
    assert!(!help.unwrap_or_default().iter().any(|l| l.contains("MIGRATESLOTS")));
    println!("{test}: skipped: {v:?} has no atomic slot migration (CLUSTER MIGRATESLOTS is Valkey 9)");
    false
}

/// `args` on `c` from a new thread; its reply (an error as its text) arrives on the channel.
fn blocked(mut c: redis::Connection, args: &[&str]) -> mpsc::Receiver<Result<Value, String>> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut cmd = redis::cmd(&args[0]);
        cmd.arg(&args[1..]);
        let _ = tx.send(cmd.query::<Value>(&mut c).map_err(|e| e.to_string()));
    });
    rx
}

/// Waits until `c` has `waiting` waiters and `observing` observers blocked.
fn until_blocked(c: &mut redis::Connection, waiting: u64, observing: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field(c, "waiting") != waiting || info_field(c, "observing") != observing {
        assert!(Instant::now() < deadline, "expected {waiting} waiters and {observing} observers");
        thread::sleep(Duration::from_millis(5));
    }
}

/// A blocked client's reply must be `MOVED slot addr`.
fn moved_to(rx: &mpsc::Receiver<Result<Value, String>>, slot: u16, port: u16, what: &str) {
    let reply = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("{what}: still blocked"));
    let err = reply.expect_err(what);
    assert!(
        err.contains(&format!("{slot} 127.0.0.1:{port}")) && (err.contains("Moved") || err.contains("MOVED")),
        "{what}: {err}"
    );
}

/// A blocked client must still be blocked (no reply within a moment).
fn still_blocked(rx: &mpsc::Receiver<Result<Value, String>>, what: &str) {
    if let Ok(r) = rx.recv_timeout(Duration::from_millis(300)) {
        panic!("{what} was answered: {r:?}");
    }
}

fn int(v: Value) -> i64 {
    match v {
        Value::Int(n) => n,
        other => panic!("an integer: {other:?}"),
    }
}

/// What a key holds and until when, to compare source and target.
fn snapshot(c: &mut redis::Connection, key: &str) -> (String, Value, i64) {
    let kind: String = redis::cmd("TYPE").arg(key).query(c).unwrap();
    let value: Value = if kind == "zset" {
        redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query(c).unwrap()
    } else {
        redis::cmd("GET").arg(key).query(c).unwrap()
    };
    (kind, value, expiry_ms(c, key))
}

fn cmd(c: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    cmd.query(c)
}

fn fence(c: &mut redis::Connection, args: &[&str]) -> i64 {
    int(cmd(c, args).unwrap_or_else(|e| panic!("{args:?}: {e}")))
}

fn top_keys(c: &mut redis::Connection) -> String {
    format!("{:?}", cmd(c, &["LOCK.TOP"]).unwrap())
}

#[test]
fn state_moves_intact_and_clients_blocked_on_the_source_are_sent_to_the_target() {
    if !has_atomic_migration("state_moves_intact") {
        return;
    }
    let c = Cluster::start(3, 0);
    assert!(c.has_atomic_migration());
    let m = c.masters();
    let (src, dst) = (m[0], m[1]);
    for &i in &m {
        let _: () =
            redis::cmd("CONFIG").arg("SET").arg("lock.hold-timing").arg("yes").query(&mut c.node(i).conn()).unwrap();
    }
    let slot = c.view(src).slots[0];
    let [lk, sem, rw, el] = ["lk:", "sem:", "rw:", "el:"].map(|p| c.key_in_slot(p, slot));
    let mut s = c.node(src).conn();
    let mut fences = vec![fence(&mut s, &["LOCK.ACQUIRE", &lk, "a", "60000", "FENCE"])];
    fences.push(fence(&mut s, &["SEM.ACQUIRE", &sem, "s1", "2", "60000", "FENCE"]));
    fences.push(fence(&mut s, &["SEM.ACQUIRE", &sem, "s2", "2", "50000", "FENCE", "MAXHOLD", "100000"]));
    fences.push(fence(&mut s, &["RWLOCK.ACQUIRE", &rw, "r1", "READ", "60000", "FENCE"]));
    let term = fence(&mut s, &["LOCK.ELECT", &el, "leader", "60000", "v1"]);
    fences.push(term);
    let before: Vec<_> = [&lk, &sem, &rw, &el].iter().map(|k| snapshot(&mut s, k)).collect();

    // Blocked on the source: a waiter on each family, a candidate, an observer.
    let w_lock = blocked(c.node(src).conn(), &["LOCK.ACQUIRE", &lk, "b", "60000", "FENCE", "WAIT", "60000"]);
    let w_sem = blocked(c.node(src).conn(), &["SEM.ACQUIRE", &sem, "s3", "2", "60000", "WAIT", "60000"]);
    let w_rw = blocked(c.node(src).conn(), &["RWLOCK.ACQUIRE", &rw, "w1", "WRITE", "60000", "WAIT", "60000"]);
    let w_el = blocked(c.node(src).conn(), &["LOCK.ELECT", &el, "cand", "60000", "v2", "WAIT", "60000"]);
    let obs = blocked(c.node(src).conn(), &["LOCK.OBSERVE", &el, "AFTER", &term.to_string(), "WAIT", "60000"]);
    until_blocked(&mut s, 4, 1);
    let top = top_keys(&mut s);
    assert!(top.contains(&lk) && top.contains(&el), "LOCK.TOP on the source: {top}");
    assert!(info_field(&mut s, "holds_timed") >= 4);

    c.atomic_move_slots(slot, slot, dst);

    let port = c.node(dst).port();
    for (rx, what) in [(&w_lock, "lock waiter"), (&w_sem, "semaphore waiter"), (&w_rw, "writer"), (&w_el, "candidate")]
    {
        moved_to(rx, slot, port, what);
    }
    moved_to(&obs, slot, port, "observer");
    // Nothing is left of them on the source, nor of the keys' hold timings.
    until_blocked(&mut s, 0, 0);
    assert_eq!(info_field(&mut s, "waits_granted"), 0, "the source granted nobody");
    assert_eq!(info_field(&mut s, "holds_timed"), 0, "hold timings forgot the keys that left");
    let top = top_keys(&mut s);
    assert!(!top.contains(&lk) && !top.contains(&el), "LOCK.TOP on the source: {top}");

    // Values, absolute expiries and holders' leases, as they were.
    let mut d = c.node(dst).conn();
    let after: Vec<_> = [&lk, &sem, &rw, &el].iter().map(|k| snapshot(&mut d, k)).collect();
    assert_eq!(after, before);
    let led = cmd(&mut d, &["LOCK.LEADER", &el]).unwrap();
    assert!(format!("{led:?}").contains("v1"), "{led:?}");

    // Fences never go back: the target's first grants are above every
    // fence the source made.
    let top_fence = *fences.iter().max().unwrap();
    assert_eq!(int(cmd(&mut d, &["LOCK.RELEASE", &lk, "a"]).unwrap()), 1);
    let f = fence(&mut d, &["LOCK.ACQUIRE", &lk, "c", "60000", "FENCE"]);
    assert!(f > top_fence, "first fence on the target {f} <= {top_fence}");
    assert_eq!(int(cmd(&mut d, &["SEM.RELEASE", &sem, "s1"]).unwrap()), 1);
    let f2 = fence(&mut d, &["SEM.ACQUIRE", &sem, "s3", "2", "60000", "FENCE"]);
    assert!(f2 > f, "{f2} <= {f}");

    // And back: the source's first fence is above the target's.
    c.atomic_move_slots(slot, slot, src);
    assert_eq!(int(cmd(&mut s, &["LOCK.RELEASE", &lk, "c"]).unwrap()), 1);
    let f3 = fence(&mut s, &["LOCK.ACQUIRE", &lk, "d", "60000", "FENCE"]);
    assert!(f3 > f2, "back on the source: {f3} <= {f2}");
    assert_eq!(snapshot(&mut s, &el), before[3]);
}

/// Everything blocked on `src` for `keys` (a holder on `lk`, a waiter,
/// a candidate and an observer on `el`) as an aborted migration must
/// leave it: still blocked, then served by the source.
struct Blocked {
    waiter: mpsc::Receiver<Result<Value, String>>,
    candidate: mpsc::Receiver<Result<Value, String>>,
    observer: mpsc::Receiver<Result<Value, String>>,
    fence: i64,
    before: Vec<(String, Value, i64)>,
}

fn block_on(c: &Cluster, src: usize, lk: &str, el: &str) -> Blocked {
    let mut s = c.node(src).conn();
    let fence = fence(&mut s, &["LOCK.ACQUIRE", lk, "a", "60000", "FENCE"]);
    let term = self::fence(&mut s, &["LOCK.ELECT", el, "leader", "60000", "v1"]);
    let waiter = blocked(c.node(src).conn(), &["LOCK.ACQUIRE", lk, "b", "60000", "FENCE", "WAIT", "60000"]);
    let candidate = blocked(c.node(src).conn(), &["LOCK.ELECT", el, "cand", "60000", "v2", "WAIT", "60000"]);
    let observer = blocked(c.node(src).conn(), &["LOCK.OBSERVE", el, "AFTER", &term.to_string(), "WAIT", "60000"]);
    until_blocked(&mut s, 2, 1);
    let before = [lk, el].iter().map(|k| snapshot(&mut s, k)).collect();
    Blocked { waiter, candidate, observer, fence: fence.max(term), before }
}

/// After an abort: nothing moved, nobody was answered; then the source
/// serves them as if nothing happened, with larger fences.
fn unchanged(c: &Cluster, src: usize, lk: &str, el: &str, b: Blocked) {
    let slot = c.slot_of(lk);
    assert_eq!(c.owner_of_slot(slot), src);
    let mut s = c.node(src).conn();
    still_blocked(&b.waiter, "the waiter");
    still_blocked(&b.candidate, "the candidate");
    still_blocked(&b.observer, "the observer");
    until_blocked(&mut s, 2, 1);
    let now: Vec<_> = [lk, el].iter().map(|k| snapshot(&mut s, k)).collect();
    assert_eq!(now, b.before);
    assert_eq!(int(cmd(&mut s, &["LOCK.RELEASE", lk, "a"]).unwrap()), 1);
    let granted = int(b.waiter.recv_timeout(Duration::from_secs(10)).expect("the waiter is served").unwrap());
    assert!(granted > b.fence, "{granted} <= {}", b.fence);
    assert_eq!(int(cmd(&mut s, &["LOCK.RELEASE", el, "leader"]).unwrap()), 1);
    let term = int(b.candidate.recv_timeout(Duration::from_secs(10)).expect("the candidate is elected").unwrap());
    assert!(term > granted, "{term} <= {granted}");
    let seen = b.observer.recv_timeout(Duration::from_secs(10)).expect("the observer is told").unwrap();
    assert!(format!("{seen:?}").contains("v2") || format!("{seen:?}").contains("Nil"), "{seen:?}");
    for k in [lk, el] {
        let _ = cmd(&mut s, &["DEL", k]);
    }
}

#[test]
fn an_aborted_migration_changes_nothing() {
    if !has_atomic_migration("an_aborted_migration_changes_nothing") {
        return;
    }
    let mut c = Cluster::start(3, 1);
    let m = c.masters();
    let (src, dst) = (m[0], m[1]);
    let slot = c.view(src).slots[0];
    let (lk, el) = (c.key_in_slot("lk:", slot), c.key_in_slot("el:", slot));

    // Cancelled by the server's own command, in the same round trip as
    // its start (pipelined: deterministic, before any byte moved).
    let b = block_on(&c, src, &lk, &el);
    let mut s = c.node(src).conn();
    let replies: Vec<Value> = redis::pipe()
        .cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(c.id(dst))
        .cmd("CLUSTER")
        .arg("CANCELSLOTMIGRATIONS")
        .query(&mut s)
        .unwrap();
    assert_eq!(replies.len(), 2);
    let job = c.slot_migration(src, slot, slot).expect("the export job");
    assert_eq!(job.state, "cancelled", "{job:?}");
    unchanged(&c, src, &lk, &el, b);

    // Cancelled while the target is stalled in the hand-shake (stopped for
    // well under the node timeout). A fenced grant meanwhile reaches the
    // source's replica, but its fence mark (`LOCK.FENCEFLOOR`) only once
    // the export ended.
    let b = block_on(&c, src, &lk, &el);
    let replica = c.replicas_of(src)[0];
    let busy = c.key_in_slot("busy:", c.view(src).slots[1]);
    let floors = |c: &Cluster| {
        let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut c.node(replica).conn()).unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_lock.fencefloor:calls="))
            .map_or(0, |v| v.split(',').next().unwrap().parse::<u64>().unwrap())
    };
    let synced = |s: &mut redis::Connection| {
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(s).unwrap();
        assert_eq!(acked, 1, "the replica acknowledged");
    };
    synced(&mut s);
    c.node(dst).set_paused(true);
    c.start_atomic_migration(slot, slot, dst).unwrap();
    c.wait_until("the source connected to the stopped target", |c| {
        c.slot_migration(src, slot, slot).is_some_and(|j| j.state != "connecting" && j.state != "cancelled")
    });
    let before = floors(&c);
    fence(&mut s, &["LOCK.ACQUIRE", &busy, "x", "60000", "FENCE"]);
    synced(&mut s);
    let during = floors(&c);
    c.cancel_atomic_migrations(src).unwrap();
    c.node(dst).set_paused(false);
    assert_eq!(during, before, "no fence mark replicated while exporting");
    c.wait_until("the held fence mark reached the replica", |c| floors(c) == before + 1);
    assert_eq!(c.slot_migration(src, slot, slot).unwrap().state, "cancelled");
    c.wait_until("the target gave up its import", |c| {
        c.slot_migrations(dst).iter().all(|j| j.operation != "IMPORT" || j.finished())
    });
    c.wait_ok();
    unchanged(&c, src, &lk, &el, b);

    // The target killed in the middle: its replica takes its place, the
    // export fails, and the source keeps everything.
    let b = block_on(&c, src, &lk, &el);
    let (job, _promoted) = c.atomic_migration_to_killed_target(slot, slot, dst);
    assert_eq!(job.state, "failed", "{job:?}");
    unchanged(&c, src, &lk, &el, b);
}

/// One grant as the client saw it: when it asked (before the request was
/// sent), when it had it (after the reply), the fence, and when it let go
/// (before the release was sent). The server's hold contains `at..until`,
/// so spans that overlap are holds that did; the server granted it after
/// `asked` and before `at`.
#[derive(Clone, Copy, Debug)]
struct Grant {
    asked: Instant,
    at: Instant,
    fence: u64,
    until: Instant,
}

/// No two of `grants` overlap more than `limit` at a time, and every grant
/// the server surely made before another (its reply came before the other
/// was asked for) has a smaller fence: no fence went back across a move.
fn model_check(what: &str, grants: &[Grant], limit: usize) {
    let mut g = grants.to_vec();
    g.sort_by_key(|g| g.at);
    for (i, a) in g.iter().enumerate() {
        let overlapping = g[..i].iter().filter(|b| b.until > a.at).count();
        assert!(overlapping < limit, "{what}: {} holders at once at grant {i} ({a:?})", overlapping + 1);
        for b in &g {
            if b.at < a.asked {
                assert!(b.fence < a.fence, "{what}: fence went back: {b:?} then {a:?}");
            }
        }
    }
}

#[test]
fn a_hundred_migrations_under_traffic_lose_nothing() {
    if !has_atomic_migration("a_hundred_migrations_under_traffic") {
        return;
    }
    const MIGRATIONS: usize = 100;
    let c = Cluster::start(3, 0);
    let m = c.masters();
    let (a, b) = (m[0], m[1]);
    let slot = c.view(a).slots[0];
    let [lk, sem, el] = ["lk:", "sem:", "el:"].map(|p| c.key_in_slot(p, slot));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let grants: Arc<Mutex<[Vec<Grant>; 3]>> = Arc::default();
    let ms = Duration::from_millis;

    // Three workers per family, each with its own client: take the key
    // with a wait, hold it a few ms, let go.
    let mut threads = Vec::new();
    for family in 0..3 {
        for n in 0..3 {
            let (stop, errors, grants) = (stop.clone(), errors.clone(), grants.clone());
            let client = LockClient::open_cluster(&c.urls()).unwrap();
            let (lk, sem, el) = (lk.clone(), sem.clone(), el.clone());
            threads.push(thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let got = match family {
                        0 => {
                            client.acquire(&lk, ms(5000), ms(10_000)).map(|l| (l.fence(), Box::new(l) as Box<dyn Held>))
                        }
                        1 => client
                            .semaphore(&sem, 2)
                            .acquire(ms(5000), ms(10_000))
                            .map(|l| (l.fence(), Box::new(l) as _)),
                        _ => client
                            .election(&el)
                            .campaign(&format!("w{n}"), ms(5000), ms(10_000))
                            .map(|l| (Some(l.term()), Box::new(l) as _)),
                    };
                    match got {
                        Ok((fence, held)) => {
                            let at = Instant::now();
                            thread::sleep(ms(3));
                            let until = Instant::now();
                            if let Err(e) = held.let_go() {
                                errors.lock().unwrap().push(format!("release: {e}"));
                            }
                            let fence = fence.expect("the module gives fences");
                            grants.lock().unwrap()[family].push(Grant { asked, at, fence, until });
                        }
                        Err(Error::NotAcquired { .. }) => {}
                        Err(e) => errors.lock().unwrap().push(e.to_string()),
                    }
                }
            }));
        }
    }

    // Fenced grants on other keys of both nodes, all the time: each node's
    // cached epoch is then always fresh (read < 100 ms ago), so a fence
    // made right after a hand-over with the epoch from before it would show
    // (the import events make the module re-read it; without them this
    // test sees fences go back).
    for (node, other) in [(a, c.view(a).slots[1]), (b, c.view(b).slots[0])] {
        let stop = stop.clone();
        let key = c.key_in_slot("busy:", other);
        let mut con = c.node(node).conn();
        threads.push(thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _: redis::RedisResult<Value> =
                    redis::cmd("LOCK.ACQUIRE").arg(&key).arg("busy").arg(1000).arg("FENCE").query(&mut con);
                let _: redis::RedisResult<Value> = redis::cmd("LOCK.RELEASE").arg(&key).arg("busy").query(&mut con);
                thread::sleep(ms(5));
            }
        }));
    }

    // The traffic goes on through the moves: after each one, every family
    // is granted again (within 5 s, for a loaded machine: a grant takes a
    // few ms, a waiter stuck until its 10 s wait ran out takes longer)
    // before the next move.
    let started = Instant::now();
    let mut stalled = Vec::new();
    for i in 0..MIGRATIONS {
        let to = if i % 2 == 0 { b } else { a };
        c.atomic_move_slots(slot, slot, to);
        let counts = || grants.lock().unwrap().each_ref().map(Vec::len);
        let moved = counts();
        let patience = Instant::now() + ms(5000);
        while counts().iter().zip(moved).any(|(now, then)| *now == then) && Instant::now() < patience {
            thread::sleep(ms(2));
        }
        let now = counts();
        if now.iter().zip(moved).any(|(now, then)| *now == then) {
            stalled.push(format!("after migration {i}: grants {moved:?}, 5 s later {now:?}"));
            break;
        }
    }
    let took = started.elapsed();
    thread::sleep(ms(500));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    println!("{MIGRATIONS} migrations in {took:?}");

    let errors = errors.lock().unwrap();
    assert!(errors.is_empty(), "{} operations failed: {:?}", errors.len(), &errors[..errors.len().min(5)]);
    let grants = grants.lock().unwrap();
    for (g, (what, limit)) in grants.iter().zip([("lock", 1), ("semaphore", 2), ("election", 1)]) {
        assert!(g.len() >= MIGRATIONS / 2, "{what}: only {} grants", g.len());
        model_check(what, g, limit);
    }
    // (lock, semaphore, election)
    assert!(stalled.is_empty(), "no grant within 5 s of a move: {stalled:?}");
    // Nobody is left blocked anywhere.
    for &i in &m {
        let mut con = c.node(i).conn();
        until_blocked(&mut con, 0, 0);
    }
}

/// A lock, a semaphore permit or a leadership, let go the same way.
trait Held: Send {
    fn let_go(&self) -> Result<(), Error>;
}

impl Held for redis_lock_client::Lock {
    fn let_go(&self) -> Result<(), Error> {
        self.release()
    }
}

impl Held for redis_lock_client::Leadership {
    fn let_go(&self) -> Result<(), Error> {
        self.resign()
    }
}

/// The client's leader stream (`Election::observe`) through atomic
/// migrations: its blocked `LOCK.OBSERVE` is answered `MOVED` at each
/// hand-over, it re-issues it on the new owner, and sees every proclaim
/// made there, in order.
#[test]
fn a_client_observer_follows_its_election_through_migrations() {
    if !has_atomic_migration("a_client_observer_follows") {
        return;
    }
    let c = Cluster::start(3, 0);
    let m = c.masters();
    let (a, b) = (m[0], m[1]);
    let slot = c.view(a).slots[0];
    let key = c.key_in_slot("observed:", slot);
    let client = LockClient::open_cluster(&c.urls()).unwrap();
    let election = client.election(&key);
    let leadership = election.campaign("v0", Duration::from_secs(30), Duration::ZERO).unwrap();
    let iter = election.observe_blocking().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for item in iter {
            if tx.send(item.map(|l| l.map(|l| (l.value, l.term)))).is_err() {
                return;
            }
        }
    });
    let next = |what: &str| rx.recv_timeout(Duration::from_secs(15)).unwrap_or_else(|_| panic!("{what}: nothing seen"));
    assert_eq!(next("the state now").unwrap(), Some(("v0".to_string(), leadership.term())));
    for (i, to) in [b, a, b].into_iter().enumerate() {
        c.atomic_move_slots(slot, slot, to);
        let value = format!("v{}", i + 1);
        leadership.proclaim(&value).unwrap();
        // The stream may also report the unchanged state after it moved.
        let seen = loop {
            let s = next(&value).unwrap_or_else(|e| panic!("after the move to node {to}: {e}"));
            if s.as_ref().map(|l| l.0.as_str()) != Some(&format!("v{i}")) {
                break s;
            }
        };
        assert_eq!(seen, Some((value, leadership.term())), "after the move to node {to}");
        let mut from = c.node(if to == a { b } else { a }).conn();
        assert_eq!(info_field(&mut from, "observing"), 0, "nothing left on the source");
    }
    leadership.resign().unwrap();
}
