//! Sessions on semaphores and read-write locks (docs/sessions.md):
//! `SEM.ACQUIRE … SESSION id` and `RWLOCK.ACQUIRE … SESSION id`, with and
//! without WAIT; a session-held holder needs no renewal and is refused to
//! its holder from its session's end; a revoke frees its places at once
//! and serves the line, an expiry keeps them through the key's lock-delay;
//! errors that write nothing; a randomized run against a model, with a
//! replica and an AOF restart holding what the master holds.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use redis_lock_harness::Server;

mod support;
use support::lease::{err, field, fields_of, int, score, server_now, until_server_time, zrange};
use support::{info_field, replica_of, until_waiting, AofDir};

/// A session-held holder's place: 2^53 (no lease end of its own).
const HELD: f64 = 9_007_199_254_740_992.0;

fn grant(c: &mut Connection, args: &[&str]) -> String {
    redis::cmd("SESSION.GRANT").arg(args).query(c).expect("SESSION.GRANT")
}

fn session_int(c: &mut Connection, id: &str, name: &str) -> i64 {
    match fields_of(c, &["SESSION.INFO", id]).map(|f| field(&f, name)) {
        Some(Value::Int(n)) => n,
        other => panic!("{name} of {id}: {other:?}"),
    }
}

fn list(c: &mut Connection) -> Vec<String> {
    redis::cmd("SESSION.LIST").query(c).expect("SESSION.LIST")
}

fn exists(c: &mut Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(c).unwrap() == 1
}

/// The session member of `token` (`"\0\0" + token`).
fn session_member(token: &str) -> Vec<u8> {
    [&b"\0\0"[..], token.as_bytes()].concat()
}

