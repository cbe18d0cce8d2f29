//! Every scenario is written once and run against a server with the module
//! (`module::*`) and one without it (`scripts::*`, the Lua fallback).

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_lock_client::{Backend, Error, LockOptions, LossReason, WatchdogOptions};
use redis_lock_harness::Server;
use support::{client, eventually, get, ms, pttl, rt};

/// The lease of the watchdog scenarios: its renewals (every third of it)
/// may be late by most of it on a loaded machine and still keep the lock.
const LEASE: u64 = 1_500;

/// How long a scenario waits for what must happen: only a failure waits
/// this long, so it can be generous.
const PATIENCE: Duration = Duration::from_secs(10);

/// The scenarios; each takes a fresh server.
mod s {
    use super::*;

    pub fn backend_is_detected(s: Server, want: Backend) {
        let c = client(&s);
        assert_eq!(c.backend(), Backend::Unknown);
        let lock = c.try_acquire("k", ms(1000)).expect("acquire");
        assert_eq!(c.backend(), want);
        lock.release().expect("release");
        assert_eq!(c.backend(), want);
    }

    pub fn two_clients_contend(s: Server) {
        let (a, b) = (client(&s), client(&s));
        let la = a.try_acquire("k", ms(5000)).expect("a acquires");
        assert_eq!(la.token().len(), 32);
        assert_eq!(get(&s, "k").as_deref(), Some(la.token()));
        assert!(pttl(&s, "k") > 4000);
        assert!(matches!(b.try_acquire("k", ms(5000)), Err(Error::NotAcquired { ref key }) if key == "k"));
        let t = Instant::now();
        assert!(b.acquire("k", ms(5000), ms(150)).unwrap_err().is_not_acquired());
        assert!(t.elapsed() >= ms(150), "acquire gave up early: {:?}", t.elapsed());
        // A waiter gets the lock soon after the holder lets go.
        let releaser = thread::spawn(move || {
            thread::sleep(ms(200));
            la.release().expect("a releases");
        });
        let lb = b.acquire("k", ms(5000), PATIENCE).expect("b gets it after release");
        releaser.join().expect("releaser");
        assert_eq!(get(&s, "k").as_deref(), Some(lb.token()));
        assert_ne!(lb.token(), "");
    }

    pub fn caller_token_is_used(s: Server) {
        let c = client(&s);
        let l = c.try_acquire_with("k", ms(1000), &LockOptions::new().token("my-token")).expect("acquire");
        assert_eq!(l.token(), "my-token");
        assert_eq!(l.key(), "k");
        assert_eq!(get(&s, "k").as_deref(), Some("my-token"));
        assert!(c
            .try_acquire_with("k", ms(1000), &LockOptions::new().token(""))
            .unwrap_err()
            .to_string()
            .contains("required"));
    }

    pub fn not_held_after_expiry(s: Server) {
        let c = client(&s);
        // Long enough to be renewed on a loaded machine; the renewal sets
        // the 1 s lease that ends.
        let l = c.try_acquire("k", ms(10_000)).expect("acquire");
        assert!(l.is_held());
        l.renew(ms(1000)).expect("renew while held");
        thread::sleep(ms(1300));
        assert!(!l.is_held());
        assert_eq!(l.loss_reason(), Some(LossReason::Expired));
        assert!(matches!(l.renew(ms(200)), Err(Error::NotHeld { .. })));
        // Someone else takes it; our release must not touch their lock.
        let other = client(&s).try_acquire("k", ms(5000)).expect("other acquires");
        assert!(l.release().unwrap_err().is_not_held());
        assert_eq!(get(&s, "k").as_deref(), Some(other.token()));
    }

    pub fn renew_after_takeaway_is_not_held(s: Server) {
        let c = client(&s);
        let l = c.try_acquire("k", ms(5000)).expect("acquire");
        let _: () = s.conn().set("k", "intruder").expect("SET");
        assert!(l.renew(ms(5000)).unwrap_err().is_not_held());
        assert_eq!(l.loss_reason(), Some(LossReason::NotOwner));
        assert_eq!(get(&s, "k").as_deref(), Some("intruder"));
    }

