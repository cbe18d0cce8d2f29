//! LOCK.GUARD against a real server: the inner command runs only while the
//! token holds the lock, as the caller's own command (ACL, deny-oom,
//! read-only replica, database, protocol), replies what it replied, and
//! leaves replicas and the AOF only its effects. Holders that pause or die
//! never land a late write; the same workload with plain writes does.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};
use redis_lock_harness::Server;

mod support;
use support::{get, info_field, wait_for_link};

const NOT_HELD: &str =
    "NOTHELD the token does not hold the lock (absent, expired, or another owner); the command did not run";

/// Runs `args` (command first): the reply, or `Err("CODE detail")`.
fn run(c: &mut Connection, args: &[&[u8]]) -> Result<Value, String> {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    cmd.query::<Value>(c).map_err(|e| match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => format!("not a server error: {e}"),
    })
}

fn s(c: &mut Connection, args: &[&str]) -> Result<Value, String> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    run(c, &args)
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// `DEBUG DIGEST`: one hash of every key, value and expiry time.
fn digest(c: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
}

#[test]
fn runs_the_command_only_while_the_token_holds_the_lock() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:a", "t", "SET", "d", "absent"]), Err(NOT_HELD.into()));
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:a", "t", "60000"]), Ok(Value::Int(1)));
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:a", "t", "SET", "d", "bare"]), Ok(Value::Okay));
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:a", "other", "SET", "d", "stolen"]), Err(NOT_HELD.into()));
    assert_eq!(get(&mut c, "d").as_deref(), Some("bare"));
    // A structured value is held by its owner, as LOCK.RELEASE decides.
    assert_eq!(s(&mut c, &["LOCK.TAKEOVER", "lock:s", "owner-tok", "run-1", "60000"]), Ok(Value::Int(1)));
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:s", "owner-tok", "SET", "d", "structured"]), Ok(Value::Okay));
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:s", "run-1", "SET", "d", "run-id is no owner"]), Err(NOT_HELD.into()));
    assert_eq!(
        s(&mut c, &["LOCK.GUARD", "lock:s", r#"{"owner":"owner-tok","runId":"run-1"}"#, "SET", "d", "x"]),
        Err(NOT_HELD.into())
    );
    assert_eq!(get(&mut c, "d").as_deref(), Some("structured"));
    // Released: no longer held.
    assert_eq!(s(&mut c, &["LOCK.RELEASE", "lock:a", "t"]), Ok(Value::Int(1)));
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:a", "t", "DEL", "d"]), Err(NOT_HELD.into()));
    assert_eq!(get(&mut c, "d").as_deref(), Some("structured"));
    // A lock key of another type: WRONGTYPE, as RELEASE, and nothing runs.
    let _: i64 = redis::cmd("RPUSH").arg("lock:list").arg("t").query(&mut c).unwrap();
    let err = s(&mut c, &["LOCK.GUARD", "lock:list", "t", "DEL", "d"]).unwrap_err();
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert_eq!(get(&mut c, "d").as_deref(), Some("structured"));
    assert_eq!(info_field(&mut c, "guarded"), 2);
    assert_eq!(info_field(&mut c, "guard_refusals"), 5);
}

#[test]
fn an_expired_lock_is_not_held() {
    let server = Server::start();
    let mut c = server.conn();
    // PXAT in the past leaves no key; an expiry 1 ms away has passed by the
    // time we poll it gone.
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:e", "t", "1"]), Ok(Value::Int(1)));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // PTTL -2: gone (lazily or actively expired).
        let pttl: i64 = redis::cmd("PTTL").arg("lock:e").query(&mut c).unwrap();
        if pttl == -2 {
            break;
        }
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:e", "t", "SET", "d", "late"]), Err(NOT_HELD.into()));
    assert_eq!(get(&mut c, "d"), None);
}

#[test]
fn the_reply_is_exactly_what_the_inner_command_replied() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:r", "t", "60000"]), Ok(Value::Int(1)));
    let g = |c: &mut Connection, args: &[&str]| {
        let mut all = vec!["LOCK.GUARD", "lock:r", "t"];
        all.extend_from_slice(args);
        s(c, &all)
    };
    assert_eq!(g(&mut c, &["INCRBY", "n", "5"]), Ok(Value::Int(5)));
    assert_eq!(g(&mut c, &["GET", "n"]), Ok(bulk("5")));
    assert_eq!(g(&mut c, &["GET", "missing"]), Ok(Value::Nil));
    assert_eq!(g(&mut c, &["RPUSH", "l", "a", "b"]), Ok(Value::Int(2)));
    assert_eq!(g(&mut c, &["LRANGE", "l", "0", "-1"]), Ok(Value::Array(vec![bulk("a"), bulk("b")])));
    assert_eq!(g(&mut c, &["PING"]), Ok(Value::SimpleString("PONG".into())));
    // The inner command's own errors come back as they are.
    assert_eq!(
        g(&mut c, &["INCR", "l"]),
        Err("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
    let err = g(&mut c, &["SET", "k", "v", "EX", "-1"]).unwrap_err();
    assert_eq!(err, s(&mut c, &["SET", "k", "v", "EX", "-1"]).unwrap_err());
    // In RESP3, a RESP3 reply (a map) passes through as one.
    let mut c3 = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap().get_connection().unwrap();
    let _: i64 = redis::cmd("HSET").arg("h").arg("f").arg("v").query(&mut c3).unwrap();
    let direct: Value = redis::cmd("HGETALL").arg("h").query(&mut c3).unwrap();
    assert!(matches!(direct, Value::Map(_)), "{direct:?}");
    assert_eq!(g(&mut c3, &["HGETALL", "h"]), Ok(direct));
    assert!(matches!(g(&mut c, &["HGETALL", "h"]), Ok(Value::Array(_))));
}

#[test]
fn runs_in_the_callers_database_and_guards_a_write_against_watch_like_a_native_one() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut c).unwrap();
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:w", "t", "60000"]), Ok(Value::Int(1)));
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:w", "t", "SET", "d", "in-3"]), Ok(Value::Okay));
    assert_eq!(get(&mut c, "d").as_deref(), Some("in-3"));
    let mut db0 = server.conn();
    assert_eq!(get(&mut db0, "d"), None);
    assert_eq!(
        s(&mut db0, &["LOCK.GUARD", "lock:w", "t", "SET", "d", "x"]),
        Err(NOT_HELD.into()),
        "the lock lives in db 3"
    );

    // A guarded write invalidates WATCH on its key, as the write itself would...
    let mut other = server.conn();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut other).unwrap();
    let _: () = redis::cmd("WATCH").arg("d").query(&mut other).unwrap();
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:w", "t", "SET", "d", "changed"]), Ok(Value::Okay));
    let _: () = redis::cmd("MULTI").query(&mut other).unwrap();
    let _: () = redis::cmd("GET").arg("d").query(&mut other).unwrap();
    let exec: Value = redis::cmd("EXEC").query(&mut other).unwrap();
    assert_eq!(exec, Value::Nil, "EXEC ran although the watched key changed");
    // ...while a refused one touches nothing, not even the lock it read.
    let _: () = redis::cmd("WATCH").arg("d").arg("lock:w").query(&mut other).unwrap();
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:w", "u", "SET", "d", "refused"]), Err(NOT_HELD.into()));
    let _: () = redis::cmd("MULTI").query(&mut other).unwrap();
    let _: () = redis::cmd("GET").arg("d").query(&mut other).unwrap();
    let exec: Value = redis::cmd("EXEC").query(&mut other).unwrap();
    assert_eq!(exec, Value::Array(vec![bulk("changed")]));
}