/// The live holders SEM.INFO / RWLOCK.INFO lists, sorted, with the lease
/// they show.
fn holders(c: &mut Connection, info: &str, key: &str) -> Vec<(String, i64)> {
    let Some(f) = fields_of(c, &[info, key]) else { return Vec::new() };
    let mut out: Vec<(String, i64)> = match field(&f, "holders") {
        Value::Array(items) => items
            .chunks(2)
            .map(|p| match p {
                [Value::BulkString(t), Value::Int(n)] => (String::from_utf8(t.clone()).unwrap(), *n),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    };
    out.sort();
    out
}

fn tokens(c: &mut Connection, info: &str, key: &str) -> Vec<String> {
    holders(c, info, key).into_iter().map(|(t, _)| t).collect()
}

/// Waits (at most 20 s) until `what` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

type Answers = mpsc::Sender<(String, Value)>;

/// `args` on `c` from a new thread; its reply (an error as a
/// `SimpleString`) arrives on `tx` with `name`.
fn spawn(mut c: Connection, name: &str, args: &[&str], tx: Answers) -> thread::JoinHandle<()> {
    let (name, args): (String, Vec<String>) = (name.into(), args.iter().map(|a| a.to_string()).collect());
    thread::spawn(move || {
        let reply = redis::cmd(&args[0]).arg(&args[1..]).query::<Value>(&mut c);
        let _ = tx.send((name, reply.unwrap_or_else(|e| Value::SimpleString(e.to_string()))));
    })
}

#[test]
fn a_session_held_holder_needs_no_renewal_and_works_as_any_hold() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    // Refused before anything is written: an unknown or malformed session.
    let unknown = "00112233445566778899aabbccddeeff";
    for (args, what) in [
        (vec!["SEM.ACQUIRE", "sem", "a", "2", "100", "SESSION", unknown], "no such session"),
        (vec!["RWLOCK.ACQUIRE", "rw", "a", "READ", "100", "SESSION", "xyz"], "no such session"),
        (vec!["SEM.ACQUIRE", "sem", "a", "2", "100", "SESSION"], "syntax"),
    ] {
        assert!(err(&mut c, &args).contains(what), "{args:?}");
    }
    assert!(!exists(&mut c, "sem") && !exists(&mut c, "rw"));
    // A grant: its place has no lease end, its session member names it.
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "a", "2", "100", "SESSION", &id]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "b", "2", "100"]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "r1", "READ", "100", "SESSION", &id]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "r2", "READ", "100", "SESSION", &id]), 1);
    assert!(int(&mut c, &["RWLOCK.ACQUIRE", "w", "wr", "WRITE", "100", "FENCE", "SESSION", &id]) > 0);
    assert_eq!(score(&mut c, "sem", "a"), Some(HELD));
    assert!(score(&mut c, "sem", session_member("a")).is_some_and(|s| s < -HELD));
    assert_eq!(score(&mut c, "sem", session_member("b")), None);
    assert_eq!(session_int(&mut c, &id, "holds"), 4);
    // Past every ttl-ms: the session's holders are held, the other is not.
    thread::sleep(Duration::from_millis(300));
    assert_eq!(tokens(&mut c, "SEM.INFO", "sem"), vec!["a"]);
    assert_eq!(tokens(&mut c, "RWLOCK.INFO", "rw"), vec!["r1", "r2"]);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "w", "x", "READ", "100"]), 0);
    // Their lease shown is the session's TTL left.
    let (_, left) = holders(&mut c, "SEM.INFO", "sem")[0];
    assert!(left > 50_000 && left <= 60_000, "{left}");
    let f = fields_of(&mut c, &["SEM.INFO", "sem"]).unwrap();
    assert!(matches!(field(&f, "sessions"), Value::Array(a) if a.len() == 2), "{f:?}");
    // A renewal by the holder changes nothing; a release detaches it.
    assert_eq!(int(&mut c, &["SEM.RENEW", "sem", "a", "10"]), 1);
    assert_eq!(score(&mut c, "sem", "a"), Some(HELD));
    assert_eq!(int(&mut c, &["RWLOCK.RENEW", "rw", "r1", "10"]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.RELEASE", "rw", "r1"]), 1);
    assert_eq!(score(&mut c, "rw", session_member("r1")), None);
    assert_eq!(session_int(&mut c, &id, "holds"), 3);
    // MAXHOLD still caps a session-held holder.
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "capped", "t", "1", "100", "MAXHOLD", "200", "SESSION", &id]), 1);
    let now = server_now(&mut c);
    let place = score(&mut c, "capped", "t").unwrap() as i64;
    assert!(place > now && place <= now + 200, "{place} {now}");
    until_server_time(&mut c, place + 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "capped", "u", "1", "100"]), 1, "its hold limit ended it");
    assert_eq!(score(&mut c, "capped", session_member("t")), None, "pruned with its place");
    assert_eq!(int(&mut c, &["SEM.RELEASE", "capped", "t"]), 0);
    // An ended session's grant: refused, nothing written.
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    assert!(err(&mut c, &["SEM.ACQUIRE", "new", "a", "2", "100", "SESSION", &id]).contains("no such session"));
    assert!(!exists(&mut c, "new"));
}

