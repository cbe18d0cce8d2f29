//! A revocation of a session-held hold (docs/revocation.md, "A lock held
//! by a session"; docs/sessions.md, "Client"): the session's keepalive
//! replies `-ttl`, the engine reads `SESSION.INFO` and fires the revoked
//! signal of the listed hold (reason and deadline), which is then lost as
//! `LossReason::Revoked` at the deadline, as a hold on its own lease is;
//! the session and its other holds live on. With `session_checks(0)` no
//! hold is checked on its own, so what is heard comes from the keepalive.
//! Only orders are asserted, no durations: the deadline is the server's.

mod support;

use std::time::{Duration, Instant};

use redis_lock_client::{
    ClientOptions, LockClient, LockOptions, LossReason, RevokeOptions, RevokeOutcome, WatchdogOptions,
};
use redis_lock_harness::Server;
use support::{ms, rt};

const PATIENCE: Duration = Duration::from_secs(30);

/// The holds' TTL: keepalives every second, so one a second late on a
/// loaded machine still finds its session alive (what is tested here is
/// the revocation, not how short a session can be).
const TTL: Duration = Duration::from_millis(3_000);

/// A client whose watchdog holds are all kept by sessions: `checks` holds
/// a second are checked on their own (`LOCK.RENEW`), 0 for none.
fn client(s: &Server, checks: u32) -> LockClient {
    let opts =
        ClientOptions::new().response_timeout(ms(2000)).connect_timeout(ms(2000)).sessions(true).session_checks(checks);
    LockClient::open_with(&s.url(), opts).expect("client")
}

fn watched() -> LockOptions {
    LockOptions::new().watchdog(WatchdogOptions::new())
}

fn revoke(token: Option<&str>, grace_ms: u64, reason: &str) -> RevokeOptions {
    RevokeOptions { token: token.map(str::to_string), grace: ms(grace_ms), reason: Some(reason.into()) }
}

/// `SESSION.INFO id`'s field `name`.
fn session_field(s: &Server, id: &str, name: &str) -> redis::Value {
    let v: Vec<redis::Value> = redis::cmd("SESSION.INFO").arg(id).query(&mut s.conn()).expect("SESSION.INFO");
    let at = v.iter().position(|f| matches!(f, redis::Value::BulkString(b) if b == name.as_bytes())).expect(name);
    v[at + 1].clone()
}

/// The one session on `s`, and how many holds it has.
fn the_session(s: &Server) -> (String, i64) {
    let ids: Vec<String> = redis::cmd("SESSION.LIST").query(&mut s.conn()).expect("SESSION.LIST");
    assert_eq!(ids.len(), 1, "one session for the client: {ids:?}");
    let holds = redis::from_redis_value(session_field(s, &ids[0], "holds")).unwrap();
    (ids[0].clone(), holds)
}

#[test]
fn a_session_held_lock_hears_its_revocation_from_the_keepalive_and_ends_at_the_deadline() {
    let s = Server::start();
    let c = client(&s, 0);
    let lock = c.try_acquire_with("srv:lock", TTL, &watched()).expect("acquire");
    let other = c.try_acquire_with("srv:other", TTL, &watched()).expect("acquire");
    let (id, holds) = the_session(&s);
    assert_eq!(holds, 2, "both held by the session");
    let r = c.revoke("srv:lock", &revoke(None, 6_000, "drain node-7")).unwrap();
    // The server set the deadline before it replied: 6 s after its reply
    // at the latest, however slow the round trip (a few ms for the
    // server's whole milliseconds).
    let answered = Instant::now();
    assert_eq!(r.outcome, RevokeOutcome::Revoked);
    // Keepalives every TTL/3 (1 s): the next one says `-ttl`, and the
    // engine reads which lock, with its reason.
    let heard = lock.lost_signal().wait_revoked_timeout(PATIENCE).expect("the revocation was heard");
    assert_eq!(heard.reason.as_deref(), Some("drain node-7"));
    assert!(heard.deadline <= answered + ms(6_000) + ms(20), "the deadline is the server's, at the latest");
    assert!(lock.is_held(), "held until the deadline");
    assert!(other.lost_signal().revocation().is_none(), "the other lock was not revoked");
    // Lost as revoked at the deadline, as a lock on its own lease is.
    // (Each later keepalive may place the deadline a little earlier, never later.)
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Revoked));
    let last = lock.lost_signal().revocation().expect("the revocation is kept");
    assert!(last.deadline <= heard.deadline && Instant::now() >= last.deadline);
    assert_eq!(last.reason, heard.reason);
    // The session lives on with its other lock, unrevoked.
    let end = Instant::now() + PATIENCE;
    while redis::from_redis_value::<i64>(session_field(&s, &id, "holds")).unwrap() != 1 {
        assert!(Instant::now() < end, "the revoked hold left its session at the deadline");
        std::thread::sleep(ms(50));
    }
    std::thread::sleep(TTL); // keepalives go on
    assert!(other.is_held() && other.lost_signal().revocation().is_none());
    assert_eq!(the_session(&s), (id.clone(), 1));
    assert_eq!(redis::from_redis_value::<i64>(session_field(&s, &id, "revoked-holds")).unwrap(), 0);
    other.renew(TTL).expect("still ours");
    other.release().unwrap();
    assert_eq!(other.loss_reason(), None);
    // The key is free again (the session has no lock-delay).
    let again = c.try_acquire("srv:lock", TTL).expect("free after the deadline");
    again.release().unwrap();
}

