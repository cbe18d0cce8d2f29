//! The session commands the renewal engine sends (`SESSION.GRANT`,
//! `SESSION.KEEPALIVE`, `SESSION.REVOKE`; docs/commands.md, "Sessions"),
//! and what their replies and refusals mean: the one place that reads a
//! keepalive's reply.

use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use crate::cmd::reply::{is_unknown_command, unexpected};

/// `SESSION.GRANT ttl-ms [LOCKDELAY ms]`.
pub(crate) fn grant_cmd(ttl_ms: u64, lock_delay_ms: Option<u64>) -> Cmd {
    let mut c = redis::cmd("SESSION.GRANT");
    c.arg(ttl_ms);
    if let Some(ms) = lock_delay_ms {
        c.arg("LOCKDELAY").arg(ms);
    }
    c
}

/// `SESSION.GRANT`'s reply: the session's id.
pub(crate) fn grant_reply(v: Value) -> RedisResult<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b).map_err(|e| unexpected(Value::BulkString(e.into_bytes()))),
        Value::SimpleString(s) => Ok(s),
        other => Err(unexpected(other)),
    }
}

/// `SESSION.KEEPALIVE id [id ...]`: every session of one node in one call.
pub(crate) fn keepalive_cmd<'a>(ids: impl IntoIterator<Item = &'a str>) -> Cmd {
    let mut c = redis::cmd("SESSION.KEEPALIVE");
    for id in ids {
        c.arg(id);
    }
    c
}

/// `SESSION.REVOKE id`: a voluntary end (no lock-delay).
pub(crate) fn revoke_cmd(id: &str) -> Cmd {
    let mut c = redis::cmd("SESSION.REVOKE");
    c.arg(id);
    c
}

/// `SESSION.INFO id COUNT n`: the session's revoked locks (`revoked`),
/// the first `n` of them (1 to 1000); after a keepalive's `0`, how the
/// session ended (`state`; nil: unknown to the node).
pub(crate) fn info_cmd(id: &str, count: u32) -> Cmd {
    let mut c = redis::cmd("SESSION.INFO");
    c.arg(id).arg("COUNT").arg(count.clamp(1, 1000));
    c
}

/// `SESSION.ADOPT key token id`: the lock `token` holds on `key`, which
/// moved to a node that does not know its session, attached to session
/// `id` of that node (`1`; `0`: nothing changed).
pub(crate) fn adopt_cmd(key: &str, token: &str, id: &str) -> Cmd {
    let mut c = redis::cmd("SESSION.ADOPT");
    c.arg(key).arg(token).arg(id);
    c
}

/// What a keepalive said of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kept {
    /// Kept alive for its TTL from when the keepalive was sent.
    Alive,
    /// Kept alive as [`Kept::Alive`], and some of its locks are revoked
    /// (`-ttl`): `SESSION.INFO` lists which.
    Revoked,
    /// Unknown to the node, or ended (expired, revoked, forgotten): its
    /// locks are no longer held for it (`SESSION.INFO` tells how).
    Ended,
    /// A reply this client cannot read: counted as a failed keepalive (the
    /// session's locks stay valid until their validity runs out).
    Unreadable,
}

impl Kept {
    /// Whether the session was kept alive (revoked locks or not).
    pub(crate) fn alive(self) -> bool {
        matches!(self, Kept::Alive | Kept::Revoked)
    }
}

/// One session's entry in a keepalive's reply: its TTL when kept alive
/// (a positive number), `-ttl` when kept alive with some of its locks
/// revoked, `0` (or nil) when unknown or ended. Read tolerantly: an entry
/// that carries more than the TTL (an array whose first element is it) is
/// read by that first element.
pub(crate) fn keepalive_entry(v: &Value) -> Kept {
    match v {
        Value::Int(0) | Value::Nil => Kept::Ended,
        Value::Int(n) if *n < 0 => Kept::Revoked,
        Value::Int(_) => Kept::Alive,
        Value::Array(a) | Value::Set(a) => a.first().map_or(Kept::Unreadable, keepalive_entry),
        Value::BulkString(b) => match std::str::from_utf8(b).ok().and_then(|s| s.parse::<i64>().ok()) {
            Some(n) => keepalive_entry(&Value::Int(n)),
            None => Kept::Unreadable,
        },
        _ => Kept::Unreadable,
    }
}

/// A keepalive's whole reply for `n` sessions, in the order sent; an
/// error reply, or a reply of another length, is every session's failure.
pub(crate) fn keepalive_reply(v: Value, n: usize) -> RedisResult<Vec<Kept>> {
    match v {
        Value::Array(a) if a.len() == n => Ok(a.iter().map(keepalive_entry).collect()),
        other => Err(unexpected(other)),
    }
}