/// A holder stops (a GC pause, a swapped-out VM) between taking the lock
/// and writing; it wakes after its TTL, when the next holder has the lock.
#[test]
fn a_holder_paused_past_its_ttl_lands_no_write_while_the_next_holder_does() {
    let server = Server::start();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let mut first = server.conn();
    let paused = thread::spawn(move || {
        assert_eq!(s(&mut first, &["LOCK.ACQUIRE", "lock:p", "first", "100"]), Ok(Value::Int(1)));
        held_tx.send(()).unwrap();
        // The pause: nothing runs on this thread until the lock is someone else's.
        go_rx.recv().unwrap();
        s(&mut first, &["LOCK.GUARD", "lock:p", "first", "SET", "data", "late write from first"])
    });
    held_rx.recv().unwrap();
    let mut second = server.conn();
    // WAIT: granted when the first holder's TTL runs out.
    assert_eq!(s(&mut second, &["LOCK.ACQUIRE", "lock:p", "second", "60000", "WAIT", "30000"]), Ok(Value::Int(1)));
    assert_eq!(s(&mut second, &["LOCK.GUARD", "lock:p", "second", "SET", "data", "second"]), Ok(Value::Okay));
    go_tx.send(()).unwrap();
    assert_eq!(paused.join().unwrap(), Err(NOT_HELD.into()));
    assert_eq!(get(&mut second, "data").as_deref(), Some("second"));
    assert_eq!(s(&mut second, &["LOCK.GUARD", "lock:p", "second", "SET", "data", "second again"]), Ok(Value::Okay));
    assert_eq!(get(&mut second, "data").as_deref(), Some("second again"));
}

/// The check happens when the server runs the write, not when the client
/// sent it: a guarded write that waits in a stopped server's socket past
/// the lock's TTL is refused when the server resumes.
#[test]
fn a_write_sent_before_a_server_pause_is_judged_when_it_runs() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:q", "t", "300"]), Ok(Value::Int(1)));
    server.set_paused(true);
    let sent = Instant::now();
    let writer = thread::spawn(move || s(&mut c, &["LOCK.GUARD", "lock:q", "t", "SET", "data", "in flight"]));
    // Well past the TTL, by the wall clock the server reads when it resumes.
    thread::sleep(Duration::from_millis(600));
    server.set_paused(false);
    let reply = writer.join().unwrap();
    assert!(sent.elapsed() >= Duration::from_millis(600));
    assert_eq!(reply, Err(NOT_HELD.into()));
    assert_eq!(get(&mut server.conn(), "data"), None);
}

// --- A register written by holders that pause and die ------------------------

const REGISTER: &str = "register";
const REGISTER_LOCK: &str = "lock:register";
const REGISTER_TTL_MS: u64 = 150;
const HOLDER_ENV: &str = "LOCK_GUARD_HOLDER";

/// One holder process of [`register_history`]: takes the register's lock
/// (with a fence), appends `fence:token:seq` entries to the register — through
/// LOCK.GUARD, or plainly — sometimes pausing past the TTL before a write,
/// releases, and again, until it is killed. Does nothing unless started by
/// the register test.
#[test]
#[ignore = "a holder process started by the register tests"]
fn register_holder_process() {
    let Ok(spec) = std::env::var(HOLDER_ENV) else { return };
    let parts: Vec<&str> = spec.split(':').collect();
    let (port, guarded, id) = (parts[0], parts[1] == "guarded", parts[2]);
    let Ok(mut c) = redis::Client::open(format!("redis://127.0.0.1:{port}/")).and_then(|cl| cl.get_connection()) else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(id.bytes().map(u64::from).sum::<u64>() ^ u64::from(std::process::id()));
    for n in 0.. {
        let token = format!("{id}-{}-{n}", std::process::id());
        let fence: Option<i64> = match redis::cmd("LOCK.ACQUIRE")
            .arg(REGISTER_LOCK)
            .arg(&token)
            .arg(REGISTER_TTL_MS)
            .arg("FENCE")
            .arg("WAIT")
            .arg(10_000)
            .query(&mut c)
        {
            Ok(f) => f,
            Err(_) => return,
        };
        let Some(fence) = fence else { continue };
        for seq in 0..rng.gen_range(1..5) {
            // Now and then a pause past the TTL (a GC pause), else a short think.
            let pause = if rng.gen_bool(0.2) { REGISTER_TTL_MS + 100 } else { rng.gen_range(0..10) };
            thread::sleep(Duration::from_millis(pause));
            let entry = format!("{fence}:{token}:{seq}");
            let reply = if guarded {
                redis::cmd("LOCK.GUARD")
                    .arg(REGISTER_LOCK)
                    .arg(&token)
                    .arg("RPUSH")
                    .arg(REGISTER)
                    .arg(&entry)
                    .query::<Value>(&mut c)
            } else {
                redis::cmd("RPUSH").arg(REGISTER).arg(&entry).query::<Value>(&mut c)
            };
            match reply {
                Ok(_) => {}
                Err(e) if e.code() == Some("NOTHELD") => break,
                Err(_) => return,
            }
        }
        let _ = redis::cmd("LOCK.RELEASE").arg(REGISTER_LOCK).arg(&token).query::<Value>(&mut c);
    }
}

