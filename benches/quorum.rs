//! Quorum lock latency (issue 11): acquire + release through
//! `redis-lock-client`, on one server vs a quorum of N = 1, 3, 5 servers,
//! all private local redis-servers with the module (loopback).
//!
//! Variants, each one acquire + release of a free key per sample:
//! - `single`: `LockClient::try_acquire` + `Lock::release` (sync API): 2
//!   round trips on one connection;
//! - `single async`: the same `LockClient` (so the same connection) through
//!   the `_async` API on a current-thread tokio runtime in the bench
//!   thread: the sync API is a thin layer over it, and the ratio of the two
//!   is what that layer costs;
//! - `quorum N`: `QuorumClient::try_acquire` + `QuorumLock::release` (sync
//!   API, run on the client's background runtime): the two-phase acquire
//!   (ACQUIRE on all, then RENEW ... FLOOR on the granting servers) and the
//!   release, each step on all N servers in parallel;
//! - `quorum N async`: the same through the `_async` API on a
//!   current-thread tokio runtime in the bench thread.
//!
//! The variants run interleaved, in blocks of 100 samples, 20 rounds, so a
//! change of load on a shared machine hits them alike. Prints per variant
//! p50 / p90 / p99 / mean in µs and the server commands per sample (INFO
//! commandstats summed over the servers, around 1 000 samples), as
//! evidence of what each one sends.
//!
//! `cargo bench --bench quorum` (`QUORUM_BENCH_ROUNDS=5` for a short run).
//! The servers are started by `redis_lock_harness::Server`, which builds
//! the module if needed; `REDIS_SERVER` names another redis-server binary.

use std::time::{Duration, Instant};

use redis_lock_client::{LockClient, QuorumClient, QuorumOptions};
use redis_lock_harness::Server;

const TTL: Duration = Duration::from_secs(30);
const BLOCK: usize = 100;

enum Variant {
    Single(LockClient),
    SingleAsync(LockClient, tokio::runtime::Runtime),
    Quorum(QuorumClient),
    QuorumAsync(QuorumClient, tokio::runtime::Runtime),
}

impl Variant {
    fn once(&self, key: &str) {
        match self {
            Variant::Single(c) => c.try_acquire(key, TTL).expect("acquire").release().expect("release"),
            Variant::SingleAsync(c, rt) => rt.block_on(async {
                let lock = c.try_acquire_async(key, TTL).await.expect("acquire");
                lock.release_async().await.expect("release");
            }),
            Variant::Quorum(c) => c.try_acquire(key, TTL).expect("acquire").release().expect("release"),
            Variant::QuorumAsync(c, rt) => rt.block_on(async {
                let lock = c.try_acquire_async(key, TTL).await.expect("acquire");
                lock.release_async().await.expect("release");
            }),
        }
    }
}

/// Commands the servers ran so far (all LOCK.* and EVALSHA/SET/DEL).
fn commands(servers: &[&Server]) -> u64 {
    servers
        .iter()
        .map(|s| {
            let info: String = redis::cmd("INFO").arg("commandstats").query(&mut s.conn()).expect("INFO");
            info.lines()
                .filter(|l| {
                    l.starts_with("cmdstat_lock.")
                        || l.starts_with("cmdstat_set:")
                        || l.starts_with("cmdstat_del:")
                        || l.starts_with("cmdstat_evalsha:")
                })
                .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is understood.
    let rounds: usize = std::env::var("QUORUM_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(20);
    let servers: Vec<Server> = (0..5).map(|_| Server::start()).collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let opts = QuorumOptions::new();
    let quorum = |n: usize| QuorumClient::open_with(&urls[..n], opts.clone()).expect("quorum client");
    let rt = || tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let single = LockClient::open(&urls[0]).expect("client");
    let variants: Vec<(String, usize, Variant)> = vec![
        ("single (LockClient)".into(), 1, Variant::Single(single.clone())),
        ("single async (same LockClient)".into(), 1, Variant::SingleAsync(single, rt())),
        ("quorum N=1".into(), 1, Variant::Quorum(quorum(1))),
        ("quorum N=3".into(), 3, Variant::Quorum(quorum(3))),
        ("quorum N=5".into(), 5, Variant::Quorum(quorum(5))),
        ("quorum N=3 async".into(), 3, Variant::QuorumAsync(quorum(3), rt())),
        ("quorum N=5 async".into(), 5, Variant::QuorumAsync(quorum(5), rt())),
    ];
    let mut samples: Vec<Vec<Duration>> = variants.iter().map(|_| Vec::with_capacity(rounds * BLOCK)).collect();
    let mut per_op = Vec::new();
    // Warm-up and command count: 1 000 samples each.
    for (i, (_, n, v)) in variants.iter().enumerate() {
        let key = format!("bench:quorum:{i}");
        let used: Vec<&Server> = servers[..*n].iter().collect();
        let before = commands(&used);
        for _ in 0..1000 {
            v.once(&key);
        }
        // Releases still finishing on the last servers are counted too.
        std::thread::sleep(Duration::from_millis(50));
        per_op.push((commands(&used) - before) as f64 / 1000.0);
    }
    for _ in 0..rounds {
        for (i, (_, _, v)) in variants.iter().enumerate() {
            let key = format!("bench:quorum:{i}");
            for _ in 0..BLOCK {
                let t = Instant::now();
                v.once(&key);
                samples[i].push(t.elapsed());
            }
        }
    }
    println!("acquire+release, {} samples per variant ({rounds} interleaved rounds of {BLOCK})", rounds * BLOCK);
    println!("| variant | p50 µs | p90 µs | p99 µs | mean µs | commands/op |");
    println!("|---|--:|--:|--:|--:|--:|");
    for (i, (name, _, _)) in variants.iter().enumerate() {
        let s = &mut samples[i];
        s.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let pct = |p: f64| us(s[((s.len() - 1) as f64 * p).round() as usize]);
        let mean = us(s.iter().sum::<Duration>()) / s.len() as f64;
        println!("| {name} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |", pct(0.5), pct(0.9), pct(0.99), mean, per_op[i]);
    }
}
