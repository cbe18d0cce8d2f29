//! `run`'s process supervision: CMD in a process group of its own, which is
//! signalled as a whole and is gone before `run` lets the lock go.
//!
//! The promise (docs/cli.md): no process that `run` started is still running
//! once the lock can be granted to someone else, except descendants that
//! leave CMD's process group on purpose (`setsid`, a job-control shell's
//! `setpgid`) and a lock that is lost (then the group gets SIGTERM at once
//! and SIGKILL after `--grace`). Its pieces:
//!
//! - CMD leads a new process group; losses, forwarded signals and CMD's own
//!   exit all end with that whole group gone (SIGTERM, SIGKILL after the
//!   grace), and only then does `run` release the lock.
//! - If `run` itself dies (`kill -9`, OOM), a watcher process it forked sees
//!   the end of a pipe only `run` holds open and SIGKILLs the group at once,
//!   while the key, not released, lasts until its last renewal's TTL runs
//!   out (renewals come every TTL/3). On Linux CMD also has
//!   `PR_SET_PDEATHSIG` = SIGKILL, in case the watcher died too.
//! - On Linux `run` is a child subreaper, so orphaned members of the group
//!   become its children and it reaps them itself: the group's emptiness
//!   does not depend on an init that reaps (a container's PID 1 may not).
//!
//! Unix only (process groups and signals).

#[cfg(not(unix))]
compile_error!("redis-lock run supervises a Unix process group; other platforms are not supported");

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use libc::{c_int, pid_t};
use redis_lock_client::{LossReason, LostSignal};

/// The signals `run` passes on to CMD's group (each also starts the grace
/// period, after which the group gets SIGKILL).
const FORWARDED: [c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// Bit N set: signal N arrived and is not yet forwarded.
static PENDING: AtomicU32 = AtomicU32::new(0);

/// How often the loop looks at CMD, the signals and the lock.
const TICK: Duration = Duration::from_millis(20);

extern "C" fn note_signal(sig: c_int) {
    // Only an atomic store: async-signal-safe (a lock-free atomic) and on
    // whichever thread the kernel picked. The wait loop does the rest.
    if (1..32).contains(&sig) {
        PENDING.fetch_or(1 << sig, Ordering::SeqCst);
    }
}

/// Catches the forwarded signals, except those ignored when `run` started:
/// as with a shell's `nohup`, those stay ignored and CMD inherits that.
/// Caught ones go back to the default in CMD (exec resets handlers).
fn catch_signals() -> io::Result<()> {
    for sig in FORWARDED {
        // SAFETY: sigaction(2) with zero-initialised structs (a valid empty
        // action, an empty mask) that live across the calls; the handler
        // only touches an atomic.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                return Err(io::Error::last_os_error());
            }
            if old.sa_sigaction == libc::SIG_IGN {
                continue;
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = note_signal as extern "C" fn(c_int) as libc::sighandler_t;
            // The client's threads should not see EINTR.
            new.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut new.sa_mask);
            if libc::sigaction(sig, &new, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

fn take_signals() -> impl Iterator<Item = c_int> {
    let bits = PENDING.swap(0, Ordering::SeqCst);
    FORWARDED.into_iter().filter(move |s| bits & (1 << s) != 0)
}

/// A pipe whose two ends are closed on exec.
fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe(2) fills the two-int array; each fd is then owned once.
    // No other thread of `run` forks, so the window before FD_CLOEXEC is
    // harmless (pipe2 is not on macOS).
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let (rd, wr) = (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]));
        for fd in fds {
            if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok((rd, wr))
    }
}

