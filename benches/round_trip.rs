//! Client round trip (issue 4, part 2): one synchronous redis-rs connection
//! to a private local redis-server with the module loaded, timing whole
//! request/reply round trips for the same lock operation done four ways:
//!
//! - `module`: the LOCK.* commands (`LOCK.ACQUIRE` + `LOCK.RELEASE`, ...);
//! - `raw`: the nearest native commands with no ownership check, the floor
//!   (`SET NX PX` + `DEL`, `PEXPIRE`, `SET PX`);
//! - `script`: what the seed-000 Go services send: `SET NX PX` for acquire,
//!   and EVALSHA of the reference scripts for release, renew and takeover;
//! - `client`: the same operations through `redis-lock-client`'s sync API
//!   (`LockClient::try_acquire` + `Lock::release`, `Lock::renew`,
//!   `LockClient::takeover`), which send the LOCK.* commands with `FENCE`.
//!
//! Targets: module acquire+release ≤ 1.1× the raw round trip, and the
//! client's acquire+release ≤ 1.1× raw too. After each group the bench
//! prints how many commands the server ran per client call (INFO
//! commandstats around 1000 calls), as evidence of its round trips, and at
//! the end an interleaved cross-check of all four (alternating blocks, so a
//! load change on a shared machine hits every variant alike).
//!
//! `cargo bench --bench round_trip` (add `-- --quick` for a short run). The
//! server is started by `redis_lock_harness::Server`, which builds the module
//! if needed; `REDIS_SERVER` names another redis-server binary.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use redis::Connection;
use redis_lock_client::{Backend, LockClient, LockOptions};
use redis_lock_harness::Server;
use redis_lock_rules::encode::structured_value;
use redis_lock_rules::scripts;

const TOKEN: &str = "3f2b8c1e-5d4a-4b6f-9e1c-7a8d9b0c2e4f";
const OTHER: &str = "a7c4e2f0-1b3d-4e5f-8a9b-0c1d2e3f4a5b";
const RUN: &str = "9d8e7f6a-5b4c-4d3e-a2f1-0e9d8c7b6a50";
const TTL: u64 = 30_000;

fn load(con: &mut Connection, body: &str) -> String {
    redis::cmd("SCRIPT").arg("LOAD").arg(body).query(con).expect("SCRIPT LOAD")
}

fn int(con: &mut Connection, cmd: &mut redis::Cmd) -> i64 {
    cmd.query(con).expect("integer reply")
}

/// `SET key token NX PX ttl`, true when granted.
fn set_nx_px(con: &mut Connection, key: &str) -> bool {
    let r: Option<String> =
        redis::cmd("SET").arg(key).arg(TOKEN).arg("NX").arg("PX").arg(TTL).query(con).expect("SET NX PX");
    r.is_some()
}

fn acquire_release(c: &mut Criterion, server: &Server) {
    let mut con = server.conn();
    let release_sha = load(&mut con, scripts::RELEASE);
    let mut g = c.benchmark_group("acquire_release");
    g.measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));

    g.bench_function(BenchmarkId::new("module", "LOCK.ACQUIRE+LOCK.RELEASE"), |b| {
        let key = "bench:ar:module";
        b.iter(|| {
            assert_eq!(int(&mut con, redis::cmd("LOCK.ACQUIRE").arg(key).arg(TOKEN).arg(TTL)), 1);
            assert_eq!(int(&mut con, redis::cmd("LOCK.RELEASE").arg(key).arg(TOKEN)), 1);
        })
    });
    g.bench_function(BenchmarkId::new("raw", "SET NX PX+DEL"), |b| {
        let key = "bench:ar:raw";
        b.iter(|| {
            assert!(set_nx_px(&mut con, key));
            assert_eq!(int(&mut con, redis::cmd("DEL").arg(key)), 1);
        })
    });
    g.bench_function(BenchmarkId::new("script", "SET NX PX+EVALSHA release"), |b| {
        let key = "bench:ar:script";
        b.iter(|| {
            assert!(set_nx_px(&mut con, key));
            assert_eq!(int(&mut con, redis::cmd("EVALSHA").arg(&release_sha).arg(1).arg(key).arg(TOKEN)), 1);
        })
    });

    // The client crate (`redis-lock-client`, sync API) on the same server:
    // `try_acquire` (LOCK.ACQUIRE ... FENCE, random token) and `release`
    // (LOCK.RELEASE); the release marks the lock released, so its drop sends
    // nothing. Its ratio to `raw` is the issue-4 target (≤ 1.1×).
    let locks = client(server);
    g.bench_function(BenchmarkId::new("client", "acquire+release"), |b| {
        let key = "bench:ar:client";
        b.iter(|| {
            let lock = locks.try_acquire(key, Duration::from_millis(TTL)).expect("client acquire");
            lock.release().expect("client release");
        })
    });
    g.finish();
    count_commands(server, "client acquire+release", 1000, || {
        let lock = locks.try_acquire("bench:ar:client", Duration::from_millis(TTL)).expect("client acquire");
        lock.release().expect("client release");
    });
}

