//! A [`LockCmd`] as the module's command (`LOCK.*`, `SEM.*`, `RWLOCK.*`),
//! and what its reply in a pipeline means.

use redis::{Cmd, RedisResult, Value};

use crate::cmd::reply::{is_unknown_command, module_reply, Grant};
use crate::cmd::{LockCmd, LockKind};

impl LockCmd {
    /// The module command. Acquire and takeover always ask for a fence: the
    /// reply is then the fence or nil, never an ambiguous 1 (a valid fence).
    pub(crate) fn module_cmd(&self) -> Cmd {
        // Sized up front: a command grown argument by argument reallocates
        // its two buffers several times (~800 instructions per lock).
        let extra = match self {
            LockCmd::Takeover { run_id, .. } => run_id.len(),
            LockCmd::Acquire { elect: Some(v), .. } => v.len(),
            _ => 0,
        };
        let mut c = Cmd::with_capacity(12, 100 + self.key().len() + self.token().len() + extra);
        c.arg(self.name());
        match self {
            LockCmd::Acquire { key, token, ttl_ms, wait_ms, lease, elect: Some(value), session, .. } => {
                // Always fenced: the reply is the term or nil.
                c.arg(key).arg(token).arg(ttl_ms).arg(value);
                if let Some(ms) = wait_ms {
                    c.arg("WAIT").arg(ms);
                }
                lease.append(&mut c);
                if let Some(s) = session {
                    c.arg("SESSION").arg(&s.id);
                }
            }
            LockCmd::Acquire { kind, key, token, ttl_ms, wait_ms, lease, elect: None, session } => {
                c.arg(key).arg(token);
                match kind {
                    LockKind::Exclusive => {}
                    LockKind::Permit { limit } => {
                        c.arg(limit);
                    }
                    LockKind::Read => {
                        c.arg("READ");
                    }
                    LockKind::Write => {
                        c.arg("WRITE");
                    }
                }
                c.arg(ttl_ms).arg("FENCE");
                if let Some(ms) = wait_ms {
                    c.arg("WAIT").arg(ms);
                }
                lease.append(&mut c);
                if let Some(s) = session {
                    c.arg("SESSION").arg(&s.id);
                }
            }
            LockCmd::Renew { key, token, ttl_ms, floor, .. } => {
                c.arg(key).arg(token).arg(ttl_ms);
                if let Some(f) = floor {
                    c.arg("FLOOR").arg(f);
                }
            }
            LockCmd::Release { key, token, .. } => {
                c.arg(key).arg(token);
            }
            LockCmd::Takeover { key, token, run_id, ttl_ms, lease } => {
                c.arg(key).arg(token).arg(run_id).arg(ttl_ms).arg("FENCE");
                lease.append(&mut c);
            }
        }
        c
    }

    /// A module command's reply in a pipeline; `None` when the command
    /// has to run again alone (the module is not there, or no longer).
    pub(crate) fn batch_reply(&self, v: Value) -> Option<RedisResult<Grant>> {
        match v {
            Value::ServerError(e) => {
                let e = redis::RedisError::from(e);
                (!is_unknown_command(&e)).then_some(Err(e))
            }
            v => Some(module_reply(v, self.fenced())),
        }
    }

    /// Whether it grants the key (acquire, takeover): then an outcome in
    /// doubt may have left a grant to release.
    pub(crate) fn grants(&self) -> bool {
        self.fenced()
    }

