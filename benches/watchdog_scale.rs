//! Watchdog locks at scale (issue 14): one process holds N locks with
//! `LockOptions::watchdog`, N = 1,000, 10,000 and 100,000 on one server with
//! the module, and 10,000 on a Redis Cluster of 3 masters, for at least
//! three renewal intervals, then drops them all.
//!
//! Per setup it reports:
//! - `acquire s`: taking the N locks, 64 async tasks sharing the client's
//!   multiplexed connection (each acquire is its own round trip; 64 are in
//!   flight at once);
//! - `threads`: the process's threads before the locks and the most seen
//!   while holding them (`/proc/self/task`, sampled every 50 ms);
//! - `RSS/lock`: growth of the process's resident memory from before the
//!   locks to while holding them, divided by N;
//! - per renewal interval (TTL/3) of the hold: `LOCK.RENEW` calls
//!   (`INFO commandstats`) and read events of the server(s)
//!   (`total_reads_processed` of `INFO stats`, an upper bound on the round
//!   trips that carried them: only this process talks to the server, and a
//!   pipeline arrives in one read or a few), and their ratio;
//! - the server's µs per `LOCK.RENEW` (`usec_per_call`) against a pipelined
//!   native `PEXPIRE` of the same keys, sent after the hold (pipelines of
//!   100), in the same run;
//! - `lost`: locks not held at the end of the hold, by the client's own
//!   account plus those whose key does not hold its token on the server;
//! - `release s`: from dropping all N locks (releases queued with the
//!   client's engine and pipelined) until the server has no keys.
//!
//! The locks renew lock by lock (`ClientOptions::sessions(false)`): this
//! measures the engine's batched renewals. With sessions (the default) the
//! server's cost of keeping them is one keepalive per node per TTL/3
//! instead, whatever N (`client/tests/sessions.rs`).
//!
//! `cargo bench --bench watchdog_scale` (about 2 minutes). Without
//! `--bench` (as under `cargo test --benches`) it runs N = 1,000 alone, to
//! check that it works. `REDIS_SERVER` names another redis-server binary.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis_lock_client::{ClientOptions, Lock, LockClient, LockOptions, WatchdogOptions};
use redis_lock_harness::{Cluster, Server};

const TTL: Duration = Duration::from_secs(6);
const ACQUIRING_TASKS: usize = 64;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn info(con: &mut redis::Connection, section: &str) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO").arg(section).query(con).expect("INFO");
    text.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.to_string(), v.trim().to_string())).collect()
}

/// `calls` and `usec` of one command in `INFO commandstats`.
fn cmdstat(con: &mut redis::Connection, cmd: &str) -> (u64, u64) {
    let i = info(con, "commandstats");
    let Some(v) = i.get(&format!("cmdstat_{cmd}")) else { return (0, 0) };
    let field =
        |name: &str| v.split(',').find_map(|kv| kv.strip_prefix(name)).and_then(|n| n.parse().ok()).unwrap_or(0);
    (field("calls="), field("usec="))
}

fn reads(con: &mut redis::Connection) -> u64 {
    info(con, "stats").get("total_reads_processed").and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The masters' connections, summed over for the server-side numbers.
struct Servers {
    cons: Vec<redis::Connection>,
}

impl Servers {
    fn sum(&mut self, f: impl Fn(&mut redis::Connection) -> u64) -> u64 {
        self.cons.iter_mut().map(f).sum()
    }

    fn reset(&mut self) {
        for c in &mut self.cons {
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).expect("CONFIG RESETSTAT");
        }
    }

    fn dbsize(&mut self) -> u64 {
        self.sum(|c| redis::cmd("DBSIZE").query(c).expect("DBSIZE"))
    }

    /// Keys of `locks` whose value is not their token, on whichever
    /// master has them (other masters answer MOVED, which is skipped).
    fn not_held(&mut self, locks: &[Lock]) -> usize {
        let mut found: HashMap<&str, String> = HashMap::new();
        for c in &mut self.cons {
            for chunk in locks.chunks(500) {
                let mut p = redis::pipe();
                for l in chunk {
                    p.cmd("GET").arg(l.key());
                }
                let vals: Vec<redis::RedisResult<Option<String>>> = p.ignore_errors().query(c).expect("GET pipeline");
                for (l, v) in chunk.iter().zip(vals) {
                    if let Ok(Some(v)) = v {
                        found.insert(l.key(), v);
                    }
                }
            }
        }
        locks.iter().filter(|l| found.get(l.key()).map(String::as_str) != Some(l.token())).count()
    }

    /// The server's µs per PEXPIRE of every key, pipelined 100 at a time.
    fn pexpire_us(&mut self, locks: &[Lock]) -> f64 {
        let before = self.sum(|c| cmdstat(c, "pexpire").1);
        let calls_before = self.sum(|c| cmdstat(c, "pexpire").0);
        let ttl_ms = TTL.as_millis() as u64;
        for c in &mut self.cons {
            for chunk in locks.chunks(100) {
                let mut p = redis::pipe();
                for l in chunk {
                    p.cmd("PEXPIRE").arg(l.key()).arg(ttl_ms);
                }
                // MOVED for other masters' keys in a cluster: not counted as calls.
                let _: Vec<redis::RedisResult<i64>> = p.ignore_errors().query(c).expect("PEXPIRE pipeline");
            }
        }
        let usec = self.sum(|c| cmdstat(c, "pexpire").1) - before;
        let calls = self.sum(|c| cmdstat(c, "pexpire").0) - calls_before;
        usec as f64 / calls.max(1) as f64
    }
}

