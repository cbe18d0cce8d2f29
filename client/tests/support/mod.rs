//! What the client's tests share: durations, polling, a client with short
//! timeouts, a runtime for the async API, and reading keys behind the
//! client's back. One copy here (`mod support;` in each test file), so a
//! fix reaches every test.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use redis::Commands;
use redis_lock_client::{ClientOptions, LockClient};
use redis_lock_harness::Server;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Polls `f` until it holds or `within` is over; its last answer.
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(ms(5));
    }
    f()
}

/// A client of `s` whose commands and connects fail after 2 s, its
/// watchdog locks each on its own lease (sessions off): the scenarios
/// compare the module with the scripts, which have no sessions, lock by
/// lock (tests/sessions.rs tests the sessions).
pub fn client(s: &Server) -> LockClient {
    let opts = ClientOptions::new().response_timeout(ms(2000)).connect_timeout(ms(2000)).sessions(false);
    LockClient::open_with(&s.url(), opts).expect("client")
}

/// A runtime for the `_async` API (two workers: a test's task and the
/// client's own).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// `key`'s value on `s`.
pub fn get(s: &Server, key: &str) -> Option<String> {
    s.conn().get(key).expect("GET")
}

/// `key`'s PTTL on `s`.
pub fn pttl(s: &Server, key: &str) -> i64 {
    s.conn().pttl(key).expect("PTTL")
}

/// The same, on node `i` of a cluster (the key's owner, or not).
pub mod cluster {
    use redis_lock_harness::Cluster;

    pub fn get(c: &Cluster, i: usize, key: &str) -> Option<String> {
        redis::cmd("GET").arg(key).query(&mut c.node(i).conn()).expect("GET on the owner")
    }

    pub fn pttl(c: &Cluster, i: usize, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(&mut c.node(i).conn()).expect("PTTL on the owner")
    }
}

/// `calls=` of `command` in a server's `INFO commandstats` (0 before its first call).
pub fn calls(con: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).expect("INFO");
    let field: std::collections::HashMap<&str, &str> = info.lines().filter_map(|l| l.split_once(':')).collect();
    field
        .get(format!("cmdstat_{command}").as_str())
        .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .map_or(0, |n| n.parse().unwrap())
}
