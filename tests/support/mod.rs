//! Helpers shared by the WAIT tests: plain commands, `INFO lock` fields,
//! and waiters on threads of their own.
#![allow(dead_code)] // each test file uses its own share

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

pub mod eviction;
pub mod holders;
pub mod lease;
pub mod session;

use redis::Value;
use redis_lock_harness::Server;

/// The lease of [`acquire`]'s holders and of every [`waiter`]: longer than
/// any wait in these tests, so a waiter granted within its wait was served
/// by the event under test, never by a holder's lease running out.
pub const LEASE_MS: i64 = 60_000;

pub fn acquire(c: &mut redis::Connection, key: &str, token: &str) -> i64 {
    redis::cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(LEASE_MS).query(c).expect("acquire")
}

/// `key`'s absolute expiry on the server's clock (Unix ms; -1 none, -2 gone).
pub fn expiry_ms(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).expect("pexpiretime")
}

/// When the server granted `key` to its current holder, a [`waiter`], on the
/// server's own clock: its lease ends [`LEASE_MS`] after the grant. Timing
/// read this way does not depend on how fast this machine runs the test.
pub fn granted_at_ms(c: &mut redis::Connection, key: &str) -> i64 {
    let expiry = expiry_ms(c, key);
    assert!(expiry > 0, "{key} has no lease: {expiry}");
    expiry - LEASE_MS
}

/// Turns Redis's own active expiry off, so that a key whose lease ends is
/// freed only by the module's timer (or a read): a grant then proves the
/// timer fired, with no bound on how long this machine took.
pub fn without_active_expiry(c: &mut redis::Connection) {
    let _: () = redis::cmd("DEBUG").arg("SET-ACTIVE-EXPIRE").arg(0).query(c).expect("DEBUG SET-ACTIVE-EXPIRE 0");
}

pub fn release(c: &mut redis::Connection, key: &str, token: &str) -> i64 {
    redis::cmd("LOCK.RELEASE").arg(key).arg(token).query(c).expect("release")
}

pub fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).expect("get")
}

pub fn info_field(c: &mut redis::Connection, name: &str) -> u64 {
    let text: String = redis::cmd("INFO").arg("lock").query(c).expect("info");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("lock_{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no lock_{name} in INFO"))
}

/// `INFO lock` as field → text, without the `lock_` prefix.
pub fn lock_info(c: &mut redis::Connection) -> std::collections::HashMap<String, String> {
    let text: String = redis::cmd("INFO").arg("lock").query(c).expect("info");
    parse_lock_info(&text)
}

/// The text of `INFO lock` (read inside an `EXEC`, say) as [`lock_info`].
pub fn parse_lock_info(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("lock_"))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// A counter of [`lock_info`].
pub fn count(i: &std::collections::HashMap<String, String>, field: &str) -> u64 {
    i.get(field).unwrap_or_else(|| panic!("no lock_{field}: {i:?}")).parse().expect("a number")
}

/// Waits until a replica's link to its master is up (it has synced).
/// A folder for a master that appends every write to its AOF, removed
/// when dropped: the tests that a replica and an AOF restart carry some
/// state start the master here ([`AofDir::start`]), kill it, and start it
/// again on the same folder.
pub struct AofDir(std::path::PathBuf);

impl AofDir {
    /// A fresh folder named for the test (`name`) and this process.
    pub fn new(name: &str) -> AofDir {
        let dir = std::env::temp_dir().join(format!("redis-lock-{name}-aof-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        AofDir(dir)
    }

    /// A master on this folder, its AOF fsynced at every write.
    pub fn start(&self) -> Server {
        Server::builder().dir(&self.0).arg("appendonly", "yes").arg("appendfsync", "always").start()
    }
}

impl Drop for AofDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A replica of `master` and a connection to it, once its link is up.
pub fn replica_of(master: &Server) -> (Server, redis::Connection) {
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    (replica, r)
}

pub fn wait_for_link(replica: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query(replica).expect("info");
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(Instant::now() < deadline, "replica did not sync");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `n` clients are blocked in the server.
pub fn until_waiting(c: &mut redis::Connection, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field(c, "waiting") != n {
        assert!(Instant::now() < deadline, "expected {n} waiting clients");
        thread::sleep(Duration::from_millis(2));
    }
}

/// Starts a client that waits for `key` as `token`; its reply arrives on
/// the channel together with the instant it arrived.
pub fn waiter(
    server: &Server,
    key: &str,
    token: &str,
    timeout_ms: u64,
    tx: mpsc::Sender<(String, Value, Instant)>,
) -> thread::JoinHandle<()> {
    waiter_on(server.conn(), key, token, &["WAIT", &timeout_ms.to_string()], tx)
}

/// `LOCK.ACQUIRE key token LEASE_MS options...` on `c` from a new thread; an
/// error reply arrives as a `SimpleString` holding its text.
pub fn waiter_on(
    mut c: redis::Connection,
    key: &str,
    token: &str,
    options: &[&str],
    tx: mpsc::Sender<(String, Value, Instant)>,
) -> thread::JoinHandle<()> {
    let (key, token) = (key.to_string(), token.to_string());
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    thread::spawn(move || {
        let reply = redis::cmd("LOCK.ACQUIRE").arg(&key).arg(&token).arg(LEASE_MS).arg(&options).query::<Value>(&mut c);
        let _ = tx.send((token, reply.unwrap_or_else(|e| Value::SimpleString(e.to_string())), Instant::now()));
    })
}