    /// Whether the module's reply is a fence (or nil) rather than 1/0.
    pub(crate) fn fenced(&self) -> bool {
        matches!(self, LockCmd::Acquire { .. } | LockCmd::Takeover { .. })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use crate::cmd::Lease;
    use crate::error::Error;

    use super::*;

    #[test]
    fn module_commands_ask_for_fences_and_waits() {
        let ttl = Duration::from_millis(100);
        let packed = |c: &LockCmd| String::from_utf8_lossy(&c.module_cmd().get_packed_command()).replace("\r\n", " ");
        let a = LockCmd::acquire("k", "t", ttl).unwrap();
        assert!(packed(&a).ends_with("$5 FENCE "), "{}", packed(&a));
        assert!(packed(&a.with_wait(250)).ends_with("$5 FENCE $4 WAIT $3 250 "), "{}", packed(&a.with_wait(250)));
        assert!(packed(&a.with_wait(0)).ends_with("$4 WAIT $1 1 "), "0 would mean forever");
        assert!(packed(&LockCmd::takeover("k", "t", "r", ttl).unwrap()).ends_with("$5 FENCE "));
        assert!(!packed(&LockCmd::renew("k", "t", ttl).unwrap()).contains("FENCE"));
        assert!(packed(&LockCmd::renew("k", "t", ttl).unwrap().with_floor(17)).ends_with("$3 100 $5 FLOOR $2 17 "));
    }

    #[test]
    fn campaigns_and_lease_options_are_module_commands() {
        let ttl = Duration::from_millis(100);
        let packed = |c: &LockCmd| String::from_utf8_lossy(&c.module_cmd().get_packed_command()).replace("\r\n", " ");
        let e = LockCmd::elect("k", "t", ttl, "host:1").unwrap();
        assert_eq!(e.name(), "LOCK.ELECT");
        assert!(e.fenced() && e.grants(), "the reply is a term or nil");
        assert!(packed(&e).ends_with("$10 LOCK.ELECT $1 k $1 t $3 100 $6 host:1 "), "{}", packed(&e));
        assert!(!packed(&e).contains("FENCE"), "always fenced: no FENCE argument");
        let lease = Lease::new(Some(Duration::from_secs(5)), Some(Duration::from_secs(60)), ttl).unwrap();
        let w = e.clone().with_lease(lease).with_wait(250);
        assert!(
            packed(&w).ends_with("$6 host:1 $4 WAIT $3 250 $9 LOCKDELAY $4 5000 $7 MAXHOLD $5 60000 "),
            "{}",
            packed(&w)
        );
        assert!(!e.has_fallback() && e.fallback().is_none(), "no script elects");
        let a = LockCmd::acquire("k", "t", ttl).unwrap();
        assert!(a.has_fallback());
        let leased = a.clone().with_lease(lease);
        assert!(packed(&leased).ends_with("$5 FENCE $9 LOCKDELAY $4 5000 $7 MAXHOLD $5 60000 "), "{}", packed(&leased));
        assert!(!leased.has_fallback() && leased.fallback().is_none(), "the scripts cannot keep a lease rule");
        assert_eq!(leased.renewal(ttl).unwrap().lease(), Lease::default(), "renewals carry none");
        assert!(!packed(&leased.renewal(ttl).unwrap()).contains("MAXHOLD"));
        let t = LockCmd::takeover("k", "t", "r", ttl).unwrap().with_lease(lease);
        assert!(packed(&t).ends_with("$5 FENCE $9 LOCKDELAY $4 5000 $7 MAXHOLD $5 60000 "), "{}", packed(&t));
        let server = |line: &str| {
            Error::Redis(
                redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(Value::extract_error).unwrap_err(),
            )
        };
        let unknown = "ERR unknown command 'LOCK.ELECT', with args beginning with: ";
        assert!(matches!(e.explain(server(unknown)), Error::Unsupported { command: "LOCK.ELECT" }));
        assert!(matches!(leased.explain(server(unknown)), Error::Unsupported { command: "LOCK.ACQUIRE" }));
    }

    #[test]
    fn kinds_send_their_module_commands() {
        let ttl = Duration::from_millis(100);
        let packed = |c: &LockCmd| String::from_utf8_lossy(&c.module_cmd().get_packed_command()).replace("\r\n", " ");
        let sem = LockCmd::acquire_of(LockKind::Permit { limit: 5 }, "k", "t", ttl).unwrap();
        assert!(
            packed(&sem.with_wait(7)).ends_with("$11 SEM.ACQUIRE $1 k $1 t $1 5 $3 100 $5 FENCE $4 WAIT $1 7 "),
            "{}",
            packed(&sem)
        );
        assert!(packed(&sem.renewal(ttl).unwrap()).ends_with("$9 SEM.RENEW $1 k $1 t $3 100 "));
        assert!(packed(&sem.releasing().unwrap()).ends_with("$11 SEM.RELEASE $1 k $1 t "));
        let read = LockCmd::acquire_of(LockKind::Read, "k", "t", ttl).unwrap();
        assert!(packed(&read).ends_with("$14 RWLOCK.ACQUIRE $1 k $1 t $4 READ $3 100 $5 FENCE "), "{}", packed(&read));
        assert!(packed(&LockCmd::acquire_of(LockKind::Write, "k", "t", ttl).unwrap()).contains("$5 WRITE $3 100 "));
        assert!(packed(&read.renewal(ttl).unwrap()).contains("RWLOCK.RENEW"));
        assert!(
            !packed(&read.renewal(ttl).unwrap().with_floor(3)).contains("FLOOR"),
            "RENEW of the holders' kinds takes no FLOOR"
        );
        for limit in [0, (1 << 53) + 1] {
            assert!(
                matches!(LockCmd::acquire_of(LockKind::Permit { limit }, "k", "t", ttl), Err(Error::InvalidArgument(m)) if m.contains("limit"))
            );
        }
        assert!(LockCmd::acquire_of(LockKind::Permit { limit: 1 << 53 }, "k", "t", ttl).is_ok());
        // A lease end is a score, exact only up to 2^53 ms.
        let long = Duration::from_millis(1 << 53);
        assert!(
            matches!(LockCmd::acquire_of(LockKind::Read, "k", "t", long), Err(Error::InvalidArgument(m)) if m.contains("too large"))
        );
    }
}
