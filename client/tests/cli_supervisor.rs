//! `redis-lock run` never leaves work running unlocked (issue 21): whatever
//! ends a run — a signal to `redis-lock`, `timeout`, `kill -9`, a lost lock,
//! CMD's own exit — no process CMD started (its shell and that shell's
//! background children) is still running once the key is free (after a
//! lost lock, whose key is free at once: once redis-lock has exited).
//!
//! Each CMD is `sh -c` that starts a grandchild (`sleep 300 &`) and records
//! both pids. A pid counts as gone when `/proc/PID` is absent or a zombie
//! (an orphan's zombie waits for its new parent's reap). Only orders are
//! asserted ("gone no later than the key is free"), never durations, except
//! the lower bound of `--grace`.
//!
//! Linux: pids are read in /proc.

#![cfg(target_os = "linux")]

mod cli_support;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use redis_lock_harness::Server;

const BIN: &str = env!("CARGO_BIN_EXE_redis-lock");

/// Generous: the machine may be busy compiling.
const PATIENCE: Duration = Duration::from_secs(60);

/// A scratch directory for one test: the pid file and redis-lock's stderr.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("redis-lock-supervisor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        Scratch(d)
    }

    fn pids(&self) -> PathBuf {
        self.0.join("pids")
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.0.join("stderr")).unwrap_or_default()
    }

    /// `sh -c` running `before` first, then a grandchild `sleep 300`,
    /// recording the grandchild's pid and its own, then `after`.
    fn script(&self, before: &str, after: &str) -> String {
        let f = self.pids();
        let f = f.to_str().expect("utf-8 path");
        format!("{before} sleep 300 & echo $! > {f}.tmp; echo $$ >> {f}.tmp; mv {f}.tmp {f}; {after}")
    }

    /// `program ARGS` with redis-lock's stderr to a file and the forwarded
    /// signals at their defaults (a test runner started in the background
    /// of a shell has SIGINT ignored, which redis-lock and CMD would keep).
    fn spawn(&self, program: &str, args: &[&str]) -> Child {
        let err = std::fs::File::create(self.0.join("stderr")).expect("stderr file");
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
        cli_support::spawn_with_default_signals(&mut cmd)
    }

    /// The recorded pids (grandchild, shell), once CMD wrote them; `None`
    /// if `child` exits first.
    fn wait_pids(&self, child: &mut Child) -> Option<Pids> {
        let end = Instant::now() + PATIENCE;
        loop {
            if let Ok(s) = std::fs::read_to_string(self.pids()) {
                let pids: Vec<i32> = s.lines().map(|l| l.trim().parse().expect("a pid")).collect();
                assert_eq!(pids.len(), 2, "{s:?}");
                return Some(Pids(pids));
            }
            if child.try_wait().expect("try_wait").is_some() {
                return None;
            }
            assert!(Instant::now() < end, "CMD did not start: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Pids CMD recorded; SIGKILLed if the test fails, so that a failure does
/// not leave `sleep 300`s behind.
struct Pids(Vec<i32>);

impl Pids {
    fn alive(&self) -> Vec<i32> {
        self.0.iter().copied().filter(|&p| alive(p)).collect()
    }
}

impl Drop for Pids {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in self.alive() {
                // SAFETY: kill(2); the pid was alive a moment ago.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
        }
    }
}

/// `/proc/PID` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": comm may hold spaces and parentheses.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// No `redis-lock` for this server is left: neither `run` nor its watcher
/// (a fork of `run`, with its command line). A zombie has none.
fn assert_no_redis_lock_left(s: &Server) {
    let url = s.url();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(!(cmdline.contains(BIN) && cmdline.contains(&url)), "left running: {cmdline}");
    }
}

fn key_exists(s: &Server, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(&mut s.conn()).expect("EXISTS") == 1
}

/// Polls until `key` is free and asserts that at that moment none of
/// `pids` runs.
fn assert_gone_when_free(s: &Server, key: &str, pids: &Pids, scratch: &Scratch) {
    let end = Instant::now() + PATIENCE;
    while key_exists(s, key) {
        assert!(Instant::now() < end, "{key:?} still held: {}", scratch.stderr());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(pids.alive(), Vec::<i32>::new(), "still running once {key:?} was free: {}", scratch.stderr());
}

fn wait_exit(child: &mut Child, scratch: &Scratch) -> ExitStatus {
    let end = Instant::now() + PATIENCE;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("redis-lock did not exit: {}", scratch.stderr());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) to our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// `redis-lock run --url S --ttl 2000 FLAGS KEY -- sh -c SCRIPT`, the pids
/// its CMD recorded, all running.
fn start(s: &Server, scratch: &Scratch, flags: &[&str], key: &str, script: &str) -> (Child, Pids) {
    let url = s.url();
    let args = [&["run", "--url", &url, "--ttl", "2000"], flags, &[key, "--", "sh", "-c", script]].concat();
    let mut child = scratch.spawn(BIN, &args);
    let pids = scratch.wait_pids(&mut child).unwrap_or_else(|| panic!("redis-lock exited: {}", scratch.stderr()));
    assert_eq!(pids.alive(), pids.0, "CMD's processes run");
    assert!(key_exists(s, key));
    (child, pids)
}

#[test]
fn sigterm_hup_and_quit_are_forwarded_to_the_whole_group() {
    let s = Server::start();
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGHUP, 129), (libc::SIGQUIT, 131)] {
        let scratch = Scratch::new(&format!("sig{sig}"));
        // No core file from sh's SIGQUIT.
        let script = scratch.script("ulimit -c 0;", "wait");
        let (mut child, pids) = start(&s, &scratch, &[], "job", &script);
        signal(&child, sig);
        assert_gone_when_free(&s, "job", &pids, &scratch);
        let st = wait_exit(&mut child, &scratch);
        assert_eq!(st.code(), Some(code), "signal {sig}: {}", scratch.stderr());
    }
}