/// Holder processes, killed (SIGKILL) on drop.
struct Holders {
    port: u16,
    guarded: bool,
    children: Vec<Child>,
    started: usize,
}

impl Holders {
    fn spawn(&mut self) {
        let exe = std::env::current_exe().unwrap();
        let spec = format!("{}:{}:h{}", self.port, if self.guarded { "guarded" } else { "plain" }, self.started);
        self.started += 1;
        let child = Command::new(exe)
            .args(["register_holder_process", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
            .env(HOLDER_ENV, spec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a holder process");
        self.children.push(child);
    }

    fn signal(&self, i: usize, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.children[i].id().to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{sig}");
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// An entry of the register: the writer's fence and token.
#[derive(Debug)]
struct Entry {
    fence: u64,
    token: String,
}

fn parse_entry(raw: &str) -> Entry {
    let mut parts = raw.splitn(3, ':');
    let fence = parts.next().and_then(|f| f.parse().ok()).unwrap_or_else(|| panic!("entry {raw}"));
    Entry { fence, token: parts.next().unwrap_or_default().to_string() }
}

/// Entries that landed after a later holder's (a larger fence) entry: a
/// write by a holder that had lost the lock.
fn late_writes(history: &[Entry]) -> Vec<&Entry> {
    let mut highest = 0;
    let mut late = Vec::new();
    for e in history {
        if e.fence < highest {
            late.push(e);
        }
        highest = highest.max(e.fence);
    }
    late
}

/// Four holder processes write the register for a while; some are killed
/// (kill -9) and replaced, some are stopped (SIGSTOP) past the TTL and
/// continued. Meanwhile a scheduled late writer takes the lock, waits until
/// a later holder has written, and then writes itself: with plain writes
/// that write lands, whatever the random part did. Returns the register's
/// history and the late writer's reply.
fn register_history(guarded: bool, seed: u64) -> (Vec<Entry>, Result<Value, String>) {
    let server = Server::start();
    let mut c = server.conn();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut holders = Holders { port: server.port(), guarded, children: Vec::new(), started: 0 };
    for _ in 0..4 {
        holders.spawn();
    }
    let count = |c: &mut Connection| -> usize { redis::cmd("LLEN").arg(REGISTER).query(c).unwrap() };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut events = 0;
    let mut late = None;
    // Until the late writer has written and enough happened around it.
    while late.is_none() || events < 12 || count(&mut c) < 40 {
        assert!(Instant::now() < deadline, "the register workload stalled ({} entries)", count(&mut c));
        thread::sleep(Duration::from_millis(rng.gen_range(20..120)));
        let i = rng.gen_range(0..holders.children.len());
        if rng.gen_bool(0.5) {
            let mut killed = holders.children.swap_remove(i);
            let _ = killed.kill();
            let _ = killed.wait();
            holders.spawn();
        } else {
            holders.signal(i, "STOP");
            thread::sleep(Duration::from_millis(REGISTER_TTL_MS + rng.gen_range(50..150)));
            holders.signal(i, "CONT");
        }
        events += 1;
        if events == 4 && late.is_none() {
            late = Some(scheduled_late_write(&server, guarded));
        }
    }
    drop(holders);
    let raw: Vec<String> = redis::cmd("LRANGE").arg(REGISTER).arg(0).arg(-1).query(&mut c).unwrap();
    (raw.iter().map(|r| parse_entry(r)).collect(), late.unwrap())
}

/// Takes the lock as `late`, waits (a pause) until an entry with a larger
/// fence is in the register, then appends its own entry.
fn scheduled_late_write(server: &Server, guarded: bool) -> Result<Value, String> {
    let mut c = server.conn();
    let fence: i64 = redis::cmd("LOCK.ACQUIRE")
        .arg(REGISTER_LOCK)
        .arg("late")
        .arg(REGISTER_TTL_MS)
        .arg("FENCE")
        .arg("WAIT")
        .arg(30_000)
        .query(&mut c)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let raw: Vec<String> = redis::cmd("LRANGE").arg(REGISTER).arg(0).arg(-1).query(&mut c).unwrap();
        if raw.iter().any(|r| parse_entry(r).fence > fence as u64) {
            break;
        }
        assert!(Instant::now() < deadline, "no holder wrote after the late writer's lock expired");
        thread::sleep(Duration::from_millis(5));
    }
    let entry = format!("{fence}:late:0");
    if guarded {
        s(&mut c, &["LOCK.GUARD", REGISTER_LOCK, "late", "RPUSH", REGISTER, &entry])
    } else {
        s(&mut c, &["RPUSH", REGISTER, &entry])
    }
}

#[test]
fn guarded_register_every_landed_write_was_made_while_its_writer_held_the_lock() {
    let (history, late) = register_history(true, 16);
    assert_eq!(late, Err(NOT_HELD.into()), "the scheduled late write");
    assert!(history.iter().all(|e| e.token != "late"), "the late write landed");
    let late = late_writes(&history);
    assert!(late.is_empty(), "writes after a later holder's: {late:?}");
    // Fences only grow, and a holder's entries are contiguous: no two
    // holders' writes interleave.
    let fences: Vec<u64> = history.iter().map(|e| e.fence).collect();
    let holders: BTreeSet<u64> = fences.iter().copied().collect();
    assert!(fences.windows(2).all(|w| w[0] <= w[1]));
    assert!(holders.len() >= 5, "too few holders wrote for the test to mean much: {holders:?}");
    for e in &history {
        assert!(
            history.iter().filter(|o| o.fence == e.fence).all(|o| o.token == e.token),
            "fence {} has two writers",
            e.fence
        );
    }
}

#[test]
fn plain_register_shows_the_late_write_the_guard_refuses() {
    let (history, late) = register_history(false, 16);
    assert_eq!(
        late,
        Ok(Value::Int(history.iter().position(|e| e.token == "late").expect("the late write landed") as i64 + 1))
    );
    let late = late_writes(&history);
    assert!(late.iter().any(|e| e.token == "late"), "the checker missed the scheduled late write: {late:?}");
}

// --- The caller's own command ----------------------------------------------

fn user(server: &Server, name: &str, rules: &[&str]) -> Connection {
    let mut admin = server.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(name)
        .arg("reset")
        .arg("on")
        .arg(">pw")
        .arg(rules)
        .query(&mut admin)
        .unwrap();
    let mut c = server.conn();
    let _: () = redis::cmd("AUTH").arg(name).arg("pw").query(&mut c).unwrap();
    c
}

#[test]
fn the_inner_command_is_checked_against_the_callers_acl() {
    let server = Server::start();
    let mut admin = server.conn();
    assert_eq!(s(&mut admin, &["LOCK.ACQUIRE", "lock:acl", "t", "60000"]), Ok(Value::Int(1)));
    let _: () = redis::cmd("SET").arg("data:x").arg("original").query(&mut admin).unwrap();
    let lock_only = &mut user(&server, "lockonly", &["+@all", "~lock:*"]);
    let err = s(lock_only, &["LOCK.GUARD", "lock:acl", "t", "SET", "data:x", "v"]).unwrap_err();
    assert!(err.starts_with("NOPERM"), "{err}");
    // A key the user may touch is fine.
    assert_eq!(s(lock_only, &["LOCK.GUARD", "lock:acl", "t", "SET", "lock:mine", "v"]), Ok(Value::Okay));
    let no_set = &mut user(&server, "noset", &["+@all", "-set", "~*"]);
    let err = s(no_set, &["LOCK.GUARD", "lock:acl", "t", "SET", "data:x", "v"]).unwrap_err();
    assert!(err.starts_with("NOPERM"), "{err}");
    assert_eq!(s(no_set, &["LOCK.GUARD", "lock:acl", "t", "APPEND", "data:x", "+"]), Ok(Value::Int(9)));
    // Read permission on the data suffices for a guarded read, not a write:
    // the inner command's own key flags decide.
    let reader = &mut user(&server, "reader", &["+@all", "~lock:*", "%R~data:*"]);
    assert_eq!(s(reader, &["LOCK.GUARD", "lock:acl", "t", "GET", "data:x"]), Ok(bulk("original+")));
    let err = s(reader, &["LOCK.GUARD", "lock:acl", "t", "SET", "data:x", "v"]).unwrap_err();
    assert!(err.starts_with("NOPERM"), "{err}");
    // Without read permission on the lock, the guard cannot check it.
    let writer = &mut user(&server, "writer", &["+@all", "%W~lock:*", "~data:*"]);
    let err = s(writer, &["LOCK.GUARD", "lock:acl", "t", "SET", "data:x", "v"]).unwrap_err();
    assert!(err.starts_with("NOPERM"), "{err}");
    // A script calling LOCK.GUARD runs the inner command as its caller.
    let script = "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], 'SET', KEYS[2], ARGV[2])";
    let err = s(no_set, &["EVAL", script, "2", "lock:acl", "data:x", "t", "v"]).unwrap_err();
    assert!(err.contains("NOPERM") || err.contains("no permissions"), "{err}");
    assert_eq!(get(&mut admin, "data:x").as_deref(), Some("original+"));
    assert_eq!(s(&mut admin, &["EVAL", script, "2", "lock:acl", "data:x", "t", "from a script"]), Ok(Value::Okay));
    assert_eq!(get(&mut admin, "data:x").as_deref(), Some("from a script"));
}

#[test]
fn the_inner_command_obeys_deny_oom_and_a_replica_refuses_the_guard() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:m", "t", "60000"]), Ok(Value::Int(1)));
    let _: () = redis::cmd("SET").arg("d").arg("v").query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1").query(&mut c).unwrap();
    let err = s(&mut c, &["LOCK.GUARD", "lock:m", "t", "SET", "d", "grow"]).unwrap_err();
    assert!(err.starts_with("OOM"), "{err}");
    // Not deny-oom commands still run, as when sent directly.
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:m", "t", "GET", "d"]), Ok(bulk("v")));
    assert_eq!(s(&mut c, &["LOCK.GUARD", "lock:m", "t", "DEL", "d"]), Ok(Value::Int(1)));
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("0").query(&mut c).unwrap();

    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", server.port())).start();
    let mut r = replica.conn();
    let err = s(&mut r, &["LOCK.GUARD", "lock:m", "t", "SET", "d", "on a replica"]).unwrap_err();
    assert!(err.starts_with("READONLY"), "{err}");
}

/// Blocking commands behave as inside MULTI (no block, their empty reply);
/// a LOCK.ACQUIRE … WAIT inside does not wait either.
#[test]
fn blocking_commands_do_not_block() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:b", "t", "60000"]), Ok(Value::Int(1)));
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:other", "holder", "60000"]), Ok(Value::Int(1)));
    for args in [
        &["BLPOP", "empty", "0"][..],
        &["BRPOPLPUSH", "empty", "dst", "0"],
        &["BZPOPMIN", "empty", "0"],
        &["XREAD", "BLOCK", "0", "STREAMS", "stream", "$"],
    ] {
        let mut all = vec!["LOCK.GUARD", "lock:b", "t"];
        all.extend_from_slice(args);
        let reply = s(&mut c, &all).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(matches!(reply, Value::Nil) || reply == Value::Array(vec![]), "{args:?}: {reply:?}");
    }
    assert_eq!(
        s(&mut c, &["LOCK.GUARD", "lock:b", "t", "LOCK.ACQUIRE", "lock:other", "me", "1000", "WAIT", "0"]),
        Ok(Value::Int(0))
    );
    let _: i64 = redis::cmd("RPUSH").arg("full").arg("x").query(&mut c).unwrap();
    assert_eq!(
        s(&mut c, &["LOCK.GUARD", "lock:b", "t", "BLPOP", "full", "0"]),
        Ok(Value::Array(vec![bulk("full"), bulk("x")]))
    );
    assert_eq!(info_field(&mut c, "waiting"), 0);
}

/// Several guarded writes in one step: LOCK.GUARD inside MULTI (or a
/// script), each checked, none can be interleaved.
#[test]
fn guards_run_inside_multi_and_scripts_and_refuse_nesting() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:t", "t", "60000"]), Ok(Value::Int(1)));
    let replies: Value = redis::pipe()
        .atomic()
        .ignore_errors()
        .cmd("LOCK.GUARD")
        .arg("lock:t")
        .arg("t")
        .arg("SET")
        .arg("a")
        .arg("1")
        .cmd("LOCK.GUARD")
        .arg("lock:t")
        .arg("t")
        .arg("INCR")
        .arg("a")
        .cmd("LOCK.GUARD")
        .arg("lock:t")
        .arg("u")
        .arg("SET")
        .arg("a")
        .arg("x")
        .query(&mut c)
        .unwrap_or_else(|e| panic!("{e}"));
    let Value::Array(items) = replies else { panic!("{replies:?}") };
    // (One reply per command: the transaction's.)
    let items = if let [Value::Array(inner)] = &items[..] { inner.clone() } else { items };
    assert_eq!(items[0], Value::Okay);
    assert_eq!(items[1], Value::Int(2));
    assert!(matches!(&items[2], Value::ServerError(e) if e.code() == "NOTHELD"), "{:?}", items[2]);
    assert_eq!(get(&mut c, "a").as_deref(), Some("2"));
    let err = s(&mut c, &["LOCK.GUARD", "lock:t", "t", "LOCK.GUARD", "lock:t", "t", "SET", "a", "nested"]).unwrap_err();
    assert!(err.starts_with("ERR LOCK.GUARD cannot run LOCK.GUARD"), "{err}");
    let err = s(&mut c, &["LOCK.GUARD", "lock:t", "t", "EVAL", "return redis.call('SET', KEYS[1], 'x')", "1", "a"])
        .unwrap_err();
    assert!(err.starts_with("ERR LOCK.GUARD cannot run scripts"), "{err}");
    assert_eq!(get(&mut c, "a").as_deref(), Some("2"));
}

/// Bad input: a clear error and nothing changed, whether or not the lock
/// is held (held here: the refusals come before or instead of the command).
#[test]
fn bad_inner_commands_get_a_clear_error_and_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:x", "t", "60000"]), Ok(Value::Int(1)));
    let _: () = redis::cmd("SET").arg("d").arg("v").query(&mut c).unwrap();
    let before = digest(&mut c);
    let cases: &[(&[&str], &str)] = &[
        (&["LOCK.GUARD"], "ERR wrong number of arguments for 'lock.guard' command"),
        (&["LOCK.GUARD", "lock:x"], "ERR wrong number of arguments for 'lock.guard' command"),
        (&["LOCK.GUARD", "lock:x", "t"], "ERR wrong number of arguments for 'lock.guard' command"),
        (&["LOCK.GUARD", "", "t", "SET", "d", "x"], "ERR lock key and token are required"),
        (&["LOCK.GUARD", "lock:x", "", "SET", "d", "x"], "ERR lock key and token are required"),
        (&["LOCK.GUARD", "lock:x", "t", "nosuchcommand", "d"], "ERR unknown command 'nosuchcommand'"),
        (&["LOCK.GUARD", "lock:x", "t", ""], "ERR unknown command ''"),
        (&["LOCK.GUARD", "lock:x", "t", "SET", "d"], "ERR wrong number of arguments for 'set' command"),
        (&["LOCK.GUARD", "lock:x", "t", "GET", "d", "extra"], "ERR wrong number of arguments for 'get' command"),
        (&["LOCK.GUARD", "lock:x", "t", "CONFIG", "NOSUCH"], "ERR LOCK.GUARD cannot run server administration"),
        (&["LOCK.GUARD", "lock:x", "t", "MULTI"], "ERR LOCK.GUARD cannot run MULTI"),
        (&["LOCK.GUARD", "lock:x", "t", "exec"], "ERR LOCK.GUARD cannot run MULTI"),
        (&["LOCK.GUARD", "lock:x", "t", "WATCH", "d"], "ERR LOCK.GUARD cannot run MULTI"),
        (&["LOCK.GUARD", "lock:x", "t", "SUBSCRIBE", "ch"], "ERR LOCK.GUARD cannot run a command about the connection"),
        (&["LOCK.GUARD", "lock:x", "t", "MONITOR"], "ERR LOCK.GUARD cannot run a command about the connection"),
        (&["LOCK.GUARD", "lock:x", "t", "SELECT", "1"], "ERR LOCK.GUARD cannot run a command about the connection"),
        (
            &["LOCK.GUARD", "lock:x", "t", "CLIENT", "KILL", "ID", "1"],
            "ERR LOCK.GUARD cannot run a command about the connection",
        ),
        (&["LOCK.GUARD", "lock:x", "t", "SHUTDOWN", "NOSAVE"], "ERR LOCK.GUARD cannot run server administration"),
        (&["LOCK.GUARD", "lock:x", "t", "FLUSHALL"], ""),
        (&["LOCK.GUARD", "lock:x", "t", "WAIT", "1", "0"], "ERR LOCK.GUARD cannot run WAIT"),
        (&["LOCK.GUARD", "lock:x", "t", "FCALL", "f", "0"], "ERR LOCK.GUARD cannot run scripts"),
        (
            &["LOCK.GUARD", "lock:x", "t", "lock.guard", "lock:x", "t", "DEL", "d"],
            "ERR LOCK.GUARD cannot run LOCK.GUARD",
        ),
    ];
    for (args, expected) in cases {
        if args.get(3) == Some(&"FLUSHALL") {
            continue; // a valid command: not bad input (listed to say so)
        }
        let err = s(&mut c, args).expect_err(&format!("{args:?} succeeded"));
        assert!(err.starts_with(expected), "{args:?}: {err}");
        assert_eq!(digest(&mut c), before, "{args:?} changed the data");
    }
    // A NUL byte in the name: Redis would look up the name up to the NUL.
    let err = run(&mut c, &[b"LOCK.GUARD", b"lock:x", b"t", b"DEL\0junk", b"d"]).unwrap_err();
    assert!(err.starts_with("ERR LOCK.GUARD: a command name cannot contain a NUL byte"), "{err}");
    assert_eq!(digest(&mut c), before);
    assert_eq!(s(&mut c, &["PING"]), Ok(Value::SimpleString("PONG".into())));
}

