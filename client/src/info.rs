//! [`LockInfo`]: what a key holds, as the lock commands see it, read from
//! `LOCK.INFO`'s reply; without the module, the same computed from `GET`
//! and `PTTL` (read together by `send::Info`) by the rules crate's
//! `describe`, which is what the module itself uses.
//!
//! [`HoldersInfo`]: the same for a semaphore or read-write lock
//! (`SEM.INFO`, `RWLOCK.INFO`), module only.

use std::time::Duration;

use redis::{RedisResult, Value};
use redis_lock_rules::lock::describe;

use crate::cmd::{unexpected, LockKind};

/// How the lock value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockFormat {
    /// A bare token (`acquire`, or any string that is not a JSON table).
    Legacy,
    /// A JSON table such as `{"owner":token,"runId":run_id}` (`takeover`).
    Structured,
}

impl LockFormat {
    /// `legacy` or `structured`, as `LOCK.INFO` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            LockFormat::Legacy => "legacy",
            LockFormat::Structured => "structured",
        }
    }
}

/// A lock key's state, from [`LockClient::info`](crate::LockClient::info).
///
/// Byte strings that are not UTF-8 are shown with U+FFFD replacement
/// characters; tokens and run ids written by this client are always UTF-8.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The token that owns the key, as renew and release compare it: the
    /// bare value, or a structured value's `owner`. `None` when no token can
    /// own it (a structured `owner` that is not a string, e.g. a number).
    pub owner: Option<String>,
    /// A structured value's `runId`, when it is a string.
    pub run_id: Option<String>,
    /// Bare token or JSON table.
    pub format: LockFormat,
    /// Time left; `None` when the key has no expiry.
    pub ttl: Option<Duration>,
    /// The fencing token of the current grant, when the server knows it.
    /// Currently always `None`: the module keeps no per-key fence (the
    /// holder has it from [`Lock::fence`](crate::Lock::fence)).
    pub fence: Option<u64>,
    /// Clients blocked in the server waiting for this key (`acquire` with
    /// the module's `WAIT`). Always 0 without the module, where waiters poll.
    pub waiters: u64,
    /// The reason of a revocation of the hold (`LOCK.REVOKE`; its deadline
    /// is the hold limit), `None` when it is not revoked.
    pub revoked: Option<String>,
}

/// A semaphore's or read-write lock's state, from
/// [`NamedLock::info`](crate::NamedLock::info) or
/// [`RwLock::info`](crate::RwLock::info).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoldersInfo {
    /// [`LockKind::Permit`] with the semaphore's stored limit, or
    /// [`LockKind::Read`] / [`LockKind::Write`]: what a read-write lock is
    /// held for now.
    pub kind: LockKind,
    /// The live holders, earliest lease end first.
    pub holders: Vec<Holder>,
    /// Clients blocked in the server's queue for this key.
    pub waiters: u64,
}

/// One holder of a semaphore or read-write lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Its token ([`Lock::token`](crate::Lock::token)).
    pub token: String,
    /// What is left of its lease.
    pub ttl: Duration,
}

/// An election's leader, from [`Election::leader`](crate::Election::leader)
/// and [`Election::observe`](crate::Election::observe) (`LOCK.LEADER`,
/// `LOCK.OBSERVE`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader proclaimed: the value it campaigned with, or its
    /// latest [`Leadership::proclaim`](crate::Leadership::proclaim). Not
    /// UTF-8 bytes show as U+FFFD (this client only writes UTF-8).
    pub value: String,
    /// The leadership's term: its grant's fence, strictly greater than
    /// every earlier leader's of the key. A follower that passes it with
    /// its requests lets a resource refuse a deposed leader's.
    pub term: u64,
    /// The revision of the leadership's state: a new fence at the grant
    /// (equal to the term) and at every proclaim, so two observations with
    /// the same rev saw the same leader with the same value.
    pub rev: u64,
    /// What is left of the leader's lease (it renews it); `None`: no expiry.
    pub ttl: Option<Duration>,
    /// The reason of a revocation of the leader (`LOCK.REVOKE`): it is
    /// asked to resign; `None` when it is not revoked.
    pub revoked: Option<String>,
}

/// `SEM.INFO key` or `RWLOCK.INFO key` (by `kind`'s family).
pub(crate) fn holders_cmd(kind: LockKind, key: &str) -> redis::Cmd {
    let mut c = redis::cmd(kind.info_command());
    c.arg(key);
    c
}