#[test]
fn a_revoke_frees_every_place_at_once_and_serves_each_line_first_come() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000", "LOCKDELAY", "5000"]);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "a", "1", "60000", "SESSION", &id]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "w", "WRITE", "60000", "SESSION", &id]), 1);
    let (tx, rx) = mpsc::channel();
    let mut threads = vec![spawn(
        server.conn(),
        "first",
        &["SEM.ACQUIRE", "sem", "first", "1", "60000", "WAIT", "20000"],
        tx.clone(),
    )];
    until_waiting(&mut c, 1);
    threads.push(spawn(
        server.conn(),
        "second",
        &["SEM.ACQUIRE", "sem", "second", "1", "60000", "WAIT", "20000"],
        tx.clone(),
    ));
    until_waiting(&mut c, 2);
    for r in ["r1", "r2"] {
        threads.push(spawn(
            server.conn(),
            r,
            &["RWLOCK.ACQUIRE", "rw", r, "READ", "60000", "WAIT", "20000"],
            tx.clone(),
        ));
    }
    until_waiting(&mut c, 4);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    // Refused to their holder at once (no lock-delay on a revoke).
    assert_eq!(int(&mut c, &["SEM.RELEASE", "sem", "a"]), 0);
    assert_eq!(int(&mut c, &["RWLOCK.RENEW", "rw", "w", "1000"]), 0);
    let mut granted = Vec::new();
    for _ in 0..3 {
        let (who, reply) = rx.recv_timeout(Duration::from_secs(10)).expect("a waiter was granted");
        assert_eq!(reply, Value::Int(1), "{who}");
        granted.push(who);
    }
    granted.sort();
    assert_eq!(granted, vec!["first", "r1", "r2"]);
    assert_eq!(tokens(&mut c, "SEM.INFO", "sem"), vec!["first"]);
    assert_eq!(tokens(&mut c, "RWLOCK.INFO", "rw"), vec!["r1", "r2"]);
    assert_eq!(score(&mut c, "sem", session_member("a")), None);
    eventually("the session is forgotten", || list(&mut c).is_empty());
    assert_eq!(info_field(&mut c, "session_holds_ended"), 2);
    assert_eq!(int(&mut c, &["SEM.RELEASE", "sem", "first"]), 1);
    let (who, reply) = rx.recv_timeout(Duration::from_secs(10)).expect("the second was granted");
    assert_eq!((who.as_str(), reply), ("second", Value::Int(1)));
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn an_expiry_keeps_each_place_through_the_keys_lock_delay() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["300"]);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "a", "1", "60000", "LOCKDELAY", "1000", "SESSION", &id]), 1);
    let deadline = session_int(&mut c, &id, "deadline");
    until_server_time(&mut c, deadline);
    // From its deadline on, refused to its holder (whether or not the
    // timer reached it), and the place stays through the key's delay.
    assert_eq!(int(&mut c, &["SEM.RENEW", "sem", "a", "1000"]), 0);
    assert_eq!(int(&mut c, &["SEM.RELEASE", "sem", "a"]), 0);
    eventually("the session ended", || list(&mut c).is_empty());
    let place = score(&mut c, "sem", "a").expect("kept through the delay") as i64;
    assert_eq!(place, deadline + 1000);
    assert_eq!(score(&mut c, "sem", session_member("a")), None);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "b", "1", "60000", "LOCKDELAY", "1000"]), 0);
    until_server_time(&mut c, place + 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "b", "1", "60000", "LOCKDELAY", "1000"]), 1);
    assert_eq!(info_field(&mut c, "sessions_expired"), 1);
    assert_eq!(info_field(&mut c, "session_holds_ended"), 1);
}

#[test]
fn a_waiting_request_attaches_when_granted_or_is_answered_at_its_sessions_end() {
    let server = Server::start();
    let mut c = server.conn();
    let (live, doomed) = (grant(&mut c, &["60000"]), grant(&mut c, &["60000"]));
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "holder", "WRITE", "60000"]), 1);
    let (tx, rx) = mpsc::channel();
    let args = |t: &'static str, id: &str| -> Vec<String> {
        ["RWLOCK.ACQUIRE", "rw", t, "READ", "1000", "WAIT", "20000", "SESSION", id]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let a = args("doomed", &doomed);
    let w1 = spawn(server.conn(), "doomed", &a.iter().map(String::as_str).collect::<Vec<_>>(), tx.clone());
    until_waiting(&mut c, 1);
    let a = args("kept", &live);
    let w2 = spawn(server.conn(), "kept", &a.iter().map(String::as_str).collect::<Vec<_>>(), tx);
    until_waiting(&mut c, 2);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &doomed]), 1);
    let (who, reply) = rx.recv_timeout(Duration::from_secs(10)).expect("answered at the revoke");
    assert_eq!(who, "doomed");
    assert!(matches!(&reply, Value::SimpleString(e) if e.contains("no such session")), "{reply:?}");
    assert_eq!(session_int(&mut c, &live, "holds"), 0, "nothing attaches before the grant");
    assert_eq!(int(&mut c, &["RWLOCK.RELEASE", "rw", "holder"]), 1);
    let (who, reply) = rx.recv_timeout(Duration::from_secs(10)).expect("granted");
    assert_eq!((who.as_str(), reply), ("kept", Value::Int(1)));
    w1.join().unwrap();
    w2.join().unwrap();
    assert_eq!(score(&mut c, "rw", "kept"), Some(HELD));
    assert!(score(&mut c, "rw", session_member("kept")).is_some());
    assert_eq!(session_int(&mut c, &live, "holds"), 1);
    thread::sleep(Duration::from_millis(1100));
    assert_eq!(tokens(&mut c, "RWLOCK.INFO", "rw"), vec!["kept"], "past its ttl-ms, held by its session");
}