/// Why a node refused a session command or an acquire with `SESSION`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `ERR no such session …`: the node does not know the session (it
    /// ended, or the key is served by another node than the session's).
    NoSuchSession,
    /// `ERR syntax error` to an acquire with `SESSION`: this command takes
    /// none on that node (an older module; a kind without sessions yet).
    NotTaken,
    /// An unknown command: no module, or one without sessions.
    NoSessions,
}

/// What a refusal means for sessions, if it is one of theirs. Every one
/// of them changed nothing on the server (an error reply writes nothing).
pub(crate) fn session_refusal(e: &RedisError) -> Option<Refusal> {
    if is_unknown_command(e) {
        return Some(Refusal::NoSessions);
    }
    if e.kind() != ErrorKind::Server(ServerErrorKind::ResponseError) {
        return None;
    }
    let detail = e.detail()?.trim_start().to_ascii_lowercase();
    if detail.starts_with("no such session") {
        Some(Refusal::NoSuchSession)
    } else if detail.starts_with("syntax error") {
        Some(Refusal::NotTaken)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(line: &str) -> RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(Value::extract_error).unwrap_err()
    }

    #[test]
    fn commands_are_spelled_as_the_module_reads_them() {
        let packed = |c: Cmd| String::from_utf8_lossy(&c.get_packed_command()).replace("\r\n", " ");
        assert!(packed(grant_cmd(1500, None)).ends_with("$13 SESSION.GRANT $4 1500 "));
        assert!(packed(grant_cmd(1500, Some(250))).ends_with("$4 1500 $9 LOCKDELAY $3 250 "));
        assert!(packed(keepalive_cmd(["a", "b"])).ends_with("$17 SESSION.KEEPALIVE $1 a $1 b "));
        assert!(packed(revoke_cmd("a")).ends_with("$14 SESSION.REVOKE $1 a "));
        assert!(packed(info_cmd("a", 1000)).ends_with("$12 SESSION.INFO $1 a $5 COUNT $4 1000 "));
        assert_eq!(grant_reply(Value::BulkString(b"0123abcd".to_vec())).unwrap(), "0123abcd");
        assert!(grant_reply(Value::Int(1)).is_err());
    }

    #[test]
    fn keepalive_replies_are_read_tolerantly() {
        assert_eq!(keepalive_entry(&Value::Int(1500)), Kept::Alive);
        assert_eq!(keepalive_entry(&Value::Int(0)), Kept::Ended);
        assert_eq!(keepalive_entry(&Value::Nil), Kept::Ended);
        assert_eq!(keepalive_entry(&Value::Int(-20)), Kept::Revoked, "-ttl: alive, some locks revoked");
        assert!(Kept::Revoked.alive() && Kept::Alive.alive() && !Kept::Ended.alive() && !Kept::Unreadable.alive());
        assert_eq!(keepalive_entry(&Value::BulkString(b"-1500".to_vec())), Kept::Revoked);
        assert_eq!(keepalive_entry(&Value::Array(vec![Value::Int(1500), Value::Array(vec![])])), Kept::Alive);
        assert_eq!(keepalive_entry(&Value::Array(vec![Value::Int(0)])), Kept::Ended);
        assert_eq!(keepalive_entry(&Value::Array(vec![])), Kept::Unreadable);
        assert_eq!(keepalive_entry(&Value::Okay), Kept::Unreadable);
        let two = Value::Array(vec![Value::Int(1500), Value::Int(0)]);
        assert_eq!(keepalive_reply(two.clone(), 2).unwrap(), vec![Kept::Alive, Kept::Ended]);
        assert!(keepalive_reply(two, 3).is_err(), "a reply of another length is no answer");
    }

    #[test]
    fn refusals_are_told_apart() {
        let no = server("ERR no such session (never granted on this node, or ended)");
        assert_eq!(session_refusal(&no), Some(Refusal::NoSuchSession));
        assert_eq!(session_refusal(&server("ERR syntax error")), Some(Refusal::NotTaken));
        let unknown = server("ERR unknown command 'SESSION.GRANT', with args beginning with: ");
        assert_eq!(session_refusal(&unknown), Some(Refusal::NoSessions));
        assert_eq!(session_refusal(&server("WRONGTYPE Operation against a key holding the wrong kind of value")), None);
        assert_eq!(session_refusal(&server("ERR LOCKDELAY must be an integer from 0 to 60000 (milliseconds)")), None);
    }
}