#[test]
fn huge_argument_lists_run_or_fail_cleanly() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(s(&mut c, &["LOCK.ACQUIRE", "lock:h", "t", "60000"]), Ok(Value::Int(1)));
    let n = 200_000;
    let mut mset = redis::cmd("LOCK.GUARD");
    mset.arg("lock:h").arg("t").arg("MSET");
    for i in 0..n {
        mset.arg(format!("k{i}")).arg(i);
    }
    let reply: Value = mset.query(&mut c).unwrap();
    assert_eq!(reply, Value::Okay);
    let size: usize = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, n + 1);
    // The getkeys report of 200 000 keys (COMMAND GETKEYS asks the module).
    let mut getkeys = redis::cmd("COMMAND");
    getkeys.arg("GETKEYS").arg("LOCK.GUARD").arg("lock:h").arg("t").arg("DEL");
    for i in 0..n {
        getkeys.arg(format!("k{i}"));
    }
    let keys: Vec<String> = getkeys.query(&mut c).unwrap();
    assert_eq!(keys.len(), n + 1);
    assert_eq!((keys[0].as_str(), keys[n].as_str()), ("lock:h", format!("k{}", n - 1).as_str()));
    // A huge bad call: arity error, nothing changed.
    let before = digest(&mut c);
    let mut bad = redis::cmd("LOCK.GUARD");
    bad.arg("lock:h").arg("t").arg("GET");
    for i in 0..n {
        bad.arg(i);
    }
    let err = bad.query::<Value>(&mut c).unwrap_err();
    assert_eq!(err.code(), Some("ERR"), "{err}");
    let mut refused = redis::cmd("LOCK.GUARD");
    refused.arg("lock:h").arg("t").arg("LOCK.GUARD");
    for _ in 0..n / 3 {
        refused.arg("lock:h").arg("t").arg("LOCK.GUARD");
    }
    refused.arg("DEL").arg("k1");
    assert!(refused.query::<Value>(&mut c).unwrap_err().to_string().contains("cannot run LOCK.GUARD"));
    assert_eq!(digest(&mut c), before);
}