    pub fn renew_resets_ttl(s: Server) {
        let c = client(&s);
        let l = c.try_acquire("k", ms(2000)).expect("acquire");
        l.renew(ms(10_000)).expect("renew");
        assert!(pttl(&s, "k") > 2000);
        thread::sleep(ms(2300));
        assert!(l.is_held(), "validity follows the renewal's TTL");
    }

    pub fn release_is_idempotent(s: Server) {
        let (a, b) = (client(&s), client(&s));
        let l = a.try_acquire("k", ms(5000)).expect("acquire");
        l.release().expect("release");
        assert_eq!(get(&s, "k"), None);
        assert!(!l.is_held());
        assert_eq!(l.loss_reason(), None);
        let lb = b.try_acquire("k", ms(5000)).expect("b acquires after release");
        l.release().expect("second release is a no-op");
        assert_eq!(get(&s, "k").as_deref(), Some(lb.token()));
        assert!(l.renew(ms(100)).unwrap_err().is_not_held());
    }

    pub fn drop_releases(s: Server) {
        let c = client(&s);
        {
            let _l = c.try_acquire("k", ms(5000)).expect("acquire");
            assert!(get(&s, "k").is_some());
        }
        assert_eq!(get(&s, "k"), None);
        // A dropped lock's signal ends as "released", not "lost".
        let l = c.try_acquire("k", ms(5000)).expect("acquire again");
        let sig = l.lost_signal();
        drop(l);
        assert_eq!(sig.wait_timeout(PATIENCE), None);
        assert_eq!(get(&s, "k"), None);
    }

    pub fn watchdog_keeps_lock_alive(s: Server) {
        let c = client(&s);
        let l =
            c.try_acquire_with("k", ms(LEASE), &LockOptions::new().watchdog(WatchdogOptions::new())).expect("acquire");
        let other = client(&s);
        let t = Instant::now();
        while t.elapsed() < ms(LEASE * 7 / 3) {
            assert!(other.try_acquire("k", ms(200)).unwrap_err().is_not_acquired());
            thread::sleep(ms(50));
        }
        assert!(l.is_held());
        assert_eq!(get(&s, "k").as_deref(), Some(l.token()));
        assert!(pttl(&s, "k") > 0);
        l.release().expect("release");
        assert_eq!(get(&s, "k"), None);
        // The watchdog stopped: nothing recreates or renews the key.
        thread::sleep(ms(150));
        assert_eq!(get(&s, "k"), None);
    }

    pub fn loss_signalled_when_deleted(s: Server) {
        let c = client(&s);
        // Seen by the next renewal (NotOwner), before the lease would have
        // run out (Expired).
        let l =
            c.try_acquire_with("k", ms(LEASE), &LockOptions::new().watchdog(WatchdogOptions::new())).expect("acquire");
        let sig = l.lost_signal();
        let _: () = s.conn().del("k").expect("DEL");
        assert_eq!(sig.wait_timeout(PATIENCE), Some(LossReason::NotOwner));
        assert!(!l.is_held());
        assert!(l.renew(ms(300)).unwrap_err().is_not_held());
    }

    pub fn loss_signalled_when_overwritten(s: Server) {
        let c = client(&s);
        let l =
            c.try_acquire_with("k", ms(LEASE), &LockOptions::new().watchdog(WatchdogOptions::new())).expect("acquire");
        let _: () = s.conn().pset_ex("k", "someone-else", 10_000).expect("SET");
        assert_eq!(l.lost_signal().wait_timeout(PATIENCE), Some(LossReason::NotOwner));
        drop(l);
        assert_eq!(
            get(&s, "k").as_deref(),
            Some("someone-else"),
            "drop of a lost lock must not delete the new owner's key"
        );
    }