/// Forks the watcher: it learns CMD's group from CMD itself (see `spawn`),
/// then blocks until every write end of the pipe is closed — `run`'s closes
/// only when `run` exits or dies, CMD's at its exec — and SIGKILLs the group.
/// On a normal end `run` SIGKILLs the watcher first.
///
/// The watcher is outside CMD's group (in a group of its own, so that a
/// signal to `run`'s group, e.g. `timeout -k`'s SIGKILL, spares it). Its
/// `kill` could therefore hit a reused group id, but only if the group had
/// emptied and its number had been given to a new group leader in the
/// moment between `run`'s death and the watcher's wake-up: pids are not
/// reused that fast.
fn fork_watcher(rd: c_int, wr: c_int) -> io::Result<pid_t> {
    // SAFETY: `run` has other threads, so the child may only make
    // async-signal-safe calls until it exits: `watch` makes only raw
    // syscalls (setpgid, signal, close, read, kill, _exit) on stack memory,
    // allocates nothing and cannot panic.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => unsafe { watch(rd, wr) },
        pid => Ok(pid),
    }
}

/// The watcher's whole life (in the forked child; see `fork_watcher`).
unsafe fn watch(rd: c_int, wr: c_int) -> ! {
    libc::setpgid(0, 0);
    // Signals meant for `run` or CMD (a terminal's Ctrl-C, a forwarded
    // SIGTERM) must not end the watcher; SIGKILL still does.
    for sig in [
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGPIPE,
    ] {
        libc::signal(sig, libc::SIG_IGN);
    }
    libc::close(wr);
    let mut pgid = [0u8; 4];
    let mut got = 0usize;
    let mut buf = [0u8; 16];
    loop {
        let n = libc::read(rd, buf.as_mut_ptr().cast(), buf.len());
        if n == 0 {
            break;
        }
        if n < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            break;
        }
        for &b in buf.iter().take(n as usize) {
            if got < pgid.len() {
                pgid[got] = b;
                got += 1;
            }
        }
    }
    let pgid = pid_t::from_ne_bytes(pgid);
    if got == 4 && pgid > 1 {
        libc::kill(-pgid, libc::SIGKILL);
    }
    libc::_exit(0)
}

/// The first of stdin, stdout and stderr that is the terminal `run`'s group
/// has in the foreground: CMD gets the foreground instead, so that an
/// interactive CMD can read the terminal (a background group would get
/// SIGTTIN) and a Ctrl-C or Ctrl-\ reaches it directly.
fn foreground_tty() -> Option<c_int> {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read process state.
    (0..3).find(|&fd| unsafe { libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == libc::getpgrp() })
}

/// Makes `pgid` the terminal's foreground group. A background caller would
/// get SIGTTOU for that unless the signal is blocked, so it is blocked
/// around the call. Async-signal-safe (also called between fork and exec).
unsafe fn give_tty(fd: c_int, pgid: pid_t) {
    let mut block: libc::sigset_t = std::mem::zeroed();
    let mut old: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut block);
    libc::sigaddset(&mut block, libc::SIGTTOU);
    libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
    libc::tcsetpgrp(fd, pgid);
    libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
}

/// CMD, running in its own process group.
pub struct Supervised {
    pid: pid_t,
    /// CMD's wait status, once reaped.
    status: Option<c_int>,
    watcher: Option<pid_t>,
    /// Held open for the watcher: closed, it kills the group.
    _lifeline: OwnedFd,
    tty: Option<c_int>,
}

/// How the group ended.
pub struct Outcome {
    /// CMD's status as a shell reports it: its exit code, or 128+N if
    /// signal N killed it.
    pub code: u8,
    /// The loss, if the lock was lost before the group was gone.
    pub lost: Option<LossReason>,
}

