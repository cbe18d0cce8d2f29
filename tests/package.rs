//! The portable package (`scripts/package`, docs/install.md), used as a
//! user would: unpack the tarball, check `SHA256SUMS`, run `redis-server
//! redis.conf` in its folder (with `$REDIS_SERVER`), and the module the
//! packaged `redis.conf` loads serves the core commands; the packaged CLI
//! holds a lock through it.
//!
//! `scripts/test` builds the package and runs this on every server of the
//! matrix with `REDIS_LOCK_PACKAGE` naming the tarball. By hand:
//! `pkg=$(scripts/package) && REDIS_LOCK_PACKAGE=$PWD/$pkg cargo test
//! --release -p redis-lock --test package -- --ignored`. It is ignored
//! without the package rather than passing without it.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use redis::Value;
use redis_lock_harness::Server;
use support::{acquire, release, until_waiting, waiter_on, LEASE_MS};

/// What the tarball's one folder holds, sorted.
const CONTENTS: [&str; 6] = ["LICENSE", "SHA256SUMS", "libredis_lock.so", "redis-lock", "redis.conf", "var"];

/// A scratch folder, removed on drop (also when an assertion fails).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Unpacks `$REDIS_LOCK_PACKAGE` into `scratch` and returns its folder.
fn unpack(scratch: &Path) -> PathBuf {
    let tarball = std::env::var_os("REDIS_LOCK_PACKAGE")
        .map(PathBuf::from)
        .expect("REDIS_LOCK_PACKAGE is not set: it names the tarball scripts/package writes (scripts/test sets it)");
    assert!(tarball.is_file(), "no package at {}: run scripts/package", tarball.display());
    let name = tarball.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".tar.gz")).expect("a .tar.gz");
    assert!(
        name.starts_with("redis-lock-") && name.ends_with("-x86_64-linux-gnu.2.17"),
        "unexpected package name {name}"
    );
    let _ = std::fs::remove_dir_all(scratch); // a killed run's leftovers
    std::fs::create_dir_all(scratch).unwrap();
    let status = Command::new("tar").arg("-xzf").arg(&tarball).arg("-C").arg(scratch).status().expect("run tar");
    assert!(status.success(), "tar -xzf {} failed", tarball.display());
    let top: Vec<String> = names(scratch);
    assert_eq!(top, [name], "the tarball holds one folder named as itself");
    scratch.join(name)
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

fn info(c: &mut redis::Connection, key: &str) -> Vec<Value> {
    redis::cmd("LOCK.INFO").arg(key).query(c).expect("LOCK.INFO")
}

