//! The portable package (`scripts/package`, docs/install.md), used as a
//! user would: unpack the tarball, check `SHA256SUMS`, run `redis-server
//! redis.conf` in its folder (with `$REDIS_SERVER`), and the module the
//! packaged `redis.conf` loads serves the core commands and the README's
//! `redis-cli` examples; the packaged CLI acquires, waits, fences, releases.
//!
//! `scripts/test` builds the package and runs this on every server of the
//! matrix with `REDIS_LOCK_PACKAGE` naming the tarball. By hand:
//! `pkg=$(scripts/package) && REDIS_LOCK_PACKAGE=$PWD/$pkg cargo test
//! --release -p redis-lock --test package -- --ignored`. It is ignored
//! without the package rather than passing without it.
//!
//! The arm64 package (`scripts/package --target aarch64`) runs under
//! qemu-user: `REDIS_LOCK_EMULATOR` names a program running the aarch64
//! program given as its first argument (`.tools/arm64/run` of
//! `scripts/arm64.sh emulator`), `REDIS_SERVER` and `REDIS_CLI` Debian's
//! arm64 ones through it; then the tarball must be the aarch64 one, its
//! binaries aarch64 ELF files, and every packaged CLI runs through the
//! emulator (`scripts/test` does this after the matrix).

mod support;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
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

/// The unpacked package, and how its programs run here.
struct Package {
    folder: PathBuf,
    /// `$REDIS_LOCK_EMULATOR`: the packaged programs are aarch64 ones, run
    /// through it.
    emulator: Option<PathBuf>,
}

impl Package {
    /// The packaged CLI's command line, `args` after it: through the
    /// emulator when there is one.
    fn cli_argv(&self, args: &[&str]) -> Vec<OsString> {
        let mut argv: Vec<OsString> = self.emulator.iter().map(|e| e.clone().into_os_string()).collect();
        argv.push(self.folder.join("redis-lock").into_os_string());
        argv.extend(args.iter().map(OsString::from));
        argv
    }

    /// The packaged CLI with `args`, ready to run.
    fn cli(&self, args: &[&str]) -> Command {
        let argv = self.cli_argv(args);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd
    }
}

/// The architecture the package must be for, as its name says it and as
/// the ELF header's `e_machine` does.
fn expected_arch(emulated: bool) -> (&'static str, u16) {
    if emulated {
        ("aarch64", 183)
    } else {
        ("x86_64", 62)
    }
}

/// Unpacks `$REDIS_LOCK_PACKAGE` into `scratch`.
fn unpack(scratch: &Path) -> Package {
    let tarball = std::env::var_os("REDIS_LOCK_PACKAGE")
        .map(PathBuf::from)
        .expect("REDIS_LOCK_PACKAGE is not set: it names the tarball scripts/package writes (scripts/test sets it)");
    assert!(tarball.is_file(), "no package at {}: run scripts/package", tarball.display());
    let emulator = std::env::var_os("REDIS_LOCK_EMULATOR").map(PathBuf::from);
    let (arch, machine) = expected_arch(emulator.is_some());
    let name = tarball.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".tar.gz")).expect("a .tar.gz");
    assert!(
        name.starts_with("redis-lock-") && name.ends_with(&format!("-{arch}-linux-gnu.2.17")),
        "unexpected package name {name} (expected one for {arch})"
    );
    let _ = std::fs::remove_dir_all(scratch); // a killed run's leftovers
    std::fs::create_dir_all(scratch).unwrap();
    let status = Command::new("tar").arg("-xzf").arg(&tarball).arg("-C").arg(scratch).status().expect("run tar");
    assert!(status.success(), "tar -xzf {} failed", tarball.display());
    let top: Vec<String> = names(scratch);
    assert_eq!(top, [name], "the tarball holds one folder named as itself");
    let folder = scratch.join(name);
    for binary in ["libredis_lock.so", "redis-lock"] {
        let elf = std::fs::read(folder.join(binary)).unwrap();
        assert_eq!(&elf[..4], b"\x7fELF", "{binary} is not an ELF file");
        let found = u16::from_le_bytes([elf[18], elf[19]]);
        assert_eq!(found, machine, "{binary}'s ELF machine is {found}, not {arch}'s {machine}");
    }
    Package { folder, emulator }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// Starts `$REDIS_SERVER` with the packaged `redis.conf` and checks that
