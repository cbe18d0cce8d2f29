//! `redis-lock list` against private servers: one server (with and without
//! the module), a quorum's servers, and every master of a Redis Cluster;
//! as a table and as JSON.

mod cli_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cli_support::{addr, cli, list_json, row, rows_of, stderr, stdout, table, BIN};
use redis::Commands;
use redis_lock_client::LockClient;
use redis_lock_harness::{Cluster, Server};
use serde_json::{json, Value};

const HEADER: [&str; 8] = ["SERVER", "KEY", "OWNER", "RUN-ID", "FORMAT", "TTL-MS", "FENCE", "WAITERS"];

/// A key with the characters JSON must escape, and a value with a newline.
const ODD_KEY: &str = "lk:q\"uo\\te";
const ODD_OWNER: &str = "t\"\n1";

/// Legacy, structured (no expiry), fenced, another type, an odd key, and
/// one that `lk:*` does not match.
fn fill(s: &Server) {
    let mut con = s.conn();
    let _: () = con.pset_ex("lk:legacy", "tok-a", 600_000).expect("SET");
    let _: () = con.set("lk:structured", r#"{"owner":"tok-b","runId":"run-b"}"#).expect("SET");
    let _: () = con.lpush("lk:list", "x").expect("LPUSH");
    let _: () = con.pset_ex(ODD_KEY, ODD_OWNER, 600_000).expect("SET");
    let _: () = con.set("other:x", "y").expect("SET");
}

/// The rows `fill` made, as `list --json lk:*` shows them, whatever the
/// backend; the TTLs are checked apart (time passes).
fn check_filled(rows: &[Value], server: &str) {
    let strip = |r: &Value| {
        let mut r = r.clone();
        r.as_object_mut().expect("object").remove("ttl_ms");
        r
    };
    assert_eq!(
        strip(row(rows, "lk:structured")),
        json!({"server": server, "key": "lk:structured", "owner": "tok-b", "run_id": "run-b", "format": "structured", "fence": null, "waiters": 0})
    );
    assert_eq!(row(rows, "lk:structured")["ttl_ms"], -1, "no expiry");
    assert_eq!(
        row(rows, "lk:list"),
        &json!({"server": server, "key": "lk:list", "owner": null, "run_id": null, "format": "other", "ttl_ms": null, "fence": null, "waiters": null})
    );
    let odd = row(rows, ODD_KEY);
    assert_eq!((&odd["owner"], &odd["format"]), (&json!(ODD_OWNER), &json!("legacy")));
    for key in ["lk:legacy", ODD_KEY] {
        let ttl = row(rows, key)["ttl_ms"].as_i64().expect("ttl_ms");
        // Of 600 s, allowing this machine minutes to get here.
        assert!(ttl > 300_000 && ttl <= 600_000, "{key}: ttl_ms {ttl}");
    }
    let legacy = row(rows, "lk:legacy");
    assert_eq!(
        (&legacy["owner"], &legacy["run_id"], &legacy["format"]),
        (&json!("tok-a"), &Value::Null, &json!("legacy"))
    );
    assert!(rows_of(rows, "other:x").is_empty(), "the pattern excludes other:x");
}

#[test]
fn list_on_one_server_with_a_waiter() {
    let s = Server::start();
    let url = s.url();
    let server = addr(s.port());
    fill(&s);
    let fence: i64 = redis::cmd("LOCK.ACQUIRE")
        .arg("lk:fenced")
        .arg("tok-c")
        .arg(600_000)
        .arg("FENCE")
        .query(&mut s.conn())
        .expect("LOCK.ACQUIRE");
    assert!(fence > 0);
    // A blocked waiter on lk:legacy, as `redis-lock run --wait` would be.
    let waiter = {
        let url = url.clone();
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url).expect("client").get_connection().expect("conn");
            redis::cmd("LOCK.ACQUIRE")
                .arg("lk:legacy")
                .arg("w")
                .arg(600_000)
                .arg("WAIT")
                .arg(120_000)
                .query::<redis::Value>(&mut con)
        })
    };
    let end = Instant::now() + Duration::from_secs(20);
    let rows = loop {
        let rows = list_json(&["--url", &url, "lk:*"]);
        if row(&rows, "lk:legacy")["waiters"] == 1 || Instant::now() > end {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The table, while the waiter still waits (its wait is 120 s).
    let lines = table(&cli(&["list", "--url", &url, "lk:*"]));
    // Frees the waiter (it takes the lock) rather than waiting out its wait.
    let _: i64 = s.conn().del("lk:legacy").expect("DEL");
    let probe = waiter.join().expect("waiter");
    let waited = !matches!(&probe, Err(e) if e.to_string().contains("WAIT is not supported"));
    if waited {
        assert_eq!(row(&rows, "lk:legacy")["waiters"], 1, "{rows:?}");
    } else {
        eprintln!("SKIPPED list waiters check: the lock module says WAIT is not supported");
    }
    check_filled(&rows, &server);
    let fenced = row(&rows, "lk:fenced");
    assert_eq!(
        (&fenced["owner"], &fenced["format"], &fenced["waiters"]),
        (&json!("tok-c"), &json!("legacy"), &json!(0))
    );
    assert_eq!(rows.len(), 5, "{rows:?}");

    assert_eq!(lines[0], HEADER);
    assert_eq!(lines.len(), 6, "a header and one line per key: {lines:?}");
    let legacy = lines.iter().find(|l| l[1] == "lk:legacy").expect("lk:legacy row");
    assert_eq!(legacy[..5], [server.as_str(), "lk:legacy", "tok-a", "-", "legacy"]);
    assert_eq!(legacy[6..], ["-", if waited { "1" } else { "0" }]);
    let structured = lines.iter().find(|l| l[1] == "lk:structured").expect("lk:structured row");
    assert_eq!(structured[2..], ["tok-b", "run-b", "structured", "-1", "-", "0"]);
    let list = lines.iter().find(|l| l[1] == "lk:list").expect("lk:list row");
    assert_eq!(list[2..], ["-", "-", "other", "-", "-", "-"]);
    // The newline in the owner is escaped: the row stays one line.
    let odd = lines.iter().find(|l| l[1] == ODD_KEY).expect("odd row");
    assert_eq!(odd[2], "t\"\\n1");
    let keys: Vec<&str> = lines[1..].iter().map(|l| l[1].as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "sorted by key");

    // The default pattern is `*`.
    let all = list_json(&["--url", &url]);
    assert_eq!(row(&all, "other:x")["owner"], "y");
    // lk:legacy is the waiter's now, if it waited.
    assert_eq!(all.len(), if waited { 6 } else { 5 }, "{all:?}");
    if waited {
        assert_eq!(row(&all, "lk:legacy")["owner"], "w");
    }
    let none = list_json(&["--url", &url, "nothing:*"]);
    assert!(none.is_empty());
    assert_eq!(stdout(&cli(&["list", "--url", &url, "nothing:*"])).lines().collect::<Vec<_>>(), [HEADER.join("  ")]);
}

#[test]
fn list_without_the_module_in_small_batches() {
    let s = Server::builder().without_module().start();
    let url = s.url();
    fill(&s);
    let rows = list_json(&["--url", &url, "lk:*"]);
    check_filled(&rows, &addr(s.port()));
    assert_eq!(row(&rows, "lk:legacy")["waiters"], 0);
    assert_eq!(rows.len(), 4, "{rows:?}");

    // 250 more keys, listed 7 at a time: each once, none lost between
    // SCAN's cursors or the batches' pipelines.
    let mut p = redis::pipe();
    for i in 0..250 {
        p.cmd("SET").arg(format!("many:{i:03}")).arg(format!("t{i}")).ignore();
    }
    let with_module = Server::start();
    for server in [&s, &with_module] {
        let _: () = p.query(&mut server.conn()).expect("SET many");
        let rows = list_json(&["--url", &server.url(), "--count", "7", "many:*"]);
        let keys: Vec<String> = rows.iter().map(|r| r["key"].as_str().expect("key").to_string()).collect();
        assert_eq!(keys, (0..250).map(|i| format!("many:{i:03}")).collect::<Vec<_>>());
        assert!(rows.iter().enumerate().all(|(i, r)| r["owner"] == format!("t{i}")));
    }
    assert_eq!(cli(&["list", "--url", &url, "--count", "0"]).status.code(), Some(2));
}

#[test]
fn list_on_a_quorum_of_servers() {
    let mut s: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let _: () = s[2].conn().pset_ex("q:only-on-2", "tok-x", 600_000).expect("SET");
    let _: () = s[1].conn().hset("q:hash", "f", "v").expect("HSET");
    let mut args = vec!["--json".to_string()];
    for x in &s {
        args.extend(["--url".to_string(), x.url()]);
    }
    args.push("q:*".into());
    // CMD lists the locks while it holds the quorum lock q:job.
    let script = format!("echo \"$REDIS_LOCK_TOKEN\"; exec {BIN} list {}", args.join(" ").replace('*', "\\*"));
    let mut run = Command::new(BIN);
    run.arg("run");
    for x in &s {
        run.args(["--url", &x.url()]);
    }
    let o = run
        .args(["--ttl", "10000", "q:job", "--", "sh", "-c", &script])
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let (token, json) = out.split_once('\n').expect("token line");
    let rows: Vec<Value> = serde_json::from_str(json).expect("JSON");
    let job = rows_of(&rows, "q:job");
    assert!(job.len() >= 2, "a majority holds it: {rows:?}");
    // Held by each server's session (docs/sessions.md, "Quorum locks").
    assert!(job.iter().all(|r| r["owner"] == token && r["format"] == "structured"), "{rows:?}");
    let servers: Vec<String> = s.iter().map(|x| addr(x.port())).collect();
    assert_eq!(row(&rows, "q:only-on-2")["server"], json!(servers[2]));
    assert_eq!(row(&rows, "q:hash")["format"], "other");
    assert_eq!(row(&rows, "q:hash")["server"], json!(servers[1]));

    // The table names each server; a dead one is reported (exit 69) and
    // the others still listed.
    let _: () = s[0].conn().pset_ex("q:job", "tok-0", 600_000).expect("SET");
    // The run's lock is gone from the third server too, whether its release
    // reached it in time or not (on a loaded machine a release to one node
    // can miss the quorum's node timeout; the lease then ends by itself).
    let _: () = s[2].conn().del("q:job").expect("DEL");
    s[1].kill();
    let o = Command::new(BIN)
        .args(["list", "--url", &s[0].url(), "--url", &s[1].url(), "--url", &s[2].url(), "q:*"])
        .stdin(Stdio::null())
        .output()
        .expect("list");
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains(&servers[1]), "names the dead server: {}", stderr(&o));
    let lines: Vec<Vec<String>> =
        stdout(&o).lines().map(|l| l.split_whitespace().map(String::from).collect()).collect();
    assert_eq!(lines[0], HEADER);
    let rest: Vec<[&str; 3]> = lines[1..].iter().map(|l| [l[0].as_str(), l[1].as_str(), l[2].as_str()]).collect();
    assert_eq!(rest, [[servers[0].as_str(), "q:job", "tok-0"], [servers[2].as_str(), "q:only-on-2", "tok-x"]]);
}