/// A client on `server` whose backend is already detected, so the timed
/// loops see its steady state (detection rides on the first command anyway).
fn client(server: &Server) -> LockClient {
    let locks = LockClient::open(&server.url()).expect("client");
    drop(locks.try_acquire("bench:client:warm", Duration::from_millis(TTL)).expect("client warm-up acquire"));
    assert_eq!(locks.backend(), Backend::Module, "the module is loaded: the client must use it");
    locks
}

/// Commands the server ran per call of `op` (INFO commandstats before and
/// after `n` calls, minus the INFO itself): evidence of how many round
/// trips the client spends, printed next to criterion's numbers.
fn count_commands(server: &Server, what: &str, n: u64, mut op: impl FnMut()) {
    let mut con = server.conn();
    let stats = |con: &mut Connection| -> std::collections::BTreeMap<String, u64> {
        let info: String = redis::cmd("INFO").arg("commandstats").query(con).expect("INFO commandstats");
        info.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?.parse().ok()?;
                Some((name.to_string(), calls))
            })
            .collect()
    };
    let before = stats(&mut con);
    for _ in 0..n {
        op();
    }
    let after = stats(&mut con);
    let mut total = 0;
    let mut per = Vec::new();
    for (name, calls) in &after {
        let d = calls - before.get(name).copied().unwrap_or(0) - u64::from(name == "info");
        if d > 0 {
            total += d;
            per.push(format!("{name} {:.2}", d as f64 / n as f64));
        }
    }
    println!("{what}: {:.2} commands per call ({})", total as f64 / n as f64, per.join(", "));
}

fn renew(c: &mut Criterion, server: &Server) {
    let mut con = server.conn();
    let renew_sha = load(&mut con, scripts::RENEW);
    let key = "bench:renew";
    assert!(set_nx_px(&mut con, key));
    let mut g = c.benchmark_group("renew");
    g.measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    g.bench_function(BenchmarkId::new("module", "LOCK.RENEW"), |b| {
        b.iter(|| assert_eq!(int(&mut con, redis::cmd("LOCK.RENEW").arg(key).arg(TOKEN).arg(TTL)), 1))
    });
    g.bench_function(BenchmarkId::new("raw", "PEXPIRE"), |b| {
        b.iter(|| assert_eq!(int(&mut con, redis::cmd("PEXPIRE").arg(key).arg(TTL)), 1))
    });
    g.bench_function(BenchmarkId::new("script", "EVALSHA renew"), |b| {
        b.iter(|| {
            assert_eq!(int(&mut con, redis::cmd("EVALSHA").arg(&renew_sha).arg(1).arg(key).arg(TOKEN).arg(TTL)), 1)
        })
    });
    // The client's renew of a lock it holds (its own key: `bench:renew` is
    // held by TOKEN through the raw connection).
    let locks = client(server);
    let lock = locks.try_acquire("bench:renew:client", Duration::from_millis(TTL)).expect("client acquire");
    g.bench_function(BenchmarkId::new("client", "renew"), |b| {
        b.iter(|| lock.renew(Duration::from_millis(TTL)).expect("client renew"))
    });
    g.finish();
    count_commands(server, "client renew", 1000, || lock.renew(Duration::from_millis(TTL)).expect("client renew"));
    lock.release().expect("client release");
}

