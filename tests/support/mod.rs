//! Helpers shared by the WAIT tests: plain commands, `INFO lock` fields,
//! and waiters on threads of their own.
#![allow(dead_code)] // each test file uses its own share

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

pub mod holders;

use redis::Value;
use redis_lock_harness::Server;

pub fn acquire(c: &mut redis::Connection, key: &str, token: &str) -> i64 {
    redis::cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(60_000).query(c).expect("acquire")
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

/// Waits until `n` clients are blocked in the server.
pub fn until_waiting(c: &mut redis::Connection, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(c, "waiting") != n {
        assert!(Instant::now() < deadline, "expected {n} waiting clients");
        thread::sleep(Duration::from_millis(2));
    }
}

/// Starts a client that waits for `key` as `token`; its reply arrives on
/// the channel together with the instant it arrived.
pub fn waiter(server: &Server, key: &str, token: &str, timeout_ms: u64, tx: mpsc::Sender<(String, Value, Instant)>) -> thread::JoinHandle<()> {
    waiter_on(server.conn(), key, token, &["WAIT", &timeout_ms.to_string()], tx)
}

/// `LOCK.ACQUIRE key token 60000 options...` on `c` from a new thread; an
/// error reply arrives as a `SimpleString` holding its text.
pub fn waiter_on(mut c: redis::Connection, key: &str, token: &str, options: &[&str], tx: mpsc::Sender<(String, Value, Instant)>) -> thread::JoinHandle<()> {
    let (key, token) = (key.to_string(), token.to_string());
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    thread::spawn(move || {
        let reply = redis::cmd("LOCK.ACQUIRE").arg(&key).arg(&token).arg(60_000).arg(&options).query::<Value>(&mut c);
        let _ = tx.send((token, reply.unwrap_or_else(|e| Value::SimpleString(e.to_string())), Instant::now()));
    })
}
