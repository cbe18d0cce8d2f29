//! Handoff latency: how long after a holder sends its release the next
//! waiter learns that it holds the lock.
//!
//! For N = 1, 10 and 100 waiters on one key:
//!
//! - **module WAIT**: a server with the module. A holder takes the key; N
//!   waiters, each on its own thread and connection (raw redis-rs), block in
//!   `LOCK.ACQUIRE key tok<i> ttl WAIT 0`, queued one after another (each is
//!   seen in `LOCK.INFO`'s `waiters` before the next is sent, so the FIFO
//!   order is known). The holder timestamps just before sending
//!   `LOCK.RELEASE`; the head waiter timestamps on receiving its reply, checks
//!   it got 1, that `LOCK.INFO` names it owner with exactly the waiters behind
//!   it still queued, timestamps and sends its own `LOCK.RELEASE` (must answer
//!   1), and so on down the queue: one round gives N samples. Grants must
//!   come in queue order and each after its predecessor's release was sent,
//!   so a module that grants twice, out of order or without a release fails
//!   loudly (a panic), not with a nice number.
//! - **polling fallback**: a server without the module; the holder and each
//!   waiter use `redis-lock-client` (its own `LockClient` per thread), whose
//!   blocking `acquire` there polls `SET NX PX` with its default backoff
//!   (full jitter, 10 ms doubling to 200 ms). Waiters start polling, the
//!   holder keeps the key for `POLL_HOLD` (so every waiter's backoff has
//!   reached its 200 ms cap), then timestamps and releases; whoever gets it
//!   timestamps when `acquire` returns, checks with `LockClient::info` that it
//!   owns the key, timestamps and releases, and so on. Grants are ordered by
//!   time; each must follow its predecessor's release.
//!
//! latency = grant reply received − release sent, both `Instant`s of this
//! process (one monotonic clock). Prints p50/p99/max per N as a markdown table.
//!
//! `cargo bench --bench handoff` runs the full set (≥ 1000 module samples per
//! N; 100–200 polling samples; about a minute and a half, most of it the
//! polling N = 1 rounds). `-- --quick` takes ≥ 100 module and 5–100 polling
//! samples (a few seconds); so does a run without `--bench` (as under
//! `cargo test --benches`). Other arguments (criterion-style filters and
//! flags) are ignored.

use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use redis_lock_client::{Backend, LockClient};
use redis_lock_harness::Server;
use redis_lock_rules::scripts;

/// Lock TTL: long enough that nothing ever expires during a run.
const TTL_MS: u64 = 30_000;
/// How long a waiter may wait for a grant before the bench calls it broken.
const STUCK: Duration = Duration::from_secs(30);
/// How long the polling holder keeps the key before its release: long enough
/// for every waiter's backoff to have doubled up to its 200 ms cap
/// (10+20+40+80+160 ms of draws at most before it).
const POLL_HOLD: Duration = Duration::from_millis(400);
const WAITERS: [usize; 3] = [1, 10, 100];

struct Plan {
    /// Minimum module samples per N (rounds = ceil(samples / N)).
    module: usize,
    /// Minimum polling samples for N = 1, 10, 100.
    polling: [usize; 3],
    name: &'static str,
}

const FULL: Plan = Plan { module: 1000, polling: [100, 200, 200], name: "full" };
const QUICK: Plan = Plan { module: 100, polling: [5, 10, 100], name: "quick" };

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // then a smoke run is enough.
    let plan = if args.iter().any(|a| a == "--quick") || !args.iter().any(|a| a == "--bench") { QUICK } else { FULL };
    let ignored: Vec<&String> = args.iter().filter(|a| *a != "--quick" && *a != "--bench").collect();
    if !ignored.is_empty() {
        eprintln!("handoff: ignoring arguments {ignored:?}");
    }
    eprintln!("handoff: {} run", plan.name);
    let started = Instant::now();

    let mut rows = Vec::new();
    {
        let t = Instant::now();
        let server = Server::start();
        eprintln!(
            "server with the module started in {:.1?} (the harness builds the module first if needed)",
            t.elapsed()
        );
        for n in WAITERS {
            let t = Instant::now();
            let s = module_handoff(&server, n, plan.module);
            eprintln!("module WAIT, {n:>3} waiters: {} samples in {:.1?}", s.len(), t.elapsed());
            rows.push((n, Stats::of(s), None));
        }
    }
    {
        let t = Instant::now();
        let server = Server::builder().without_module().start();
        eprintln!("server without the module started in {:.1?}", t.elapsed());
        for (row, want) in rows.iter_mut().zip(plan.polling) {
            let n = row.0;
            let t = Instant::now();
            let s = polling_handoff(&server, n, want);
            eprintln!("polling fallback, {n:>3} waiters: {} samples in {:.1?}", s.len(), t.elapsed());
            row.2 = Some(Stats::of(s));
        }
    }

    println!();
    println!("| waiters | module WAIT p50 | p99 | max | samples | polling fallback p50 | p99 | max | samples |");
    println!("|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for (n, m, p) in &rows {
        let p = p.as_ref().expect("measured");
        println!(
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt(m.p50),
            fmt(m.p99),
            fmt(m.max),
            m.n,
            fmt(p.p50),
            fmt(p.p99),
            fmt(p.max),
            p.n
        );
    }
    println!();
    let worst = rows.iter().map(|(_, m, _)| m.p99).max().expect("rows");
    println!(
        "module handoff p99 target ≤ 1 ms: {} (worst p99 {})",
        if worst <= Duration::from_millis(1) { "met" } else { "MISSED" },
        fmt(worst)
    );
    eprintln!("handoff: done in {:.1?}", started.elapsed());
}

