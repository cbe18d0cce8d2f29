//! A session-held hold lost to an eviction reaches its session
//! (docs/eviction.md, "How a session's holder hears it"): its keepalive
//! replies `-ttl`, `SESSION.INFO` lists it (`evicted`: key, database,
//! token, when), the session no longer counts it among its holds, and a
//! replica has the same. Run on every server of the matrix with
//! `REDIS_SERVER`.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use redis_lock_harness::Server;

mod support;
use support::eviction::{config_set, fill, info, limit_memory, num, run};
use support::wait_for_link;

fn keepalive(c: &mut Connection, id: &str) -> i64 {
    let ttls: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(id).query(c).unwrap();
    ttls[0]
}

fn text(v: &Value) -> String {
    redis::from_redis_value::<String>(v.clone()).unwrap()
}

fn int(v: &Value) -> i64 {
    redis::from_redis_value::<i64>(v.clone()).unwrap()
}

/// `SESSION.INFO id COUNT 1000` as a map.
fn session_info(c: &mut Connection, id: &str) -> HashMap<String, Value> {
    let v: Value = redis::cmd("SESSION.INFO").arg(id).arg("COUNT").arg(1000).query(c).unwrap();
    let Value::Array(items) = v else { panic!("SESSION.INFO: {v:?}") };
    items.chunks_exact(2).map(|p| (text(&p[0]), p[1].clone())).collect()
}

/// Its `evicted` entries: (key, token), each in database 0 and evicted
/// lately (`at` within the last minute of `now_ms`).
fn evicted(i: &HashMap<String, Value>, now_ms: i64) -> BTreeSet<(String, String)> {
    let Some(Value::Array(items)) = i.get("evicted") else { panic!("no evicted: {i:?}") };
    items
        .chunks_exact(4)
        .map(|e| {
            assert_eq!(int(&e[1]), 0, "database");
            let at = int(&e[3]);
            assert!(at <= now_ms && at > now_ms - 60_000, "at {at}, now {now_ms}");
            (text(&e[0]), text(&e[2]))
        })
        .collect()
}

fn now_ms(c: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(c).unwrap();
    s * 1000 + us / 1000
}

/// One session's holds of every family: (key, token, exclusive).
fn grant(c: &mut Connection, id: &str) -> Vec<(String, String, bool)> {
    let mut holds = Vec::new();
    for i in 0..12 {
        let (k, t) = (format!("lk:{i}"), format!("t{i}"));
        assert_eq!(run(c, &["LOCK.ACQUIRE", &k, &t, "600000", "SESSION", id]).unwrap(), Value::Int(1));
        holds.push((k, t, true));
    }
    for i in 0..3 {
        let (k, t) = (format!("ldr:{i}"), format!("l{i}"));
        assert!(matches!(run(c, &["LOCK.ELECT", &k, &t, "600000", "v", "SESSION", id]).unwrap(), Value::Int(_)));
        holds.push((k, t, true));
    }
    for i in 0..3 {
        for j in 0..2 {
            let (k, t) = (format!("sem:{i}"), format!("s{j}"));
            assert_eq!(run(c, &["SEM.ACQUIRE", &k, &t, "3", "600000", "SESSION", id]).unwrap(), Value::Int(1));
            holds.push((k, t, false));
            let (k, t) = (format!("rw:{i}"), format!("r{j}"));
            assert_eq!(run(c, &["RWLOCK.ACQUIRE", &k, &t, "READ", "600000", "SESSION", id]).unwrap(), Value::Int(1));
            holds.push((k, t, false));
        }
    }
    holds
}

/// Whether `token` still holds `key` (its value names it, or its place is there).
fn still_held(c: &mut Connection, key: &str, token: &str, exclusive: bool) -> bool {
    if exclusive {
        let v: Option<String> = redis::cmd("GET").arg(key).query(c).unwrap();
        v.is_some_and(|v| v.contains(&format!("\"token\":\"{token}\"")))
    } else {
        let score: Option<f64> = redis::cmd("ZSCORE").arg(key).arg(token).query(c).unwrap();
        score.is_some()
    }
}

