//! `LOCK.GUARD key token command [arg ...]`: what it decides without Redis.
//!
//! - [`held`]: whether the token owns the lock — the rule of LOCK.RELEASE.
//! - [`check_command`]: the inner commands refused before the lock is even
//!   looked at, because they make no sense inside another command (the
//!   `noscript` commands of Redis 7.0 to 8.x and Valkey, plus LOCK.GUARD
//!   itself). Blocking data commands (BLPOP, XREAD BLOCK, …) are *not*
//!   refused: Redis runs them without blocking, as inside MULTI.
//! - [`legacy_acl_error`]: Redis 7.0 words the inner command's ACL refusal
//!   as a plain `ERR`; every later server says `NOPERM`, as a direct call does.

use std::ffi::CStr;

use crate::lock::{self, Entry, WrongType};

/// The reply when the token does not hold the lock: nothing ran.
pub const NOT_HELD: &CStr =
    c"NOTHELD the token does not hold the lock (absent, expired, or another owner); the command did not run";

/// Whether `token` owns the lock now: a bare value equal to the token, or a
/// structured value whose `owner` is the token, exactly as LOCK.RELEASE
/// decides. An absent (or expired) key is not held.
pub fn held(entry: Entry<'_>, token: &[u8]) -> Result<bool, WrongType> {
    lock::may_release(entry, token)
}

/// Why an inner command is refused before anything runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH.
    Transaction,
    /// Commands about the connection itself: they would act on the server's
    /// temporary client for the call, not on the caller's connection.
    Connection,
    /// EVAL, FCALL, SCRIPT, FUNCTION and their variants.
    Script,
    /// LOCK.GUARD inside LOCK.GUARD.
    Nested,
    /// WAIT and WAITAOF: they block until replicas or the disk catch up.
    Wait,
    /// Server administration: nothing a lock guards.
    Admin,
    /// A NUL byte in the command name: the name Redis would look up (up to
    /// the NUL) is not the one sent.
    NulInName,
}

impl Refusal {
    /// The error reply, NUL-terminated for `RedisModule_ReplyWithError`.
    pub const fn reply_cstr(self) -> &'static CStr {
        match self {
            Refusal::Transaction => c"ERR LOCK.GUARD cannot run MULTI, EXEC, DISCARD, WATCH or UNWATCH: send LOCK.GUARD calls inside MULTI instead",
            Refusal::Connection => c"ERR LOCK.GUARD cannot run a command about the connection (SUBSCRIBE, MONITOR, AUTH, HELLO, SELECT, CLIENT, RESET, ...): it would act on a temporary client, not on yours",
            Refusal::Script => c"ERR LOCK.GUARD cannot run scripts or functions: call LOCK.GUARD from inside the script instead",
            Refusal::Nested => c"ERR LOCK.GUARD cannot run LOCK.GUARD: one lock per guard (send several guarded calls inside MULTI)",
            Refusal::Wait => c"ERR LOCK.GUARD cannot run WAIT or WAITAOF: it may not block; send WAIT after LOCK.GUARD",
            Refusal::Admin => c"ERR LOCK.GUARD cannot run server administration commands (SHUTDOWN, CONFIG, ACL, CLUSTER, DEBUG, MODULE, REPLICAOF, SAVE, ...)",
            Refusal::NulInName => c"ERR LOCK.GUARD: a command name cannot contain a NUL byte",
        }
    }
}

/// The longest name [`check_command`] refuses ("evalsha_ro", "bgrewriteaof").
const LONGEST_REFUSED: usize = 12;

