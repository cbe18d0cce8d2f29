//! Client round trip (issue 4, part 2): one synchronous redis-rs connection
//! to a private local redis-server with the module loaded, timing whole
//! request/reply round trips for the same lock operation done three ways:
//!
//! - `module`: the LOCK.* commands (`LOCK.ACQUIRE` + `LOCK.RELEASE`, ...);
//! - `raw`: the nearest native commands with no ownership check, the floor
//!   (`SET NX PX` + `DEL`, `PEXPIRE`, `SET PX`);
//! - `script`: what the seed-000 Go services send: `SET NX PX` for acquire,
//!   and EVALSHA of the reference scripts for release, renew and takeover.
//!
//! Target: module acquire+release ≤ 1.1× the raw round trip.
//!
//! `cargo bench --bench round_trip` (add `-- --quick` for a short run). The
//! server is started by `redis_lock_harness::Server`, which builds the module
//! if needed; `REDIS_SERVER` names another redis-server binary.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use redis::Connection;
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
    let r: Option<String> = redis::cmd("SET").arg(key).arg(TOKEN).arg("NX").arg("PX").arg(TTL).query(con).expect("SET NX PX");
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

    // ---- CLIENT CRATE PATH (to add) -------------------------------------
    // When `redis-lock-client` (client/) has settled, add it as a root
    // dev-dependency and time its acquire + release here against the same
    // server, as `BenchmarkId::new("client", "acquire+release")`, e.g.
    //
    //     let locks = redis_lock_client::...::new(server.url(), ...);
    //     g.bench_function(BenchmarkId::new("client", "acquire+release"), |b| {
    //         b.iter(|| { let lock = locks.acquire("bench:ar:client", TTL)...; lock.release()... })
    //     });
    //
    // Its ratio to `raw` is the issue-4 target (≤ 1.1×).
    // ----------------------------------------------------------------------
    g.finish();
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
        b.iter(|| assert_eq!(int(&mut con, redis::cmd("EVALSHA").arg(&renew_sha).arg(1).arg(key).arg(TOKEN).arg(TTL)), 1))
    });
    // CLIENT CRATE PATH (to add): the client's renew of a held lock, as above.
    g.finish();
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
        b.iter(|| assert_eq!(int(&mut con, redis::cmd("EVALSHA").arg(&takeover_sha).arg(1).arg(key).arg(&mine).arg(TTL)), 1))
    });
    // CLIENT CRATE PATH (to add): the client's acquire-or-takeover, as above.
    g.finish();
}

fn round_trip(c: &mut Criterion) {
    let server = Server::start();
    acquire_release(c, &server);
    renew(c, &server);
    takeover(c, &server);
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