/// A randomized run: sessions granted, kept alive, revoked and left to
/// expire; semaphore permits and read and write holds taken with and
/// without a session, released and renewed, waiters served; checked after
/// every step against a model of who holds what. A replica, and the
/// master restarted from its AOF, end with the master's keys and sessions.
#[test]
fn a_random_run_on_semaphores_and_rwlocks_matches_the_model_the_replica_and_the_aof() {
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::collections::BTreeMap;

    let seed: u64 = std::env::var("SESSIONS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(31);
    let mut rng = StdRng::seed_from_u64(seed);
    let aof = AofDir::new("session-holders");
    let mut master = aof.start();
    let (_replica, mut r) = replica_of(&master);
    let mut c = master.conn();
    // Key -> (is a semaphore, holders: token -> (session, writer)).
    type Holders = BTreeMap<String, (Option<String>, bool)>;
    let keys = [("s1", true), ("s2", true), ("w1", false), ("w2", false)];
    let toks = ["t1", "t2", "t3", "t4"];
    let mut model: BTreeMap<&str, Holders> = keys.iter().map(|&(k, _)| (k, Holders::new())).collect();
    let (mut live, mut gone): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let info = |sem: bool| if sem { "SEM.INFO" } else { "RWLOCK.INFO" };
    let admits = |h: &Holders, sem: bool, write: bool| {
        if sem {
            h.len() < 2
        } else {
            h.is_empty() || (!write && h.values().all(|&(_, w)| !w))
        }
    };
    let ended = |c: &mut Connection, model: &mut BTreeMap<&str, Holders>, id: &str| {
        for (k, h) in model.iter_mut() {
            let sem = k.starts_with('s');
            let ts: Vec<String> =
                h.iter().filter(|(_, (s, _))| s.as_deref() == Some(id)).map(|(t, _)| t.clone()).collect();
            for t in ts {
                let renew = if sem { "SEM.RENEW" } else { "RWLOCK.RENEW" };
                assert_eq!(int(c, &[renew, k, &t, "1000"]), 0, "refused to {t} on {k} at once");
                eventually("an ended session's place is freed", || score(c, k, &t).is_none());
                h.remove(&t);
            }
        }
    };
    // How often each kind of step ran: session-held grants, revokes,
    // expiries, keepalives, waiters served.
    let mut seen = [0usize; 5];
    for step in 0..300 {
        let what = format!("seed {seed}, step {step}");
        let (k, sem) = keys[rng.gen_range(0..keys.len())];
        let t = toks[rng.gen_range(0..toks.len())];
        match rng.gen_range(0..12) {
            0 if live.len() < 3 => live.push(grant(&mut c, &["60000"])),
            1 if !live.is_empty() => {
                let id = live.remove(rng.gen_range(0..live.len()));
                assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1, "{what}");
                ended(&mut c, &mut model, &id);
                gone.push(id);
                seen[1] += 1;
            }
            2 => {
                // A short session on a key that admits it, left to expire.
                let id = grant(&mut c, &["200"]);
                let h = &model[k];
                if !h.contains_key("short") && admits(h, sem, false) {
                    let args: Vec<&str> = if sem {
                        vec!["SEM.ACQUIRE", k, "short", "2", "60000", "SESSION", &id]
                    } else {
                        vec!["RWLOCK.ACQUIRE", k, "short", "READ", "60000", "SESSION", &id]
                    };
                    assert_eq!(int(&mut c, &args), 1, "{what}");
                    model.get_mut(k).unwrap().insert("short".into(), (Some(id.clone()), false));
                }
                let deadline = session_int(&mut c, &id, "deadline");
                until_server_time(&mut c, deadline);
                let kept: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(&id).query(&mut c).unwrap();
                assert_eq!(kept, vec![0], "{what}");
                ended(&mut c, &mut model, &id);
                gone.push(id);
                seen[2] += 1;
            }
            3 if !live.is_empty() => {
                let id = &live[rng.gen_range(0..live.len())];
                let kept: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(id).query(&mut c).unwrap();
                assert_eq!(kept, vec![60_000], "{what}");
                seen[3] += 1;
            }
            4..=6 => {
                let write = !sem && rng.gen_bool(0.4);
                let session = match rng.gen_range(0..4) {
                    0 => None,
                    1 if !gone.is_empty() => Some((gone[rng.gen_range(0..gone.len())].clone(), false)),
                    _ if !live.is_empty() => Some((live[rng.gen_range(0..live.len())].clone(), true)),
                    _ => None,
                };
                let mut args: Vec<&str> = if sem {
                    vec!["SEM.ACQUIRE", k, t, "2", "60000"]
                } else {
                    vec!["RWLOCK.ACQUIRE", k, t, if write { "WRITE" } else { "READ" }, "60000"]
                };
                if let Some((id, _)) = &session {
                    args.extend(["SESSION", id.as_str()]);
                }
                let h = &model[k];
                match &session {
                    Some((_, false)) => assert!(err(&mut c, &args).contains("no such session"), "{what}"),
                    _ => {
                        let want = !h.contains_key(t) && admits(h, sem, write);
                        assert_eq!(int(&mut c, &args), i64::from(want), "{what}: {args:?}");
                        if want {
                            seen[0] += usize::from(session.is_some());
                            model.get_mut(k).unwrap().insert(t.into(), (session.map(|(id, _)| id), write));
                        }
                    }
                }
            }
            7 | 8 => {
                let held = model[k].contains_key(t);
                let family = if sem { "SEM" } else { "RWLOCK" };
                if rng.gen_bool(0.5) {
                    assert_eq!(int(&mut c, &[&format!("{family}.RELEASE"), k, t]), i64::from(held), "{what}");
                    model.get_mut(k).unwrap().remove(t);
                } else {
                    assert_eq!(int(&mut c, &[&format!("{family}.RENEW"), k, t, "60000"]), i64::from(held), "{what}");
                }
            }
            9 if !live.is_empty() && !model[k].is_empty() && !sem => {
                // A writer waits with a session; every holder leaves; it
                // is granted and attached.
                let id = live[rng.gen_range(0..live.len())].clone();
                if model[k].contains_key("waiter") {
                    continue;
                }
                let (tx, rx) = mpsc::channel();
                let args = ["RWLOCK.ACQUIRE", k, "waiter", "WRITE", "60000", "WAIT", "20000", "SESSION", &id];
                let w = spawn(master.conn(), "waiter", &args, tx);
                until_waiting(&mut c, 1);
                let holders: Vec<String> = model[k].keys().cloned().collect();
                for h in holders {
                    assert_eq!(int(&mut c, &["RWLOCK.RELEASE", k, &h]), 1, "{what}");
                }
                let (_, reply) = rx.recv_timeout(Duration::from_secs(10)).expect("the waiter was granted");
                assert_eq!(reply, Value::Int(1), "{what}");
                w.join().unwrap();
                let h = model.get_mut(k).unwrap();
                h.clear();
                h.insert("waiter".into(), (Some(id), true));
                seen[4] += 1;
            }
            _ => {}
        }
        for &(k, sem) in &keys {
            let want: Vec<&String> = model[k].keys().collect();
            assert_eq!(tokens(&mut c, info(sem), k).iter().collect::<Vec<_>>(), want, "{what}: {k}");
            for (t, (s, _)) in &model[k] {
                let held = score(&mut c, k, session_member(t)).is_some();
                assert_eq!(held, s.is_some(), "{what}: session member of {t} on {k}");
            }
        }
        for id in &live {
            let n: usize = model.values().map(|h| h.values().filter(|(s, _)| s.as_deref() == Some(id)).count()).sum();
            assert_eq!(session_int(&mut c, id, "holds"), n as i64, "{what}: holds of {id}");
        }
    }
    // Sessions, every key's set, and each session's deadline and holds.
    type Digest = (Vec<String>, Vec<Vec<(Vec<u8>, String)>>, Vec<(i64, i64)>);
    let digest = |c: &mut Connection| -> Digest {
        let ids = list(c);
        let sets = keys.iter().map(|&(k, _)| zrange(c, k)).collect();
        let sessions = ids.iter().map(|id| (session_int(c, id, "deadline"), session_int(c, id, "holds"))).collect();
        (ids, sets, sessions)
    };
    assert!(seen.iter().all(|&n| n > 0), "every kind of step ran: {seen:?}");
    live.sort();
    eventually("every ended session is forgotten", || list(&mut c) == live);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(20_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    let want = digest(&mut c);
    eventually("the replica has the master's sessions", || list(&mut r) == want.0);
    assert_eq!(digest(&mut r), want, "the replica");
    master.restart();
    let mut c = master.conn();
    assert_eq!(digest(&mut c), want, "the master restarted from its AOF");
}

/// `LOCK.LEADER`'s value, term, rev and ttl-ms (nil: leaderless).
fn leader(c: &mut Connection, key: &str) -> Option<(String, i64, i64, i64)> {
    let f = fields_of(c, &["LOCK.LEADER", key])?;
    let int = |name| match field(&f, name) {
        Value::Int(n) => n,
        other => panic!("{name}: {other:?}"),
    };
    let value = match field(&f, "value") {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    Some((value, int("term"), int("rev"), int("ttl-ms")))
}

#[test]
fn a_session_leads_an_election_until_it_ends() {
    let server = Server::start();
    let mut c = server.conn();
    let (id, next) = (grant(&mut c, &["60000", "LOCKDELAY", "5000"]), grant(&mut c, &["60000"]));
    let unknown = "00112233445566778899aabbccddeeff";
    assert!(err(&mut c, &["LOCK.ELECT", "e", "a", "100", "v", "SESSION", unknown]).contains("no such session"));
    assert!(!err(&mut c, &["LOCK.ELECT", "e", "a", "100", "v", "LOCKDELAY", "10", "SESSION", &id]).is_empty());
    assert!(!exists(&mut c, "e"));
    let term = int(&mut c, &["LOCK.ELECT", "e", "a", "100", "v1", "SESSION", &id]);
    assert!(term > 0);
    assert_eq!(redis::cmd("PTTL").arg("e").query::<i64>(&mut c).unwrap(), -1, "the session keeps it");
    thread::sleep(Duration::from_millis(300));
    let (value, t, rev, ttl) = leader(&mut c, "e").expect("led past its ttl-ms");
    assert_eq!((value.as_str(), t, rev), ("v1", term, term));
    assert!(ttl > 50_000 && ttl <= 60_000, "the session's TTL left: {ttl}");
    assert_eq!(int(&mut c, &["LOCK.PROCLAIM", "e", "b", "x"]), 0);
    assert_eq!(int(&mut c, &["LOCK.PROCLAIM", "e", "a", "v2"]), 1);
    let (value, t, rev, _) = leader(&mut c, "e").unwrap();
    assert_eq!((value.as_str(), t), ("v2", term));
    assert!(rev > term);
    assert!(cmd_nil(&mut c, &["LOCK.ELECT", "e", "b", "100", "w"]), "another candidate is refused");
    // A candidate waiting with its session, and an observer of the change.
    let (tx, rx) = mpsc::channel();
    let candidate = spawn(
        server.conn(),
        "b",
        &["LOCK.ELECT", "e", "b", "1000", "w", "WAIT", "20000", "SESSION", &next],
        tx.clone(),
    );
    until_waiting(&mut c, 1);
    let after = rev.to_string();
    let observer = spawn(server.conn(), "observer", &["LOCK.OBSERVE", "e", "AFTER", &after, "WAIT", "20000"], tx);
    eventually("the observer waits", || info_field(&mut c, "observing") == 1);
    // A revoke: no lock-delay, the candidate leads at once.
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    assert_eq!(int(&mut c, &["LOCK.PROCLAIM", "e", "a", "v3"]), 0, "refused to the old leader at once");
    let mut answers: Vec<(String, Value)> =
        (0..2).map(|_| rx.recv_timeout(Duration::from_secs(10)).expect("answered")).collect();
    answers.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(matches!(answers[0], (ref w, Value::Int(t)) if w == "b" && t > rev), "{answers:?}");
    assert!(matches!(&answers[1].1, Value::Array(_) | Value::Map(_)), "{answers:?}");
    candidate.join().unwrap();
    observer.join().unwrap();
    let (value, ..) = leader(&mut c, "e").expect("the candidate leads");
    assert_eq!(value, "w");
    assert_eq!(session_int(&mut c, &next, "holds"), 1);
    // Its session expires: leaderless from its deadline on.
    let short = grant(&mut c, &["300"]);
    assert!(int(&mut c, &["LOCK.ELECT", "f", "a", "100", "v", "SESSION", &short]) > 0);
    let deadline = session_int(&mut c, &short, "deadline");
    until_server_time(&mut c, deadline);
    assert_eq!(leader(&mut c, "f"), None);
}

fn cmd_nil(c: &mut Connection, args: &[&str]) -> bool {
    redis::cmd(args[0]).arg(&args[1..]).query::<Value>(c).unwrap() == Value::Nil
}

/// With `aof-use-rdb-preamble no` the AOF holds every session change as
/// `SESSION.APPLY` entries: a restart replays them, and sessions come back
/// with their deadlines and holds (exclusive locks, permits and leaders).
/// (An AOF rewrite in that mode keeps no session: docs/sessions.md.)
#[test]
fn sessions_survive_an_aof_restart_without_the_rdb_preamble() {
    let dir = TempDir::new("no-preamble");
    let mut server = Server::builder()
        .dir(&dir.0)
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("aof-use-rdb-preamble", "no")
        .start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000", "LOCKDELAY", "100"]);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "t", "1000", "SESSION", &id]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "t", "3", "1000", "SESSION", &id]), 1);
    assert!(int(&mut c, &["LOCK.ELECT", "e", "t", "1000", "v", "SESSION", &id]) > 0);
    let gone = grant(&mut c, &["60000"]);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "t", "READ", "1000", "SESSION", &gone]), 1);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &gone]), 1);
    eventually("the revoked session is forgotten", || list(&mut c) == vec![id.clone()]);
    thread::sleep(Duration::from_millis(10));
    let kept: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(&id).query(&mut c).unwrap();
    assert_eq!(kept, vec![60_000]);
    let before: Vec<i64> = ["deadline", "holds", "lock-delay-ms"].iter().map(|n| session_int(&mut c, &id, n)).collect();
    let sets = (zrange(&mut c, "sem"), zrange(&mut c, "rw"));
    server.restart();
    let mut c = server.conn();
    assert_eq!(list(&mut c), vec![id.clone()]);
    let after: Vec<i64> = ["deadline", "holds", "lock-delay-ms"].iter().map(|n| session_int(&mut c, &id, n)).collect();
    assert_eq!(after, before);
    assert_eq!((zrange(&mut c, "sem"), zrange(&mut c, "rw")), sets);
    assert_eq!(int(&mut c, &["SEM.RENEW", "sem", "t", "1000"]), 1);
    assert!(leader(&mut c, "e").is_some());
    // The restarted server ends them as the first would have.
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    eventually("every hold released", || redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap() == 0);
}