/// it runs on the package's architecture (`INFO server`'s `os`: qemu-user
/// reports aarch64) and that the module it serves is the packaged one.
fn serve(pkg: &Package) -> Server {
    let server = Server::builder().config_file(pkg.folder.join("redis.conf")).start();
    let (arch, _) = expected_arch(pkg.emulator.is_some());
    let about: String = redis::cmd("INFO").arg("server").query(&mut server.conn()).unwrap();
    let os = about.lines().find_map(|l| l.strip_prefix("os:")).unwrap_or_else(|| panic!("no os in {about}"));
    assert!(os.trim_end().ends_with(arch), "the server does not run on {arch}: os:{os}");
    let modules: Vec<Vec<Value>> = redis::cmd("MODULE").arg("LIST").query(&mut server.conn()).unwrap();
    let ours = modules
        .iter()
        .find(|m| m.contains(&bulk("lock")))
        .unwrap_or_else(|| panic!("module lock not loaded: {modules:?}"));
    assert!(ours.contains(&bulk("../libredis_lock.so")), "the module was not loaded from the package: {ours:?}");
    server
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

fn text(out: &Output) -> String {
    format!(
        "status {}, stdout {:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
#[ignore = "needs the package: REDIS_LOCK_PACKAGE names the tarball of scripts/package (scripts/test sets it)"]
fn packaged_module_and_cli_serve_the_core_commands() {
    let scratch = Scratch(std::env::temp_dir().join(format!("redis-lock-package-{}", std::process::id())));
    let pkg = unpack(&scratch.0);
    let folder = &pkg.folder;
    assert_eq!(names(folder), CONTENTS);

    let sums = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(folder)
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

    let server = serve(&pkg);
    let mut c = server.conn();
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
    let url = server.url();
    let inner = pkg.cli_argv(&["info", "--url", &url, "pkg:cli"]);
    let held = pkg
        .cli(&["run", "--url", &url, "--ttl", "60000", "--token", "pkg-cli-token", "pkg:cli", "--"])
        .args(&inner)
        .output()
        .expect("run the packaged CLI");
    let out = String::from_utf8_lossy(&held.stdout);
    assert!(held.status.success(), "redis-lock run: {}", text(&held));
    assert!(out.contains("pkg-cli-token"), "redis-lock info inside run did not show the lock held: {out}");
    let exists: i64 = redis::cmd("EXISTS").arg("pkg:cli").query(&mut c).unwrap();
    assert_eq!(exists, 0, "redis-lock run did not release its lock");
}

/// The `$ redis-cli ...` lines of the README's first example (the console
/// block after "With `scripts/serve` running"), each with the lines it
/// prints.
fn readme_example() -> Vec<(Vec<String>, String)> {
    let readme = include_str!("../README.md");
    let after = &readme[readme.find("With `scripts/serve` running").expect("the README's example")..];
    let block = &after[after.find("```console\n").expect("its console block") + "```console\n".len()..];
    let block = &block[..block.find("```").expect("the block's end")];
    let mut steps: Vec<(Vec<String>, String)> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("$ redis-cli ") {
            Some(command) => steps.push((command.split_whitespace().map(String::from).collect(), String::new())),
            None => {
                let (_, expected) = steps.last_mut().expect("output before the first command");
                expected.push_str(line);
                expected.push('\n');
            }
        }
    }
    steps
}

#[test]
#[ignore = "needs the package: REDIS_LOCK_PACKAGE names the tarball of scripts/package (scripts/test sets it)"]
fn packaged_module_serves_the_readme_and_the_cli_acquires_waits_fences_releases() {
    let scratch = Scratch(std::env::temp_dir().join(format!("redis-lock-package-cli-{}", std::process::id())));
    let pkg = unpack(&scratch.0);
    let server = serve(&pkg);
    let mut c = server.conn();
    let port = server.port().to_string();
    let url = server.url();

    // The README's example through redis-cli (`$REDIS_CLI`: the emulated
    // arm64 one for the arm64 package), printed as on a terminal.
    let redis_cli = std::env::var_os("REDIS_CLI").unwrap_or_else(|| "redis-cli".into());
    let steps = readme_example();
    assert!(steps.len() >= 6, "the README's example shrank to {} commands", steps.len());
    for (args, expected) in &steps {
        let out = Command::new(&redis_cli).args(["--no-raw", "-p", &port]).args(args).output().expect("run redis-cli");
        assert!(out.status.success(), "redis-cli {args:?}: {}", text(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            *expected,
            "redis-cli {args:?} printed otherwise than the README"
        );
    }

    // Acquire: CMD runs holding the lock, with its fence; then it is free.
    let fenced = |out: &Output| -> u64 {
        let fence = String::from_utf8_lossy(&out.stdout).trim().to_string();
        fence.parse().unwrap_or_else(|_| panic!("no fence from CMD: {}", text(out)))
    };
    let print_fence = ["sh", "-c", "echo \"$REDIS_LOCK_FENCE\""];
    let run = |extra: &[&str]| -> Output {
        let mut args = vec!["run", "--url", &url, "--ttl", "60000"];
        args.extend_from_slice(extra);
        args.push("pkg:job");
        args.push("--");
        args.extend_from_slice(&print_fence);
        pkg.cli(&args).stdin(Stdio::null()).output().expect("run the packaged CLI")
    };
    let first = run(&["-n"]);
    assert!(first.status.success(), "redis-lock run -n: {}", text(&first));
    let f1 = fenced(&first);
    assert!(f1 > 0, "fence {f1}");
    let exists: i64 = redis::cmd("EXISTS").arg("pkg:job").query(&mut c).unwrap();
    assert_eq!(exists, 0, "redis-lock run did not release pkg:job");

    // Held elsewhere: -n gives up at once with 75, CMD not run.
    let f2: u64 =
        redis::cmd("LOCK.ACQUIRE").arg("pkg:job").arg("other").arg(LEASE_MS).arg("FENCE").query(&mut c).unwrap();
    assert!(f2 > f1, "fence {f2} after {f1}");
    let refused = run(&["-n"]);
    assert_eq!(refused.status.code(), Some(75), "redis-lock run -n on a held lock: {}", text(&refused));
    assert!(refused.stdout.is_empty(), "CMD ran without the lock: {}", text(&refused));

    // Waiting: queued in the server until `other` releases, then granted
    // with a higher fence. The wait (120 s) outlasts any slowness here.
    let waiting = std::thread::scope(|s| {
        let waiter = s.spawn(|| run(&["-w", "120"]));
        until_waiting(&mut c, 1);
        assert_eq!(field(&info(&mut c, "pkg:job"), "waiters"), &Value::Int(1));
        assert_eq!(release(&mut c, "pkg:job", "other"), 1);
        waiter.join().unwrap()
    });
    assert!(waiting.status.success(), "redis-lock run -w: {}", text(&waiting));
    let f3 = fenced(&waiting);
    assert!(f3 > f2, "the waiter's fence {f3} is not above {f2}");

    // Release and info on a lock another client holds: a wrong token is
    // refused (1), the right one releases (0), then info finds nothing (1).
    assert_eq!(acquire(&mut c, "pkg:rel", "tok-r"), 1);
    let shown = pkg.cli(&["info", "--url", &url, "pkg:rel"]).output().unwrap();
    assert!(shown.status.success(), "redis-lock info: {}", text(&shown));
    assert!(String::from_utf8_lossy(&shown.stdout).contains("owner: tok-r"), "redis-lock info: {}", text(&shown));
    let wrong = pkg.cli(&["release", "--url", &url, "pkg:rel", "tok-x"]).output().unwrap();
    assert_eq!(wrong.status.code(), Some(1), "redis-lock release with a wrong token: {}", text(&wrong));
    let right = pkg.cli(&["release", "--url", &url, "pkg:rel", "tok-r"]).output().unwrap();
    assert_eq!(right.status.code(), Some(0), "redis-lock release: {}", text(&right));
    let gone = pkg.cli(&["info", "--url", &url, "pkg:rel"]).output().unwrap();
    assert_eq!(gone.status.code(), Some(1), "redis-lock info on a released lock: {}", text(&gone));
    let exists: i64 = redis::cmd("EXISTS").arg("pkg:rel").query(&mut c).unwrap();
    assert_eq!(exists, 0);
}
