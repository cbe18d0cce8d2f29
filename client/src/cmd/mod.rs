//! The one command builder behind both APIs, pure: a [`LockCmd`] with
//! checked arguments, as a `LOCK.*` module command or, for a server without
//! the module, as the reference Lua scripts (and `SET NX PX` for acquire),
//! which behave the same by construction: the module was written against
//! those scripts. What the replies mean is in `reply.rs`, LOCK.GUARD's
//! command in `guard.rs`; sending, and finding out which of the two a
//! server speaks, is the transport's (`send.rs`).

mod elect;
mod guard;
mod kind;
mod lease;
mod reply;

pub(crate) use elect::{leader_cmd, observe_cmd, proclaim_cmd, proclaim_reply};
pub(crate) use guard::{guard_cmd, guard_refusal, GuardRefusal};
pub use kind::LockKind;
pub(crate) use lease::Lease;
pub(crate) use reply::{
    fallback_reply, is_unknown_command, is_wait_unsupported, module_reply, no_fallback, unexpected, Grant,
};

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use redis::{Cmd, RedisResult, Script, Value};
use redis_lock_rules::{args, encode, holders, scripts, ArgError};

use crate::error::{Error, Result};

static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RENEW));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RELEASE));
static TAKEOVER: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::TAKEOVER));

/// Which commands a connection's server understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// Not asked yet: the next lock command finds out.
    Unknown,
    /// The `lock` module is loaded: `LOCK.*` commands.
    Module,
    /// No module: the reference Lua scripts via `EVALSHA`.
    Scripts,
}

/// One lock operation with validated arguments.
#[derive(Clone, Debug)]
pub(crate) enum LockCmd {
    /// `wait_ms`: block in the server for up to this long (module only,
    /// never 0, which would mean forever). `elect`: a leader's value,
    /// which makes it `LOCK.ELECT` (an exclusive lock's grant that stores
    /// the value and a term; module only).
    Acquire {
        kind: LockKind,
        key: String,
        token: String,
        ttl_ms: u64,
        wait_ms: Option<u64>,
        lease: Lease,
        elect: Option<String>,
    },
    /// `floor`: also raise the server's fence mark to at least this
    /// (`LOCK.RENEW ... FLOOR f`, for quorum locks; exclusive locks only).
    /// Module only: the fallback script renews without it, so a caller
    /// that needs the floor checks the connection's backend.
    Renew {
        kind: LockKind,
        key: String,
        token: String,
        ttl_ms: u64,
        floor: Option<u64>,
    },
    Release {
        kind: LockKind,
        key: String,
        token: String,
    },
    /// A non-empty run-id (an empty one is built as `Acquire`).
    Takeover {
        key: String,
        token: String,
        run_id: String,
        ttl_ms: u64,
        lease: Lease,
    },
}

/// What a lock command sends to a server without the module.
pub(crate) enum Fallback {
    Cmd(Cmd),
    /// `EVALSHA`, loaded on `NOSCRIPT`.
    Script(redis::ScriptInvocation<'static>),
}

impl LockCmd {
    /// An exclusive lock's acquire.
    pub(crate) fn acquire(key: &str, token: &str, ttl: Duration) -> Result<Self> {
        Self::acquire_of(LockKind::Exclusive, key, token, ttl)
    }

    pub(crate) fn acquire_of(kind: LockKind, key: &str, token: &str, ttl: Duration) -> Result<Self> {
        let ttl_ms = check(kind, key, token, ttl)?;
        Ok(LockCmd::Acquire {
            kind,
            key: key.into(),
            token: token.into(),
            ttl_ms,
            wait_ms: None,
            lease: Lease::default(),
            elect: None,
        })
    }

    /// `LOCK.ELECT key token ttl value`: a campaign for leadership of
    /// `key` with `value`; its grant's fence is the leader's term.
    pub(crate) fn elect(key: &str, token: &str, ttl: Duration, value: &str) -> Result<Self> {
        let mut c = Self::acquire(key, token, ttl)?;
        if let LockCmd::Acquire { elect, .. } = &mut c {
            *elect = Some(value.into());
        }
        Ok(c)
    }

