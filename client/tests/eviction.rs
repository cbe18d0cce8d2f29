//! The holder hears *evicted* (issue 29): a lock whose key the server
//! evicts is lost with `LossReason::Evicted` (through the watchdog, a
//! manual renewal, a semaphore permit), and `redis-lock run` exits 78.
//! The server runs `volatile-lru` and is filled with keys without a TTL,
//! so the lock keys (they carry a TTL) are the only keys it can evict;
//! under `allkeys-lru`, session-held keys (no TTL) are evicted too, and
//! their loss is heard through the session's keepalive.

mod cli_support;
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::{Connection, RedisResult, Value};
use redis_lock_client::{LockOptions, LossReason, WatchdogOptions};
use redis_lock_harness::Server;
use support::{calls, client, ms};

const PATIENCE: Duration = Duration::from_secs(20);

/// A server that may evict (`lock.eviction allow`, so that it grants), its
/// limit 1.5 MB above what it uses now.
fn evicting_server() -> Server {
    let s = Server::builder().arg("lock.eviction", "allow").start();
    let mut c = s.conn();
    let text: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
    let used: u64 = text.lines().find_map(|l| l.strip_prefix("used_memory:")).unwrap().trim().parse().unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("volatile-lru").query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(used + 1_500_000).query(&mut c).unwrap();
    s
}

/// Writes keys without a TTL until the server refuses one for memory: by
/// then it had nothing left to evict, so every key with a TTL is gone.
fn fill_until_oom(c: &mut Connection) {
    let v = "x".repeat(1000);
    for i in 0..20_000 {
        let r: RedisResult<Value> = redis::cmd("SET").arg(format!("fill:{i}")).arg(&v).query(c);
        if let Err(e) = r {
            assert!(e.to_string().contains("OOM"), "{e}");
            return;
        }
    }
    panic!("20 MB written and no OOM: the limit did not hold");
}

fn evicted_count(c: &mut Connection) -> u64 {
    let text: String = redis::cmd("INFO").arg("lock").query(c).unwrap();
    ["lock_evicted_locks:", "lock_evicted_sem_holders:"]
        .iter()
        .map(|f| text.lines().find_map(|l| l.strip_prefix(f)).unwrap().trim().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn a_watched_lock_and_a_permit_whose_keys_are_evicted_are_lost_as_evicted() {
    let s = evicting_server();
    let c = client(&s);
    let watched = LockOptions::new().watchdog(WatchdogOptions::new());
    // Renewed every second: a loaded machine's late renewal does not let
    // the lease end (a loss as expired) before the eviction is heard.
    let lock = c.try_acquire_with("evict:lock", ms(3000), &watched).expect("acquire");
    let permit = c.semaphore("evict:sem", 2).try_acquire_with(ms(3000), &watched).expect("permit");
    let manual = c.try_acquire("evict:manual", ms(60_000)).expect("acquire without watchdog");
    let mut conn = s.conn();
    fill_until_oom(&mut conn);
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Evicted));
    assert_eq!(permit.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Evicted));
    assert!(manual.renew(ms(60_000)).unwrap_err().is_not_held());
    assert_eq!(manual.loss_reason(), Some(LossReason::Evicted));
    assert_eq!(evicted_count(&mut conn), 3);
    // Another token on a lost key is no eviction of its own.
    let _: RedisResult<()> = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(&mut conn);
    let other = c.try_acquire("evict:other", ms(60_000)).expect("acquire");
    let _: () = redis::cmd("SET").arg("evict:other").arg("intruder").query(&mut conn).unwrap();
    assert!(other.renew(ms(60_000)).unwrap_err().is_not_held());
    assert_eq!(other.loss_reason(), Some(LossReason::NotOwner));
}

