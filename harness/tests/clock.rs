//! The clock shift of `Builder::clock_offset_ms` against a real server.

use std::time::{SystemTime, UNIX_EPOCH};

use redis_lock_harness::Server;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}

/// The server's `TIME`, in ms, minus the system clock read around it.
fn skew_ms(s: &Server) -> i64 {
    let before = now_ms();
    let (sec, usec): (i64, i64) = redis::cmd("TIME").query(&mut s.conn()).expect("TIME");
    let after = now_ms();
    sec * 1000 + usec / 1000 - (before + after) / 2
}

#[test]
fn time_is_shifted_by_the_offset() {
    for offset in [30_000, -30_000, 0] {
        let s = Server::builder().clock_offset_ms(offset).start();
        let skew = skew_ms(&s);
        assert!((skew - offset).abs() < 500, "offset {offset}: server TIME is {skew} ms off the system clock");
    }
    // And a server without the shim is on the system clock.
    let s = Server::start();
    assert!(skew_ms(&s).abs() < 500);
}

#[test]
fn fences_follow_the_shifted_clock_and_ttls_do_not_stretch() {
    let s = Server::builder().clock_offset_ms(30_000).start();
    let mut c = s.conn();
    let fence: i64 =
        redis::cmd("LOCK.ACQUIRE").arg("k").arg("t").arg(10_000).arg("FENCE").query(&mut c).expect("ACQUIRE");
    let ahead = fence / 1000 - now_ms();
    assert!((29_500..30_500).contains(&ahead), "fence {fence} is {ahead} ms ahead of the system clock");
    // Expiry deadlines and "now" are shifted alike: a 10 s TTL stays 10 s.
    let pttl: i64 = redis::cmd("PTTL").arg("k").query(&mut c).expect("PTTL");
    assert!((9_000..=10_000).contains(&pttl), "PTTL {pttl}");
}

#[test]
fn restart_keeps_the_offset() {
    let mut s = Server::builder().clock_offset_ms(-30_000).start();
    s.restart();
    let skew = skew_ms(&s);
    assert!((skew + 30_000).abs() < 500, "after restart: {skew}");
}