#[test]
fn list_on_every_master_of_a_cluster() {
    let c = Cluster::start(3, 1);
    let masters = c.masters();
    assert_eq!(masters.len(), 3);
    let client = LockClient::open_cluster(&c.urls()).expect("cluster client");
    // Two locks on each master (one taken over: structured), a hash on the
    // first, and a key the pattern does not match.
    let mut held = Vec::new();
    let mut expect: Vec<(String, usize, String, &str)> = Vec::new();
    for &m in &masters {
        for (n, prefix) in ["cl:a", "cl:b"].into_iter().enumerate() {
            let key = c.key_on(prefix, m);
            let lock = if n == 0 {
                client.try_acquire(&key, Duration::from_secs(600))
            } else {
                client.takeover(&key, "run-1", Duration::from_secs(600))
            }
            .expect("lock");
            expect.push((key, m, lock.token().to_string(), if n == 0 { "legacy" } else { "structured" }));
            held.push(lock);
        }
        let _: () = c.node(m).conn().set(c.key_on("zz:", m), "x").expect("SET");
    }
    let hash = c.key_on("cl:h", masters[0]);
    let _: () = c.node(masters[0]).conn().hset(&hash, "f", "v").expect("HSET");
    expect.sort();

    // Any node is a seed, a replica too; replicas' copies are not listed.
    let replica = c.replicas_of(masters[1])[0];
    let rows = list_json(&["--cluster", "--url", &c.node(replica).url(), "cl:*"]);
    assert_eq!(rows.len(), expect.len() + 1, "each key once: {rows:?}");
    for (key, m, token, format) in &expect {
        let r = row(&rows, key);
        assert_eq!(
            (&r["server"], &r["owner"], &r["format"]),
            (&json!(addr(c.node(*m).port())), &json!(token), &json!(format)),
            "{key}"
        );
        assert!(r["ttl_ms"].as_i64().is_some_and(|t| t > 0), "{r}");
    }
    assert_eq!(row(&rows, &hash)["format"], "other");
    for r in rows.iter().filter(|r| r["format"] == "structured") {
        assert_eq!(r["run_id"], "run-1");
    }

    // A redis+cluster:// URL with two seeds, as a table.
    let url = format!("redis+cluster://127.0.0.1:{},127.0.0.1:{}/", c.node(masters[2]).port(), c.node(replica).port());
    let lines = table(&cli(&["list", "--url", &url, "cl:*"]));
    assert_eq!(lines[0], HEADER);
    let keys: Vec<&str> = lines[1..].iter().map(|l| l[1].as_str()).collect();
    let mut want: Vec<&str> = expect.iter().map(|e| e.0.as_str()).chain([hash.as_str()]).collect();
    want.sort_unstable();
    assert_eq!(keys, want);
    drop(held);
}
