//! A shifted wall clock for one server: [`Builder::clock_offset_ms`].
//!
//! The server is started with an `LD_PRELOAD` shim that adds a fixed offset
//! to `CLOCK_REALTIME` (and `CLOCK_REALTIME_COARSE`) from `clock_gettime`,
//! to `gettimeofday` and to `time`, and leaves `CLOCK_MONOTONIC` alone. So
//! everything the server (and a module inside it) reads as "now" — `TIME`,
//! key expiry deadlines, fences made from the clock — is shifted, while its
//! timers and event loop, which run on the monotonic clock, are not. Tests
//! use it to run several masters whose clocks disagree.
//!
//! The shim is C, compiled once with `cc -shared -fPIC` into
//! `target/clock-shift/` the first time a shifted server is asked for: gcc
//! is installed on every machine this project builds on (the module's
//! bindgen build needs a C toolchain anyway), and a few lines of C are the
//! honest way to interpose libc symbols. It only works for a dynamically
//! linked server: **a statically linked `redis-server` (e.g. some PyPI
//! wheels) ignores `LD_PRELOAD`**, and then runs on the real clock.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::{workspace_root, Builder};

/// The environment variable the shim reads its offset from (milliseconds,
/// may be negative).
const OFFSET_ENV: &str = "REDIS_LOCK_CLOCK_OFFSET_MS";

/// The shim. No libc headers besides `dlfcn.h`: glibc versions differ in
/// how they declare `gettimeofday`'s second parameter, and a mismatching
/// redeclaration would not compile; the layouts below are those of Linux on
/// 64-bit targets (`time_t` and `suseconds_t` are `long`).
const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>

extern char *getenv(const char *);
extern long long strtoll(const char *, char **, int);

struct shift_timespec { long sec; long nsec; };
struct shift_timeval { long sec; long usec; };

#define SHIFT_CLOCK_REALTIME 0
#define SHIFT_CLOCK_REALTIME_COARSE 5

static long long offset_ms;
static int offset_read;
static int (*real_clock_gettime)(int, struct shift_timespec *);
static int (*real_gettimeofday)(struct shift_timeval *, void *);

/* Read lazily: libc may call in before this library's constructor ran. */
static long long offset(void) {
    if (!offset_read) {
        const char *s = getenv("REDIS_LOCK_CLOCK_OFFSET_MS");
        offset_ms = s ? strtoll(s, 0, 10) : 0;
        offset_read = 1;
    }
    return offset_ms;
}

int clock_gettime(int clk, struct shift_timespec *ts) {
    if (!real_clock_gettime) real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    int r = real_clock_gettime(clk, ts);
    if (r == 0 && ts && (clk == SHIFT_CLOCK_REALTIME || clk == SHIFT_CLOCK_REALTIME_COARSE)) {
        long long ns = ts->nsec + (offset() % 1000) * 1000000LL;
        long long s = ts->sec + offset() / 1000;
        while (ns < 0) { ns += 1000000000LL; s -= 1; }
        while (ns >= 1000000000LL) { ns -= 1000000000LL; s += 1; }
        ts->sec = s;
        ts->nsec = ns;
    }
    return r;
}

int gettimeofday(struct shift_timeval *tv, void *tz) {
    if (!real_gettimeofday) real_gettimeofday = dlsym(RTLD_NEXT, "gettimeofday");
    int r = real_gettimeofday(tv, tz);
    if (r == 0 && tv) {
        long long us = tv->usec + (offset() % 1000) * 1000LL;
        long long s = tv->sec + offset() / 1000;
        while (us < 0) { us += 1000000LL; s -= 1; }
        while (us >= 1000000LL) { us -= 1000000LL; s += 1; }
        tv->sec = s;
        tv->usec = us;
    }
    return r;
}

long time(long *t) {
    struct shift_timespec ts;
    if (clock_gettime(SHIFT_CLOCK_REALTIME, &ts) != 0) return -1;
    if (t) *t = ts.sec;
    return ts.sec;
}
"#;

impl Builder {
    /// Runs the server with its wall clock shifted by `offset_ms`
    /// milliseconds (negative: behind), through the `LD_PRELOAD` shim
    /// described in this module: `TIME`, expiry deadlines and the module's
    /// clock-based fences see the shifted time, the monotonic clock does
    /// not. Has no effect on a statically linked server binary, which
    /// ignores `LD_PRELOAD`. Kept across [`Server::restart`](crate::Server::restart).
    pub fn clock_offset_ms(mut self, offset_ms: i64) -> Self {
        self.clock_offset_ms = Some(offset_ms);
        self
    }
}

/// The environment a shifted server is started with.
pub(crate) fn env(offset_ms: i64) -> [(&'static str, String); 2] {
    [("LD_PRELOAD", shim().display().to_string()), (OFFSET_ENV, offset_ms.to_string())]
}

/// The compiled shim, built once per process (and reused across processes
/// while its source is unchanged).
fn shim() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"));
        let dir = target.join("clock-shift");
        std::fs::create_dir_all(&dir).expect("create target/clock-shift");
        let so = dir.join("libclockshift.so");
        let src = dir.join("clockshift.c");
        if so.exists() && std::fs::read_to_string(&src).is_ok_and(|s| s == SOURCE) {
            return so;
        }
        // Built under per-process names and renamed into place, so test
        // binaries running at the same time never load a half-written file.
        let pid = std::process::id();
        let tmp_src = dir.join(format!("clockshift-{pid}.c"));
        let tmp_so = dir.join(format!("libclockshift-{pid}.so"));
        std::fs::write(&tmp_src, SOURCE).expect("write the clock shim source");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&tmp_so)
            .arg(&tmp_src)
            .arg("-ldl")
            .output()
            .unwrap_or_else(|e| panic!("run {cc} to build the clock shim: {e} (install gcc)"));
        assert!(out.status.success(), "building the clock shim failed:\n{}", String::from_utf8_lossy(&out.stderr));
        std::fs::rename(&tmp_so, &so).expect("move the clock shim into place");
        std::fs::rename(&tmp_src, &src).expect("move the clock shim source into place");
        so
    })
    .clone()
}
