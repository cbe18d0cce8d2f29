//! Acquire+release throughput of `redis-lock-client`: a Redis Cluster of 3
//! masters (no replicas, module on every node) against one server with the
//! module.
//!
//! For each setup and each client count C (1, 8, 32): C threads, each with
//! its own `LockClient` (its own connection(s)), loop `try_acquire` +
//! `release` on keys of their own (`bench:<thread>:<n % 64>`, so keys spread
//! over every master's slots and never contend), for `DURATION` after a
//! short warm-up. Every acquire must succeed and every release must answer
//! that it released (a refused one panics), so a number is only printed for
//! work that was done. Prints acquire+release pairs per second, per setup
//! and C, as a markdown table with the cluster/single ratio.
//!
//! `cargo bench --bench cluster_throughput` (about 40 s); `-- --quick`, or a
//! run without `--bench` (as under `cargo test --benches`), uses 0.3 s per
//! cell. All processes share this machine's cores: with 2 cores the servers
//! and the client threads compete, so the cluster's three servers cannot
//! each get a core; read the ratio with that in mind.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_client::LockClient;
use redis_lock_harness::{Cluster, Server};

const CLIENTS: [usize; 3] = [1, 8, 32];

fn run(open: &(dyn Fn() -> LockClient + Sync), clients: usize, duration: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    thread::scope(|s| {
        for t in 0..clients {
            let (stop, counting, done) = (stop.clone(), counting.clone(), done.clone());
            let client = open();
            s.spawn(move || {
                let keys: Vec<String> = (0..64).map(|n| format!("bench:{t}:{n}")).collect();
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let lock = client
                        .try_acquire(&keys[n % keys.len()], Duration::from_secs(10))
                        .expect("acquire a key nobody else uses");
                    lock.release().expect("release what we hold");
                    n += 1;
                    if counting.load(Ordering::Relaxed) {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        thread::sleep(duration / 5); // warm-up: connections, backend detection
        counting.store(true, Ordering::Relaxed);
        let start = Instant::now();
        thread::sleep(duration);
        let pairs = done.load(Ordering::Relaxed);
        let secs = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        pairs as f64 / secs
    })
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench") && !std::env::args().any(|a| a == "--quick");
    let duration = if full { Duration::from_secs(5) } else { Duration::from_millis(300) };
    let single = Server::start();
    let cluster = Cluster::start(3, 0);
    let single_url = single.url();
    let seeds = cluster.urls();
    println!("| clients | one server (pairs/s) | cluster, 3 masters (pairs/s) | cluster / one |");
    println!("|--:|--:|--:|--:|");
    for c in CLIENTS {
        let one = run(&|| LockClient::open(&single_url).expect("client"), c, duration);
        let three = run(&|| LockClient::open_cluster(&seeds).expect("cluster client"), c, duration);
        println!("| {c} | {one:.0} | {three:.0} | {:.2} |", three / one);
    }
}