/// A fresh directory, deleted on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("redis-lock-session-holders-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A replica keeps a session's permits and holds; promoted, it restarts the
/// session's deadline at its full TTL, then ends it itself: the permit is
/// freed and the line behind it served.
#[test]
fn a_promoted_replica_ends_a_sessions_permits_itself() {
    let master = Server::builder().arg("repl-diskless-sync", "no").start();
    let mut m = master.conn();
    let (_replica, mut r) = replica_of(&master);
    let id = grant(&mut m, &["1500"]);
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "sem", "a", "1", "60000", "SESSION", &id]), 1);
    assert_eq!(int(&mut m, &["RWLOCK.ACQUIRE", "rw", "r", "READ", "60000", "SESSION", &id]), 1);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(20_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(session_int(&mut r, &id, "holds"), 2);
    assert_eq!(score(&mut r, "sem", "a"), Some(HELD));
    drop(master);
    // Past its deadline: a replica ends nothing itself.
    let deadline = session_int(&mut r, &id, "deadline");
    until_server_time(&mut r, deadline + 200);
    assert_eq!(list(&mut r), vec![id.clone()]);
    assert_eq!(score(&mut r, "sem", "a"), Some(HELD));
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    assert_eq!(int(&mut r, &["SEM.RENEW", "sem", "a", "10"]), 1, "held a full TTL after the promotion");
    assert_eq!(int(&mut r, &["SEM.ACQUIRE", "sem", "b", "1", "60000"]), 0);
    eventually("the promoted replica ended the session", || list(&mut r).is_empty());
    assert_eq!(int(&mut r, &["SEM.RELEASE", "sem", "a"]), 0);
    assert_eq!(int(&mut r, &["SEM.ACQUIRE", "sem", "b", "1", "60000"]), 1);
    assert_eq!(tokens(&mut r, "RWLOCK.INFO", "rw"), Vec::<String>::new());
}
