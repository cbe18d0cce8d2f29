//! LOCK.INFO and the `INFO lock` counters, against a real server.

use redis::Value;
use redis_lock_harness::Server;

fn info_fields(conn: &mut redis::Connection, key: &str) -> Option<Vec<(String, Value)>> {
    let v: Value = redis::cmd("LOCK.INFO").arg(key).query(conn).expect("LOCK.INFO");
    match v {
        Value::Nil => None,
        Value::Array(items) => Some(
            items
                .chunks(2)
                .map(|p| (redis::from_redis_value_ref::<String>(&p[0]).expect("field name"), p[1].clone()))
                .collect(),
        ),
        other => panic!("unexpected LOCK.INFO reply {other:?}"),
    }
}

fn field<'a>(fields: &'a [(String, Value)], name: &str) -> &'a Value {
    &fields.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no field {name}")).1
}

fn counters(conn: &mut redis::Connection) -> std::collections::HashMap<String, u64> {
    let text: String = redis::cmd("INFO").arg("lock").query(conn).expect("INFO lock");
    text.lines()
        .filter_map(|l| l.strip_prefix("lock_"))
        .filter_map(|l| l.split_once(':'))
        // The distributions (`lock_wait_ms_exclusive:p50=…`) are text.
        .filter(|(k, _)| !k.contains("_ms_"))
        .map(|(k, v)| (k.to_string(), v.trim().parse().expect("numeric counter")))
        .collect()
}

#[test]
fn info_on_a_structured_lock_shows_owner_run_and_ttl() {
    let server = Server::start();
    let mut c = server.conn();
    let _: i64 = redis::cmd("LOCK.TAKEOVER").arg("k").arg("tok").arg("run-1").arg(600_000).query(&mut c).unwrap();
    let f = info_fields(&mut c, "k").expect("lock exists");
    let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "owner",
            "run-id",
            "format",
            "ttl-ms",
            "fence",
            "waiters",
            "lock-delay-ms",
            "hold-until",
            "lease-end",
            "delayed-until",
            "revoked"
        ]
    );
    for lease_field in ["lock-delay-ms", "hold-until", "lease-end", "delayed-until", "revoked"] {
        assert_eq!(field(&f, lease_field), &Value::Nil, "{lease_field} of a lock without lease terms");
    }
    assert_eq!(field(&f, "owner"), &Value::BulkString(b"tok".to_vec()));
    assert_eq!(field(&f, "run-id"), &Value::BulkString(b"run-1".to_vec()));
    assert_eq!(field(&f, "format"), &Value::BulkString(b"structured".to_vec()));
    let Value::Int(ttl) = field(&f, "ttl-ms") else { panic!("ttl-ms not an integer") };
    // What is left of 600 s, allowing this machine 10 s between the two commands.
    assert!((590_000..=600_000).contains(ttl), "ttl-ms {ttl}");
    assert_eq!(field(&f, "waiters"), &Value::Int(0));
}

#[test]
fn info_on_a_legacy_lock_without_expiry_says_so() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("SET").arg("k").arg("bare").query(&mut c).unwrap();
    let f = info_fields(&mut c, "k").expect("lock exists");
    assert_eq!(field(&f, "owner"), &Value::BulkString(b"bare".to_vec()));
    assert_eq!(field(&f, "run-id"), &Value::Nil);
    assert_eq!(field(&f, "format"), &Value::BulkString(b"legacy".to_vec()));
    assert_eq!(field(&f, "ttl-ms"), &Value::Int(-1));
}

#[test]
fn info_is_nil_for_absent_keys_and_wrongtype_for_other_types() {
    let server = Server::start();
    let mut c = server.conn();
    assert!(info_fields(&mut c, "absent").is_none());
    let _: i64 = redis::cmd("RPUSH").arg("list").arg("x").query(&mut c).unwrap();
    let err = redis::cmd("LOCK.INFO").arg("list").query::<Value>(&mut c).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    let err = redis::cmd("LOCK.INFO").arg("a").arg("b").query::<Value>(&mut c).unwrap_err();
    assert!(err.to_string().contains("wrong number of arguments"), "{err}");
}