/// A `LOCK.INFO` reply computed from a value and its PTTL, as the module
/// computes it (the fallback of a server without the module).
pub(crate) fn computed(value: Option<Vec<u8>>, pttl: i64) -> RedisResult<Option<LockInfo>> {
    let Some(value) = value else { return Ok(None) };
    let d = describe(&value);
    Ok(Some(LockInfo {
        owner: d.owner.map(lossy),
        run_id: d.run_id.map(lossy),
        format: if d.structured { LockFormat::Structured } else { LockFormat::Legacy },
        ttl: ttl(pttl).ok_or_else(|| unexpected(Value::Int(pttl)))?,
        fence: None,
        waiters: 0,
        revoked: None,
    }))
}

/// -1 → no expiry; a negative otherwise cannot describe an existing key.
fn ttl(ms: i64) -> Option<Option<Duration>> {
    match ms {
        -1 => Some(None),
        ms if ms >= 0 => Some(Some(Duration::from_millis(ms.unsigned_abs()))),
        _ => None,
    }
}

fn lossy(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Nil (`None`), or a flat array of field/value pairs (a map under RESP3).
fn fields(v: Value) -> RedisResult<Option<Vec<(String, Value)>>> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Nil => return Ok(None),
        Value::Map(m) => m,
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut it = items.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        other => return Err(unexpected(other)),
    };
    let named = pairs.into_iter().map(|(name, value)| match name {
        Value::BulkString(b) => Ok((lossy(b), value)),
        Value::SimpleString(s) => Ok((s, value)),
        other => Err(unexpected(other)),
    });
    named.collect::<RedisResult<_>>().map(Some)
}

fn waiters(v: Value) -> RedisResult<u64> {
    u64::try_from(int(v)?).map_err(|_| unexpected(Value::SimpleString("negative waiters".into())))
}

/// A `LOCK.INFO` reply. Fields this client does not know are skipped, so a
/// newer module can add some.
pub(crate) fn parse(v: Value) -> RedisResult<Option<LockInfo>> {
    let Some(pairs) = fields(v)? else { return Ok(None) };
    let (mut owner, mut run_id, mut format, mut ttl_ms, mut fence, mut waiters) = (None, None, None, None, None, None);
    let mut revoked = None;
    for (name, value) in pairs {
        match name.as_str() {
            "owner" => owner = opt_bytes(value)?,
            "run-id" => run_id = opt_bytes(value)?,
            "format" => {
                format = Some(match opt_bytes(value)?.as_deref() {
                    Some("legacy") => LockFormat::Legacy,
                    Some("structured") => LockFormat::Structured,
                    other => return Err(unexpected(Value::SimpleString(format!("format {other:?}")))),
                })
            }
            "ttl-ms" => ttl_ms = Some(int(value)?),
            "fence" => {
                fence = match value {
                    Value::Nil => None,
                    Value::Int(n) if n > 0 => Some(n.unsigned_abs()),
                    other => return Err(unexpected(other)),
                }
            }
            "waiters" => waiters = Some(self::waiters(value)?),
            "revoked" => revoked = opt_bytes(value)?,
            _ => {}
        }
    }
    let missing = |f: &str| unexpected(Value::SimpleString(format!("LOCK.INFO reply without {f}")));
    let ttl_ms = ttl_ms.ok_or_else(|| missing("ttl-ms"))?;
    Ok(Some(LockInfo {
        owner,
        run_id,
        format: format.ok_or_else(|| missing("format"))?,
        ttl: ttl(ttl_ms).ok_or_else(|| unexpected(Value::Int(ttl_ms)))?,
        fence,
        // An older module without the field has no waiters.
        waiters: waiters.unwrap_or(0),
        revoked,
    }))
}