/// A session holding locks, leaders, permits and read-write holds under
/// an `allkeys-*` policy, then 8 MB written over a 1.5 MB margin (6 MB
/// under `allkeys-random`, so that some holds stay): each
/// hold is still held or listed as evicted by its session (exactly those
/// `LOCK.EVICTED` answers 1 for), the keepalive says `-ttl`, the session's
/// holds drop the evicted ones, and a replica agrees. A lock granted to
/// the session again since, with another token, is held and not listed.
#[test]
fn an_evicted_session_hold_is_told_by_the_keepalive_and_leaves_its_session() {
    for (policy, margin) in [("allkeys-lru", 1_500_000), ("allkeys-random", 6_000_000)] {
        let master = Server::builder().arg("lock.eviction", "allow").arg("repl-diskless-sync", "no").start();
        let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
        let (mut c, mut r) = (master.conn(), replica.conn());
        wait_for_link(&mut r);
        let id: String = redis::cmd("SESSION.GRANT").arg(600_000).query(&mut c).unwrap();
        limit_memory(&mut c, margin, policy);
        let holds = grant(&mut c, &id);
        assert_eq!(num(&info(&mut c), "eviction_tracked"), holds.len() as u64, "{policy}");
        assert_eq!(keepalive(&mut c, &id), 600_000, "{policy}: nothing lost yet");
        fill(&mut c, 8000, None);
        config_set(&mut c, "maxmemory", "0");
        let mut lost = BTreeSet::new();
        for (k, t, exclusive) in &holds {
            let told = run(&mut c, &["LOCK.EVICTED", k, t]).unwrap() == Value::Int(1);
            let held = still_held(&mut c, k, t, *exclusive);
            assert!(held != told, "{policy}: {k} {t}: held {held}, evicted {told}");
            if told {
                lost.insert((k.clone(), t.clone()));
            }
        }
        assert!(!lost.is_empty(), "{policy}: 8 MB over a {margin} B margin evicted no session hold");
        eprintln!("{policy}: {} of {} session holds evicted", lost.len(), holds.len());
        assert_eq!(num(&info(&mut c), "session_holds_evicted"), lost.len() as u64, "{policy}");
        assert_eq!(keepalive(&mut c, &id), -600_000, "{policy}: alive, and some holds lost");
        let i = session_info(&mut c, &id);
        let now = now_ms(&mut c);
        assert_eq!(evicted(&i, now), lost, "{policy}");
        assert_eq!(int(&i["evicted-holds"]), lost.len() as i64, "{policy}");
        assert_eq!(int(&i["holds"]), (holds.len() - lost.len()) as i64, "{policy}: the session forgot them");
        assert_eq!(int(&i["revoked-holds"]), 0, "{policy}: an eviction is no revoke");
        // The replica has the same notes and holds.
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut c).unwrap();
        assert_eq!(acked, 1);
        let ri = session_info(&mut r, &id);
        assert_eq!(evicted(&ri, now), lost, "{policy}: replica");
        assert_eq!(int(&ri["holds"]), int(&i["holds"]), "{policy}: replica");
        // The same key granted to the session again, with a new token.
        if let Some((k, t)) = lost.iter().find(|(k, _)| k.starts_with("lk:")).cloned() {
            assert_eq!(run(&mut c, &["LOCK.ACQUIRE", &k, "again", "600000", "SESSION", &id]).unwrap(), Value::Int(1));
            let i = session_info(&mut c, &id);
            assert_eq!(int(&i["holds"]), (holds.len() - lost.len() + 1) as i64, "{policy}");
            let listed = evicted(&i, now_ms(&mut c));
            assert!(listed.contains(&(k.clone(), t)) && !listed.contains(&(k.clone(), "again".into())), "{listed:?}");
            assert_eq!(run(&mut c, &["LOCK.EVICTED", &k, "again"]).unwrap(), Value::Int(0));
        }
        // Its end forgets them: a new session of the same client hears nothing old.
        assert_eq!(run(&mut c, &["SESSION.REVOKE", &id]).unwrap(), Value::Int(1));
        let fresh: String = redis::cmd("SESSION.GRANT").arg(600_000).query(&mut c).unwrap();
        assert_eq!(keepalive(&mut c, &fresh), 600_000, "{policy}");
    }
}

/// The notes outlive a restart from an RDB: the session's keepalive still
/// replies `-ttl` and `SESSION.INFO` lists the same holds.
#[test]
fn the_notes_are_saved_in_the_rdb() {
    let mut server = Server::builder().arg("lock.eviction", "allow").start();
    let mut c = server.conn();
    let id: String = redis::cmd("SESSION.GRANT").arg(600_000).query(&mut c).unwrap();
    limit_memory(&mut c, 1_500_000, "allkeys-lru");
    grant(&mut c, &id);
    fill(&mut c, 8000, None);
    config_set(&mut c, "maxmemory", "0");
    let before = evicted(&session_info(&mut c, &id), now_ms(&mut c));
    assert!(!before.is_empty());
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    server.restart();
    let mut c = server.conn();
    assert_eq!(evicted(&session_info(&mut c, &id), now_ms(&mut c)), before);
    assert_eq!(keepalive(&mut c, &id), -600_000);
}

/// The notes and the detached holds outlive an AOF rewrite without the
/// RDB preamble (its walk restates them as `SESSION.APPLY EVICTHOLD`)
/// and a `kill -9`.
#[test]
fn the_notes_survive_an_aof_rewrite_without_the_preamble() {
    let dir = std::env::temp_dir().join(format!("redis-lock-evsess-aof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = Server::builder()
        .dir(&dir)
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("aof-use-rdb-preamble", "no")
        .arg("lock.eviction", "allow")
        .start();
    let mut c = server.conn();
    let id: String = redis::cmd("SESSION.GRANT").arg(600_000).query(&mut c).unwrap();
    limit_memory(&mut c, 1_500_000, "allkeys-lru");
    grant(&mut c, &id);
    fill(&mut c, 8000, None);
    config_set(&mut c, "maxmemory", "0");
    let i = session_info(&mut c, &id);
    let before = (evicted(&i, now_ms(&mut c)), int(&i["holds"]));
    assert!(!before.0.is_empty());
    let _: Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
        let walking = num(&info(&mut c), "aof_walking");
        if p.contains("aof_rewrite_in_progress:0") && p.contains("aof_rewrite_scheduled:0") && walking == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the rewrite or its walk did not end: {p}");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.restart();
    let mut c = server.conn();
    let i = session_info(&mut c, &id);
    assert_eq!((evicted(&i, now_ms(&mut c)), int(&i["holds"])), before);
    assert_eq!(keepalive(&mut c, &id), -600_000);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