#[test]
fn info_lock_counts_grants_refusals_renewals_releases_and_takeovers() {
    let server = Server::start();
    let mut c = server.conn();
    let mut run = |args: &[&str]| -> i64 { redis::cmd(args[0]).arg(&args[1..]).query(&mut c).unwrap() };
    assert_eq!(run(&["LOCK.ACQUIRE", "a", "t", "10000"]), 1);
    assert_eq!(run(&["LOCK.ACQUIRE", "a", "u", "10000"]), 0);
    assert_eq!(run(&["LOCK.RENEW", "a", "t", "10000"]), 1);
    assert_eq!(run(&["LOCK.RENEW", "a", "u", "10000"]), 0);
    assert_eq!(run(&["LOCK.RELEASE", "a", "u"]), 0);
    assert_eq!(run(&["LOCK.RELEASE", "a", "t"]), 1);
    assert_eq!(run(&["LOCK.TAKEOVER", "s", "t", "r", "10000"]), 1);
    assert_eq!(run(&["LOCK.TAKEOVER", "s", "t2", "r", "10000"]), 1);
    assert_eq!(run(&["LOCK.TAKEOVER", "s", "t3", "other", "10000"]), 0);
    let _: () = redis::cmd("SET").arg("legacy").arg("bare").query(&mut c).unwrap();
    let mut run = |args: &[&str]| -> i64 { redis::cmd(args[0]).arg(&args[1..]).query(&mut c).unwrap() };
    assert_eq!(run(&["LOCK.TAKEOVER", "legacy", "t", "r", "10000"]), 1);
    let n = counters(&mut c);
    assert_eq!(n["grants"], 4, "{n:?}");
    assert_eq!(n["refusals"], 4, "{n:?}");
    assert_eq!(n["renewals"], 1);
    assert_eq!(n["releases"], 1);
    assert_eq!(n["takeovers_same_run"], 1);
    assert_eq!(n["takeovers_stale_legacy"], 1);
    assert_eq!(n["waiting"], 0);
}

/// `COMMAND DOCS`: what redis-cli shows as hints and help.
#[test]
fn command_docs_describe_every_command_and_its_arguments() {
    let server = Server::start();
    let mut c = server.conn();
    for (name, args) in [
        ("lock.acquire", &["key", "token", "ttl-ms", "fence", "timeout-ms", "lock-delay-ms", "max-hold-ms"][..]),
        ("lock.renew", &["key", "token", "ttl-ms", "fence"]),
        ("lock.release", &["key", "token"]),
        ("lock.takeover", &["key", "token", "run-id", "ttl-ms", "fence", "lock-delay-ms", "max-hold-ms"]),
        ("lock.info", &["key"]),
        ("lock.fencefloor", &["fence"]),
        ("lock.guard", &["key", "token", "command", "arg"]),
        ("lock.elect", &["key", "token", "ttl-ms", "value", "timeout-ms"]),
        ("lock.proclaim", &["key", "token", "value"]),
        ("lock.leader", &["key"]),
        ("lock.observe", &["key", "rev", "timeout-ms"]),
        ("lock.top", &["count"]),
        ("lock.evicted", &["key", "token"]),
    ] {
        let docs: Value = redis::cmd("COMMAND").arg("DOCS").arg(name).query(&mut c).unwrap();
        let words = strings_in(&docs);
        for field in ["summary", "since", "complexity", "arguments"] {
            assert!(words.iter().any(|w| w == field), "{name} documents {field}: {words:?}");
        }
        for arg in args {
            assert!(words.iter().any(|w| w == arg), "{name} documents argument {arg}: {words:?}");
        }
    }
    let docs: Value = redis::cmd("COMMAND").arg("DOCS").arg("lock.acquire").query(&mut c).unwrap();
    let words = strings_in(&docs);
    for word in ["WAIT", "FENCE", "LOCKDELAY", "MAXHOLD", "optional", "integer", "key", "pure-token"] {
        assert!(words.iter().any(|w| w == word), "{word} in {words:?}");
    }
}

/// Every string in a reply, depth first.
fn strings_in(v: &Value) -> Vec<String> {
    match v {
        Value::BulkString(b) => vec![String::from_utf8_lossy(b).into_owned()],
        Value::SimpleString(s) => vec![s.clone()],
        Value::Array(items) | Value::Set(items) => items.iter().flat_map(strings_in).collect(),
        Value::Map(pairs) => pairs.iter().flat_map(|(k, v)| strings_in(k).into_iter().chain(strings_in(v))).collect(),
        _ => Vec::new(),
    }
}