fn takeover(c: &mut Criterion, server: &Server) {
    let mut con = server.conn();
    let takeover_sha = load(&mut con, scripts::TAKEOVER);
    let key = "bench:takeover";
    let theirs = String::from_utf8(structured_value(OTHER, RUN)).expect("ascii");
    let mine = String::from_utf8(structured_value(TOKEN, RUN)).expect("ascii");
    // Held by another owner of the same run: every call takes it over.
    let () = redis::cmd("SET").arg(key).arg(&theirs).arg("PX").arg(TTL).query(&mut con).expect("SET");
    let mut g = c.benchmark_group("takeover_same_run");
    g.measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    g.bench_function(BenchmarkId::new("module", "LOCK.TAKEOVER"), |b| {
        b.iter(|| assert_eq!(int(&mut con, redis::cmd("LOCK.TAKEOVER").arg(key).arg(TOKEN).arg(RUN).arg(TTL)), 1))
    });
    g.bench_function(BenchmarkId::new("raw", "SET PX"), |b| {
        b.iter(|| {
            let () = redis::cmd("SET").arg(key).arg(&mine).arg("PX").arg(TTL).query(&mut con).expect("SET PX");
        })
    });
    g.bench_function(BenchmarkId::new("script", "EVALSHA takeover"), |b| {
        b.iter(|| {
            assert_eq!(int(&mut con, redis::cmd("EVALSHA").arg(&takeover_sha).arg(1).arg(key).arg(&mine).arg(TTL)), 1)
        })
    });
    // The client's acquire-or-takeover (LOCK.TAKEOVER ... FENCE). Each call
    // has a fresh random token, so it takes the key over from the previous
    // call's owner of the same run. Its `Lock` would release on drop, so the
    // handles are kept until the end of each batch and dropped untimed
    // (`iter_with_large_drop`); the last drop of a batch deletes the key, so
    // the first call of the next batch finds it free.
    let locks = client(server);
    let ckey = "bench:takeover:client";
    let () = redis::cmd("SET").arg(ckey).arg(&theirs).arg("PX").arg(TTL).query(&mut con).expect("SET");
    g.bench_function(BenchmarkId::new("client", "takeover"), |b| {
        b.iter_with_large_drop(|| locks.takeover(ckey, RUN, Duration::from_millis(TTL)).expect("client takeover"))
    });
    g.finish();
    let mut held = Vec::new();
    count_commands(server, "client takeover (drops excluded)", 1000, || {
        held.push(locks.takeover(ckey, RUN, Duration::from_millis(TTL)).expect("client takeover"))
    });
    drop(held);
}

/// One operation of the interleaved check, on the shared raw connection.
type Op<'a> = Box<dyn FnMut(&mut Connection) + 'a>;