    /// The same grant with `LOCKDELAY` / `MAXHOLD` (see [`Lease`]); renewals
    /// and releases have none.
    pub(crate) fn with_lease(mut self, l: Lease) -> Self {
        if let LockCmd::Acquire { lease, .. } | LockCmd::Takeover { lease, .. } = &mut self {
            *lease = l;
        }
        self
    }

    /// The lease options of a grant (none for renew and release).
    pub(crate) fn lease(&self) -> Lease {
        match self {
            LockCmd::Acquire { lease, .. } | LockCmd::Takeover { lease, .. } => *lease,
            _ => Lease::default(),
        }
    }

    /// The same acquire, blocking in the server for up to `wait_ms` (≥ 1).
    pub(crate) fn with_wait(&self, wait_ms: u64) -> Self {
        let mut c = self.clone();
        if let LockCmd::Acquire { wait_ms: w, .. } = &mut c {
            *w = Some(wait_ms.max(1));
        }
        c
    }

    /// Whether a server without the module can serve it (by the scripts):
    /// the exclusive lock's commands, without what only the module has (a
    /// leader's value, a lock-delay, a hold limit).
    pub(crate) fn has_fallback(&self) -> bool {
        let module_only = matches!(self, LockCmd::Acquire { elect: Some(_), .. }) || !self.lease().is_empty();
        self.kind().has_fallback() && !module_only
    }

    pub(crate) fn kind(&self) -> LockKind {
        match self {
            LockCmd::Acquire { kind, .. } | LockCmd::Renew { kind, .. } | LockCmd::Release { kind, .. } => *kind,
            LockCmd::Takeover { .. } => LockKind::Exclusive,
        }
    }

    /// The module command's name.
    pub(crate) fn name(&self) -> &'static str {
        let [acquire, renew, release, _] = self.kind().commands();
        match self {
            LockCmd::Acquire { elect: Some(_), .. } => "LOCK.ELECT",
            LockCmd::Acquire { .. } => acquire,
            LockCmd::Renew { .. } => renew,
            LockCmd::Release { .. } => release,
            LockCmd::Takeover { .. } => "LOCK.TAKEOVER",
        }
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

    /// The renewal of what this command acquires (same kind, key, token).
    pub(crate) fn renewal(&self, ttl: Duration) -> Result<Self> {
        Self::renew_of(self.kind(), self.key(), self.token(), ttl)
    }

    /// The release of what this command acquires (same kind, key, token).
    pub(crate) fn releasing(&self) -> Result<Self> {
        Self::release_of(self.kind(), self.key(), self.token())
    }

    pub(crate) fn key(&self) -> &str {
        match self {
            LockCmd::Acquire { key, .. }
            | LockCmd::Renew { key, .. }
            | LockCmd::Release { key, .. }
            | LockCmd::Takeover { key, .. } => key,
        }
    }

    pub(crate) fn token(&self) -> &str {
        match self {
            LockCmd::Acquire { token, .. }
            | LockCmd::Renew { token, .. }
            | LockCmd::Release { token, .. }
            | LockCmd::Takeover { token, .. } => token,
        }
    }

    /// An exclusive lock's renewal.
    pub(crate) fn renew(key: &str, token: &str, ttl: Duration) -> Result<Self> {
        Self::renew_of(LockKind::Exclusive, key, token, ttl)
    }

    pub(crate) fn renew_of(kind: LockKind, key: &str, token: &str, ttl: Duration) -> Result<Self> {
        let ttl_ms = check(kind, key, token, ttl)?;
        Ok(LockCmd::Renew { kind, key: key.into(), token: token.into(), ttl_ms, floor: None })
    }

    /// The same renewal with `FLOOR floor` (see [`LockCmd::Renew`]).
    pub(crate) fn with_floor(self, floor: u64) -> Self {
        match self {
            LockCmd::Renew { kind: LockKind::Exclusive, key, token, ttl_ms, .. } => {
                LockCmd::Renew { kind: LockKind::Exclusive, key, token, ttl_ms, floor: Some(floor) }
            }
            other => other,
        }
    }

    /// An exclusive lock's release.
    pub(crate) fn release(key: &str, token: &str) -> Result<Self> {
        Self::release_of(LockKind::Exclusive, key, token)
    }

    pub(crate) fn release_of(kind: LockKind, key: &str, token: &str) -> Result<Self> {
        check_token(kind, key, token)?;
        Ok(LockCmd::Release { kind, key: key.into(), token: token.into() })
    }

