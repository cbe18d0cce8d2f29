//! A revocation of a hold (`LOCK.REVOKE`, docs/revocation.md) as its
//! holder hears it: the module answers a renewal of a revoked hold with
//! the milliseconds left (`-ms`), and the server ends the hold then.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A revocation of a hold: the server ends it at [`Revocation::deadline`]
/// (lock-delay applies, the next waiter is served), so the holder should
/// finish and release before then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revocation {
    /// When the server ends the hold, on this process's clock: when the
    /// renewal that heard it was sent, plus the time left the server
    /// replied (so never later than the server's deadline).
    pub deadline: Instant,
    /// The revoke's `REASON` (`Some("")` without one), read once with
    /// `LOCK.INFO` for a lock or a leadership, or from `SESSION.INFO` for
    /// a session-held one; `None` for a semaphore permit or a read-write
    /// guard, or when it could not be read.
    pub reason: Option<String>,
}

impl Revocation {
    /// What is left before the deadline (zero once it passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// What [`LockClient::revoke`](crate::LockClient::revoke) asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevokeOptions {
    /// The holder to revoke; required on a semaphore or read-write lock
    /// with several holders.
    pub token: Option<String>,
    /// How long the holder has before the server ends its hold (zero: at once).
    pub grace: Duration,
    /// Why, told to the holder of a lock or leadership (at most 200 bytes).
    pub reason: Option<String>,
}

/// What a revoke did (`LOCK.REVOKE`'s `result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RevokeOutcome {
    /// The holder has until the deadline.
    Revoked,
    /// The hold ended at once (no grace): lock-delay applies, the next waiter was served.
    Ended,
    /// The token given does not hold the key: nothing changed.
    NotHolder,
    /// Nobody holds the key: nothing changed.
    NoHolder,
}

/// `LOCK.REVOKE`'s reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevokeReply {
    pub outcome: RevokeOutcome,
    /// The holder revoked (or the token given).
    pub token: Option<String>,
    /// When the server ends (or ended) the hold: Unix ms, the server's clock.
    pub deadline_unix_ms: Option<i64>,
}

/// `LOCK.REVOKE key [TOKEN t] [GRACE ms] [REASON text]`.
pub(crate) fn revoke_cmd(key: &str, opts: &RevokeOptions) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.REVOKE");
    cmd.arg(key);
    if let Some(t) = &opts.token {
        cmd.arg("TOKEN").arg(t);
    }
    cmd.arg("GRACE").arg(opts.grace.as_millis() as u64);
    if let Some(r) = &opts.reason {
        cmd.arg("REASON").arg(r);
    }
    cmd
}

/// Reads `LOCK.REVOKE`'s reply (flat or a map).
pub(crate) fn parse_revoke(v: redis::Value) -> Result<RevokeReply> {
    let bad = || Error::InvalidArgument("unexpected reply to LOCK.REVOKE".into());
    let mut reply = RevokeReply { outcome: RevokeOutcome::NoHolder, token: None, deadline_unix_ms: None };
    let mut outcome = None;
    for (k, v) in pairs(v).ok_or_else(bad)? {
        match redis::from_redis_value::<String>(k).map_err(|_| bad())?.as_str() {
            "result" => {
                outcome = Some(match redis::from_redis_value::<String>(v).map_err(|_| bad())?.as_str() {
                    "revoked" => RevokeOutcome::Revoked,
                    "ended" => RevokeOutcome::Ended,
                    "not-holder" => RevokeOutcome::NotHolder,
                    "no-holder" => RevokeOutcome::NoHolder,
                    _ => return Err(bad()),
                })
            }
            "token" => reply.token = redis::from_redis_value(v).map_err(|_| bad())?,
            "deadline" => reply.deadline_unix_ms = redis::from_redis_value(v).map_err(|_| bad())?,
            _ => {}
        }
    }
    reply.outcome = outcome.ok_or_else(bad)?;
    Ok(reply)
}

fn pairs(v: redis::Value) -> Option<Vec<(redis::Value, redis::Value)>> {
    match v {
        redis::Value::Array(items) => {
            let mut it = items.into_iter();
            Some(std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect())
        }
        redis::Value::Map(pairs) => Some(pairs),
        _ => None,
    }
}

/// The `revoked` field (the reason) of a `LOCK.INFO` reply, flat or a map.
pub(crate) fn reason_of(v: redis::Value) -> Option<String> {
    text_field(v, "revoked")
}

/// The text field `name` of a field/value reply (`LOCK.INFO`,
/// `SESSION.INFO`), flat or a map.
pub(crate) fn text_field(v: redis::Value, name: &str) -> Option<String> {
    let pairs = pairs(v)?;
    let text = |v: redis::Value| redis::from_redis_value::<String>(v).ok();
    pairs.into_iter().find_map(|(k, v)| (text(k).as_deref() == Some(name)).then(|| text(v)).flatten())
}

/// The deadline a renewal sent at `sent` and answered `-left_ms` tells.
pub(crate) fn deadline_of(sent: Instant, left_ms: u64) -> Instant {
    sent + Duration::from_millis(left_ms)
}

/// A revoked lock of a session, as `SESSION.INFO` lists it (a `-ttl` in
/// `SESSION.KEEPALIVE`'s reply, `cmd::Kept::Revoked`, asks for it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionRevoked {
    pub key: String,
    pub db: i64,
    pub revocation: Revocation,
}

