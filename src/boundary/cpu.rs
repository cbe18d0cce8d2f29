//! The calling thread's CPU time, for measuring the module's own work on
//! the server's thread without the time the OS gave other processes (a
//! wall clock on a shared machine counts those too).

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
}

/// `CLOCK_THREAD_CPUTIME_ID` (Linux, and the value glibc and musl use).
const THREAD_CPUTIME: i32 = 3;

/// CPU time this thread has used, in microseconds (0 if the clock is
/// unavailable).
pub fn thread_us() -> u64 {
    let mut t = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec for the call.
    if unsafe { clock_gettime(THREAD_CPUTIME, &mut t) } != 0 {
        return 0;
    }
    (t.tv_sec.max(0) as u64).saturating_mul(1_000_000).saturating_add(t.tv_nsec.max(0) as u64 / 1_000)
}