/// Random calls from a vocabulary of bad and odd input, on a held and on an
/// unheld lock: every one gets a reply, the server stays up, an unheld lock
/// changes nothing and a refused command changes nothing.
#[test]
fn fuzzed_guard_calls_never_crash_the_server_or_change_data_when_refused() {
    let server = Server::start();
    let mut c = server.conn();
    let mut rng = StdRng::seed_from_u64(0x6a4d);
    let names: &[&[u8]] = &[
        b"SET",
        b"set",
        b"GET",
        b"DEL",
        b"INCR",
        b"LPUSH",
        b"BLPOP",
        b"XREAD",
        b"MULTI",
        b"EXEC",
        b"WATCH",
        b"SUBSCRIBE",
        b"MONITOR",
        b"SHUTDOWN",
        b"EVAL",
        b"FCALL",
        b"LOCK.GUARD",
        b"LOCK.ACQUIRE",
        b"LOCK.RELEASE",
        b"CLIENT",
        b"CONFIG",
        b"DEBUG",
        b"WAIT",
        b"SELECT",
        b"nosuch",
        b"",
        b"\0",
        b"S\0ET",
        b"\xff\xfe",
        b"OBJECT",
        b"MEMORY",
        b"COMMAND",
        b"PING",
        b"SORT",
        b"XADD",
        b"RESET",
        b"QUIT",
        b"HELLO",
        b"AUTH",
    ];
    let word = |rng: &mut StdRng| -> Vec<u8> {
        match rng.gen_range(0..6) {
            0 => Vec::new(),
            1 => names[rng.gen_range(0..names.len())].to_vec(),
            2 => (0..rng.gen_range(1..20)).map(|_| rng.gen::<u8>()).collect(),
            3 => rng.gen_range(-5i64..100).to_string().into_bytes(),
            4 => b"d".to_vec(),
            _ => [&b"BLOCK"[..], b"STREAMS", b"$", b"0", b"NOSAVE", b"FORCE", b"KEYS", b"EX", b"lock:f"]
                [rng.gen_range(0..9)]
            .to_vec(),
        }
    };
    let _: () = redis::cmd("SET").arg("d").arg("v").query(&mut c).unwrap();
    // Keys the fuzz gives a TTL must not expire between two digests.
    let _: () = redis::cmd("DEBUG").arg("SET-ACTIVE-EXPIRE").arg(0).query(&mut c).unwrap();
    for round in 0..3000 {
        let held = round % 2 == 0;
        if held {
            let _: Value = redis::cmd("SET").arg("lock:f").arg("t").query(&mut c).unwrap();
        } else {
            let _: Value = redis::cmd("DEL").arg("lock:f").query(&mut c).unwrap();
        }
        let before = digest(&mut c);
        let name = if rng.gen_bool(0.8) { names[rng.gen_range(0..names.len())].to_vec() } else { word(&mut rng) };
        let args: Vec<Vec<u8>> = (0..rng.gen_range(0..6)).map(|_| word(&mut rng)).collect();
        // The key report Redis asks for (cluster routing, ACL) on the same
        // input: any reply but a dead server.
        let getkeys = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg("LOCK.GUARD")
            .arg("lock:f")
            .arg("t")
            .arg(&name)
            .arg(&args)
            .query::<Value>(&mut c);
        if getkeys.is_err_and(|e| e.code().is_none()) {
            c = server.conn(); // a reply the client could not parse
        }
        let mut call = redis::cmd("LOCK.GUARD");
        call.arg("lock:f").arg("t").arg(&name).arg(&args);
        let reply = call.query::<Value>(&mut c);
        if let Err(e) = &reply {
            if e.code().is_none() {
                // The client could not parse the reply (an error echoing
                // random bytes, not UTF-8): start over on a new connection.
                c = server.conn();
                continue;
            }
        }
        match &reply {
            Err(e) if e.code() == Some("NOTHELD") => assert!(!held),
            Err(e) if e.detail().is_some_and(|d| d.starts_with("LOCK.GUARD")) => {
                assert_eq!(digest(&mut c), before, "refused {:?} changed data", String::from_utf8_lossy(&name))
            }
            _ => assert!(held, "ran {:?} without the lock: {reply:?}", String::from_utf8_lossy(&name)),
        }
        if !held {
            assert_eq!(digest(&mut c), before, "an unheld guard changed data: {:?}", String::from_utf8_lossy(&name));
        }
        let pong: String = redis::cmd("PING").query(&mut c).unwrap_or_else(|e| {
            panic!("server gone after {:?}: {e}\n{}", String::from_utf8_lossy(&name), server.log())
        });
        assert_eq!(pong, "PONG");
    }
}