/// The revoked locks a `SESSION.INFO` reply (flat or a map) lists, read
/// when it was sent at `sent`: `revoked` is `key, db, deadline, reason, …`
/// (Unix ms on the server's clock), and the server's now is the session's
/// `deadline` less its `ttl-left-ms`, so each deadline on this process's
/// clock is never later than the server's.
pub(crate) fn session_revocations(info: redis::Value, sent: Instant) -> Vec<SessionRevoked> {
    let Some(pairs) = pairs(info) else { return Vec::new() };
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v.clone()).ok();
    let int = |v: &redis::Value| redis::from_redis_value::<i64>(v.clone()).ok();
    let (mut deadline, mut left, mut listed) = (None, None, Vec::new());
    for (k, v) in pairs {
        match text(&k).as_deref() {
            Some("deadline") => deadline = int(&v),
            Some("ttl-left-ms") => left = int(&v),
            Some("revoked") => {
                if let redis::Value::Array(items) = v {
                    listed = items;
                }
            }
            _ => {}
        }
    }
    let Some(server_now) = deadline.zip(left).map(|(d, l)| d - l) else { return Vec::new() };
    listed
        .chunks_exact(4)
        .filter_map(|c| {
            let (key, db, at, reason) = (text(&c[0])?, int(&c[1])?, int(&c[2])?, text(&c[3]));
            let left_ms = at.saturating_sub(server_now).max(0) as u64;
            Some(SessionRevoked { key, db, revocation: Revocation { deadline: deadline_of(sent, left_ms), reason } })
        })
        .collect()
}

/// The holds a `SESSION.INFO` reply (flat or a map) lists as lost to an
/// eviction (`evicted`: `key, db, token, at, …`): (key, token) each. A
/// module without the field lists none.
pub(crate) fn session_evictions(info: &redis::Value) -> Vec<(String, String)> {
    let Some(pairs) = pairs(info.clone()) else { return Vec::new() };
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v.clone()).ok();
    let Some((_, redis::Value::Array(items))) = pairs.into_iter().find(|(k, _)| text(k).as_deref() == Some("evicted"))
    else {
        return Vec::new();
    };
    items.chunks_exact(4).filter_map(|c| Some((text(&c[0])?, text(&c[2])?))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicted_holds_are_read_by_key_and_token() {
        use redis::Value::{Array, BulkString, Int};
        let b = |s: &str| BulkString(s.as_bytes().to_vec());
        let evicted = Array(vec![b("a"), Int(0), b("ta"), Int(1), b("s"), Int(0), b("p1"), Int(2)]);
        let info = Array(vec![b("holds"), Int(3), b("evicted-holds"), Int(2), b("evicted"), evicted]);
        assert_eq!(session_evictions(&info), vec![("a".into(), "ta".into()), ("s".into(), "p1".into())]);
        assert!(session_evictions(&Array(vec![b("holds"), Int(3)])).is_empty(), "an older module");
    }

    #[test]
    fn the_deadline_counts_from_the_send() {
        let t0 = Instant::now();
        assert_eq!(deadline_of(t0, 1_500), t0 + Duration::from_millis(1_500));
        let r = Revocation { deadline: t0, reason: None };
        assert_eq!(r.remaining(), Duration::ZERO);
    }

    #[test]
    fn a_sessions_revoked_locks_are_read_from_session_info() {
        use redis::Value::{Array, BulkString, Int, Map};
        let b = |s: &str| BulkString(s.as_bytes().to_vec());
        let t0 = Instant::now();
        let revoked = Array(vec![b("a"), Int(0), Int(10_500), b("drain"), b("b"), Int(2), Int(9_000), b("")]);
        let info = Array(vec![
            b("id"),
            b("x"),
            b("ttl-left-ms"),
            Int(50_000),
            b("deadline"),
            Int(60_000),
            b("revoked-holds"),
            Int(2),
            b("revoked"),
            revoked.clone(),
        ]);
        let got = session_revocations(info, t0);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].key.as_str(), got[0].db), ("a", 0));
        assert_eq!(
            got[0].revocation,
            Revocation { deadline: t0 + Duration::from_millis(500), reason: Some("drain".into()) }
        );
        assert_eq!(got[1].revocation.deadline, t0, "a deadline already passed is now");
        let map = Map(vec![(b("deadline"), Int(60_000)), (b("ttl-left-ms"), Int(50_000)), (b("revoked"), revoked)]);
        assert_eq!(session_revocations(map, t0), got);
        assert!(session_revocations(Array(vec![b("revoked"), Array(vec![])]), t0).is_empty());
        assert!(session_revocations(redis::Value::Nil, t0).is_empty());
    }

    #[test]
    fn the_reason_is_read_from_lock_info() {
        use redis::Value::{Array, BulkString, Int, Map, Nil};
        let b = |s: &str| BulkString(s.as_bytes().to_vec());
        let flat = Array(vec![b("owner"), b("t"), b("ttl-ms"), Int(5), b("revoked"), b("drain")]);
        assert_eq!(reason_of(flat), Some("drain".into()));
        assert_eq!(reason_of(Map(vec![(b("revoked"), b(""))])), Some(String::new()));
        assert_eq!(reason_of(Array(vec![b("revoked"), Nil])), None);
        assert_eq!(reason_of(Nil), None);
        let r =
            parse_revoke(Array(vec![b("result"), b("revoked"), b("token"), b("t"), b("deadline"), Int(9)])).unwrap();
        assert_eq!(
            r,
            RevokeReply { outcome: RevokeOutcome::Revoked, token: Some("t".into()), deadline_unix_ms: Some(9) }
        );
        let r = parse_revoke(Array(vec![b("result"), b("no-holder"), b("token"), Nil, b("deadline"), Nil])).unwrap();
        assert_eq!((r.outcome, r.token, r.deadline_unix_ms), (RevokeOutcome::NoHolder, None, None));
        assert!(parse_revoke(Array(vec![b("result"), b("maybe")])).is_err());
        assert!(parse_revoke(Int(1)).is_err());
    }
}