/// Refuses the inner commands listed on [`Refusal`]; any other name goes to
/// Redis, which answers an unknown command or a wrong arity itself. Only the
/// command name counts (CLIENT is refused whatever its subcommand).
pub fn check_command(name: &[u8]) -> Result<(), Refusal> {
    if name.contains(&0) {
        return Err(Refusal::NulInName);
    }
    if name.len() > LONGEST_REFUSED {
        return Ok(());
    }
    let mut lower = [0u8; LONGEST_REFUSED];
    let lower = &mut lower[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    let refusal = match &*lower {
        b"multi" | b"exec" | b"discard" | b"watch" | b"unwatch" => Refusal::Transaction,
        b"subscribe" | b"unsubscribe" | b"psubscribe" | b"punsubscribe" | b"ssubscribe" | b"sunsubscribe"
        | b"monitor" | b"auth" | b"hello" | b"reset" | b"quit" | b"select" | b"client" | b"readonly" | b"readwrite"
        | b"asking" => Refusal::Connection,
        b"eval" | b"evalsha" | b"eval_ro" | b"evalsha_ro" | b"fcall" | b"fcall_ro" | b"script" | b"function" => {
            Refusal::Script
        }
        b"lock.guard" => Refusal::Nested,
        b"wait" | b"waitaof" => Refusal::Wait,
        b"shutdown" | b"debug" | b"config" | b"acl" | b"module" | b"latency" | b"save" | b"bgsave"
        | b"bgrewriteaof" | b"replicaof" | b"slaveof" | b"failover" | b"psync" | b"sync" | b"replconf" | b"role"
        | b"cluster" => Refusal::Admin,
        _ => return Ok(()),
    };
    Err(refusal)
}

/// Redis 7.0's wording of an ACL refusal inside a module's call.
const LEGACY_ACL: &[u8] = b"ERR acl verification failed";

/// The reply to send instead of the error `text` (without its leading `-`)
/// of a refused inner call, when Redis 7.0 worded an ACL refusal as `ERR`:
/// `NOPERM` and the rest of the text, as every later server replies. `None`
/// for any other error, which is sent unchanged. NUL bytes (none expected)
/// become spaces, so the reply can be passed as a C string.
pub fn legacy_acl_error(text: &[u8]) -> Option<Vec<u8>> {
    if !text.starts_with(LEGACY_ACL) {
        return None;
    }
    let mut reply = b"NOPERM ".to_vec();
    reply.extend(text[4..].iter().map(|&b| if b == 0 { b' ' } else { b }));
    reply.push(0);
    Some(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_is_release_s_rule() {
        assert_eq!(held(Entry::Absent, b"t"), Ok(false));
        assert_eq!(held(Entry::Str(b"t"), b"t"), Ok(true));
        assert_eq!(held(Entry::Str(b"u"), b"t"), Ok(false));
        assert_eq!(held(Entry::Str(br#"{"owner":"t","runId":"r"}"#), b"t"), Ok(true));
        assert_eq!(held(Entry::Str(br#"{"owner":"u","runId":"r"}"#), b"t"), Ok(false));
        assert_eq!(held(Entry::OtherType, b"t"), Err(WrongType));
        // Same verdict as LOCK.RELEASE on arbitrary values.
        for value in [&b""[..], b"t", b"[]", b"{\"owner\":false}", b"{\"owner\":1}", b"{\"owner\":\"t\"", b" t"] {
            assert_eq!(held(Entry::Str(value), b"t"), lock::may_release(Entry::Str(value), b"t"), "{value:?}");
        }
    }

    #[test]
    fn refuses_what_cannot_run_inside_another_command_in_any_case() {
        for (name, why) in [
            (&b"MULTI"[..], Refusal::Transaction),
            (b"exec", Refusal::Transaction),
            (b"Watch", Refusal::Transaction),
            (b"SUBSCRIBE", Refusal::Connection),
            (b"monitor", Refusal::Connection),
            (b"select", Refusal::Connection),
            (b"client", Refusal::Connection),
            (b"EVAL", Refusal::Script),
            (b"evalsha_ro", Refusal::Script),
            (b"fcall", Refusal::Script),
            (b"LOCK.GUARD", Refusal::Nested),
            (b"lock.Guard", Refusal::Nested),
            (b"WAIT", Refusal::Wait),
            (b"waitaof", Refusal::Wait),
            (b"SHUTDOWN", Refusal::Admin),
            (b"bgrewriteaof", Refusal::Admin),
            (b"cluster", Refusal::Admin),
            (b"SET\0", Refusal::NulInName),
            (b"\0", Refusal::NulInName),
        ] {
            assert_eq!(check_command(name), Err(why), "{}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn passes_data_commands_blocking_ones_and_unknown_names_to_redis() {
        for name in [
            &b"SET"[..],
            b"set",
            b"DEL",
            b"INCR",
            b"BLPOP",
            b"XREAD",
            b"PUBLISH",
            b"LOCK.RELEASE",
            b"",
            b"multix",
            b"nosuchcommand",
            b"a-very-long-command-name",
        ] {
            assert_eq!(check_command(name), Ok(()), "{}", String::from_utf8_lossy(name));
        }
        // Longer than any refused name, whatever the bytes.
        assert_eq!(check_command(&[0xff; 100]), Ok(()));
    }

    #[test]
    fn every_refusal_is_an_error_reply_naming_the_guard() {
        for r in [
            Refusal::Transaction,
            Refusal::Connection,
            Refusal::Script,
            Refusal::Nested,
            Refusal::Wait,
            Refusal::Admin,
            Refusal::NulInName,
        ] {
            let text = r.reply_cstr().to_str().unwrap();
            assert!(text.starts_with("ERR LOCK.GUARD"), "{text}");
            assert!(!text.contains('\r') && !text.contains('\n'));
        }
        assert!(NOT_HELD.to_str().unwrap().starts_with("NOTHELD "));
    }

    #[test]
    fn only_redis_7_0_acl_refusals_become_noperm() {
        let legacy = b"ERR acl verification failed, can't access at least one of the keys mentioned in the command.";
        let reply = legacy_acl_error(legacy).unwrap();
        assert_eq!(reply.last(), Some(&0));
        assert_eq!(
            &reply[..reply.len() - 1],
            &b"NOPERM acl verification failed, can't access at least one of the keys mentioned in the command."[..]
        );
        assert_eq!(legacy_acl_error(b"NOPERM User u has no permissions to run the 'set' command"), None);
        assert_eq!(legacy_acl_error(b"ERR wrong number of arguments for 'set' command"), None);
        assert_eq!(
            legacy_acl_error(b"ERR acl verification failed\0x").unwrap(),
            b"NOPERM acl verification failed x\0".to_vec()
        );
    }
}