    pub fn watchdog_max_lifetime(s: Server) {
        let c = client(&s);
        let opts = LockOptions::new().watchdog(WatchdogOptions::new().max_lifetime(ms(LEASE)));
        let t = Instant::now();
        let l = c.try_acquire_with("k", ms(LEASE), &opts).expect("acquire");
        assert_eq!(l.lost_signal().wait_timeout(PATIENCE), Some(LossReason::MaxLifetime));
        assert!(t.elapsed() >= ms(LEASE), "lost after {:?}", t.elapsed());
        assert!(eventually(PATIENCE, || get(&s, "k").is_none()), "the key expires once renewals stop");
    }

    pub fn same_run_takeover(s: Server) {
        let (a, b, x) = (client(&s), client(&s), client(&s));
        let la = a.takeover("k", "run-1", ms(5000)).expect("a takes");
        assert_eq!(get(&s, "k"), Some(format!(r#"{{"owner":"{}","runId":"run-1"}}"#, la.token())));
        assert!(x.takeover("k", "run-2", ms(5000)).unwrap_err().is_not_acquired());
        assert!(x.try_acquire("k", ms(5000)).unwrap_err().is_not_acquired());
        let lb = b.takeover("k", "run-1", ms(5000)).expect("same run takes over");
        assert_eq!(get(&s, "k"), Some(format!(r#"{{"owner":"{}","runId":"run-1"}}"#, lb.token())));
        assert!(la.renew(ms(5000)).unwrap_err().is_not_held());
        lb.renew(ms(5000)).expect("new owner renews");
        lb.release().expect("new owner releases");
        assert_eq!(get(&s, "k"), None);
    }

    pub fn stale_legacy_takeover(s: Server) {
        let c = client(&s);
        let mut con = s.conn();
        let _: () = con.pset_ex("k", "legacy-token", 10_000).expect("SET");
        // Remaining ~10 s > 10 s / 2: the legacy holder is alive.
        assert!(c.takeover("k", "run-1", ms(10_000)).unwrap_err().is_not_acquired());
        assert_eq!(get(&s, "k").as_deref(), Some("legacy-token"));
        // Remaining ~400 ms <= 500: stale, taken.
        let _: () = con.pset_ex("k", "legacy-token", 400).expect("SET");
        let l = c.takeover("k", "run-1", ms(1000)).expect("stale legacy lock is taken");
        assert_eq!(get(&s, "k"), Some(format!(r#"{{"owner":"{}","runId":"run-1"}}"#, l.token())));
        // A legacy lock without expiry is stale too.
        let _: () = con.set("k2", "legacy-token").expect("SET");
        c.takeover("k2", "run-1", ms(1000)).expect("persistent legacy lock is taken");
        // A structured lock without a runId is never taken over.
        let _: () = con.set("k3", r#"{"owner":"x"}"#).expect("SET");
        assert!(c.takeover("k3", "run-1", ms(1000)).unwrap_err().is_not_acquired());
    }

    pub fn empty_run_id_is_acquire(s: Server) {
        let c = client(&s);
        let l = c.takeover("k", "", ms(1000)).expect("acquire");
        assert_eq!(get(&s, "k").as_deref(), Some(l.token()));
        assert!(c.takeover("k", "", ms(1000)).unwrap_err().is_not_acquired());
    }

    pub fn invalid_arguments(s: Server) {
        let c = client(&s);
        assert!(matches!(c.try_acquire("", ms(100)), Err(Error::InvalidArgument(_))));
        assert!(matches!(c.try_acquire("k", Duration::ZERO), Err(Error::InvalidArgument(m)) if m.contains("ttl")));
        assert!(
            matches!(c.takeover("k", "r", Duration::MAX), Err(Error::InvalidArgument(m)) if m.contains("too large"))
        );
        assert_eq!(get(&s, "k"), None);
    }

    pub fn wrong_type_is_a_server_error(s: Server) {
        let c = client(&s);
        let _: () = s.conn().lpush("k", "x").expect("LPUSH");
        assert!(c.try_acquire("k", ms(100)).unwrap_err().is_not_acquired());
        match c.release_token("k", "t") {
            Err(Error::Redis(e)) => assert_eq!(e.code(), Some("WRONGTYPE"), "{e}"),
            other => panic!("expected WRONGTYPE, got {other:?}"),
        }
        assert!(matches!(c.takeover("k", "r", ms(100)), Err(Error::Redis(e)) if e.code() == Some("WRONGTYPE")));
    }

    pub fn scripts_reload_after_flush(s: Server) {
        let c = client(&s);
        let l = c.try_acquire("k", ms(5000)).expect("acquire");
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut s.conn()).expect("SCRIPT FLUSH");
        l.renew(ms(5000)).expect("renew after SCRIPT FLUSH");
        l.release().expect("release after SCRIPT FLUSH");
        assert_eq!(get(&s, "k"), None);
    }

    pub fn operator_release(s: Server) {
        let c = client(&s);
        let l = c.try_acquire("k", ms(5000)).expect("acquire");
        assert!(c.release_token("k", "not-the-token").unwrap_err().is_not_held());
        c.release_token("k", l.token()).expect("operator release");
        assert_eq!(get(&s, "k"), None);
    }

    pub fn connection_loss_is_an_error(mut s: Server) {
        let c = client(&s);
        let l = c.try_acquire("k", ms(5000)).expect("acquire");
        s.kill();
        let t = Instant::now();
        assert!(matches!(l.renew(ms(5000)), Err(Error::Redis(_))));
        assert!(matches!(l.release(), Err(Error::Redis(_))));
        assert!(matches!(c.try_acquire("k2", ms(5000)), Err(Error::Redis(_))));
        assert!(t.elapsed() < PATIENCE, "took {:?}", t.elapsed());
    }

    pub fn watchdog_reports_unreachable_server(mut s: Server) {
        let c = client(&s);
        let l =
            c.try_acquire_with("k", ms(LEASE), &LockOptions::new().watchdog(WatchdogOptions::new())).expect("acquire");
        let t = Instant::now();
        s.kill();
        assert_eq!(l.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Expired));
        drop(l); // must not hang on the dead server
        assert!(t.elapsed() < PATIENCE + PATIENCE, "took {:?}", t.elapsed());
    }

    // ---- async ----

    pub fn async_contend_renew_release(s: Server, want: Backend) {
        rt().block_on(async {
            let (a, b) = (client(&s), client(&s));
            let la = a.try_acquire_async("k", ms(5000)).await.expect("a acquires");
            assert_eq!(a.backend_async(), want);
            assert!(b.try_acquire_async("k", ms(5000)).await.unwrap_err().is_not_acquired());
            assert!(b.acquire_async("k", ms(5000), ms(100)).await.unwrap_err().is_not_acquired());
            la.renew_async(ms(5000)).await.expect("renew");
            la.release_async().await.expect("release");
            la.release_async().await.expect("idempotent");
            let lb = b.acquire_async("k", ms(5000), ms(500)).await.expect("b acquires");
            assert_eq!(get(&s, "k").as_deref(), Some(lb.token()));
            let lt = a.takeover_async("t", "run", ms(5000)).await.expect("takeover");
            let lt2 = b.takeover_async("t", "run", ms(5000)).await.expect("same-run takeover");
            assert!(lt.renew_async(ms(5000)).await.unwrap_err().is_not_held());
            lt2.release_async().await.expect("release");
        });
    }

    pub fn async_watchdog_and_loss_future(s: Server) {
        rt().block_on(async {
            let c = client(&s);
            let l = c
                .try_acquire_with_async("k", ms(LEASE), &LockOptions::new().watchdog(WatchdogOptions::new()))
                .await
                .expect("acquire");
            tokio::time::sleep(ms(LEASE * 7 / 3)).await;
            assert!(l.is_held(), "watchdog kept it for over 2 TTLs");
            assert_eq!(get(&s, "k").as_deref(), Some(l.token()));
            let _: () = s.conn().del("k").expect("DEL");
            let r = tokio::time::timeout(PATIENCE, l.lost()).await.expect("loss future resolves");
            assert_eq!(r, Some(LossReason::NotOwner), "seen by a renewal before the lease ran out");
        });
    }

    pub fn async_drop_releases_without_blocking(s: Server) {
        rt().block_on(async {
            let c = client(&s);
            let l = c.try_acquire_async("k", ms(5000)).await.expect("acquire");
            let sig = l.lost_signal();
            drop(l);
            assert_eq!(tokio::time::timeout(PATIENCE, sig.lost()).await.expect("signal ends"), None);
            let mut con = s.client().get_multiplexed_async_connection().await.expect("conn");
            let end = Instant::now() + PATIENCE;
            loop {
                let v: Option<String> = redis::AsyncCommands::get(&mut con, "k").await.expect("GET");
                if v.is_none() {
                    break;
                }
                assert!(Instant::now() < end, "dropped async lock not released");
                tokio::time::sleep(ms(5)).await;
            }
        });
    }

    pub fn async_connection_loss_is_an_error(mut s: Server) {
        rt().block_on(async {
            let c = client(&s);
            let l = c.try_acquire_async("k", ms(5000)).await.expect("acquire");
            s.kill();
            let t = Instant::now();
            assert!(matches!(l.renew_async(ms(5000)).await, Err(Error::Redis(_))));
            assert!(t.elapsed() < PATIENCE, "took {:?}", t.elapsed());
        });
    }
}

macro_rules! scenarios {
    ($server:expr, $backend:expr) => {
        use super::*;
        #[test]
        fn backend_is_detected() {
            s::backend_is_detected($server, $backend)
        }
        #[test]
        fn two_clients_contend() {
            s::two_clients_contend($server)
        }
        #[test]
        fn caller_token_is_used() {
            s::caller_token_is_used($server)
        }
        #[test]
        fn not_held_after_expiry() {
            s::not_held_after_expiry($server)
        }
        #[test]
        fn renew_after_takeaway_is_not_held() {
            s::renew_after_takeaway_is_not_held($server)
        }
        #[test]
        fn renew_resets_ttl() {
            s::renew_resets_ttl($server)
        }
        #[test]
        fn release_is_idempotent() {
            s::release_is_idempotent($server)
        }
        #[test]
        fn drop_releases() {
            s::drop_releases($server)
        }
        #[test]
        fn watchdog_keeps_lock_alive() {
            s::watchdog_keeps_lock_alive($server)
        }
        #[test]
        fn loss_signalled_when_deleted() {
            s::loss_signalled_when_deleted($server)
        }
        #[test]
        fn loss_signalled_when_overwritten() {
            s::loss_signalled_when_overwritten($server)
        }
        #[test]
        fn watchdog_max_lifetime() {
            s::watchdog_max_lifetime($server)
        }
        #[test]
        fn same_run_takeover() {
            s::same_run_takeover($server)
        }
        #[test]
        fn stale_legacy_takeover() {
            s::stale_legacy_takeover($server)
        }
        #[test]
        fn empty_run_id_is_acquire() {
            s::empty_run_id_is_acquire($server)
        }
        #[test]
        fn invalid_arguments() {
            s::invalid_arguments($server)
        }
        #[test]
        fn wrong_type_is_a_server_error() {
            s::wrong_type_is_a_server_error($server)
        }
        #[test]
        fn scripts_reload_after_flush() {
            s::scripts_reload_after_flush($server)
        }
        #[test]
        fn operator_release() {
            s::operator_release($server)
        }
        #[test]
        fn connection_loss_is_an_error() {
            s::connection_loss_is_an_error($server)
        }
        #[test]
        fn watchdog_reports_unreachable_server() {
            s::watchdog_reports_unreachable_server($server)
        }
        #[test]
        fn async_contend_renew_release() {
            s::async_contend_renew_release($server, $backend)
        }
        #[test]
        fn async_watchdog_and_loss_future() {
            s::async_watchdog_and_loss_future($server)
        }
        #[test]
        fn async_drop_releases_without_blocking() {
            s::async_drop_releases_without_blocking($server)
        }
        #[test]
        fn async_connection_loss_is_an_error() {
            s::async_connection_loss_is_an_error($server)
        }
    };
}

mod module {
    scenarios!(Server::start(), Backend::Module);
}

mod scripts {
    scenarios!(Server::builder().without_module().start(), Backend::Scripts);
}