#[test]
fn sigint_ends_cmd_first_and_the_lock_last() {
    let s = Server::start();
    let scratch = Scratch::new("int");
    // The grandchild of a non-interactive sh ignores SIGINT: it outlives
    // sh, and goes as a leftover of the group (SIGTERM).
    let (mut child, pids) = start(&s, &scratch, &[], "job", &scratch.script("", "wait"));
    signal(&child, libc::SIGINT);
    assert_gone_when_free(&s, "job", &pids, &scratch);
    let st = wait_exit(&mut child, &scratch);
    assert_eq!(st.code(), Some(130), "{}", scratch.stderr());
}

#[test]
fn timeout_foreground_ends_cmd_before_the_lock() {
    let s = Server::start();
    let url = s.url();
    // `timeout` must not fire before CMD recorded its pids: a busy machine
    // gets longer.
    for secs in ["1", "5", "30"] {
        let scratch = Scratch::new(&format!("timeout{secs}"));
        let script = scratch.script("", "wait");
        let args = ["--foreground", secs, BIN, "run", "--url", &url, "--ttl", "2000", "job", "--", "sh", "-c", &script];
        let mut child = scratch.spawn("timeout", &args);
        let st = wait_exit(&mut child, &scratch);
        let Some(pids) = scratch.wait_pids(&mut child) else {
            continue;
        };
        // `timeout` exits after redis-lock, which released after the group.
        assert_eq!(st.code(), Some(124), "{}", scratch.stderr());
        assert!(!key_exists(&s, "job"), "{}", scratch.stderr());
        assert_eq!(pids.alive(), Vec::<i32>::new(), "{}", scratch.stderr());
        return;
    }
    panic!("CMD never started within timeout's 30 s");
}

#[test]
fn kill_9_of_redis_lock_kills_the_group_before_the_lock_expires() {
    let s = Server::start();
    let scratch = Scratch::new("kill9");
    let (mut child, pids) = start(&s, &scratch, &[], "job", &scratch.script("", "wait"));
    signal(&child, libc::SIGKILL);
    let st = wait_exit(&mut child, &scratch);
    assert_eq!(st.code(), None);
    // Not released: the key stays until its TTL runs out.
    assert_gone_when_free(&s, "job", &pids, &scratch);
    assert_no_redis_lock_left(&s);
}

#[test]
fn a_lost_lock_takes_the_grandchildren_too() {
    let s = Server::start();
    let scratch = Scratch::new("lost");
    let (mut child, pids) = start(&s, &scratch, &["--grace", "500"], "job", &scratch.script("", "wait"));
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut s.conn()).expect("DEL");
    // The key was free at once; the guarantee here is the exit's.
    let st = wait_exit(&mut child, &scratch);
    assert_eq!(pids.alive(), Vec::<i32>::new(), "{}", scratch.stderr());
    assert_eq!(st.code(), Some(79), "{}", scratch.stderr());
    assert!(scratch.stderr().contains("lost lock"), "{}", scratch.stderr());
}