    pub(crate) fn takeover(key: &str, token: &str, run_id: &str, ttl: Duration) -> Result<Self> {
        if run_id.is_empty() {
            // As in the Go wrapper and LOCK.TAKEOVER: no run-id, plain acquire.
            return Self::acquire(key, token, ttl);
        }
        let ttl_ms = check(LockKind::Exclusive, key, token, ttl)?;
        Ok(LockCmd::Takeover {
            key: key.into(),
            token: token.into(),
            run_id: run_id.into(),
            ttl_ms,
            lease: Lease::default(),
        })
    }

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
            LockCmd::Acquire { key, token, ttl_ms, wait_ms, lease, elect: Some(value), .. } => {
                // Always fenced: the reply is the term or nil.
                c.arg(key).arg(token).arg(ttl_ms).arg(value);
                if let Some(ms) = wait_ms {
                    c.arg("WAIT").arg(ms);
                }
                lease.append(&mut c);
            }
            LockCmd::Acquire { kind, key, token, ttl_ms, wait_ms, lease, elect: None } => {
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

/// Key and token: a semaphore's or read-write lock's token may not start
/// with the NUL byte its hold limits are stored under.
fn check_token(kind: LockKind, key: &str, token: &str) -> Result<()> {
    match kind {
        LockKind::Exclusive => args::check_key_and_token(key.as_bytes(), token.as_bytes())?,
        _ => args::check_holder_key_and_token(key.as_bytes(), token.as_bytes())?,
    }
    Ok(())
}

/// The checks of `redis_lock_rules::args` (and `holders` for the kinds
/// stored as sorted sets), made before anything is sent so module and
/// fallback reject the same calls with the same words.
fn check(kind: LockKind, key: &str, token: &str, ttl: Duration) -> Result<u64> {
    check_token(kind, key, token)?;
    if let LockKind::Permit { limit } = kind {
        if limit == 0 || limit > holders::MAX_EXACT.unsigned_abs() {
            return Err(ArgError::LimitInvalid.into());
        }
    }
    let ms = ttl.as_millis();
    if ms == 0 {
        return Err(ArgError::TtlNotPositive.into());
    }
    let ms = i64::try_from(ms).map_err(|_| Error::from(ArgError::TtlTooLarge))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    // A lease end is a sorted-set score, exact only up to 2^53.
    if kind.has_fallback() {
        args::expiry_at(now, ms)?;
    } else {
        holders::lease_end(now, ms)?;
    }
    // ms > 0, so the conversion is lossless.
    Ok(ms.unsigned_abs())
}

/// A fresh token: 128 random bits as 32 lowercase hex digits. From
/// `thread_rng`, a CSPRNG seeded from the OS and reseeded after a fork (and
/// every 64 KiB), not `OsRng`: with a `getrandom` syscall per lock the
/// client's acquire+release measured ~2 µs slower than with a fixed token
/// (51.4 vs 49.4 µs, `benches/round_trip.rs`, busy cores).
pub(crate) fn random_token() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    // By table: `format!("{:032x}")` costs ~750 instructions per lock.
    bytes.iter().flat_map(|&b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]).map(char::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_differ() {
        let a = random_token();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, random_token());
    }

    #[test]
    fn arguments_are_checked_before_sending() {
        let ttl = Duration::from_millis(100);
        assert!(matches!(LockCmd::acquire("", "t", ttl), Err(Error::InvalidArgument(_))));
        assert!(matches!(LockCmd::acquire("k", "", ttl), Err(Error::InvalidArgument(_))));
        assert!(
            matches!(LockCmd::renew("k", "t", Duration::from_micros(999)), Err(Error::InvalidArgument(m)) if m.contains("ttl"))
        );
        assert!(
            matches!(LockCmd::renew("k", "t", Duration::MAX), Err(Error::InvalidArgument(m)) if m.contains("too large"))
        );
        assert!(matches!(LockCmd::takeover("k", "t", "", ttl), Ok(LockCmd::Acquire { .. })));
        assert!(matches!(LockCmd::takeover("k", "t", "r", ttl), Ok(LockCmd::Takeover { ttl_ms: 100, .. })));
    }

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