struct Stats {
    n: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Stats {
    /// Nearest-rank percentiles.
    fn of(mut s: Vec<Duration>) -> Stats {
        assert!(!s.is_empty(), "no samples");
        s.sort();
        let rank = |p: f64| s[((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Stats { n: s.len(), p50: rank(0.50), p99: rank(0.99), max: *s.last().expect("non-empty") }
    }
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}

/// One waiter's turn: when its grant arrived and when it sent its release.
struct Turn {
    waiter: usize,
    granted: Instant,
    released: Instant,
}

/// The latencies of one round, after checking that the grants form one
/// chain: each strictly after the release before it (the first after the
/// holder's, sent at `start`), each waiter exactly once.
fn chain(n: usize, start: Instant, turns: &[Turn]) -> Vec<Duration> {
    let mut seen = vec![false; n];
    let mut prev = start;
    let mut out = Vec::with_capacity(turns.len());
    for t in turns {
        assert!(!std::mem::replace(&mut seen[t.waiter], true), "waiter {} granted twice in one round", t.waiter);
        assert!(t.granted > prev, "waiter {} was granted before the release it should have waited for", t.waiter);
        assert!(t.released >= t.granted);
        out.push(t.granted - prev);
        prev = t.released;
    }
    assert!(seen.iter().all(|s| *s), "not every waiter was granted");
    out
}

// ---------------------------------------------------------------- module

fn int(con: &mut Connection, cmd: &redis::Cmd) -> i64 {
    cmd.query(con).unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(&cmd.get_packed_command())))
}

/// `LOCK.INFO key` as (owner, waiters); `None` when the key is absent.
fn info(con: &mut Connection, key: &str) -> Option<(Option<String>, i64)> {
    let v: Option<Vec<Value>> = redis::cmd("LOCK.INFO").arg(key).query(con).expect("LOCK.INFO");
    let v = v?;
    let field = |name: &str| {
        v.chunks(2).find(|c| matches!(&c[0], Value::BulkString(b) if b == name.as_bytes())).map(|c| c[1].clone())
    };
    let owner = match field("owner") {
        Some(Value::BulkString(b)) => Some(String::from_utf8(b).expect("utf-8 owner")),
        _ => None,
    };
    let waiters = match field("waiters") {
        Some(Value::Int(n)) => n,
        other => panic!("LOCK.INFO waiters: {other:?}"),
    };
    Some((owner, waiters))
}

/// N waiter threads on their own connections, kept for all rounds of one N.
fn module_handoff(server: &Server, n: usize, want: usize) -> Vec<Duration> {
    let key = format!("bench:handoff:{n}");
    let (done_tx, done_rx) = mpsc::channel::<Turn>();
    let mut gos: Vec<Sender<()>> = Vec::new();
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    for i in 0..n {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let mut con = server.conn();
        con.set_read_timeout(Some(STUCK)).expect("read timeout");
        let (key, done) = (key.clone(), done_tx.clone());
        threads.push(thread::spawn(move || module_waiter(i, n, &key, &mut con, &go_rx, &done)));
        gos.push(go_tx);
    }
    // Only the waiters hold senders now: if they all die, `recv` fails at once.
    drop(done_tx);
    let mut con = server.conn();
    con.set_read_timeout(Some(STUCK)).expect("read timeout");
    let rounds = want.div_ceil(n);
    let mut out = Vec::with_capacity(rounds * n);
    // One round of warm-up (connections, allocations, the module's queue).
    for round in 0..=rounds {
        let holder = format!("holder-{round}");
        assert_eq!(int(&mut con, redis::cmd("LOCK.ACQUIRE").arg(&key).arg(&holder).arg(TTL_MS)), 1, "holder acquire");
        for (i, go) in gos.iter().enumerate() {
            go.send(()).expect("waiter alive");
            let deadline = Instant::now() + STUCK;
            // Queued before the next one is sent: the FIFO order is 0..N.
            while info(&mut con, &key).expect("held").1 < i as i64 + 1 {
                assert!(Instant::now() < deadline, "waiter {i} never queued");
                thread::yield_now();
            }
            assert_eq!(info(&mut con, &key), Some((Some(holder.clone()), i as i64 + 1)));
        }
        let start = Instant::now();
        assert_eq!(int(&mut con, redis::cmd("LOCK.RELEASE").arg(&key).arg(&holder)), 1, "holder release");
        let mut turns: Vec<Turn> =
            (0..n).map(|_| done_rx.recv_timeout(STUCK).expect("a waiter was never granted")).collect();
        turns.sort_by_key(|t| t.waiter);
        // FIFO: sorted by queue position, the grants must still chain.
        let lat = chain(n, start, &turns);
        assert_eq!(info(&mut con, &key), None, "the key is free after the round");
        if round > 0 {
            out.extend(lat);
        }
    }
    drop(gos);
    for t in threads {
        t.join().expect("waiter thread");
    }
    out
}

fn module_waiter(i: usize, n: usize, key: &str, con: &mut Connection, go: &Receiver<()>, done: &Sender<Turn>) {
    let token = format!("waiter-{i}");
    while go.recv().is_ok() {
        let mut acquire = redis::cmd("LOCK.ACQUIRE");
        acquire.arg(key).arg(&token).arg(TTL_MS).arg("WAIT").arg(0);
        let reply: i64 = acquire.query(con).expect("LOCK.ACQUIRE WAIT");
        let granted = Instant::now();
        assert_eq!(reply, 1, "waiter {i}: WAIT answered {reply}, not a grant");
        // One grant per release: it is ours, and everyone behind us still waits.
        assert_eq!(info(con, key), Some((Some(token.clone()), (n - 1 - i) as i64)), "waiter {i}: not the sole grantee");
        let released = Instant::now();
        assert_eq!(int(con, redis::cmd("LOCK.RELEASE").arg(key).arg(&token)), 1, "waiter {i}: release");
        done.send(Turn { waiter: i, granted, released }).expect("coordinator alive");
    }
}

// --------------------------------------------------------------- polling

fn polling_handoff(server: &Server, n: usize, want: usize) -> Vec<Duration> {
    let key = format!("bench:handoff:poll:{n}");
    // The release script is cached server-wide up front, so no round pays
    // for a NOSCRIPT + SCRIPT LOAD.
    let mut con = server.conn();
    let _: String = redis::cmd("SCRIPT").arg("LOAD").arg(scripts::RELEASE).query(&mut con).expect("SCRIPT LOAD");
    let (done_tx, done_rx) = mpsc::channel::<Turn>();
    let mut gos: Vec<Sender<()>> = Vec::new();
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    for i in 0..n {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let client = LockClient::open(&server.url()).expect("client");
        let (key, done) = (key.clone(), done_tx.clone());
        threads.push(thread::spawn(move || polling_waiter(i, &key, &client, &go_rx, &done)));
        gos.push(go_tx);
    }
    drop(done_tx);
    let holder = LockClient::open(&server.url()).expect("client");
    let rounds = want.div_ceil(n);
    let mut out = Vec::with_capacity(rounds * n);
    for _ in 0..rounds {
        let lock = holder.try_acquire(&key, Duration::from_millis(TTL_MS)).expect("holder acquire");
        assert_eq!(holder.backend(), Backend::Scripts, "this server has no module");
        for go in &gos {
            go.send(()).expect("waiter alive");
        }
        thread::sleep(POLL_HOLD);
        let start = Instant::now();
        lock.release().expect("holder release");
        let mut turns: Vec<Turn> =
            (0..n).map(|_| done_rx.recv_timeout(STUCK).expect("a waiter was never granted")).collect();
        // No queue: whoever polled first after a release won. Time order.
        turns.sort_by_key(|t| t.granted);
        out.extend(chain(n, start, &turns));
        assert!(holder.info(&key).expect("info").is_none(), "the key is free after the round");
    }
    drop(gos);
    for t in threads {
        t.join().expect("waiter thread");
    }
    out
}

fn polling_waiter(i: usize, key: &str, client: &LockClient, go: &Receiver<()>, done: &Sender<Turn>) {
    while go.recv().is_ok() {
        // The client's blocking acquire with its default options.
        let lock = client.acquire(key, Duration::from_millis(TTL_MS), STUCK).expect("polling acquire");
        let granted = Instant::now();
        assert_eq!(client.backend(), Backend::Scripts, "waiter {i} polls on the fallback");
        let owner = client.info(key).expect("info").and_then(|info| info.owner);
        assert_eq!(owner.as_deref(), Some(lock.token()), "waiter {i}: not the owner after its grant");
        let released = Instant::now();
        lock.release().expect("polling release");
        done.send(Turn { waiter: i, granted, released }).expect("coordinator alive");
    }
}
