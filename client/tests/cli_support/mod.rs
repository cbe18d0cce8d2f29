//! What the `redis-lock` CLI tests share: running the binary and reading
//! what `list` prints.

#![allow(dead_code)]

use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_redis-lock");

/// `redis-lock ARGS` with no `$REDIS_URL` (every test names its servers).
pub fn cli(args: &[&str]) -> Output {
    Command::new(BIN).args(args).env_remove("REDIS_URL").stdin(Stdio::null()).output().expect("run redis-lock")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `redis-lock list --json ARGS`'s array, after checking it exited 0.
pub fn list_json(args: &[&str]) -> Vec<Value> {
    let o = cli(&[&["list", "--json"], args].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    match serde_json::from_slice(&o.stdout) {
        Ok(Value::Array(rows)) => rows,
        other => panic!("not a JSON array: {other:?} from {}", stdout(&o)),
    }
}

/// The rows of `rows` for `key`.
pub fn rows_of<'a>(rows: &'a [Value], key: &str) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["key"] == key).collect()
}

/// The one row of `rows` for `key`.
pub fn row<'a>(rows: &'a [Value], key: &str) -> &'a Value {
    match rows_of(rows, key).as_slice() {
        [r] => r,
        other => panic!("{} rows for {key:?} in {rows:?}", other.len()),
    }
}

/// A `list` table's lines, each split on runs of spaces, header first.
pub fn table(o: &Output) -> Vec<Vec<String>> {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    stdout(o).lines().map(|l| l.split_whitespace().map(String::from).collect()).collect()
}

/// `127.0.0.1:PORT`, as `list` names a server.
pub fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// Spawns `cmd` with the signals `run` forwards at their defaults (a test
/// runner started in the background of a shell has SIGINT ignored, which
/// redis-lock and CMD would keep).
#[cfg(unix)]
pub fn spawn_with_default_signals(cmd: &mut Command) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    cmd.spawn().expect("spawn")
}