// --- Replication and the AOF ------------------------------------------------

/// A mixed workload: guarded writes of several kinds (relative expiries
/// among them), refused and bad guarded calls, plain lock commands.
fn mixed_workload(c: &mut Connection) {
    assert_eq!(s(c, &["LOCK.ACQUIRE", "lock:mix", "t", "600000"]), Ok(Value::Int(1)));
    let g = |c: &mut Connection, token: &str, args: &[&str]| {
        let mut all = vec!["LOCK.GUARD", "lock:mix", token];
        all.extend_from_slice(args);
        s(c, &all)
    };
    assert_eq!(g(c, "t", &["SET", "m:a", "1", "EX", "500"]), Ok(Value::Okay));
    assert_eq!(g(c, "t", &["SETEX", "m:b", "400", "x"]), Ok(Value::Okay));
    assert_eq!(g(c, "t", &["INCRBY", "m:n", "7"]), Ok(Value::Int(7)));
    assert_eq!(g(c, "t", &["RPUSH", "m:l", "a", "b", "c"]), Ok(Value::Int(3)));
    assert_eq!(g(c, "t", &["EXPIRE", "m:l", "300"]), Ok(Value::Int(1)));
    assert_eq!(g(c, "t", &["HSET", "m:h", "f", "v", "g", "w"]), Ok(Value::Int(2)));
    assert_eq!(g(c, "t", &["LPOP", "m:l"]), Ok(bulk("a")));
    assert_eq!(g(c, "t", &["SET", "m:gone", "x"]), Ok(Value::Okay));
    assert_eq!(g(c, "t", &["DEL", "m:gone"]), Ok(Value::Int(1)));
    assert_eq!(g(c, "t", &["SET", "m:px", "y", "PX", "450000"]), Ok(Value::Okay));
    assert_eq!(g(c, "t", &["ZADD", "m:z", "1", "a", "2", "b"]), Ok(Value::Int(2)));
    assert_eq!(g(c, "t", &["BLPOP", "m:empty", "0"]), Ok(Value::Nil));
    assert!(g(c, "t", &["MULTI"]).is_err());
    assert!(g(c, "t", &["INCR", "m:l"]).is_err());
    assert_eq!(g(c, "u", &["SET", "m:a", "stolen"]), Err(NOT_HELD.into()));
    assert_eq!(s(c, &["LOCK.RENEW", "lock:mix", "t", "700000"]), Ok(Value::Int(1)));
    assert_eq!(g(c, "t", &["GET", "m:a"]), Ok(bulk("1")));
}