#[test]
fn a_session_held_lock_is_not_evicted_by_a_volatile_policy() {
    let s = evicting_server();
    let c = redis_lock_client::LockClient::open(&s.url()).unwrap();
    let watched = LockOptions::new().watchdog(WatchdogOptions::new());
    // Its session's keepalive every 2/3 s may be late on a loaded machine.
    let lock = c.try_acquire_with("evict:session", ms(2000), &watched).expect("acquire");
    let mut conn = s.conn();
    assert_eq!(redis::cmd("PTTL").arg("evict:session").query::<i64>(&mut conn).unwrap(), -1, "held by a session");
    fill_until_oom(&mut conn);
    assert_eq!(redis::cmd("EXISTS").arg("evict:session").query::<i64>(&mut conn).unwrap(), 1);
    std::thread::sleep(ms(4000));
    assert!(lock.is_held(), "{:?}", lock.loss_reason());
    assert_eq!(evicted_count(&mut conn), 0);
}

/// A server that may evict any key (`allkeys-lru`), session-held ones
/// too, its limit 1.5 MB above what it uses now.
fn evicting_any_key() -> Server {
    let s = evicting_server();
    let mut c = s.conn();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query(&mut c).unwrap();
    s
}

/// 8 MB of keys without a TTL: under `allkeys-lru` and a 1.5 MB margin,
/// the older keys (the locks) are evicted.
fn fill(c: &mut Connection) {
    let v = "x".repeat(1000);
    for i in 0..8000 {
        let _: RedisResult<Value> = redis::cmd("SET").arg(format!("fill:{i}")).arg(&v).query(c);
    }
}

/// A watched lock and a permit held by the client's session, evicted:
/// the session's keepalive (`-ttl`, then `SESSION.INFO`'s `evicted`)
/// loses both as `Evicted`, with no renewal or release of theirs.
#[test]
fn session_held_holds_whose_keys_are_evicted_are_lost_as_evicted_through_the_keepalive() {
    let s = evicting_any_key();
    let c = redis_lock_client::LockClient::open(&s.url()).unwrap();
    let watched = LockOptions::new().watchdog(WatchdogOptions::new());
    let lock = c.try_acquire_with("evict:session", ms(3_000), &watched).expect("acquire");
    let permit = c.semaphore("evict:ssem", 2).try_acquire_with(ms(3_000), &watched).expect("permit");
    let mut conn = s.conn();
    assert_eq!(redis::cmd("PTTL").arg("evict:session").query::<i64>(&mut conn).unwrap(), -1, "held by a session");
    fill(&mut conn);
    assert_eq!(redis::cmd("EXISTS").arg("evict:session").query::<i64>(&mut conn).unwrap(), 0, "evicted");
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Evicted));
    assert_eq!(permit.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Evicted));
    assert!(calls(&mut conn, "session.info") >= 1, "heard through the session's listing");
    let text: String = redis::cmd("INFO").arg("lock").query(&mut conn).unwrap();
    assert!(text.contains("lock_session_holds_evicted:2"), "{text}");
}

/// `redis-lock run` whose lock is held by its session: evicted, it
/// exits 78 as with its own lease.
#[test]
fn run_with_a_session_exits_78_when_the_server_evicts_its_lock() {
    let s = evicting_any_key();
    let child = Command::new(cli_support::BIN)
        .args(["run", "--url", &s.url(), "--ttl", "3000", "--grace", "2000", "evict:srun", "--", "sleep", "60"])
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redis-lock");
    let mut conn = s.conn();
    wait_taken(&mut conn, "evict:srun");
    assert_eq!(redis::cmd("PTTL").arg("evict:srun").query::<i64>(&mut conn).unwrap(), -1, "held by a session");
    fill(&mut conn);
    let out = child.wait_with_output().expect("wait for redis-lock");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("evicted by the server"), "{err}");
}

#[test]
fn run_exits_78_when_the_server_evicts_its_lock() {
    let s = evicting_server();
    let url = s.url();
    // Its own lease: a session-held key has no TTL, which volatile-lru
    // never evicts (a_session_held_lock_is_not_evicted_by_a_volatile_policy).
    let child = run_holding(&url, "3000", "evict:run");
    let mut conn = s.conn();
    wait_taken(&mut conn, "evict:run");
    fill_until_oom(&mut conn);
    let out = child.wait_with_output().expect("wait for redis-lock");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("evicted by the server"), "{err}");
}