/// A field of a `LOCK.INFO` reply.
fn field<'a>(reply: &'a [Value], name: &str) -> &'a Value {
    let at = reply.iter().position(|v| matches!(v, Value::BulkString(b) if b == name.as_bytes()));
    &reply[at.unwrap_or_else(|| panic!("no {name} in {reply:?}")) + 1]
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[test]
#[ignore = "needs the package: REDIS_LOCK_PACKAGE names the tarball of scripts/package (scripts/test sets it)"]
fn packaged_module_and_cli_serve_the_core_commands() {
    let scratch = Scratch(std::env::temp_dir().join(format!("redis-lock-package-{}", std::process::id())));
    let folder = unpack(&scratch.0);
    assert_eq!(names(&folder), CONTENTS);

    let sums = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&folder)
        .output()
        .expect("run sha256sum");
    assert!(
        sums.status.success(),
        "SHA256SUMS do not match: {}{}",
        String::from_utf8_lossy(&sums.stdout),
        String::from_utf8_lossy(&sums.stderr)
    );
    let listed = String::from_utf8_lossy(&sums.stdout);
    for file in ["libredis_lock.so", "redis-lock", "redis.conf", "LICENSE"] {
        assert!(listed.contains(&format!("{file}: OK")), "SHA256SUMS does not cover {file}: {listed}");
    }

    let server = Server::builder().config_file(folder.join("redis.conf")).start();
    let mut c = server.conn();

    // The module is the packaged one, loaded by the packaged redis.conf.
    let modules: Vec<Vec<Value>> = redis::cmd("MODULE").arg("LIST").query(&mut c).unwrap();
    let ours = modules
        .iter()
        .find(|m| m.contains(&bulk("lock")))
        .unwrap_or_else(|| panic!("module lock not loaded: {modules:?}"));
    assert!(ours.contains(&bulk("../libredis_lock.so")), "the module was not loaded from the package: {ours:?}");

    // ACQUIRE, RENEW, INFO, RELEASE.
    assert_eq!(acquire(&mut c, "pkg:k", "a"), 1);
    assert_eq!(acquire(&mut c, "pkg:k", "b"), 0);
    let renewed: i64 = redis::cmd("LOCK.RENEW").arg("pkg:k").arg("a").arg(2 * LEASE_MS).query(&mut c).unwrap();
    assert_eq!(renewed, 1);
    let renewed: i64 = redis::cmd("LOCK.RENEW").arg("pkg:k").arg("b").arg(LEASE_MS).query(&mut c).unwrap();
    assert_eq!(renewed, 0);
    let pttl: i64 = redis::cmd("PTTL").arg("pkg:k").query(&mut c).unwrap();
    assert!(pttl > LEASE_MS, "RENEW did not extend the lease: PTTL {pttl}");
    let reply = info(&mut c, "pkg:k");
    assert_eq!(field(&reply, "owner"), &bulk("a"));
    assert_eq!(field(&reply, "format"), &bulk("legacy"));
    assert_eq!(field(&reply, "waiters"), &Value::Int(0));
    assert_eq!(release(&mut c, "pkg:k", "b"), 0);
    assert_eq!(release(&mut c, "pkg:k", "a"), 1);
    let exists: i64 = redis::cmd("EXISTS").arg("pkg:k").query(&mut c).unwrap();
    assert_eq!(exists, 0);

    // FENCE: a grant replies its fence, a refusal nil.
    let first: i64 = redis::cmd("LOCK.ACQUIRE").arg("pkg:f").arg("a").arg(LEASE_MS).arg("FENCE").query(&mut c).unwrap();
    assert!(first > 0, "fence {first}");
    let refused: Option<i64> =
        redis::cmd("LOCK.ACQUIRE").arg("pkg:f").arg("b").arg(LEASE_MS).arg("FENCE").query(&mut c).unwrap();
    assert_eq!(refused, None);

    // TAKEOVER: the same run takes its lock back, another run does not.
    let took: i64 =
        redis::cmd("LOCK.TAKEOVER").arg("pkg:t").arg("t1").arg("run-1").arg(LEASE_MS).query(&mut c).unwrap();
    assert_eq!(took, 1);
    let took: i64 =
        redis::cmd("LOCK.TAKEOVER").arg("pkg:t").arg("t2").arg("run-1").arg(LEASE_MS).query(&mut c).unwrap();
    assert_eq!(took, 1);
    let took: i64 =
        redis::cmd("LOCK.TAKEOVER").arg("pkg:t").arg("t3").arg("run-2").arg(LEASE_MS).query(&mut c).unwrap();
    assert_eq!(took, 0);
    let value: String = redis::cmd("GET").arg("pkg:t").query(&mut c).unwrap();
    assert_eq!(value, r#"{"owner":"t2","runId":"run-1"}"#);
    let reply = info(&mut c, "pkg:t");
    assert_eq!(field(&reply, "owner"), &bulk("t2"));
    assert_eq!(field(&reply, "run-id"), &bulk("run-1"));
    assert_eq!(field(&reply, "format"), &bulk("structured"));

    // WAIT: a blocked client is granted the lock, with a higher fence, when
    // its holder releases it. Its wait (60 s) outlasts any slowness here.
    let (tx, rx) = mpsc::channel();
    let waiting = waiter_on(server.conn(), "pkg:f", "w", &["WAIT", "60000", "FENCE"], tx);
    until_waiting(&mut c, 1);
    assert_eq!(field(&info(&mut c, "pkg:f"), "waiters"), &Value::Int(1));
    assert_eq!(release(&mut c, "pkg:f", "a"), 1);
    let (_, granted, _) = rx.recv_timeout(Duration::from_secs(60)).expect("the waiter's reply");
    waiting.join().unwrap();
    match granted {
        Value::Int(fence) => assert!(fence > first, "the waiter's fence {fence} is not above {first}"),
        other => panic!("the waiter was not granted: {other:?}"),
    }
    assert_eq!(field(&info(&mut c, "pkg:f"), "owner"), &bulk("w"));

    // The packaged CLI holds a lock while its command runs: the command (the
    // CLI's `info`) sees it held; afterwards it is released.
    let cli = folder.join("redis-lock");
    let url = server.url();
    let held = Command::new(&cli)
        .args(["run", "--url", &url, "--ttl", "60000", "--token", "pkg-cli-token", "pkg:cli", "--"])
        .arg(&cli)
        .args(["info", "--url", &url, "pkg:cli"])
        .output()
        .expect("run the packaged CLI");
    let out = String::from_utf8_lossy(&held.stdout);
    assert!(
        held.status.success(),
        "redis-lock run exited {}: {out}{}",
        held.status,
        String::from_utf8_lossy(&held.stderr)
    );
    assert!(out.contains("pkg-cli-token"), "redis-lock info inside run did not show the lock held: {out}");
    let exists: i64 = redis::cmd("EXISTS").arg("pkg:cli").query(&mut c).unwrap();
    assert_eq!(exists, 0, "redis-lock run did not release its lock");
}