/// Spawns `cmd` as the leader of a new process group, with the watcher and
/// the signal forwarding in place. Call it from the main thread (see the
/// `PR_SET_PDEATHSIG` note below).
pub fn spawn(cmd: &mut Command) -> io::Result<Supervised> {
    // Before the spawn, so that a signal in between is forwarded, not lost.
    catch_signals()?;
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(2) with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let (rd, wr) = cloexec_pipe()?;
    let watcher = fork_watcher(rd.as_raw_fd(), wr.as_raw_fd())?;
    // SAFETY: getpid only reads process state.
    let parent = unsafe { libc::getpid() };
    let lifeline = wr.as_raw_fd();
    let tty = foreground_tty();
    cmd.process_group(0);
    // SAFETY: runs in the child between fork and exec while `run` has other
    // threads, so it only makes async-signal-safe calls (setpgid, prctl,
    // getppid, getpid, write, sigprocmask, tcsetpgrp, _exit) on stack
    // memory and allocates nothing; `io::Error::last_os_error` is a plain
    // errno value.
    unsafe {
        cmd.pre_exec(move || {
            // process_group(0) does this too; here it is certainly done
            // before the pid below is announced as the group.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            #[cfg(target_os = "linux")]
            {
                // The death signal fires when the *thread* that forked
                // exits; `run` forks from its main thread, which lives as
                // long as the process. (Cleared by a set-user-ID exec; the
                // watcher still covers that.)
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // `run` died before the line above took effect.
                if libc::getppid() != parent {
                    libc::_exit(127);
                }
            }
            #[cfg(not(target_os = "linux"))]
            let _ = parent;
            // Tells the watcher which group to kill. The child holds the
            // pipe's read end too (until exec), so this cannot raise SIGPIPE;
            // 4 bytes are written atomically.
            let me = libc::getpid().to_ne_bytes();
            libc::write(lifeline, me.as_ptr().cast(), me.len());
            if let Some(fd) = tty {
                // Here, not in `run` after the spawn: CMD must own the
                // terminal before it can first read it.
                give_tty(fd, libc::getpid());
            }
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            // SAFETY: kill and waitpid on our own watcher child; see
            // `give_tty` (the child may have taken the terminal before its
            // exec failed).
            unsafe {
                libc::kill(watcher, libc::SIGKILL);
                libc::waitpid(watcher, std::ptr::null_mut(), 0);
                if let Some(fd) = tty {
                    if libc::tcgetpgrp(fd) != libc::getpgrp() {
                        give_tty(fd, libc::getpgrp());
                    }
                }
            }
            return Err(e);
        }
    };
    drop(rd);
    let pid = pid_t::try_from(child.id()).map_err(|_| io::Error::other("pid out of range"))?;
    // Reaped below with waitpid, not through `child` (whose drop leaves it be).
    drop(child);
    Ok(Supervised { pid, status: None, watcher: Some(watcher), _lifeline: wr, tty })
}

impl Supervised {
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Supervises until CMD's whole group is gone: forwards the signals
    /// `run` receives, SIGTERMs the group on a loss (after calling
    /// `on_loss`) or once CMD has exited with others of its group left,
    /// SIGKILLs it `grace` after the first of these. The lock stays renewed
    /// (by the caller's watchdog) all along.
    ///
    /// A revocation the watchdog hears (`LOCK.REVOKE`) sends `on_revoke`
    /// (if any) to the group at once, so CMD can finish, and SIGKILLs the
    /// group at the revocation's deadline if it is still there: nothing
    /// outlives the lock.
    pub fn wait(
        mut self,
        lost: &[LostSignal],
        grace: Duration,
        on_revoke: Option<c_int>,
        mut on_loss: impl FnMut(LossReason),
    ) -> Outcome {
        let mut deadline: Option<Instant> = None;
        let mut killed = false;
        let mut loss = None;
        let mut revoked = false;
        loop {
            self.reap();
            if self.status.is_some() && self.group_gone() {
                break;
            }
            // From here on the group is known to exist: a signal to it
            // cannot hit a reused group id (CMD's pid is not reused before
            // CMD is reaped, nor the group's while a member is left).
            for sig in take_signals() {
                self.signal(sig);
                deadline.get_or_insert(Instant::now() + grace);
            }
            if loss.is_none() {
                if let Some(r) = lost.iter().find_map(LostSignal::reason) {
                    on_loss(r);
                    loss = Some(r);
                    self.signal(libc::SIGTERM);
                    deadline.get_or_insert(Instant::now() + grace);
                }
            }
            if !revoked && loss.is_none() {
                if let Some(r) = lost.iter().find_map(LostSignal::revocation) {
                    revoked = true;
                    let why = r.reason.as_deref().map(|w| format!(" ({w})")).unwrap_or_default();
                    eprintln!("redis-lock: the lock was revoked{why}; it ends in {} ms", r.remaining().as_millis());
                    if let Some(sig) = on_revoke {
                        self.signal(sig);
                    }
                    deadline = Some(deadline.map_or(r.deadline, |d| d.min(r.deadline)));
                }
            }
            // CMD is done; what it left behind in its group is not.
            if self.status.is_some() && deadline.is_none() {
                self.signal(libc::SIGTERM);
                deadline = Some(Instant::now() + grace);
            }
            if !killed && deadline.is_some_and(|d| Instant::now() >= d) {
                self.signal(libc::SIGKILL);
                killed = true;
            }
            // One lock: woken by its loss at once; several: each looked at
            // every tick.
            match lost {
                [one] if loss.is_none() => {
                    one.wait_timeout(TICK);
                }
                _ => std::thread::sleep(TICK),
            }
        }
        self.finish();
        Outcome { code: shell_code(self.status.unwrap_or(0)), lost: loss }
    }

    /// Reaps CMD and orphans of its group (ours as the subreaper), and
    /// continues a group that a terminal's Ctrl-Z stopped: a stopped CMD
    /// would keep the lock while the shell cannot get its terminal back
    /// (`run` itself does not stop), so suspending is not supported.
    fn reap(&mut self) {
        let mut suspended = false;
        loop {
            let mut st: c_int = 0;
            // SAFETY: waitpid on our children in CMD's group, into a local.
            let r = unsafe { libc::waitpid(-self.pid, &mut st, libc::WNOHANG | libc::WUNTRACED) };
            if r <= 0 {
                break;
            }
            if libc::WIFSTOPPED(st) {
                suspended |= libc::WSTOPSIG(st) == libc::SIGTSTP;
                continue;
            }
            if r == self.pid {
                self.status = Some(st);
            }
        }
        if suspended {
            eprintln!("redis-lock: a command under a lock cannot be suspended; continuing it");
            self.signal(libc::SIGCONT);
        }
        // CMD itself may have moved to another group (setpgid): reaped by
        // pid, its group still watched.
        if self.status.is_none() {
            let mut st: c_int = 0;
            // SAFETY: waitpid on our own child, into a local.
            if unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) } == self.pid {
                self.status = Some(st);
            }
        }
    }

    /// No process is left in the group, not even a zombie.
    fn group_gone(&self) -> bool {
        // SAFETY: signal 0 only checks for existence. EPERM (a member that
        // changed user) counts as present.
        let r = unsafe { libc::kill(-self.pid, 0) };
        r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    fn signal(&self, sig: c_int) {
        // SAFETY: kill(2) to CMD's group, which exists (see `wait`).
        unsafe { libc::kill(-self.pid, sig) };
    }

    /// Takes the terminal back and ends the watcher, now that the group is
    /// gone.
    fn finish(&mut self) {
        if let Some(fd) = self.tty.take() {
            // Only from CMD's group: whatever else has the foreground now
            // got it from the shell, not from `run`.
            // SAFETY: see `give_tty`; tcgetpgrp and getpgrp only read.
            unsafe {
                if libc::tcgetpgrp(fd) == self.pid {
                    give_tty(fd, libc::getpgrp());
                }
            }
        }
        if let Some(w) = self.watcher.take() {
            // SAFETY: our own, not yet reaped child.
            unsafe {
                libc::kill(w, libc::SIGKILL);
                libc::waitpid(w, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// A wait status as a shell's `$?`: the exit code, or 128+N for signal N.
fn shell_code(st: c_int) -> u8 {
    if libc::WIFEXITED(st) {
        return u8::try_from(libc::WEXITSTATUS(st) & 0xff).unwrap_or(1);
    }
    if libc::WIFSIGNALED(st) {
        return u8::try_from(128 + (libc::WTERMSIG(st) & 0x7f)).unwrap_or(1);
    }
    1
}
