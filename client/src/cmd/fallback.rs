//! A [`LockCmd`] for a server without the module: the reference Lua
//! scripts (and `SET NX PX` for acquire), which only the exclusive lock's
//! commands without a leader's value or lease options have.

use std::sync::LazyLock;

use redis::{Cmd, Script};
use redis_lock_rules::{encode, scripts};

use crate::cmd::reply::is_unknown_command;
use crate::cmd::{Fallback, LockCmd};
use crate::error::Error;

static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RENEW));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RELEASE));
static TAKEOVER: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::TAKEOVER));

impl LockCmd {
    /// Whether a server without the module can serve it (by the scripts):
    /// the exclusive lock's commands, without what only the module has (a
    /// leader's value, a lock-delay, a hold limit).
    pub(crate) fn has_fallback(&self) -> bool {
        // A session-held grant never falls back: the scripts' lease would
        // expire with nothing renewing it.
        let module_only =
            matches!(self, LockCmd::Acquire { elect: Some(_), .. } | LockCmd::Acquire { session: Some(_), .. })
                || !self.lease().is_empty();
        self.kind().has_fallback() && !module_only
    }

    /// An error that says "no such command" as [`Error::Unsupported`]
    /// for a command without a script fallback; any other error unchanged.
    pub(crate) fn explain(&self, e: Error) -> Error {
        match e {
            Error::Redis(r) if !self.has_fallback() && is_unknown_command(&r) => {
                Error::Unsupported { command: self.name() }
            }
            e => e,
        }
    }

    /// `None` for a kind without a fallback.
    pub(crate) fn fallback(&self) -> Option<Fallback> {
        if !self.has_fallback() {
            return None;
        }
        Some(match self {
            // Without the module there is no server-side queue: a waiting
            // acquire polls (the caller's backoff), so `wait_ms` is unused.
            LockCmd::Acquire { key, token, ttl_ms, .. } => {
                let mut c = redis::cmd("SET");
                c.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
                Fallback::Cmd(c)
            }
            LockCmd::Renew { key, token, ttl_ms, .. } => {
                let mut inv = RENEW.prepare_invoke();
                inv.key(key).arg(token).arg(ttl_ms);
                Fallback::Script(inv)
            }
            LockCmd::Release { key, token, .. } => {
                let mut inv = RELEASE.prepare_invoke();
                inv.key(key).arg(token);
                Fallback::Script(inv)
            }
            LockCmd::Takeover { key, token, run_id, ttl_ms, .. } => {
                let mut inv = TAKEOVER.prepare_invoke();
                inv.key(key).arg(encode::structured_value(token, run_id)).arg(ttl_ms);
                Fallback::Script(inv)
            }
        })
    }

    /// The script a fallback command runs (its source, to load it) and the
    /// `EVALSHA` that runs it; for renew and release only, the operations the
    /// engine batches.
    pub(crate) fn batch_script(&self) -> Option<(&'static str, Cmd)> {
        if !self.kind().has_fallback() {
            return None;
        }
        let (source, script) = match self {
            LockCmd::Renew { .. } => (scripts::RENEW, &*RENEW),
            LockCmd::Release { .. } => (scripts::RELEASE, &*RELEASE),
            _ => return None,
        };
        let mut c = redis::cmd("EVALSHA");
        c.arg(script.get_hash()).arg(1).arg(self.key()).arg(self.token());
        if let LockCmd::Renew { ttl_ms, .. } = self {
            c.arg(ttl_ms);
        }
        Some((source, c))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use crate::cmd::LockKind;
    use crate::error::Error;

    use super::*;

    #[test]
    fn unknown_commands_of_kinds_without_fallback_are_unsupported() {
        let server = |line: &str| {
            Error::Redis(
                redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(Value::extract_error).unwrap_err(),
            )
        };
        let ttl = Duration::from_millis(100);
        let unknown = "ERR unknown command 'SEM.ACQUIRE', with args beginning with: ";
        let sem = LockCmd::acquire_of(LockKind::Permit { limit: 2 }, "k", "t", ttl).unwrap();
        assert!(matches!(sem.explain(server(unknown)), Error::Unsupported { command: "SEM.ACQUIRE" }));
        assert!(matches!(
            sem.releasing().unwrap().explain(server(unknown)),
            Error::Unsupported { command: "SEM.RELEASE" }
        ));
        assert!(matches!(
            sem.explain(server("ERR limit differs from the semaphore's: its limit is 3")),
            Error::Redis(_)
        ));
        assert!(
            matches!(LockCmd::acquire("k", "t", ttl).unwrap().explain(server(unknown)), Error::Redis(_)),
            "the exclusive lock falls back instead"
        );
    }
}