/// A server that cannot evict yet (`maxmemory 0`), under `allow`; then
/// [`start_evicting`] lets it.
fn quiet_server() -> Server {
    Server::builder().arg("lock.eviction", "allow").start()
}

fn start_evicting(s: &Server) {
    let mut c = s.conn();
    let text: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
    let used: u64 = text.lines().find_map(|l| l.strip_prefix("used_memory:")).unwrap().trim().parse().unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("volatile-lru").query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(used + 1_500_000).query(&mut c).unwrap();
}

fn unverified_count(c: &mut Connection) -> u64 {
    let text: String = redis::cmd("INFO").arg("lock").query(c).unwrap();
    text.lines().find_map(|l| l.strip_prefix("lock_evicted_unverified:")).unwrap().trim().parse().unwrap()
}

/// Locks taken while the server could not evict, and not renewed before
/// it evicted them (so in no table of the module): still lost as
/// `Evicted`, through a manual renewal, a release and the watchdog.
#[test]
fn locks_taken_before_eviction_was_possible_are_lost_as_evicted() {
    let s = quiet_server();
    let c = client(&s);
    let watched = LockOptions::new().watchdog(WatchdogOptions::new());
    let manual = c.try_acquire("early:manual", ms(60_000)).expect("acquire");
    let released = c.try_acquire("early:released", ms(60_000)).expect("acquire");
    let permit = c.semaphore("early:sem", 2).try_acquire(ms(60_000)).expect("permit");
    // Renewed every 2 s: whether its next renewal comes before or after
    // the eviction, its loss is told as one.
    let lock = c.try_acquire_with("early:watched", ms(6_000), &watched).expect("acquire");
    start_evicting(&s);
    let mut conn = s.conn();
    fill_until_oom(&mut conn);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(&mut conn).unwrap();
    assert!(manual.renew(ms(60_000)).unwrap_err().is_not_held());
    assert_eq!(manual.loss_reason(), Some(LossReason::Evicted));
    assert!(released.release().is_err());
    assert_eq!(released.loss_reason(), Some(LossReason::Evicted));
    assert!(permit.renew(ms(60_000)).is_err());
    assert_eq!(permit.loss_reason(), Some(LossReason::Evicted));
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Evicted));
    assert!(unverified_count(&mut conn) >= 3, "the three never renewed were in no table");
}

/// `redis-lock run` whose lock was taken before the server could evict:
/// its renewal every 3 s finds it evicted (tracked or not by then), and
/// it exits 78.
#[test]
fn run_exits_78_when_its_lock_taken_before_eviction_is_evicted() {
    let s = quiet_server();
    let url = s.url();
    let child = run_holding(&url, "9000", "early:run");
    let mut conn = s.conn();
    wait_taken(&mut conn, "early:run");
    start_evicting(&s);
    fill_until_oom(&mut conn);
    let out = child.wait_with_output().expect("wait for redis-lock");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("evicted by the server"), "{err}");
}

/// `redis-lock run` of `sleep 60` on `key` with its own lease of `ttl`
/// ms (no session), its standard error piped.
fn run_holding(url: &str, ttl: &str, key: &str) -> std::process::Child {
    Command::new(cli_support::BIN)
        .args(["run", "--url", url, "--ttl", ttl, "--grace", "2000", "--no-session", key, "--", "sleep", "60"])
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redis-lock")
}

/// Waits until `key` exists: `run` took its lock.
fn wait_taken(conn: &mut redis::Connection, key: &str) {
    let start = Instant::now();
    while redis::cmd("EXISTS").arg(key).query::<i64>(conn).unwrap() == 0 {
        assert!(start.elapsed() < PATIENCE, "run never took the lock");
        std::thread::sleep(ms(10));
    }
}
