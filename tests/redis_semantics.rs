//! The LOCK.* commands behave like native Redis writes: keyspace
//! notifications, WATCH, MULTI/EXEC, Lua, ACL, command metadata, memory
//! limits, replicas' read-only mode and key expiry.

use std::time::Duration;

use redis::{Connection, PubSub, Value};
use redis_lock_harness::{server_version, Server};

/// Runs a command: `Ok(n)` for an integer reply, `Err("CODE detail")` for an error.
fn call(con: &mut Connection, args: &[&str]) -> Result<i64, String> {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    match c.query::<Value>(con) {
        Ok(Value::Int(n)) => Ok(n),
        Ok(other) => panic!("{args:?}: unexpected reply {other:?}"),
        Err(e) => match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => Err(format!("{code} {detail}")),
            (Some(code), None) => Err(code.to_string()),
            _ => panic!("{args:?}: not a server error: {e}"),
        },
    }
}

fn ok(con: &mut Connection, args: &[&str]) -> i64 {
    call(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn get(con: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn exists(con: &mut Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(con).unwrap() == 1
}

fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

/// Runs every command in one MULTI/EXEC and returns their replies:
/// no time passes between them on the server's clock, so a short lease
/// cannot end between two of them however slowly this test runs.
fn at_once(con: &mut Connection, cmds: &[&[&str]]) -> Vec<Value> {
    let mut p = redis::pipe();
    p.atomic();
    for args in cmds {
        p.cmd(args[0]).arg(&args[1..]);
    }
    p.query(con).unwrap_or_else(|e| panic!("{cmds:?}: {e}"))
}

fn run(con: &mut Connection, args: &[&str]) {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    let _: Value = c.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"));
}

// --- Keyspace notifications ------------------------------------------------

/// Collects the keyspace events that `action` raises: runs it, then sets a
/// marker key and reads events up to the marker's own.
struct Events<'a> {
    sub: PubSub<'a>,
    marks: usize,
}

impl Events<'_> {
    fn of(&mut self, con: &mut Connection, action: impl FnOnce(&mut Connection)) -> Vec<(String, String)> {
        action(con);
        self.marks += 1;
        let mark = format!("mark:{}", self.marks);
        run(con, &["SET", &mark, "x"]);
        let mut seen = Vec::new();
        loop {
            let msg = self.sub.get_message().expect("keyspace event (timed out?)");
            let event = msg.get_channel_name().strip_prefix("__keyevent@0__:").expect("a keyevent channel").to_string();
            let key: String = msg.get_payload().unwrap();
            if key == mark {
                assert_eq!(event, "set");
                return seen;
            }
            seen.push((event, key));
        }
    }
}

fn ev(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(e, k)| (e.to_string(), k.to_string())).collect()
}

