//! Error replies the module composes itself (argument errors live with
//! their checks, in `redis_lock_rules::args`).

use std::ffi::{CStr, CString};

pub const WRONGTYPE: &CStr = c"WRONGTYPE Operation against a key holding the wrong kind of value";
pub const EXHAUSTED: &CStr = c"ERR fencing tokens exhausted: the high-water mark is at its 63-bit maximum";
pub const SESSION_APPLY_INTERNAL: &CStr =
    c"ERR SESSION.APPLY is internal: only a master's replication stream and the AOF send it";
pub const TOO_MANY_WAITERS: &CStr = c"ERR too many clients waiting: lock.max-waiters reached; retry later or raise it";
pub const INTERNAL: &CStr =
    c"ERR internal error in the lock module; nothing was changed if it happened before a write (see the server log)";

/// A semaphore acquired with a limit other than the one its key stores.
pub fn limit_differs(stored: u64) -> CString {
    // Digits only: no NUL can occur.
    CString::new(format!("ERR limit differs from the semaphore's: its limit is {stored}")).unwrap_or_default()
}

/// A semaphore or read-write lock acquired with a lock-delay other than
/// the one its key stores (ms; 0: none).
pub fn delay_differs(stored: i64) -> CString {
    // Digits only: no NUL can occur.
    CString::new(format!("ERR LOCKDELAY differs from the key's: its lock-delay is {stored} ms")).unwrap_or_default()
}