/// A `LOCK.LEADER` or `LOCK.OBSERVE` reply: nil (no leader), or `value V
/// term N rev N ttl-ms MS` as a flat array (a map under RESP3). Unknown
/// fields are skipped, as in [`parse`].
pub(crate) fn parse_leader(v: Value) -> RedisResult<Option<Leader>> {
    let Some(pairs) = fields(v)? else { return Ok(None) };
    let (mut value, mut term, mut rev, mut ttl_ms, mut revoked) = (None, None, None, None, None);
    for (name, v) in pairs {
        match name.as_str() {
            "value" => value = opt_bytes(v)?,
            "term" => term = Some(positive(v)?),
            "rev" => rev = Some(positive(v)?),
            "ttl-ms" => ttl_ms = Some(int(v)?),
            "revoked" => revoked = opt_bytes(v)?,
            _ => {}
        }
    }
    let missing = |f: &str| unexpected(Value::SimpleString(format!("leader reply without {f}")));
    let ttl_ms = ttl_ms.ok_or_else(|| missing("ttl-ms"))?;
    Ok(Some(Leader {
        value: value.ok_or_else(|| missing("value"))?,
        term: term.ok_or_else(|| missing("term"))?,
        rev: rev.ok_or_else(|| missing("rev"))?,
        ttl: ttl(ttl_ms).ok_or_else(|| unexpected(Value::Int(ttl_ms)))?,
        revoked,
    }))
}

fn positive(v: Value) -> RedisResult<u64> {
    match v {
        Value::Int(n) if n > 0 => Ok(n.unsigned_abs()),
        other => Err(unexpected(other)),
    }
}

/// A `SEM.INFO` or `RWLOCK.INFO` reply: `limit` N or `mode`
/// read/write, `holders` [token, ttl-ms, …], `waiters` N. Unknown fields
/// are skipped, as in [`parse`].
pub(crate) fn parse_holders(v: Value) -> RedisResult<Option<HoldersInfo>> {
    let Some(pairs) = fields(v)? else { return Ok(None) };
    let (mut kind, mut holders, mut waiters) = (None, Vec::new(), 0);
    for (name, value) in pairs {
        match name.as_str() {
            "limit" => {
                kind = Some(LockKind::Permit {
                    limit: u64::try_from(int(value)?)
                        .map_err(|_| unexpected(Value::SimpleString("negative limit".into())))?,
                })
            }
            "mode" => {
                kind = Some(match opt_bytes(value)?.as_deref() {
                    Some("read") => LockKind::Read,
                    Some("write") => LockKind::Write,
                    other => return Err(unexpected(Value::SimpleString(format!("mode {other:?}")))),
                })
            }
            "holders" => {
                let Value::Array(items) = value else { return Err(unexpected(value)) };
                let mut it = items.into_iter();
                while let Some(token) = it.next() {
                    let token = opt_bytes(token)?.ok_or_else(|| unexpected(Value::Nil))?;
                    let ms = it.next().map_or(Err(unexpected(Value::Nil)), int)?;
                    // A lease is held through its last millisecond: never negative.
                    holders.push(Holder { token, ttl: Duration::from_millis(ms.max(0).unsigned_abs()) });
                }
            }
            "waiters" => waiters = self::waiters(value)?,
            _ => {}
        }
    }
    let kind =
        kind.ok_or_else(|| unexpected(Value::SimpleString("holders info reply without limit or mode".into())))?;
    Ok(Some(HoldersInfo { kind, holders, waiters }))
}

fn opt_bytes(v: Value) -> RedisResult<Option<String>> {
    match v {
        Value::Nil => Ok(None),
        Value::BulkString(b) => Ok(Some(lossy(b))),
        Value::SimpleString(s) => Ok(Some(s)),
        other => Err(unexpected(other)),
    }
}