#[test]
fn each_command_raises_exactly_the_native_keyspace_events_and_refusals_raise_none() {
    let server = Server::start();
    let mut con = server.conn();
    run(&mut con, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    let mut sub_con = server.conn();
    sub_con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sub = sub_con.as_pubsub();
    sub.psubscribe("__keyevent@0__:*").unwrap();
    let mut events = Events { sub, marks: 0 };
    let c = &mut con;

    // Acquire.
    assert_eq!(
        events.of(c, |c| assert_eq!(ok(c, &["LOCK.ACQUIRE", "n:a", "tok", "60000"]), 1)),
        ev(&[("set", "n:a"), ("expire", "n:a")])
    );
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.ACQUIRE", "n:a", "other", "60000"]), 0)), ev(&[]));
    // Renew.
    assert_eq!(
        events.of(c, |c| assert_eq!(ok(c, &["LOCK.RENEW", "n:a", "tok", "90000"]), 1)),
        ev(&[("expire", "n:a")])
    );
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.RENEW", "n:a", "other", "90000"]), 0)), ev(&[]));
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.RENEW", "n:absent", "tok", "90000"]), 0)), ev(&[]));
    assert_eq!(events.of(c, |c| assert!(call(c, &["LOCK.RENEW", "n:a", "tok", "0"]).is_err())), ev(&[]));
    // Release.
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.RELEASE", "n:a", "other"]), 0)), ev(&[]));
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.RELEASE", "n:a", "tok"]), 1)), ev(&[("del", "n:a")]));
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.RELEASE", "n:a", "tok"]), 0)), ev(&[]));
    // Takeover: absent, same run, another run, a fresh legacy value.
    assert_eq!(
        events.of(c, |c| assert_eq!(ok(c, &["LOCK.TAKEOVER", "n:t", "tok", "run", "60000"]), 1)),
        ev(&[("set", "n:t"), ("expire", "n:t")])
    );
    assert_eq!(
        events.of(c, |c| assert_eq!(ok(c, &["LOCK.TAKEOVER", "n:t", "tok2", "run", "60000"]), 1)),
        ev(&[("set", "n:t"), ("expire", "n:t")])
    );
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.TAKEOVER", "n:t", "tok3", "other", "60000"]), 0)), ev(&[]));
    assert_eq!(
        events.of(c, |c| run(c, &["SET", "n:legacy", "bare", "PX", "60000"])),
        ev(&[("set", "n:legacy"), ("expire", "n:legacy")])
    );
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.TAKEOVER", "n:legacy", "tok", "run", "60000"]), 0)), ev(&[]));
    assert_eq!(
        events.of(c, |c| assert_eq!(ok(c, &["LOCK.TAKEOVER", "n:legacy", "tok", "run", "200000"]), 1)),
        ev(&[("set", "n:legacy"), ("expire", "n:legacy")])
    );
    // Renew and release of a structured value.
    assert_eq!(
        events.of(c, |c| assert_eq!(ok(c, &["LOCK.RENEW", "n:t", "tok2", "90000"]), 1)),
        ev(&[("expire", "n:t")])
    );
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.RELEASE", "n:t", "tok2"]), 1)), ev(&[("del", "n:t")]));
    // Wrong types raise nothing.
    assert_eq!(events.of(c, |c| run(c, &["RPUSH", "n:list", "tok"])), ev(&[("rpush", "n:list")]));
    assert_eq!(events.of(c, |c| assert!(call(c, &["LOCK.RENEW", "n:list", "tok", "1000"]).is_err())), ev(&[]));
    assert_eq!(events.of(c, |c| assert!(call(c, &["LOCK.RELEASE", "n:list", "tok"]).is_err())), ev(&[]));
    assert_eq!(
        events.of(c, |c| assert!(call(c, &["LOCK.TAKEOVER", "n:list", "tok", "run", "1000"]).is_err())),
        ev(&[])
    );
    assert_eq!(events.of(c, |c| assert_eq!(ok(c, &["LOCK.ACQUIRE", "n:list", "tok", "1000"]), 0)), ev(&[]));
    // An expired lock: the expiry is reported before the new lock's events.
    // Found expired by the module's command: Redis's active expiry off, or
    // on a loaded machine it could expire the 20 ms key before the mark
    // below is set (its `expired` then in the first batch).
    run(c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    assert_eq!(
        events.of(c, |c| run(c, &["SET", "n:exp", "old", "PX", "20"])),
        ev(&[("set", "n:exp"), ("expire", "n:exp")])
    );
    let got = events.of(c, |c| {
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(ok(c, &["LOCK.ACQUIRE", "n:exp", "tok", "60000"]), 1);
    });
    assert_eq!(got, ev(&[("expired", "n:exp"), ("set", "n:exp"), ("expire", "n:exp")]));
}

// --- WATCH -----------------------------------------------------------------

/// WATCHes `key` on one connection, runs `action` on another, then runs a
/// transaction on the first: true when EXEC ran, false when WATCH aborted it.
fn exec_runs_after(server: &Server, key: &str, action: impl FnOnce(&mut Connection)) -> bool {
    let mut watcher = server.conn();
    let mut other = server.conn();
    run(&mut watcher, &["WATCH", key]);
    action(&mut other);
    run(&mut watcher, &["MULTI"]);
    run(&mut watcher, &["INCR", "watch:probe"]);
    match redis::cmd("EXEC").query::<Value>(&mut watcher).unwrap() {
        Value::Nil => false,
        Value::Array(_) => true,
        other => panic!("EXEC replied {other:?}"),
    }
}

#[test]
fn a_successful_change_invalidates_watch_on_the_key() {
    let server = Server::start();
    let mut con = server.conn();
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("w:acq", &[], &["LOCK.ACQUIRE", "w:acq", "tok", "60000"]),
        ("w:renew", &["LOCK.ACQUIRE", "w:renew", "tok", "60000"], &["LOCK.RENEW", "w:renew", "tok", "90000"]),
        ("w:rel", &["LOCK.ACQUIRE", "w:rel", "tok", "60000"], &["LOCK.RELEASE", "w:rel", "tok"]),
        ("w:take", &[], &["LOCK.TAKEOVER", "w:take", "tok", "run", "60000"]),
        (
            "w:take2",
            &["LOCK.TAKEOVER", "w:take2", "tok", "run", "60000"],
            &["LOCK.TAKEOVER", "w:take2", "tok2", "run", "60000"],
        ),
        ("w:legacy", &["SET", "w:legacy", "bare"], &["LOCK.TAKEOVER", "w:legacy", "tok", "run", "60000"]),
        (
            "w:srenew",
            &["LOCK.TAKEOVER", "w:srenew", "tok", "run", "60000"],
            &["LOCK.RENEW", "w:srenew", "tok", "90000"],
        ),
    ];
    for (key, setup, action) in cases {
        if !setup.is_empty() {
            run(&mut con, setup);
        }
        let ran = exec_runs_after(&server, key, |c| assert_eq!(ok(c, action), 1, "{action:?}"));
        assert!(!ran, "{action:?} succeeded but left WATCH on {key} intact");
    }
}

#[test]
fn a_refused_command_leaves_watch_intact() {
    let server = Server::start();
    let mut con = server.conn();
    run(&mut con, &["SET", "w:held", "tok", "PX", "60000"]);
    run(&mut con, &["SET", "w:struct", r#"{"owner":"tok","runId":"run"}"#, "PX", "60000"]);
    run(&mut con, &["SET", "w:fresh", "bare", "PX", "60000"]);
    // Integer- and embstr-encoded values: reading them must not count as a change.
    run(&mut con, &["SET", "w:int", "12345", "PX", "60000"]);
    run(&mut con, &["SET", "w:small", "7"]);
    run(&mut con, &["RPUSH", "w:list", "tok"]);
    let refused: &[(&str, &[&str])] = &[
        ("w:held", &["LOCK.ACQUIRE", "w:held", "other", "60000"]),
        ("w:held", &["LOCK.RENEW", "w:held", "other", "90000"]),
        ("w:held", &["LOCK.RELEASE", "w:held", "other"]),
        ("w:held", &["LOCK.TAKEOVER", "w:held", "tok", "run", "60000"]),
        ("w:struct", &["LOCK.TAKEOVER", "w:struct", "tok", "other-run", "60000"]),
        ("w:struct", &["LOCK.RENEW", "w:struct", "other", "90000"]),
        ("w:struct", &["LOCK.RELEASE", "w:struct", r#"{"owner":"tok","runId":"run"}"#]),
        ("w:fresh", &["LOCK.TAKEOVER", "w:fresh", "tok", "run", "60000"]),
        ("w:int", &["LOCK.RENEW", "w:int", "1234", "90000"]),
        ("w:int", &["LOCK.RELEASE", "w:int", "123456"]),
        ("w:int", &["LOCK.TAKEOVER", "w:int", "tok", "run", "60000"]),
        ("w:int", &["LOCK.ACQUIRE", "w:int", "tok", "60000"]),
        ("w:small", &["LOCK.RELEASE", "w:small", "8"]),
        ("w:small", &["LOCK.RENEW", "w:small", "8", "1000"]),
        ("w:absent", &["LOCK.RENEW", "w:absent", "tok", "90000"]),
        ("w:absent", &["LOCK.RELEASE", "w:absent", "tok"]),
    ];
    for (key, action) in refused {
        let ran = exec_runs_after(&server, key, |c| assert_eq!(ok(c, action), 0, "{action:?}"));
        assert!(ran, "refused {action:?} invalidated WATCH on {key}");
    }
    let errors: &[(&str, &[&str])] = &[
        ("w:held", &["LOCK.RENEW", "w:held", "tok", "0"]),
        ("w:held", &["LOCK.RELEASE", "w:held"]),
        ("w:absent", &["LOCK.ACQUIRE", "w:absent", "tok", "abc"]),
        ("w:list", &["LOCK.RENEW", "w:list", "tok", "1000"]),
        ("w:list", &["LOCK.RELEASE", "w:list", "tok"]),
        ("w:list", &["LOCK.TAKEOVER", "w:list", "tok", "run", "1000"]),
    ];
    for (key, action) in errors {
        let ran = exec_runs_after(&server, key, |c| assert!(call(c, action).is_err(), "{action:?}"));
        assert!(ran, "failed {action:?} invalidated WATCH on {key}");
    }
    // Nothing above changed the values.
    assert_eq!(get(&mut con, "w:int").as_deref(), Some("12345"));
    assert_eq!(get(&mut con, "w:small").as_deref(), Some("7"));
    assert_eq!(pttl(&mut con, "w:small"), -1);
    assert_eq!(get(&mut con, "w:held").as_deref(), Some("tok"));
    assert!(!exists(&mut con, "w:absent"));
}

#[test]
fn integer_valued_locks_are_owned_by_their_decimal_token() {
    let server = Server::start();
    let mut con = server.conn();
    run(&mut con, &["SET", "int:lock", "12345", "PX", "60000"]);
    assert_eq!(ok(&mut con, &["LOCK.RENEW", "int:lock", "12345", "90000"]), 1);
    assert!(pttl(&mut con, "int:lock") > 60_000);
    assert_eq!(get(&mut con, "int:lock").as_deref(), Some("12345"));
    assert_eq!(ok(&mut con, &["LOCK.RELEASE", "int:lock", "12345"]), 1);
    assert!(!exists(&mut con, "int:lock"));
}

// --- MULTI/EXEC and Lua ----------------------------------------------------

#[test]
fn lock_commands_run_inside_multi_exec() {
    let server = Server::start();
    let mut con = server.conn();
    let replies: Vec<i64> = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("m:k")
        .arg("tok")
        .arg(60000)
        .cmd("LOCK.ACQUIRE")
        .arg("m:k")
        .arg("other")
        .arg(60000)
        .cmd("LOCK.RENEW")
        .arg("m:k")
        .arg("tok")
        .arg(90000)
        .cmd("LOCK.RELEASE")
        .arg("m:k")
        .arg("other")
        .cmd("LOCK.RELEASE")
        .arg("m:k")
        .arg("tok")
        .cmd("LOCK.TAKEOVER")
        .arg("m:t")
        .arg("tok")
        .arg("run")
        .arg(60000)
        .cmd("LOCK.TAKEOVER")
        .arg("m:t")
        .arg("tok2")
        .arg("run")
        .arg(60000)
        .cmd("LOCK.TAKEOVER")
        .arg("m:t")
        .arg("tok3")
        .arg("other")
        .arg(60000)
        .query(&mut con)
        .unwrap();
    assert_eq!(replies, vec![1, 0, 1, 0, 1, 1, 1, 0]);
    assert!(!exists(&mut con, "m:k"));
    assert_eq!(get(&mut con, "m:t").as_deref(), Some(r#"{"owner":"tok2","runId":"run"}"#));
    assert!(pttl(&mut con, "m:t") > 50_000);
}

fn eval(con: &mut Connection, script: &str, key: &str, args: &[&str]) -> Result<i64, String> {
    let mut c = redis::cmd("EVAL");
    c.arg(script).arg(1).arg(key);
    for a in args {
        c.arg(*a);
    }
    match c.query::<Value>(con) {
        Ok(Value::Int(n)) => Ok(n),
        Ok(other) => panic!("EVAL {script}: unexpected reply {other:?}"),
        Err(e) => Err(format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""))),
    }
}

#[test]
fn lua_scripts_can_call_every_lock_command() {
    let server = Server::start();
    let mut con = server.conn();
    let acquire = "return redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], ARGV[2])";
    let renew = "return redis.call('LOCK.RENEW', KEYS[1], ARGV[1], ARGV[2])";
    let release = "return redis.call('LOCK.RELEASE', KEYS[1], ARGV[1])";
    let takeover = "return redis.call('LOCK.TAKEOVER', KEYS[1], ARGV[1], ARGV[2], ARGV[3])";
    let c = &mut con;
    assert_eq!(eval(c, acquire, "l:k", &["tok", "5000"]), Ok(1));
    assert_eq!(eval(c, acquire, "l:k", &["other", "5000"]), Ok(0));
    assert_eq!(eval(c, renew, "l:k", &["tok", "90000"]), Ok(1));
    assert!(pttl(c, "l:k") > 60_000);
    assert_eq!(eval(c, renew, "l:k", &["other", "90000"]), Ok(0));
    assert_eq!(eval(c, release, "l:k", &["other"]), Ok(0));
    assert_eq!(eval(c, release, "l:k", &["tok"]), Ok(1));
    assert!(!exists(c, "l:k"));
    assert_eq!(eval(c, takeover, "l:t", &["tok", "run", "5000"]), Ok(1));
    assert_eq!(eval(c, takeover, "l:t", &["tok2", "run", "5000"]), Ok(1));
    assert_eq!(eval(c, takeover, "l:t", &["tok3", "other", "5000"]), Ok(0));
    assert_eq!(get(c, "l:t").as_deref(), Some(r#"{"owner":"tok2","runId":"run"}"#));
    // An error inside the script reaches the caller with its message.
    let err = eval(c, renew, "l:t", &["tok2", "0"]).unwrap_err();
    assert!(err.contains("ttl-ms must be a positive integer"), "{err}");
    // Several commands in one script.
    let both = "local a = redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 5000); local b = redis.call('LOCK.RELEASE', KEYS[1], ARGV[1]); return a * 10 + b";
    assert_eq!(eval(c, both, "l:both", &["tok"]), Ok(11));
    assert!(!exists(c, "l:both"));
}

#[test]
fn read_only_scripts_may_not_call_lock_commands() {
    let server = Server::start();
    let mut con = server.conn();
    for script in [
        "return redis.call('LOCK.ACQUIRE', KEYS[1], 'tok', 5000)",
        "return redis.call('LOCK.RELEASE', KEYS[1], 'tok')",
        "return redis.call('LOCK.RENEW', KEYS[1], 'tok', 5000)",
        "return redis.call('LOCK.TAKEOVER', KEYS[1], 'tok', 'run', 5000)",
    ] {
        let r = redis::cmd("EVAL_RO").arg(script).arg(1).arg("ro:k").query::<Value>(&mut con);
        let e = r.expect_err(script);
        assert!(e.to_string().contains("Write commands are not allowed from read-only scripts"), "{script}: {e}");
    }
    assert!(!exists(&mut con, "ro:k"));
}

// --- ACL ---------------------------------------------------------------------

fn connect_as(server: &Server, user: &str) -> Connection {
    let mut con = server.conn();
    run(&mut con, &["AUTH", user, "pw"]);
    con
}

#[test]
fn acl_key_patterns_apply_to_the_lock_key() {
    let server = Server::start();
    let mut admin = server.conn();
    run(&mut admin, &["ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@all"]);
    let mut app = connect_as(&server, "app");
    for cmd in [
        &["LOCK.ACQUIRE", "other:x", "tok", "5000"][..],
        &["LOCK.RENEW", "other:x", "tok", "5000"],
        &["LOCK.RELEASE", "other:x", "tok"],
        &["LOCK.TAKEOVER", "other:x", "tok", "run", "5000"],
    ] {
        let e = call(&mut app, cmd).expect_err("allowed outside the key pattern");
        assert!(e.starts_with("NOPERM"), "{cmd:?}: {e}");
    }
    assert!(!exists(&mut admin, "other:x"));
    assert_eq!(call(&mut app, &["LOCK.ACQUIRE", "app:x", "tok", "5000"]), Ok(1));
    assert_eq!(call(&mut app, &["LOCK.RENEW", "app:x", "tok", "5000"]), Ok(1));
    assert_eq!(call(&mut app, &["LOCK.TAKEOVER", "app:y", "tok", "run", "5000"]), Ok(1));
    assert_eq!(call(&mut app, &["LOCK.RELEASE", "app:x", "tok"]), Ok(1));
}

#[test]
fn acl_read_only_key_permissions_refuse_lock_writes_but_allow_lock_info() {
    let server = Server::start();
    let mut admin = server.conn();
    run(&mut admin, &["SET", "ro:x", "tok", "PX", "60000"]);
    run(&mut admin, &["ACL", "SETUSER", "reader", "on", ">pw", "%R~ro:*", "+@all"]);
    let mut reader = connect_as(&server, "reader");
    assert_eq!(get(&mut reader, "ro:x").as_deref(), Some("tok"));
    for cmd in [
        &["LOCK.ACQUIRE", "ro:y", "tok", "5000"][..],
        &["LOCK.RENEW", "ro:x", "tok", "90000"],
        &["LOCK.RELEASE", "ro:x", "tok"],
        &["LOCK.TAKEOVER", "ro:y", "tok", "run", "5000"],
    ] {
        let e = call(&mut reader, cmd).expect_err("a write allowed on a read-only key");
        assert!(e.starts_with("NOPERM"), "{cmd:?}: {e}");
    }
    assert_eq!(get(&mut admin, "ro:x").as_deref(), Some("tok"));
    assert!(pttl(&mut admin, "ro:x") <= 60_000);
    assert!(!exists(&mut admin, "ro:y"));
    // LOCK.INFO only reads its key (an RO key spec), so `%R~` suffices.
    let info: Value =
        redis::cmd("LOCK.INFO").arg("ro:x").query(&mut reader).expect("LOCK.INFO with read-only key permission");
    assert!(matches!(&info, Value::Array(f) if f.len() == 22), "{info:?}");
    let e = redis::cmd("LOCK.INFO").arg("other:x").query::<Value>(&mut reader).expect_err("outside the key pattern");
    assert_eq!(e.code(), Some("NOPERM"), "{e}");
}

// --- Command metadata --------------------------------------------------------

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) | Value::Set(items) => items
            .iter()
            .map(|i| match i {
                Value::SimpleString(s) => s.clone(),
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("not a string: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

#[test]
fn command_info_shows_the_flags_and_the_key_position() {
    let server = Server::start();
    let mut con = server.conn();
    // The key specs: what each command does to its key (all read it first,
    // so all need read permission: `access`).
    for (name, must, must_not, access) in [
        // WAIT can block it, so it is `blocking` (and not `fast`), as BLPOP.
        ("lock.acquire", &["write", "denyoom", "blocking"][..], &["fast"][..], "insert"),
        // Renew is not deny-oom, like the PEXPIRE its script runs: a
        // server at its memory limit must still let holders renew.
        ("lock.renew", &["write", "fast"], &["denyoom"], "update"),
        ("lock.takeover", &["write", "denyoom", "fast"], &[], "update"),
        ("lock.release", &["write", "fast"], &["denyoom"], "delete"),
    ] {
        let info: Value = redis::cmd("COMMAND").arg("INFO").arg(name).query(&mut con).unwrap();
        let Value::Array(outer) = info else { panic!("{info:?}") };
        let Some(Value::Array(fields)) = outer.first() else { panic!("{name}: {outer:?}") };
        assert_eq!(strings(&Value::Array(vec![fields[0].clone()])), vec![name.to_string()]);
        let flags = strings(&fields[2]);
        for f in must {
            assert!(flags.contains(&f.to_string()), "{name} lacks {f}: {flags:?}");
        }
        for f in must_not {
            assert!(!flags.contains(&f.to_string()), "{name} has {f}: {flags:?}");
        }
        assert!(!flags.contains(&"readonly".to_string()), "{name}: {flags:?}");
        assert_eq!(&fields[3..6], &[Value::Int(1), Value::Int(1), Value::Int(1)], "{name} key positions");
        assert_eq!(
            key_spec_flags(&fields[8]),
            ["RW".to_string(), "access".to_string(), access.to_string()],
            "{name} key spec"
        );
    }
    let info: Value = redis::cmd("COMMAND").arg("INFO").arg("lock.info").query(&mut con).unwrap();
    let Value::Array(outer) = info else { panic!("{info:?}") };
    let Some(Value::Array(fields)) = outer.first() else { panic!("{outer:?}") };
    assert!(strings(&fields[2]).contains(&"readonly".to_string()));
    assert_eq!(key_spec_flags(&fields[8]), ["RO", "access"]);
}

/// The flags of a command's single key spec (COMMAND INFO's 9th field).
fn key_spec_flags(specs: &Value) -> Vec<String> {
    let Value::Array(specs) = specs else { panic!("{specs:?}") };
    assert_eq!(specs.len(), 1, "one key spec: {specs:?}");
    let Value::Array(spec) = &specs[0] else { panic!("{specs:?}") };
    let at = spec.iter().position(|v| strings(&Value::Array(vec![v.clone()])) == ["flags"]).expect("flags");
    strings(&spec[at + 1])
}

#[test]
fn command_getkeys_finds_the_lock_key() {
    let server = Server::start();
    let mut con = server.conn();
    for args in [
        &["LOCK.TAKEOVER", "k", "t", "r", "100"][..],
        &["LOCK.ACQUIRE", "k", "t", "100"],
        &["LOCK.RENEW", "k", "t", "100"],
        &["LOCK.RELEASE", "k", "t"],
    ] {
        let keys: Vec<String> = redis::cmd("COMMAND").arg("GETKEYS").arg(args).query(&mut con).unwrap();
        assert_eq!(keys, vec!["k".to_string()], "{args:?}");
    }
}

// --- Memory limit and replicas ----------------------------------------------

#[test]
fn over_maxmemory_acquire_and_takeover_are_refused_but_renew_and_release_still_run() {
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(ok(&mut con, &["LOCK.ACQUIRE", "oom:k", "tok", "60000"]), 1);
    run(&mut con, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    run(&mut con, &["CONFIG", "SET", "maxmemory", "1"]);
    for cmd in [
        &["LOCK.ACQUIRE", "oom:new", "tok", "60000"][..],
        &["LOCK.TAKEOVER", "oom:new", "tok", "run", "60000"],
        &["LOCK.TAKEOVER", "oom:new", "tok", "", "60000"],
    ] {
        let e = call(&mut con, cmd).expect_err("a deny-oom command ran over maxmemory");
        assert!(e.starts_with("OOM"), "{cmd:?}: {e}");
    }
    assert_eq!(call(&mut con, &["LOCK.RENEW", "oom:k", "tok", "90000"]), Ok(1), "renew must work over maxmemory");
    assert!(pttl(&mut con, "oom:k") > 60_000);
    assert_eq!(call(&mut con, &["LOCK.RELEASE", "oom:k", "tok"]), Ok(1), "release must work over maxmemory");
    run(&mut con, &["CONFIG", "SET", "maxmemory", "0"]);
    assert!(!exists(&mut con, "oom:k"));
    assert!(!exists(&mut con, "oom:new"));
}

fn memory_usage(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("MEMORY").arg("USAGE").arg(key).query(con).unwrap()
}

#[test]
fn a_lock_written_over_another_value_holds_exactly_its_bytes_in_as_much_memory_as_set() {
    let server = Server::start();
    let mut con = server.conn();
    let structured = |owner: &str| format!(r#"{{"owner":"{owner}","runId":"run-0123456789"}}"#);
    let (t40, t90, u90) = ("t".repeat(40), "t".repeat(90), "u".repeat(90));
    // Same run with a longer, an equal and a shorter token (resized or
    // written in place), and a stale legacy token (a shorter bare value).
    // Every new value exceeds 44 bytes, so SET stores it unembedded too and
    // MEMORY USAGE (which counts the value's allocation) compares like for like.
    // Valkey 9 embeds longer values (up to ~100 bytes here), which the
    // module's in-place writes never do: there such a lock is compared with
    // the same bytes stored unembedded (SETRANGE on a new key writes an
    // exact-size raw string), and SET's value is smaller (docs/compatibility.md).
    let v = server_version();
    let set_embeds_long_values = v.is_valkey() && v.major >= 9;
    let cases = [
        (structured(&t40), &t90, "60000"),
        (structured(&t90), &u90, "60000"),
        (structured(&t90), &t40, "60000"),
        ("legacy-token".into(), &t40, "9000000"),
    ];
    for (i, (before, token, ttl)) in cases.iter().enumerate() {
        let (lock, plain, raw) = (format!("mem:lock:{i}"), format!("mem:plain:{i}"), format!("mem:rawv:{i}"));
        let after = structured(token);
        run(&mut con, &["SET", &lock, before, "PX", "600000"]);
        run(&mut con, &["SET", &plain, before, "PX", "600000"]);
        run(&mut con, &["SET", &plain, &after, "PX", "600000"]);
        assert_eq!(ok(&mut con, &["LOCK.TAKEOVER", &lock, token, "run-0123456789", ttl]), 1, "case {i}");
        assert_eq!(get(&mut con, &lock).as_deref(), Some(after.as_str()), "case {i}");
        let reference = if encoding(&mut con, &plain) == "embstr" {
            assert!(set_embeds_long_values, "case {i}: {v} embedded a {}-byte value", after.len());
            run(&mut con, &["SETRANGE", &raw, "0", &after]);
            run(&mut con, &["PEXPIRE", &raw, "600000"]);
            assert_eq!(encoding(&mut con, &raw), "raw");
            raw
        } else {
            plain
        };
        assert_eq!(memory_usage(&mut con, &lock), memory_usage(&mut con, &reference), "case {i}: {before} -> {after}");
    }
}

fn encoding(con: &mut Connection, key: &str) -> String {
    redis::cmd("OBJECT").arg("ENCODING").arg(key).query(con).unwrap()
}

#[test]
fn a_replica_refuses_lock_commands_as_writes() {
    let master = Server::start();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    for cmd in [
        &["LOCK.ACQUIRE", "rep:k", "tok", "60000"][..],
        &["LOCK.RENEW", "rep:k", "tok", "90000"],
        &["LOCK.RELEASE", "rep:k", "tok"],
        &["LOCK.TAKEOVER", "rep:k", "tok", "run", "60000"],
    ] {
        let e = call(&mut r, cmd).expect_err("a replica accepted a lock write");
        assert!(e.starts_with("READONLY"), "{cmd:?}: {e}");
    }
}

// --- Expiry ------------------------------------------------------------------

#[test]
fn an_expired_lock_can_be_acquired_again() {
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(
        at_once(&mut con, &[&["LOCK.ACQUIRE", "e:k", "tok", "50"], &["LOCK.ACQUIRE", "e:k", "other", "5000"]]),
        [Value::Int(1), Value::Int(0)]
    );
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(ok(&mut con, &["LOCK.ACQUIRE", "e:k", "other", "5000"]), 1);
    assert_eq!(get(&mut con, "e:k").as_deref(), Some("other"));
}

#[test]
fn renew_and_release_of_an_expired_lock_are_refused() {
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(ok(&mut con, &["LOCK.ACQUIRE", "e:r", "tok", "50"]), 1);
    assert_eq!(ok(&mut con, &["LOCK.TAKEOVER", "e:s", "tok", "run", "50"]), 1);
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(ok(&mut con, &["LOCK.RENEW", "e:r", "tok", "5000"]), 0);
    assert!(!exists(&mut con, "e:r"), "renew revived an expired lock");
    assert_eq!(ok(&mut con, &["LOCK.RELEASE", "e:s", "tok"]), 0);
    assert_eq!(ok(&mut con, &["LOCK.RENEW", "e:s", "tok", "5000"]), 0);
    assert!(!exists(&mut con, "e:s"));
}

#[test]
fn an_expired_lock_is_taken_over_by_another_run() {
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(
        at_once(
            &mut con,
            &[&["LOCK.TAKEOVER", "e:t", "tok", "run", "50"], &["LOCK.TAKEOVER", "e:t", "tok2", "other", "5000"]]
        ),
        [Value::Int(1), Value::Int(0)]
    );
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(ok(&mut con, &["LOCK.TAKEOVER", "e:t", "tok2", "other", "5000"]), 1);
    assert_eq!(get(&mut con, "e:t").as_deref(), Some(r#"{"owner":"tok2","runId":"other"}"#));
}

#[test]
fn a_legacy_lock_is_taken_over_once_at_most_half_its_ttl_remains() {
    let server = Server::start();
    let mut con = server.conn();
    // In one transaction, so the remaining TTL is what was set.
    let replies = at_once(
        &mut con,
        &[
            &["SET", "lg:k", "bare", "PX", "4000"][..],
            // 4000 ms left > floor(6000 / 2): still fresh...
            &["LOCK.TAKEOVER", "lg:k", "tok", "run", "6000"],
            // ...but stale for a ttl of 20000 (threshold 10000).
            &["LOCK.TAKEOVER", "lg:k", "tok", "run", "20000"],
            &["PTTL", "lg:k"],
        ],
    );
    assert_eq!(replies[1..3], [Value::Int(0), Value::Int(1)]);
    assert!(matches!(replies[3], Value::Int(ttl) if ttl > 10_000), "the takeover's TTL: {:?}", replies[3]);
    assert_eq!(get(&mut con, "lg:k").as_deref(), Some(r#"{"owner":"tok","runId":"run"}"#));
}