#[test]
fn a_replica_ends_with_the_masters_digest_after_a_mixed_guarded_workload() {
    let master = Server::builder().arg("repl-diskless-sync", "no").start();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    let mut m = master.conn();
    mixed_workload(&mut m);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let on_master = digest(&mut m);
    assert_ne!(on_master, "0".repeat(40));
    assert_eq!(digest(&mut r), on_master);
}

#[test]
fn the_aof_holds_only_the_inner_effects_and_replays_to_the_same_data() {
    let dir =
        std::env::temp_dir().join(format!("redis-lock-guard-aof-{}-{}", std::process::id(), rand::random::<u32>()));
    let builder = || {
        Server::builder()
            .dir(&dir)
            .arg("appendonly", "yes")
            .arg("aof-use-rdb-preamble", "no")
            .arg("appendfsync", "always")
    };
    let mut server = builder().start();
    let mut c = server.conn();
    mixed_workload(&mut c);
    let before = digest(&mut c);
    let mut aof = Vec::new();
    for f in std::fs::read_dir(dir.join("appendonlydir")).unwrap() {
        aof.extend(std::fs::read(f.unwrap().path()).unwrap());
    }
    let text = String::from_utf8_lossy(&aof).to_lowercase();
    assert!(!text.contains("lock.guard"), "the AOF holds LOCK.GUARD");
    assert!(text.contains("pexpireat") && text.contains("pxat"), "relative expiries were not made absolute");
    server.restart();
    assert_eq!(digest(&mut server.conn()), before, "replaying the AOF with the module");
    drop(server);
    // Only native commands are logged: a server without the module loads it too.
    let plain = builder().without_module().start();
    let mut p = plain.conn();
    let lock: Option<String> = redis::cmd("GET").arg("lock:mix").query(&mut p).unwrap();
    assert_eq!(lock.as_deref(), Some("t"));
    assert_eq!(digest(&mut p), before, "replaying the AOF without the module");
    drop(plain);
    let _ = std::fs::remove_dir_all(&dir);
}

