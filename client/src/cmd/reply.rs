//! What a server's reply to a lock command means: the grant, and the error
//! replies the client tells apart (no such command, no `WAIT`).

use redis::{ErrorKind, RedisResult, ServerErrorKind, Value};

/// What a lock command did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Refused: the key is held by another token, or not ours to renew/release.
    Refused,
    /// Took effect; for acquire and takeover on the module, with the grant's
    /// fencing token.
    Granted(Option<u64>),
    /// A renewal that took effect, but shorter than asked: the key's hold
    /// limit (`MAXHOLD`) cut it (`LOCK.RENEW` answered 2).
    Capped,
    /// A renewal that took effect up to a revocation's deadline
    /// (`LOCK.REVOKE`): the server ends the hold `left_ms` from now (the
    /// module replied `-left_ms`).
    Revoked { left_ms: u64 },
}

impl Grant {
    pub(crate) fn took_effect(self) -> bool {
        matches!(self, Grant::Granted(_) | Grant::Capped | Grant::Revoked { .. })
    }

    /// The fence of a grant that took effect.
    pub(crate) fn fence(self) -> Option<u64> {
        match self {
            Grant::Granted(f) => f,
            _ => None,
        }
    }
}

/// `ERR WAIT is not supported by this version of the lock module`: a module
/// that has `FENCE` but not yet the blocking wait.
pub(crate) fn is_wait_unsupported(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.detail().is_some_and(|d| d.to_ascii_lowercase().contains("wait is not supported"))
}

/// `ERR unknown command 'LOCK.ACQUIRE', with args beginning with: ...`
/// (Redis 6 quotes with backticks; both start the same).
pub(crate) fn is_unknown_command(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.detail().is_some_and(|d| d.trim_start().to_ascii_lowercase().starts_with("unknown command"))
}

/// A module reply: with `FENCE` (acquire, takeover, elect) a positive
/// fence or nil; otherwise (renew, release) 1/0, 2 for a renewal cut
/// short by the key's hold limit, `-ms` for a renewal of a revoked hold.
pub(crate) fn module_reply(v: Value, fenced: bool) -> RedisResult<Grant> {
    match (fenced, v) {
        (true, Value::Int(n)) if n > 0 => Ok(Grant::Granted(Some(n.unsigned_abs()))),
        (true, Value::Nil) => Ok(Grant::Refused),
        (false, Value::Int(2)) => Ok(Grant::Capped),
        (false, Value::Int(n)) if n < 0 => Ok(Grant::Revoked { left_ms: n.unsigned_abs() }),
        (false, v) => fallback_reply(v),
        (true, other) => Err(unexpected(other)),
    }
}

/// Scripts answer 1/0; `SET NX` answers OK/nil. No fence without the module.
pub(crate) fn fallback_reply(v: Value) -> RedisResult<Grant> {
    match v {
        Value::Int(1) | Value::Okay => Ok(Grant::Granted(None)),
        Value::Int(0) | Value::Nil => Ok(Grant::Refused),
        Value::SimpleString(s) if s == "OK" => Ok(Grant::Granted(None)),
        other => Err(unexpected(other)),
    }
}

/// Unreachable: a kind without a fallback returns the module's answer.
pub(crate) fn no_fallback() -> redis::RedisError {
    redis::RedisError::from((ErrorKind::Client, "no script fallback for this lock kind"))
}

pub(crate) fn unexpected(v: Value) -> redis::RedisError {
    redis::RedisError::from((ErrorKind::UnexpectedReturnType, "unexpected reply to a lock command", format!("{v:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_map_to_effect() {
        assert_eq!(fallback_reply(Value::Int(1)).unwrap(), Grant::Granted(None));
        assert_eq!(fallback_reply(Value::Int(0)).unwrap(), Grant::Refused);
        assert_eq!(fallback_reply(Value::Okay).unwrap(), Grant::Granted(None));
        assert_eq!(fallback_reply(Value::Nil).unwrap(), Grant::Refused);
        assert!(fallback_reply(Value::Int(2)).is_err());
        // With FENCE, 1 is a fence like any other, and refusal is nil.
        assert_eq!(module_reply(Value::Int(1), true).unwrap(), Grant::Granted(Some(1)));
        assert_eq!(module_reply(Value::Int(i64::MAX), true).unwrap(), Grant::Granted(Some(i64::MAX as u64)));
        assert_eq!(module_reply(Value::Nil, true).unwrap(), Grant::Refused);
        assert!(module_reply(Value::Int(0), true).is_err());
        assert!(module_reply(Value::Int(-3), true).is_err());
        assert_eq!(module_reply(Value::Int(1), false).unwrap(), Grant::Granted(None));
        assert_eq!(module_reply(Value::Int(0), false).unwrap(), Grant::Refused);
        // A renewal cut short by MAXHOLD: took effect, not the full TTL.
        assert_eq!(module_reply(Value::Int(2), false).unwrap(), Grant::Capped);
        assert!(Grant::Capped.took_effect());
        assert_eq!(Grant::Capped.fence(), None);
        assert!(module_reply(Value::Int(2), true).is_ok_and(|g| g == Grant::Granted(Some(2))), "a fence of 2");
        assert!(module_reply(Value::Int(3), false).is_err());
        // A revoked hold's renewal: took effect, with the ms left.
        assert_eq!(module_reply(Value::Int(-1500), false).unwrap(), Grant::Revoked { left_ms: 1500 });
        assert!(Grant::Revoked { left_ms: 1 }.took_effect());
    }

    #[test]
    fn wait_refusal_is_recognised() {
        // Errors as the connection parses them off the wire.
        let server = |line: &str| {
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(Value::extract_error).unwrap_err()
        };
        assert!(is_wait_unsupported(&server("ERR WAIT is not supported by this version of the lock module")));
        assert!(!is_wait_unsupported(&server("ERR unknown command 'LOCK.ACQUIRE', with args beginning with: ")));
        assert!(is_unknown_command(&server("ERR unknown command 'LOCK.ACQUIRE', with args beginning with: ")));
        assert!(!is_wait_unsupported(&server("ERR syntax error")));
    }
}
