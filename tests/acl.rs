//! ACL: key permissions follow the key specs (every write reads the value
//! first, so it needs read and write permission), and the commands carry
//! their native twins' categories on servers that let a module set them.

use redis::{Connection, Value};
use redis_lock_harness::{server_version, Server};

/// Whether the server lets modules set ACL categories (Redis 7.2+, and
/// every Valkey: it forked from 7.2).
fn has_module_acl_categories() -> bool {
    server_version().redis_api() >= (7, 2)
}

fn user(server: &Server, rules: &[&str]) -> Connection {
    let mut admin = server.conn();
    let name = format!("u{}", rules.join("").len() + rules.len());
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&name)
        .arg("reset")
        .arg("on")
        .arg(">pw")
        .arg(rules)
        .query(&mut admin)
        .unwrap();
    let mut c = server.conn();
    let _: () = redis::cmd("AUTH").arg(&name).arg("pw").query(&mut c).unwrap();
    c
}

fn run(c: &mut Connection, args: &[&str]) -> Result<Value, String> {
    redis::cmd(args[0]).arg(&args[1..]).query::<Value>(c).map_err(|e| e.to_string())
}

#[test]
fn writes_need_read_and_write_permission_on_the_key_and_info_only_read() {
    let server = Server::start();
    let mut admin = server.conn();
    let _: () = redis::cmd("SET").arg("lock:k").arg("holder").query(&mut admin).unwrap();
    let mut write_only = user(&server, &["+@all", "%W~lock:*"]);
    for args in [
        &["LOCK.ACQUIRE", "lock:k", "t", "1000"][..],
        &["LOCK.RENEW", "lock:k", "holder", "1000"],
        &["LOCK.RELEASE", "lock:k", "holder"],
        &["LOCK.TAKEOVER", "lock:k", "t", "run", "1000"],
        &["LOCK.INFO", "lock:k"],
    ] {
        let err = run(&mut write_only, args).unwrap_err();
        assert!(err.to_lowercase().contains("noperm"), "{args:?} probed ownership without read permission: {err}");
    }
    let mut read_only = user(&server, &["+@all", "%R~lock:*"]);
    assert!(run(&mut read_only, &["LOCK.INFO", "lock:k"]).is_ok());
    assert!(run(&mut read_only, &["LOCK.RELEASE", "lock:k", "holder"]).unwrap_err().to_lowercase().contains("noperm"));
    let mut both = user(&server, &["+@all", "~lock:*"]);
    assert_eq!(run(&mut both, &["LOCK.RELEASE", "lock:k", "holder"]), Ok(Value::Int(1)));
}

#[test]
fn commands_carry_their_native_twins_acl_categories() {
    let server = Server::start();
    let mut admin = server.conn();
    let in_category =
        |c: &mut Connection, cat: &str| -> Vec<String> { redis::cmd("ACL").arg("CAT").arg(cat).query(c).unwrap() };
    if !has_module_acl_categories() {
        // Redis 7.0 has no API for them: module commands are in no category
        // but @all (docs/commands.md, ACL categories), so rules must name them.
        assert!(!in_category(&mut admin, "write").iter().any(|c| c.starts_with("lock.")));
        return;
    }
    let expected: &[(&str, &[&str])] = &[
        (
            "write",
            &[
                "lock.acquire",
                "lock.renew",
                "lock.release",
                "lock.takeover",
                "lock.fencefloor",
                "lock.guard",
                "lock.elect",
                "lock.proclaim",
                "lock.acquireall",
                "lock.revoke",
            ],
        ),
        ("read", &["lock.info", "lock.leader", "lock.observe", "lock.top", "lock.evicted"]),
        ("blocking", &["lock.acquire", "lock.elect", "lock.observe", "lock.acquireall"]),
        (
            "slow",
            &["lock.acquire", "lock.guard", "lock.elect", "lock.observe", "lock.top", "lock.acquireall", "lock.revoke"],
        ),
        (
            "fast",
            &[
                "lock.renew",
                "lock.release",
                "lock.takeover",
                "lock.info",
                "lock.fencefloor",
                "lock.proclaim",
                "lock.leader",
                "lock.evicted",
            ],
        ),
        ("dangerous", &["lock.fencefloor"]),
        ("admin", &["lock.fencefloor"]),
    ];
    for (category, commands) in expected {
        let listed = in_category(&mut admin, category);
        for cmd in [
            "lock.acquire",
            "lock.renew",
            "lock.release",
            "lock.takeover",
            "lock.info",
            "lock.fencefloor",
            "lock.guard",
            "lock.elect",
            "lock.proclaim",
            "lock.leader",
            "lock.observe",
            "lock.top",
            "lock.evicted",
            "lock.acquireall",
            "lock.revoke",
        ] {
            assert_eq!(listed.iter().any(|c| c == cmd), commands.contains(&cmd), "@{category} and {cmd}: {listed:?}");
        }
    }
    // The module's own category, where the server lets modules add one
    // (Redis 7.4+, Valkey 8.1+).
    if let Ok(mut listed) = redis::cmd("ACL").arg("CAT").arg("lock").query::<Vec<String>>(&mut admin) {
        listed.sort();
        let mut all = [
            "lock.acquire",
            "lock.acquireall",
            "lock.elect",
            "lock.evicted",
            "lock.leader",
            "lock.observe",
            "lock.proclaim",
            "lock.fencefloor",
            "lock.guard",
            "lock.info",
            "lock.release",
            "lock.renew",
            "lock.revoke",
            "lock.takeover",
            "lock.top",
        ]
        .to_vec();
        all.extend([
            "rwlock.acquire",
            "rwlock.info",
            "rwlock.release",
            "rwlock.renew",
            "sem.acquire",
            "sem.info",
            "sem.release",
            "sem.renew",
            "session.adopt",
            "session.apply",
            "session.grant",
            "session.info",
            "session.keepalive",
            "session.list",
            "session.revoke",
        ]);
        all.sort();
        assert_eq!(listed, all);
    }
    // SESSION.APPLY is replication plumbing, as LOCK.FENCEFLOOR:
    // `-@dangerous` keeps applications from it, not from the sessions.
    let dangerous = in_category(&mut admin, "dangerous");
    assert!(dangerous.iter().any(|c| c == "session.apply"), "{dangerous:?}");
    assert!(!dangerous.iter().any(|c| c == "session.grant"), "{dangerous:?}");
    let mut no_writes = user(&server, &["+@all", "-@write", "~*"]);
    assert!(run(&mut no_writes, &["LOCK.ACQUIRE", "k", "t", "1000"]).unwrap_err().to_lowercase().contains("noperm"));
    assert!(run(&mut no_writes, &["LOCK.INFO", "k"]).is_ok());
    let mut app = user(&server, &["+@all", "-@dangerous", "-@admin", "~lock:*"]);
    assert!(run(&mut app, &["LOCK.FENCEFLOOR", "1"]).unwrap_err().to_lowercase().contains("noperm"));
    assert_eq!(run(&mut app, &["LOCK.ACQUIRE", "lock:k", "t", "1000"]), Ok(Value::Int(1)));
}