// --- Introspection -----------------------------------------------------------

#[test]
fn command_getkeys_reports_the_lock_key_and_every_inner_key() {
    let server = Server::start();
    let mut c = server.conn();
    let getkeys = |c: &mut Connection, args: &[&str]| -> Result<Vec<String>, String> {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("GETKEYS").arg("LOCK.GUARD").arg(args);
        cmd.query(c).map_err(|e| e.to_string())
    };
    assert_eq!(getkeys(&mut c, &["lock:k", "t", "SET", "d", "v"]).unwrap(), ["lock:k", "d"]);
    assert_eq!(getkeys(&mut c, &["lock:k", "t", "MSET", "a", "1", "b", "2"]).unwrap(), ["lock:k", "a", "b"]);
    // Commands whose keys need a key-finding function: as Redis finds them.
    for (inner, n) in [
        (&["ZUNIONSTORE", "dst", "2", "z1", "z2"][..], 3),
        (&["SORT", "l", "STORE", "out"], 2),
        (&["EVAL", "return 1", "2", "k1", "k2", "arg"], 2),
    ] {
        let direct: Vec<String> = redis::cmd("COMMAND").arg("GETKEYS").arg(inner).query(&mut c).unwrap();
        assert_eq!(direct.len(), n, "{direct:?}");
        let mut args = vec!["lock:k", "t"];
        args.extend_from_slice(inner);
        let mut reported = getkeys(&mut c, &args).unwrap();
        // (Redis's key-finding function may list them in another order
        // than COMMAND GETKEYS, which reads the key specs.)
        assert_eq!(reported.remove(0), "lock:k");
        let (mut reported, mut direct) = (reported, direct);
        reported.sort();
        direct.sort();
        assert_eq!(reported, direct, "{inner:?}");
    }
    // No inner keys, unknown or malformed inner commands: the lock key only.
    assert_eq!(getkeys(&mut c, &["lock:k", "t", "PING"]).unwrap(), ["lock:k"]);
    assert_eq!(getkeys(&mut c, &["lock:k", "t", "nosuch", "x"]).unwrap(), ["lock:k"]);
    assert_eq!(getkeys(&mut c, &["lock:k", "t", "GET"]).unwrap(), ["lock:k"]);
    assert_eq!(getkeys(&mut c, &["lock:k", "t", "LOCK.GUARD", "lock:j", "t", "SET", "x", "y"]).unwrap(), ["lock:k"]);
    // Flags: the lock key is read; the inner keys carry the flags Redis has for them.
    let flags: Value = redis::cmd("COMMAND")
        .arg("GETKEYSANDFLAGS")
        .arg("LOCK.GUARD")
        .arg("lock:k")
        .arg("t")
        .arg("SORT")
        .arg("l")
        .arg("STORE")
        .arg("out")
        .query(&mut c)
        .unwrap();
    let direct: Value = redis::cmd("COMMAND")
        .arg("GETKEYSANDFLAGS")
        .arg("SORT")
        .arg("l")
        .arg("STORE")
        .arg("out")
        .query(&mut c)
        .unwrap();
    let (Value::Array(guarded), Value::Array(direct)) = (flags, direct) else { panic!("not arrays") };
    assert_eq!(&guarded[1..], &direct[..]);
    let Value::Array(lock_key) = &guarded[0] else { panic!("{:?}", guarded[0]) };
    assert_eq!(lock_key[0], bulk("lock:k"));
    assert_eq!(
        format!("{:?}", lock_key[1]),
        format!("{:?}", Value::Array(vec![Value::SimpleString("RO".into()), Value::SimpleString("access".into())]))
    );
}

#[test]
fn command_info_and_docs_describe_the_guard() {
    let server = Server::start();
    let mut c = server.conn();
    let info: Value = redis::cmd("COMMAND").arg("INFO").arg("lock.guard").query(&mut c).unwrap();
    let text = format!("{info:?}");
    for word in ["write", "movablekeys", "variable_flags"] {
        assert!(text.contains(word), "{word} in {text}");
    }
    assert!(!text.contains("denyoom"), "{text}");
    let docs: Value = redis::cmd("COMMAND").arg("DOCS").arg("lock.guard").query(&mut c).unwrap();
    let text = format!("{docs:?}");
    for word in ["summary", "key", "token", "command", "arg", "multiple", "optional"] {
        assert!(text.contains(word), "{word} in {text}");
    }
}