#[test]
fn a_revoked_lock_released_before_the_deadline_is_an_ordinary_release() {
    let s = Server::start();
    let c = client(&s, 0);
    rt().block_on(async {
        let lock = c.try_acquire_with_async("srv:job", TTL, &watched()).await.expect("acquire");
        let r = c.revoke_async("srv:job", &revoke(None, 60_000, "maintenance")).await.unwrap();
        assert_eq!(r.outcome, RevokeOutcome::Revoked);
        let heard = tokio::time::timeout(PATIENCE, lock.revoked()).await.expect("in time").expect("revoked");
        assert_eq!(heard.reason.as_deref(), Some("maintenance"));
        assert!(heard.remaining() > ms(30_000), "heard long before the deadline");
        lock.release_async().await.expect("released before the deadline");
        assert_eq!(lock.loss_reason(), None);
    });
    let (_, holds) = the_session(&s);
    assert_eq!(holds, 0);
}

#[test]
fn a_session_held_leadership_hears_it_and_the_sessions_lock_does_not() {
    let s = Server::start();
    let c = client(&s, 0);
    let lead = c.election("srv:elect").campaign_with("10.0.0.1", TTL, Duration::ZERO, &watched()).unwrap();
    let lock = c.try_acquire_with("srv:kept", TTL, &watched()).expect("acquire");
    assert_eq!(the_session(&s).1, 2, "the leadership and the lock are the session's");
    let r = c.revoke("srv:elect", &revoke(None, 30_000, "better candidate")).unwrap();
    assert_eq!(r.outcome, RevokeOutcome::Revoked);
    let heard = rt().block_on(async { tokio::time::timeout(PATIENCE, lead.revoked()).await });
    let heard = heard.expect("in time").expect("revoked");
    assert_eq!(heard.reason.as_deref(), Some("better candidate"));
    assert!(heard.remaining() > ms(10_000), "heard long before the deadline");
    assert!(lock.lost_signal().wait_revoked_timeout(ms(1_500)).is_none(), "the lock was not revoked");
    assert!(lock.is_held());
    lead.resign().expect("resign before the deadline");
    lock.release().unwrap();
    assert_eq!(lock.loss_reason(), None);
}

#[test]
fn the_per_lock_check_hears_it_too() {
    // Checks on (the default rate): whichever comes first, the keepalive
    // or the lock's own `LOCK.RENEW` (`-ms`), the holder hears a
    // revocation, never a loss, and the lock ends as revoked.
    let s = Server::start();
    let c = client(&s, 100);
    let lock = c.try_acquire_with("srv:checked", TTL, &watched()).expect("acquire");
    assert_eq!(the_session(&s).1, 1);
    let r = c.revoke("srv:checked", &revoke(None, 4_000, "drain")).unwrap();
    assert_eq!(r.outcome, RevokeOutcome::Revoked);
    let heard = lock.lost_signal().wait_revoked_timeout(PATIENCE).expect("the revocation was heard");
    assert_eq!(heard.reason.as_deref(), Some("drain"));
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Revoked));
}

#[test]
fn a_session_held_permit_hears_its_revocation_from_the_keepalive() {
    let s = Server::start();
    let c = client(&s, 0);
    let pool = c.semaphore("srv:pool", 3);
    let permit = pool.try_acquire_with(TTL, &watched()).expect("a permit");
    let kept = pool.try_acquire_with(TTL, &watched()).expect("another");
    assert_eq!(the_session(&s).1, 2, "both permits are the session's");
    let token = permit.token().to_string();
    let r = c.revoke("srv:pool", &revoke(Some(&token), 4_000, "shrink")).unwrap();
    assert_eq!(r.outcome, RevokeOutcome::Revoked);
    // Heard from a keepalive (no permit is checked on its own here).
    let heard = permit.lost_signal().wait_revoked_timeout(PATIENCE).expect("the revocation was heard");
    assert!(permit.is_held(), "held until the deadline");
    assert!(kept.lost_signal().revocation().is_none(), "the other permit was not revoked");
    assert_eq!(permit.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Revoked));
    // (A later keepalive may place the deadline a little earlier, never later.)
    let last = permit.lost_signal().revocation().expect("the revocation is kept");
    assert!(last.deadline <= heard.deadline && Instant::now() >= last.deadline);
    // The session keeps the other permit.
    let end = Instant::now() + PATIENCE;
    while the_session(&s).1 != 1 {
        assert!(Instant::now() < end, "the revoked permit left its session");
        std::thread::sleep(ms(50));
    }
    assert!(kept.is_held());
    kept.release().unwrap();
}