fn int(v: Value) -> RedisResult<i64> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(unexpected(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_module_reply() {
        let v = Value::Array(vec![
            bulk("owner"),
            bulk("tok"),
            bulk("run-id"),
            Value::Nil,
            bulk("format"),
            bulk("legacy"),
            bulk("ttl-ms"),
            Value::Int(-1),
            bulk("fence"),
            Value::Nil,
            bulk("waiters"),
            Value::Int(2),
            bulk("future-field"),
            Value::Int(7),
        ]);
        let i = parse(v).unwrap().unwrap();
        assert_eq!(i.owner.as_deref(), Some("tok"));
        assert_eq!((i.run_id, i.format, i.ttl, i.fence, i.waiters), (None, LockFormat::Legacy, None, None, 2));
        assert_eq!(parse(Value::Nil).unwrap(), None);
        assert!(parse(Value::Array(vec![bulk("owner")])).is_err());
        assert!(parse(Value::Array(vec![bulk("format"), bulk("xml"), bulk("ttl-ms"), Value::Int(1)])).is_err());
        assert!(parse(Value::Array(vec![bulk("format"), bulk("legacy")])).is_err(), "ttl-ms is required");
    }

    #[test]
    fn parses_holders_replies() {
        let v = Value::Array(vec![
            bulk("limit"),
            Value::Int(3),
            bulk("holders"),
            Value::Array(vec![bulk("a"), Value::Int(10), bulk("b"), Value::Int(2500)]),
            bulk("waiters"),
            Value::Int(1),
        ]);
        let i = parse_holders(v).unwrap().unwrap();
        assert_eq!(i.kind, LockKind::Permit { limit: 3 });
        assert_eq!(
            i.holders.iter().map(|h| (h.token.as_str(), h.ttl.as_millis())).collect::<Vec<_>>(),
            [("a", 10), ("b", 2500)]
        );
        assert_eq!(i.waiters, 1);
        let v = Value::Array(vec![
            bulk("mode"),
            bulk("write"),
            bulk("holders"),
            Value::Array(vec![bulk("w"), Value::Int(5)]),
            bulk("waiters"),
            Value::Int(0),
        ]);
        assert_eq!(parse_holders(v).unwrap().unwrap().kind, LockKind::Write);
        assert_eq!(parse_holders(Value::Nil).unwrap(), None);
        assert!(
            parse_holders(Value::Array(vec![bulk("holders"), Value::Array(vec![])])).is_err(),
            "limit or mode is required"
        );
        assert!(parse_holders(Value::Array(vec![bulk("mode"), bulk("both")])).is_err());
        assert!(
            parse_holders(Value::Array(vec![
                bulk("limit"),
                Value::Int(2),
                bulk("holders"),
                Value::Array(vec![bulk("a")])
            ]))
            .is_err(),
            "a token without its ttl"
        );
    }

    #[test]
    fn parses_leader_replies_in_both_protocols() {
        let flat = Value::Array(vec![
            bulk("value"),
            bulk("host-a:8080"),
            bulk("term"),
            Value::Int(7),
            bulk("rev"),
            Value::Int(9),
            bulk("ttl-ms"),
            Value::Int(2900),
        ]);
        let l = parse_leader(flat).unwrap().unwrap();
        assert_eq!((l.value.as_str(), l.term, l.rev, l.ttl), ("host-a:8080", 7, 9, Some(Duration::from_millis(2900))));
        let map = Value::Map(vec![
            (Value::SimpleString("term".into()), Value::Int(3)),
            (Value::SimpleString("rev".into()), Value::Int(3)),
            (Value::SimpleString("value".into()), Value::BulkString(vec![0xff, b'x'])),
            (Value::SimpleString("ttl-ms".into()), Value::Int(-1)),
            (Value::SimpleString("future".into()), Value::Nil),
        ]);
        let l = parse_leader(map).unwrap().unwrap();
        assert_eq!((l.value.as_str(), l.term, l.rev, l.ttl), ("\u{fffd}x", 3, 3, None));
        assert_eq!(parse_leader(Value::Nil).unwrap(), None);
        assert!(parse_leader(Value::Array(vec![bulk("value"), bulk("v"), bulk("ttl-ms"), Value::Int(1)])).is_err());
        assert!(
            parse_leader(Value::Array(vec![
                bulk("value"),
                bulk("v"),
                bulk("term"),
                Value::Int(0),
                bulk("rev"),
                Value::Int(1),
                bulk("ttl-ms"),
                Value::Int(1)
            ]))
            .is_err(),
            "a term is a fence: positive"
        );
        assert!(parse_leader(Value::Int(1)).is_err());
    }

    #[test]
    fn computes_like_the_module() {
        let i = computed(Some(br#"{"owner":"a","runId":"r"}"#.to_vec()), 1500).unwrap().unwrap();
        assert_eq!((i.owner.as_deref(), i.run_id.as_deref(), i.format), (Some("a"), Some("r"), LockFormat::Structured));
        assert_eq!(i.ttl, Some(Duration::from_millis(1500)));
        let i = computed(Some(br#"{"owner":5}"#.to_vec()), -1).unwrap().unwrap();
        assert_eq!((i.owner, i.ttl), (None, None));
        assert_eq!(computed(None, -2).unwrap(), None);
        assert!(computed(Some(b"x".to_vec()), -2).is_err());
    }
}
