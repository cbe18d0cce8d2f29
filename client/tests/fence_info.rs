//! Fences and `info`, each scenario run against a server with the module
//! (`module::*`) and one without it (`scripts::*`).

mod support;

use redis::Commands;
use redis_lock_client::{Error, LockClient, LockFormat, LockInfo};
use redis_lock_harness::Server;
use redis_lock_rules::lock::describe;
use support::{client, ms};

fn info(c: &LockClient, key: &str) -> LockInfo {
    c.info(key).expect("info").unwrap_or_else(|| panic!("{key} absent"))
}

/// What `describe` (the scripts' reading of a value) says, for cross-checking.
fn described(value: &str) -> (Option<String>, Option<String>, LockFormat) {
    let d = describe(value.as_bytes());
    let s = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8(b).expect("utf-8"));
    (s(d.owner), s(d.run_id), if d.structured { LockFormat::Structured } else { LockFormat::Legacy })
}

mod s {
    use super::*;

    pub fn fences_increase(s: Server, module: bool) {
        let (a, b) = (client(&s), client(&s));
        let l1 = a.try_acquire("k", ms(5000)).expect("acquire");
        if !module {
            // The fallback issues no fences, for any kind of grant.
            assert_eq!(l1.fence(), None);
            l1.release().expect("release");
            assert_eq!(b.try_acquire("k", ms(5000)).expect("re-acquire").fence(), None);
            assert_eq!(a.takeover("t", "run", ms(5000)).expect("takeover").fence(), None);
            assert_eq!(b.acquire("t2", ms(5000), ms(100)).expect("acquire with wait").fence(), None);
            return;
        }
        let f1 = l1.fence().expect("module grants carry a fence");
        assert!(f1 > 0);
        l1.renew(ms(5000)).expect("renew");
        assert_eq!(l1.fence(), Some(f1), "renewal keeps the fence");
        // A refusal carries none and does not disturb the holder.
        assert!(b.try_acquire("k", ms(5000)).unwrap_err().is_not_acquired());
        l1.release().expect("release");
        let l2 = b.try_acquire("k", ms(5000)).expect("re-acquire");
        let f2 = l2.fence().expect("fence");
        assert!(f2 > f1, "{f2} after {f1}");
        l2.release().expect("release");
        let l3 = a.takeover("k", "run-1", ms(5000)).expect("takeover of a free key");
        let f3 = l3.fence().expect("fence");
        assert!(f3 > f2, "{f3} after {f2}");
        let l4 = b.takeover("k", "run-1", ms(5000)).expect("same-run takeover");
        let f4 = l4.fence().expect("fence");
        assert!(f4 > f3, "{f4} after {f3}");
        assert!(l3.renew(ms(5000)).unwrap_err().is_not_held());
        l4.release().expect("release");
        // An empty run id is a plain acquire, fenced as well.
        let f5 = a.takeover("k", "", ms(5000)).expect("acquire").fence().expect("fence");
        assert!(f5 > f4, "{f5} after {f4}");
    }

    pub fn info_matches(s: Server, module: bool) {
        let c = client(&s);
        let mut con = s.conn();
        assert_eq!(c.info("k").expect("info"), None);
        // Legacy: a bare token with a TTL.
        let l = c.try_acquire("k", ms(600_000)).expect("acquire");
        let i = info(&c, "k");
        assert_eq!(i.owner.as_deref(), Some(l.token()));
        assert_eq!((i.run_id.as_deref(), i.format, i.fence, i.waiters), (None, LockFormat::Legacy, None, 0));
        let ttl = i.ttl.expect("a TTL");
        // What is left of 600 s, allowing this machine 10 s in between.
        assert!(ttl > ms(590_000) && ttl <= ms(600_000), "{ttl:?}");
        // Structured: what takeover writes.
        let t = c.takeover("t", "run-1", ms(300_000)).expect("takeover");
        let i = info(&c, "t");
        assert_eq!(
            (i.owner.as_deref(), i.run_id.as_deref(), i.format),
            (Some(t.token()), Some("run-1"), LockFormat::Structured)
        );
        assert!(i.ttl.is_some_and(|d| d > ms(290_000) && d <= ms(300_000)), "{:?}", i.ttl);
        // Values written by others, read exactly as the scripts read them.
        let values = [
            ("bare", "legacy-token"),
            ("numowner", r#"{"owner":5,"runId":"r"}"#),
            ("noowner", r#"{"runId":"r"}"#),
            ("falseowner", r#"{"owner":false}"#),
            ("notjson", r#"{"owner":"x""#),
            ("array", r#"["a"]"#),
            ("escaped", r#"{"owner":"a\u0062","runId":7}"#),
        ];
        for (key, value) in values {
            let _: () = con.set(key, value).expect("SET");
            let i = info(&c, key);
            assert_eq!((i.owner, i.run_id, i.format), described(value), "{key}: {value}");
            assert_eq!(i.ttl, None, "{key} has no expiry");
            assert_eq!((i.fence, i.waiters), (None, 0));
        }
        assert_eq!(described(r#"{"owner":"a\u0062","runId":7}"#).0.as_deref(), Some("ab"));
        // Other types are refused as LOCK.INFO refuses them.
        let _: () = con.lpush("list", "x").expect("LPUSH");
        match c.info("list") {
            Err(Error::Redis(e)) => assert_eq!(e.code(), Some("WRONGTYPE"), "{e}"),
            other => panic!("expected WRONGTYPE, got {other:?}"),
        }
        assert!(matches!(c.info(""), Err(Error::InvalidArgument(_))));
        // info detects the backend like any lock command.
        let fresh = client(&s);
        assert_eq!(fresh.info("k").expect("info").map(|i| i.owner), Some(Some(l.token().to_string())));
        let want = if module { redis_lock_client::Backend::Module } else { redis_lock_client::Backend::Scripts };
        assert_eq!(fresh.backend(), want);
        // Async: the same answers.
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(async {
            let i = c.info_async("t").await.expect("info").expect("present");
            assert_eq!(
                (i.owner.as_deref(), i.run_id.as_deref(), i.format),
                (Some(t.token()), Some("run-1"), LockFormat::Structured)
            );
            assert_eq!(c.info_async("absent").await.expect("info"), None);
            assert_eq!(c.backend_async(), want);
        });
    }
}

macro_rules! scenarios {
    ($server:expr, $module:expr) => {
        use super::*;
        #[test]
        fn fences_increase() {
            s::fences_increase($server, $module)
        }
        #[test]
        fn info_matches() {
            s::info_matches($server, $module)
        }
    };
}

mod module {
    scenarios!(Server::start(), true);
}

mod scripts {
    scenarios!(Server::builder().without_module().start(), false);
}
