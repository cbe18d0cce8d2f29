//! The revoked signal (issue 31): `LockClient::revoke`, and each kind of
//! hold — a lock, a semaphore permit, a read-write guard, a leadership —
//! hears it on its next renewal by the engine (the module replies `-ms`
//! left), with the deadline and, for a lock or leadership, the reason;
//! its validity never passes the deadline, and a hold still there then is
//! lost as `LossReason::Revoked`.

mod support;

use std::time::{Duration, Instant};

use redis_lock_client::{LockOptions, LossReason, RevokeOptions, RevokeOutcome, WatchdogOptions};
use redis_lock_harness::Server;
use support::{client, ms, rt};

const PATIENCE: Duration = Duration::from_secs(30);

/// The holds' TTL: renewals every second, so one a second late on a loaded
/// machine still finds its hold (what is tested here is the revocation).
const TTL: Duration = Duration::from_millis(3_000);

fn revoke_opts(token: Option<&str>, grace_ms: u64, reason: Option<&str>) -> RevokeOptions {
    RevokeOptions { token: token.map(str::to_string), grace: ms(grace_ms), reason: reason.map(str::to_string) }
}

fn watched() -> LockOptions {
    LockOptions::new().watchdog(WatchdogOptions::new())
}

#[test]
fn a_watched_lock_hears_its_revocation_with_the_reason_and_is_lost_at_the_deadline() {
    let s = Server::start();
    let c = client(&s);
    let lock = c.try_acquire_with("rv:lock", TTL, &watched()).expect("acquire");
    assert!(lock.lost_signal().revocation().is_none());
    let r = c.revoke("rv:lock", &revoke_opts(None, 4_000, Some("drain node-7"))).unwrap();
    // The server set the deadline before it replied: 4 s after its reply
    // at the latest, however slow the round trip (a few ms for the
    // server's whole milliseconds).
    let answered = Instant::now();
    assert_eq!(r.outcome, RevokeOutcome::Revoked);
    assert_eq!(r.token.as_deref(), Some(lock.token()));
    assert_eq!(c.info("rv:lock").unwrap().unwrap().revoked.as_deref(), Some("drain node-7"), "LockInfo shows it");
    // The engine renews every TTL/3 (1 s): it hears it on its next renewal.
    let heard = lock.lost_signal().wait_revoked_timeout(PATIENCE).expect("the revocation was heard");
    assert_eq!(heard.reason.as_deref(), Some("drain node-7"));
    assert!(heard.deadline <= answered + ms(4_000) + ms(20), "the deadline is the server's, at the latest");
    // Still held until then; lost as revoked at the deadline (each later
    // renewal may place it a little earlier, never later).
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Revoked));
    let last = lock.lost_signal().revocation().expect("kept");
    assert!(last.deadline <= heard.deadline && Instant::now() >= last.deadline);
    assert_eq!(last.reason, heard.reason);
}

#[test]
fn a_revoke_of_nobody_or_of_another_token_changes_nothing() {
    let s = Server::start();
    let c = client(&s);
    let r = c.revoke("rv:free", &RevokeOptions::default()).unwrap();
    assert_eq!((r.outcome, r.token, r.deadline_unix_ms), (RevokeOutcome::NoHolder, None, None));
    let lock = c.try_acquire("rv:held", ms(60_000)).unwrap();
    let r = c.revoke("rv:held", &revoke_opts(Some("other"), 0, None)).unwrap();
    assert_eq!(r.outcome, RevokeOutcome::NotHolder);
    assert!(lock.is_held());
    lock.renew(ms(60_000)).expect("still ours");
    // Without grace, the hold ends at once; its renewal finds it gone.
    assert_eq!(c.revoke("rv:held", &RevokeOptions::default()).unwrap().outcome, RevokeOutcome::Ended);
    assert!(lock.renew(ms(60_000)).is_err());
}

#[test]
fn a_permit_and_a_read_write_guard_hear_it_without_a_reason() {
    let s = Server::start();
    let c = client(&s);
    let permit = c.semaphore("rv:sem", 2).try_acquire_with(TTL, &watched()).unwrap();
    let other = c.semaphore("rv:sem", 2).try_acquire_with(TTL, &watched()).unwrap();
    let r = c.revoke("rv:sem", &revoke_opts(Some(permit.token()), 30_000, Some("ignored"))).unwrap();
    assert_eq!(r.outcome, RevokeOutcome::Revoked);
    let heard = permit.lost_signal().wait_revoked_timeout(PATIENCE).expect("the permit heard it");
    assert_eq!(heard.reason, None, "the server keeps no reason for a semaphore holder");
    assert!(other.lost_signal().wait_revoked_timeout(ms(1_500)).is_none(), "the other permit was not revoked");
    let writer = c.rw_lock("rv:rw").write().try_acquire_with(TTL, &watched()).unwrap();
    assert_eq!(c.revoke("rv:rw", &revoke_opts(None, 30_000, None)).unwrap().outcome, RevokeOutcome::Revoked);
    assert!(writer.lost_signal().wait_revoked_timeout(PATIENCE).is_some(), "the writer heard it");
    // A release before the deadline is an ordinary release.
    writer.release().unwrap();
    assert_eq!(writer.loss_reason(), None);
}

#[test]
fn a_leadership_hears_it_through_the_async_future() {
    let s = Server::start();
    let c = client(&s);
    rt().block_on(async {
        let lead = c
            .election("rv:elect")
            .campaign_with_async("10.0.0.1", TTL, Duration::ZERO, &watched())
            .await
            .expect("leads");
        let r = c.revoke_async("rv:elect", &revoke_opts(None, 30_000, Some("better candidate"))).await.unwrap();
        assert_eq!(r.outcome, RevokeOutcome::Revoked);
        let heard = tokio::time::timeout(PATIENCE, lead.revoked()).await.expect("in time").expect("revoked");
        assert_eq!(heard.reason.as_deref(), Some("better candidate"));
        let leader = c.election("rv:elect").leader_async().await.unwrap().expect("still leads");
        assert_eq!(leader.revoked.as_deref(), Some("better candidate"), "Leader shows it");
        lead.resign_async().await.expect("resign before the deadline");
    });
}