/// A cross-check of the criterion groups that load drift cannot skew: the
/// variants of each operation run in alternating blocks (rotating order) on
/// one server, so each round compares them under the same conditions; the
/// median of the per-round ratios to `raw` is printed. Runs only under
/// `cargo bench` (`--bench`), shorter with `--quick`.
fn interleaved(server: &Server) {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let (rounds, block) = if args.iter().any(|a| a == "--quick") { (11, 200) } else { (31, 500) };
    let ttl = Duration::from_millis(TTL);
    let mut con = server.conn();
    let release_sha = load(&mut con, scripts::RELEASE);
    let renew_sha = load(&mut con, scripts::RENEW);
    let takeover_sha = load(&mut con, scripts::TAKEOVER);
    let mine = String::from_utf8(structured_value(TOKEN, RUN)).expect("ascii");
    let locks = client(server);
    let renewed = locks.try_acquire("bench:x:renew:client", ttl).expect("client acquire");
    assert!(set_nx_px(&mut con, "bench:x:renew"));
    // Client takeovers keep their locks until the end of the block (a drop
    // would release); dropped untimed, like `iter_with_large_drop`.
    let held = std::cell::RefCell::new(Vec::new());
    let fixed = LockOptions::new().token(TOKEN);
    // Per group: the four variants of the criterion group (raw second, the
    // denominator), then diagnostics that split the client's overhead into
    // the server's FENCE work (the client always asks for a fence) and the
    // client's own (with a fixed token: no OS random number per lock).
    let groups: Vec<(&str, Vec<(&str, Op)>)> = vec![
        (
            "acquire+release",
            vec![
                (
                    "module",
                    Box::new(|con| {
                        assert_eq!(int(con, redis::cmd("LOCK.ACQUIRE").arg("bench:x:ar:m").arg(TOKEN).arg(TTL)), 1);
                        assert_eq!(int(con, redis::cmd("LOCK.RELEASE").arg("bench:x:ar:m").arg(TOKEN)), 1);
                    }),
                ),
                (
                    "raw",
                    Box::new(|con| {
                        assert!(set_nx_px(con, "bench:x:ar:r"));
                        assert_eq!(int(con, redis::cmd("DEL").arg("bench:x:ar:r")), 1);
                    }),
                ),
                (
                    "script",
                    Box::new(|con| {
                        assert!(set_nx_px(con, "bench:x:ar:s"));
                        assert_eq!(
                            int(con, redis::cmd("EVALSHA").arg(&release_sha).arg(1).arg("bench:x:ar:s").arg(TOKEN)),
                            1
                        );
                    }),
                ),
                (
                    "client",
                    Box::new(|_| {
                        let lock = locks.try_acquire("bench:x:ar:c", ttl).expect("client acquire");
                        lock.release().expect("client release");
                    }),
                ),
                (
                    "module FENCE",
                    Box::new(|con| {
                        assert!(
                            int(con, redis::cmd("LOCK.ACQUIRE").arg("bench:x:ar:f").arg(TOKEN).arg(TTL).arg("FENCE"))
                                > 0
                        );
                        assert_eq!(int(con, redis::cmd("LOCK.RELEASE").arg("bench:x:ar:f").arg(TOKEN)), 1);
                    }),
                ),
                (
                    "client fixed token",
                    Box::new(|_| {
                        let lock = locks.try_acquire_with("bench:x:ar:t", ttl, &fixed).expect("client acquire");
                        lock.release().expect("client release");
                    }),
                ),
            ],
        ),
        (
            "renew",
            vec![
                (
                    "module",
                    Box::new(|con| {
                        assert_eq!(int(con, redis::cmd("LOCK.RENEW").arg("bench:x:renew").arg(TOKEN).arg(TTL)), 1)
                    }),
                ),
                ("raw", Box::new(|con| assert_eq!(int(con, redis::cmd("PEXPIRE").arg("bench:x:renew").arg(TTL)), 1))),
                (
                    "script",
                    Box::new(|con| {
                        assert_eq!(
                            int(
                                con,
                                redis::cmd("EVALSHA").arg(&renew_sha).arg(1).arg("bench:x:renew").arg(TOKEN).arg(TTL)
                            ),
                            1
                        )
                    }),
                ),
                ("client", Box::new(|_| renewed.renew(ttl).expect("client renew"))),
            ],
        ),
        (
            "same-run takeover",
            vec![
                (
                    "module",
                    Box::new(|con| {
                        assert_eq!(
                            int(con, redis::cmd("LOCK.TAKEOVER").arg("bench:x:to:m").arg(TOKEN).arg(RUN).arg(TTL)),
                            1
                        )
                    }),
                ),
                (
                    "raw",
                    Box::new(|con| {
                        let () = redis::cmd("SET")
                            .arg("bench:x:to:r")
                            .arg(&mine)
                            .arg("PX")
                            .arg(TTL)
                            .query(con)
                            .expect("SET PX");
                    }),
                ),
                (
                    "script",
                    Box::new(|con| {
                        assert_eq!(
                            int(
                                con,
                                redis::cmd("EVALSHA").arg(&takeover_sha).arg(1).arg("bench:x:to:s").arg(&mine).arg(TTL)
                            ),
                            1
                        )
                    }),
                ),
                (
                    "client",
                    Box::new(|_| {
                        held.borrow_mut().push(locks.takeover("bench:x:to:c", RUN, ttl).expect("client takeover"))
                    }),
                ),
                (
                    "module FENCE",
                    Box::new(|con| {
                        assert!(
                            int(
                                con,
                                redis::cmd("LOCK.TAKEOVER")
                                    .arg("bench:x:to:f")
                                    .arg(TOKEN)
                                    .arg(RUN)
                                    .arg(TTL)
                                    .arg("FENCE")
                            ) > 0
                        )
                    }),
                ),
            ],
        ),
    ];
    println!("interleaved check: {rounds} rounds x {block} ops per variant, rotating order; median µs/op, and median of the per-round ratios to raw");
    for (name, mut ops) in groups {
        let k = ops.len();
        let mut us = vec![Vec::new(); k];
        for r in 0..rounds {
            for j in 0..k {
                let v = (r + j) % k;
                let t = Instant::now();
                for _ in 0..block {
                    (ops[v].1)(&mut con);
                }
                us[v].push(t.elapsed().as_secs_f64() * 1e6 / f64::from(block));
                held.borrow_mut().clear();
            }
        }
        let cells: Vec<String> = (0..k)
            .map(|v| {
                let ratio = median((0..rounds).map(|r| us[v][r] / us[1][r]).collect());
                format!("{} {:.1} ({ratio:.3})", ops[v].0, median(us[v].clone()))
            })
            .collect();
        println!("interleaved {name}: {}", cells.join(", "));
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn round_trip(c: &mut Criterion) {
    let server = Server::start();
    acquire_release(c, &server);
    renew(c, &server);
    takeover(c, &server);
    interleaved(&server);
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
