//! Helpers of the session tests (tests/sessions.rs, tests/session_multi.rs):
//! a grant, the node's sessions, a session-held value, and waiting for a
//! condition.

use std::thread;
use std::time::{Duration, Instant};

use redis::Connection;

/// `SESSION.GRANT args…`: the id, 32 lowercase hex digits.
pub fn grant(c: &mut Connection, args: &[&str]) -> String {
    let id: String = redis::cmd("SESSION.GRANT").arg(args).query(c).expect("SESSION.GRANT");
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{id}");
    id
}

/// `SESSION.LIST`.
pub fn list(c: &mut Connection) -> Vec<String> {
    redis::cmd("SESSION.LIST").query(c).expect("SESSION.LIST")
}

/// Waits (at most 20 s) until `what` holds.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// What a lock held by session `id` for `token` stores (no `MAXHOLD`).
pub fn held_value(id: &str, token: &str) -> String {
    format!(r#"{{"owner":null,"session":"{id}","token":"{token}"}}"#)
}