struct Row {
    setup: String,
    acquire: Duration,
    threads: (usize, usize),
    rss_per_lock: f64,
    renew_calls: f64,
    reads: f64,
    renew_us: f64,
    pexpire_us: f64,
    lost: usize,
    release: Duration,
}

fn run(setup: &str, n: usize, client: LockClient, mut servers: Servers) -> Row {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    // Warm: the connection and the backend are found out before counting.
    drop(rt.block_on(client.try_acquire_with_async("warm", TTL, &opts)).expect("warm-up lock"));
    while servers.dbsize() > 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let threads_before = threads();
    let rss_before = rss_bytes();

    let start = Instant::now();
    let locks: Vec<Lock> = rt.block_on(async {
        let tasks: Vec<_> = (0..ACQUIRING_TASKS)
            .map(|t| {
                let (client, opts) = (client.clone(), opts.clone());
                tokio::spawn(async move {
                    let mut mine = Vec::with_capacity(n / ACQUIRING_TASKS + 1);
                    for i in (t..n).step_by(ACQUIRING_TASKS) {
                        mine.push(
                            client.try_acquire_with_async(&format!("scale:{i}"), TTL, &opts).await.expect("acquire"),
                        );
                    }
                    mine
                })
            })
            .collect();
        let mut all = Vec::with_capacity(n);
        for t in tasks {
            all.extend(t.await.expect("acquiring task"));
        }
        all
    });
    let acquire = start.elapsed();

    // Hold for 3 renewal intervals, counted from the last acquisition.
    servers.reset();
    let reads_before = servers.sum(reads);
    let interval = TTL / 3;
    let hold = interval * 3;
    let held_from = Instant::now();
    let mut most = threads();
    let mut rss = rss_bytes();
    while held_from.elapsed() < hold {
        std::thread::sleep(Duration::from_millis(50));
        most = most.max(threads());
        rss = rss.max(rss_bytes());
    }
    let (renew_calls, renew_usec) =
        (servers.sum(|c| cmdstat(c, "lock.renew").0), servers.sum(|c| cmdstat(c, "lock.renew").1));
    let read_events = servers.sum(reads) - reads_before;
    let intervals = held_from.elapsed().as_secs_f64() / interval.as_secs_f64();
    let lost = locks.iter().filter(|l| !l.is_held()).count() + servers.not_held(&locks);
    let pexpire_us = servers.pexpire_us(&locks);

    let start = Instant::now();
    drop(locks);
    while servers.dbsize() > 0 {
        assert!(start.elapsed() < Duration::from_secs(120), "releases still pending after 2 minutes");
        std::thread::sleep(Duration::from_millis(5));
    }
    let release = start.elapsed();
    Row {
        setup: setup.to_string(),
        acquire,
        threads: (threads_before, most),
        rss_per_lock: rss.saturating_sub(rss_before) as f64 / n as f64,
        renew_calls: renew_calls as f64 / intervals,
        reads: read_events as f64 / intervals,
        renew_us: renew_usec as f64 / renew_calls.max(1) as f64,
        pexpire_us,
        lost,
        release,
    }
}

/// Each lock renewed on its own (no session).
fn lock_by_lock() -> ClientOptions {
    ClientOptions::new().sessions(false)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if full { &[1_000, 10_000, 100_000] } else { &[1_000] };
    let mut rows = Vec::new();
    let server = Server::start();
    for &n in sizes {
        let client = LockClient::open_with(&server.url(), lock_by_lock()).expect("client");
        rows.push(run(&format!("1 server, N = {n}"), n, client, Servers { cons: vec![server.conn()] }));
        eprintln!("done: N = {n}");
    }
    if full {
        let c = Cluster::start(3, 0);
        let client = LockClient::open_cluster_with(&c.urls(), lock_by_lock()).expect("cluster client");
        let cons = c.masters().into_iter().map(|m| c.node(m).conn()).collect();
        rows.push(run("3-master cluster, N = 10000", 10_000, client, Servers { cons }));
    }
    println!(
        "TTL {} s (renewal every {} s), held 3 intervals after the last acquisition",
        TTL.as_secs(),
        (TTL / 3).as_secs()
    );
    println!();
    println!("| setup | acquire s | threads before → max | RSS/lock | LOCK.RENEW calls / interval | server reads / interval | renewals / read | µs per LOCK.RENEW | µs per PEXPIRE (pipelined) | lost | release s |");
    println!("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |");
    for r in rows {
        println!(
            "| {} | {:.2} | {} → {} | {:.0} B | {:.0} | {:.0} | {:.1} | {:.2} | {:.2} | {} | {:.2} |",
            r.setup,
            r.acquire.as_secs_f64(),
            r.threads.0,
            r.threads.1,
            r.rss_per_lock,
            r.renew_calls,
            r.reads,
            r.renew_calls / r.reads.max(1.0),
            r.renew_us,
            r.pexpire_us,
            r.lost,
            r.release.as_secs_f64()
        );
    }
}
