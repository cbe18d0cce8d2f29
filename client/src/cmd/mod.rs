//! The one command builder behind both APIs, pure: a [`LockCmd`] with
//! checked arguments, as a `LOCK.*` module command or, for a server without
//! the module, as the reference Lua scripts (and `SET NX PX` for acquire),
//! which behave the same by construction: the module was written against
//! those scripts. This file builds and checks the commands; the module
//! command is written in `module.rs`, the scripts' in `fallback.rs`. What
//! the replies mean is in `reply.rs`, LOCK.GUARD's command in `guard.rs`;
//! sending, and finding out which of the two a server speaks, is the
//! transport's (`send.rs`).

mod all;
mod elect;
mod fallback;
mod guard;
mod kind;
mod lease;
mod module;
mod reply;
mod session;

pub(crate) use all::{acquire_all_cmd, groups};
pub(crate) use elect::{leader_cmd, observe_cmd, proclaim_cmd, proclaim_reply};
pub(crate) use guard::{guard_cmd, guard_refusal, GuardRefusal};
pub use kind::LockKind;
pub(crate) use lease::Lease;
pub(crate) use reply::{
    fallback_reply, is_unknown_command, is_wait_unsupported, module_reply, no_fallback, unexpected, Grant,
};
pub(crate) use session::{
    adopt_cmd, grant_cmd, grant_reply, info_cmd, keepalive_cmd, keepalive_reply, revoke_cmd, session_refusal, Kept,
    Refusal,
};

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use redis::Cmd;
use redis_lock_rules::{args, holders, ArgError};

use crate::attach::SessionLease;
use crate::error::{Error, Result};

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
        /// `SESSION id`: held by this session of the node (module only).
        session: Option<Arc<SessionLease>>,
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
            session: None,
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

    /// The same acquire held by `session` (`SESSION id`). The session's
    /// lock-delay is the lock's: the grant names none of its own.
    pub(crate) fn with_session(&self, s: Arc<SessionLease>) -> Self {
        let mut c = self.clone();
        if let LockCmd::Acquire { session, lease, .. } = &mut c {
            *session = Some(s);
            lease.lock_delay_ms = None;
        }
        c
    }

    /// The session an acquire attaches to, if any.
    pub(crate) fn session(&self) -> Option<&Arc<SessionLease>> {
        match self {
            LockCmd::Acquire { session, .. } => session.as_ref(),
            _ => None,
        }
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
}