#[test]
fn a_cmd_that_ignores_sigterm_gets_sigkill_after_the_grace() {
    let s = Server::start();
    let scratch = Scratch::new("ignore");
    // `trap '' TERM` is inherited: the grandchild ignores it as well.
    let script = scratch.script("trap '' TERM;", "wait");
    let (mut child, pids) = start(&s, &scratch, &["--grace", "500"], "job", &script);
    let t = Instant::now();
    signal(&child, libc::SIGTERM);
    assert_gone_when_free(&s, "job", &pids, &scratch);
    assert!(t.elapsed() >= Duration::from_millis(500), "SIGKILL before the grace ran out: {:?}", t.elapsed());
    let st = wait_exit(&mut child, &scratch);
    assert_eq!(st.code(), Some(137), "{}", scratch.stderr());
}

#[test]
fn a_cmd_that_traps_sigterm_exits_with_its_own_status() {
    let s = Server::start();
    let scratch = Scratch::new("trap");
    let script = scratch.script("trap 'exit 3' TERM;", "wait");
    let (mut child, pids) = start(&s, &scratch, &[], "job", &script);
    signal(&child, libc::SIGTERM);
    assert_gone_when_free(&s, "job", &pids, &scratch);
    let st = wait_exit(&mut child, &scratch);
    assert_eq!(st.code(), Some(3), "{}", scratch.stderr());
    assert_no_redis_lock_left(&s);
}

#[test]
fn what_cmd_leaves_running_is_ended_before_the_release() {
    let s = Server::start();
    let scratch = Scratch::new("leftover");
    let url = s.url();
    // sh exits at once; its background sleep would run on unlocked.
    let script = scratch.script("", "exit 4");
    let mut child = scratch.spawn(BIN, &["run", "--url", &url, "--ttl", "2000", "job", "--", "sh", "-c", &script]);
    let pids = scratch.wait_pids(&mut child);
    let st = wait_exit(&mut child, &scratch);
    let pids = pids.or_else(|| scratch.wait_pids(&mut child)).expect("CMD recorded its pids");
    assert_gone_when_free(&s, "job", &pids, &scratch);
    assert_eq!(st.code(), Some(4), "{}", scratch.stderr());
}

/// A new pseudo-terminal: (master, slave).
fn pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    // SAFETY: the usual posix_openpt sequence; each fd is owned once.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = std::fs::File::from_raw_fd(m);
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        assert!(s >= 0, "open the slave: {}", std::io::Error::last_os_error());
        (master, std::fs::File::from_raw_fd(s))
    }
}

#[test]
fn an_interactive_cmd_gets_the_terminal_and_its_ctrl_c() {
    use std::io::Write;
    let s = Server::start();
    let scratch = Scratch::new("tty");
    let (mut master, slave) = pty();
    let got = scratch.0.join("got");
    // A CMD in a background group would be stopped by SIGTTIN at `read`.
    let script = scratch.script(&format!("read x; echo \"got:$x\" > {};", got.display()), "wait");
    let url = s.url();
    let err = std::fs::File::create(scratch.0.join("stderr")).expect("stderr file");
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--url", &url, "--ttl", "2000", "job", "--", "sh", "-c", &script])
        .stdin(slave)
        .stdout(Stdio::null())
        .stderr(err);
    // redis-lock leads a session whose controlling terminal is the pty, so
    // its group has the terminal's foreground, as in an interactive shell.
    // SAFETY: setsid, ioctl and signal are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn");
    // Typed ahead: the terminal keeps the line until CMD reads it.
    master.write_all(b"hello\n").expect("type");
    let pids = scratch.wait_pids(&mut child).unwrap_or_else(|| panic!("redis-lock exited: {}", scratch.stderr()));
    assert_eq!(std::fs::read_to_string(&got).expect("CMD read the terminal"), "got:hello\n");
    // Ctrl-C: the terminal signals its foreground group, CMD's.
    master.write_all(b"\x03").expect("type");
    assert_gone_when_free(&s, "job", &pids, &scratch);
    let st = wait_exit(&mut child, &scratch);
    assert_eq!(st.code(), Some(130), "{}", scratch.stderr());
}
