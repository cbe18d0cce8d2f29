//! The election's own commands (docs/election.md): `LOCK.PROCLAIM`,
//! `LOCK.LEADER`, `LOCK.OBSERVE`, and what `LOCK.PROCLAIM` answers. A
//! campaign (`LOCK.ELECT`) is an acquire ([`LockCmd::elect`](super::LockCmd::elect)),
//! kept alive and ended by `LOCK.RENEW` and `LOCK.RELEASE`; the leader
//! replies are read in `info.rs`.

use redis::{Cmd, RedisResult, Value};
use redis_lock_rules::args;

use crate::cmd::reply::unexpected;
use crate::error::Result;

/// `LOCK.PROCLAIM key token value`.
pub(crate) fn proclaim_cmd(key: &str, token: &str, value: &str) -> Result<Cmd> {
    args::check_key_and_token(key.as_bytes(), token.as_bytes())?;
    let mut c = redis::cmd("LOCK.PROCLAIM");
    c.arg(key).arg(token).arg(value);
    Ok(c)
}

/// 1: `token` leads and its value is now the new one; 0: it does not lead.
pub(crate) fn proclaim_reply(v: Value) -> RedisResult<bool> {
    match v {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected(other)),
    }
}

/// `LOCK.LEADER key`.
pub(crate) fn leader_cmd(key: &str) -> Cmd {
    let mut c = redis::cmd("LOCK.LEADER");
    c.arg(key);
    c
}

/// `LOCK.OBSERVE key [AFTER rev] [WAIT timeout-ms]`: `after` is the rev
/// last seen (0: no leader was seen), `wait_ms` how long the server may
/// hold the reply back while nothing changes (never 0: that would mean
/// forever).
pub(crate) fn observe_cmd(key: &str, after: Option<u64>, wait_ms: Option<u64>) -> Cmd {
    let mut c = redis::cmd("LOCK.OBSERVE");
    c.arg(key);
    if let Some(rev) = after {
        c.arg("AFTER").arg(rev);
    }
    if let Some(ms) = wait_ms {
        c.arg("WAIT").arg(ms.max(1));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(c: &Cmd) -> String {
        String::from_utf8_lossy(&c.get_packed_command()).replace("\r\n", " ")
    }

    #[test]
    fn election_commands_and_replies() {
        assert_eq!(packed(&proclaim_cmd("k", "t", "v 2").unwrap()), "*4 $13 LOCK.PROCLAIM $1 k $1 t $3 v 2 ");
        assert!(proclaim_cmd("", "t", "v").is_err());
        assert!(proclaim_cmd("k", "", "v").is_err());
        assert_eq!(packed(&leader_cmd("k")), "*2 $11 LOCK.LEADER $1 k ");
        assert_eq!(packed(&observe_cmd("k", None, None)), "*2 $12 LOCK.OBSERVE $1 k ");
        assert_eq!(packed(&observe_cmd("k", Some(0), Some(0))), "*6 $12 LOCK.OBSERVE $1 k $5 AFTER $1 0 $4 WAIT $1 1 ");
        assert_eq!(packed(&observe_cmd("k", Some(42), Some(10_000))).split(' ').nth(8), Some("42"));
        assert!(proclaim_reply(Value::Int(1)).unwrap());
        assert!(!proclaim_reply(Value::Int(0)).unwrap());
        assert!(proclaim_reply(Value::Nil).is_err());
    }
}
