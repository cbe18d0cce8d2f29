//! The SESSION.* command handlers (docs/sessions.md): a session is one
//! lease that keeps any number of locks (`LOCK.ACQUIRE … SESSION id`).
//! The table and its replication are `crate::store::session`; the timer
//! ending sessions in slices, `crate::blocked::session_end`.

use redis_lock_rules::args::{
    check_key_and_token, parse_session_id, parse_ttl, session_id_text, ArgError, MAX_LOCK_DELAY_MS,
};
use redis_lock_rules::held::{self, SessionState};
use redis_lock_rules::number::{parse_count, parse_positive};
use redis_lock_rules::session::Id;
use redis_lock_rules::session::Reason;
use redis_lock_rules::{value, Entry};
use redis_module::raw::RedisModuleString;

use crate::blocked::{session_end, waiters};
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::errors::SESSION_APPLY_INTERNAL;
use crate::boundary::reply::{Argv, Failure, Item, Outcome, Reply, Value};
use crate::server::counters::{self as stats, holder_counters};
use crate::server::revoked;
use crate::store::holders_key::{Edit, Hold, HoldersKey, Mark};
use crate::store::lock_key::{LockKey, NewValue};
use crate::store::session::{self, table, Apply};
use crate::store::session_revoked;

/// How many holds SESSION.INFO lists without COUNT, and at most.
const INFO_COUNT: usize = 10;
const INFO_MAX: usize = 1_000;

/// SESSION.GRANT ttl-ms [LOCKDELAY ms]
///
/// Replies the new session's id (32 hex digits).
pub fn grant(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, ttl, ref options @ ..] = argv else { return Err(Failure::Arity) };
    let ttl = parse_ttl(bytes(ttl))?;
    let mut lock_delay = 0;
    let mut options = options.iter().map(|&o| bytes(o));
    while let Some(option) = options.next() {
        if !option.eq_ignore_ascii_case(b"LOCKDELAY") {
            return Err(ArgError::Syntax.into());
        }
        lock_delay = parse_lock_delay(options.next().ok_or(ArgError::Syntax)?)?;
    }
    let (id, deadline) = session::grant(ctx, ttl, lock_delay)?;
    session_end::arm(ctx, deadline.saturating_add(1));
    Ok(Reply::Bytes(session_id_text(id).into_bytes()))
}

fn parse_lock_delay(arg: &[u8]) -> Result<i64, ArgError> {
    if arg == b"0" {
        return Ok(0);
    }
    parse_positive(arg).ok().filter(|&ms| ms <= MAX_LOCK_DELAY_MS).ok_or(ArgError::LockDelayInvalid)
}

/// SESSION.KEEPALIVE id [id ...]
///
/// Replies, per id in order, its TTL (ms) when it was kept alive, or 0
/// when it is unknown or ended; `-ttl` when it was kept alive and some of
/// its holds are revoked (LOCK.REVOKE: SESSION.INFO lists them). O(1) per
/// id, whatever it holds.
pub fn keepalive(ctx: Ctx, argv: Argv) -> Outcome {
    let [_, ids @ ..] = argv else { return Err(Failure::Arity) };
    if ids.is_empty() {
        return Err(Failure::Arity);
    }
    let kept = ids
        .iter()
        .map(|&id| {
            let Ok(id) = parse_session_id(bytes(id)) else { return 0 };
            match session::keepalive(ctx, id) {
                Some(ttl) if session_revoked::count(id) > 0 => -ttl,
                Some(ttl) => ttl,
                None => 0,
            }
        })
        .collect();
    Ok(Reply::Ints(kept))
}

/// SESSION.REVOKE id
///
/// Replies 1 when a live session was ended (its locks released without
/// lock-delay), else 0.
pub fn revoke(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, id] = argv else { return Err(Failure::Arity) };
    let Ok(id) = parse_session_id(bytes(id)) else { return Ok(Reply::Int(0)) };
    let revoked = session::revoke(ctx, id);
    if revoked {
        waiters::session_ended_answer(ctx, id);
        session_end::arm(ctx, ctx.now_ms());
    }
    Ok(Reply::Int(i64::from(revoked)))
}

/// SESSION.ADOPT key token id
///
/// Replies 1 when `key` held `token` for a session this node does not
/// know (the key moved here from another node, docs/sessions.md) and the
/// live session `id` of this node holds it now (the orphan's end gone, its
/// hold limit kept); else 0, and nothing is written.
pub fn adopt(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token, id] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    let id = parse_session_id(bytes(id)).map_err(|_| ArgError::SessionUnknown)?;
    let now = ctx.now_ms();
    let SessionState::Alive { lock_delay } = session::state(id, now) else {
        return Err(ArgError::SessionUnknown.into());
    };
    // Opened without settling: a refusal writes nothing.
    let mut k = LockKey::open(ctx, key);
    let adopted = match k.entry() {
        Entry::Str(v) => value::parse_held(v).and_then(|h| {
            let state = session::state_of(&h.session, now);
            held::adopt(&h, bytes(token), state, &session_id_text(id), lock_delay, now)
        }),
        Entry::Absent => None,
        Entry::OtherType => {
            drop(k);
            return holders_adopt(ctx, key, token, id, now);
        }
    };
    let Some((value, pxat)) = adopted else { return Ok(Reply::Int(0)) };
    k.set_maybe_expiring(NewValue::Composed(&value), pxat);
    session::attach(ctx, id, key);
    stats::ORPHANS_ADOPTED.add();
    Ok(Reply::Int(1))
}

/// SESSION.ADOPT of a semaphore's or read-write lock's holder: `token`'s
/// live place, whose session member names a session this node does not
/// know, gets the member of session `id` (one `ZADD`); its place (and any
/// hold limit) stays. A refusal writes nothing: not even the ended leases
/// the scan found are pruned.
fn holders_adopt(ctx: Ctx, key: *mut RedisModuleString, token: *mut RedisModuleString, id: Id, now: i64) -> Outcome {
    let mut k = HoldersKey::open(ctx, key);
    let Some(summary) = k.scan(now, Some(token)).map_err(|_| Failure::WrongType)? else {
        return Ok(Reply::Int(0));
    };
    let orphan = match (summary.own, summary.session) {
        (Some(at), Some(short)) if !summary.revoked => {
            (session::state_of_short(short, now).0 == SessionState::Unknown).then_some(at)
        }
        _ => None,
    };
    let Some(at) = orphan else { return Ok(Reply::Int(0)) };
    k.mark_session(Mark::Set(held::short(id)));
    k.commit(
        Some(&summary),
        Edit::Put { token, at, tag: None, hold: Hold::Keep },
        holder_counters(summary.kind.family()).expired,
    );
    drop(k);
    session::attach_holder(ctx, id, key, token);
    stats::ORPHANS_ADOPTED.add();
    Ok(Reply::Int(1))
}

/// SESSION.INFO id [COUNT n]
pub fn info(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, id, ref options @ ..] = argv else { return Err(Failure::Arity) };
    let count = match options {
        [] => INFO_COUNT,
        [option, n] if bytes(*option).eq_ignore_ascii_case(b"COUNT") => {
            parse_count(bytes(*n)).filter(|&n| n <= INFO_MAX).ok_or(ArgError::TopCountInvalid)?
        }
        _ => return Err(ArgError::Syntax.into()),
    };
    let Ok(id) = parse_session_id(bytes(id)) else { return Ok(Reply::Nil) };
    let now = ctx.now_ms();
    let t = table();
    let Some(info) = t.info(id, count) else { return Ok(Reply::Nil) };
    let state: &[u8] = match info.ended.map(|e| e.reason) {
        Some(Reason::Revoked) => b"revoked",
        Some(Reason::Expired) => b"expired",
        None if info.deadline <= now => b"expired",
        None => b"alive",
    };
    let holds = info
        .first
        .iter()
        .map(|hold| {
            let (db, key, _) = hold.split();
            (key.to_vec(), i64::from(db))
        })
        .collect();
    let (held, ttl, lock_delay, deadline) = (info.holds, info.ttl, info.lock_delay, info.deadline);
    drop(t);
    // Its revoked holds: key, database, deadline, reason each.
    let revoked_holds = session_revoked::count(id);
    let revoked = session_revoked::list(id, count)
        .into_iter()
        .flat_map(|(hold, r)| {
            let (db, key, _) = hold.split();
            [Item::Bytes(key.into()), Item::Int(i64::from(db)), Item::Int(r.deadline), Item::Bytes(r.reason.into())]
        })
        .collect();
    Ok(Reply::Fields(vec![
        (c"id", Value::Bytes(session_id_text(id).into_bytes())),
        (c"state", Value::Bytes(state.to_vec())),
        (c"ttl-ms", Value::Int(ttl)),
        (c"ttl-left-ms", Value::Int((deadline - now).max(0))),
        (c"deadline", Value::Int(deadline)),
        (c"lock-delay-ms", Value::Int(lock_delay)),
        (c"holds", Value::Int(held as i64)),
        (c"first", Value::Holders(holds)),
        (c"revoked-holds", Value::Int(revoked_holds as i64)),
        (c"revoked", Value::Items(revoked)),
    ]))
}

/// SESSION.LIST [COUNT n]
///
/// Replies the ids of this node's sessions in order (ended ones still
/// releasing their locks included), the first `n` with COUNT. O(S log S)
/// for S sessions.
pub fn list(_ctx: Ctx, argv: Argv) -> Outcome {
    let count = match argv {
        [_] => usize::MAX,
        [_, option, n] if bytes(*option).eq_ignore_ascii_case(b"COUNT") => {
            parse_count(bytes(*n)).ok_or(ArgError::CountInvalid)?
        }
        _ => return Err(ArgError::Syntax.into()),
    };
    let mut ids: Vec<u128> = table().iter().map(|(id, _)| id).collect();
    ids.sort_unstable();
    Ok(Reply::Strings(ids.into_iter().take(count).map(|id| session_id_text(id).into_bytes()).collect()))
}

/// SESSION.APPLY GRANT id ttl-ms lock-delay-ms deadline | END id at EXPIRED|REVOKED | FORGET id | ATTACH id key [token] | DETACH id key [token] | REVOKEHOLD id key deadline reason [token] | NOTE key deadline [token reason]
///
/// Internal: what a master's session changed, as replicas and the AOF
/// apply it (absolute times); also a revoked hold's note (`NOTE`: the
/// same plumbing, so no command of its own). Refused from clients.
pub fn apply(ctx: Ctx, argv: Argv) -> Outcome {
    if !ctx.replaying() {
        return Err(Failure::Error(SESSION_APPLY_INTERNAL));
    }
    let [_, op, id, rest @ ..] = argv else { return Err(Failure::Arity) };
    let int = |s| parse_signed(bytes(s)).ok_or(Failure::Arg(ArgError::Syntax));
    let op = bytes(*op);
    if op.eq_ignore_ascii_case(b"NOTE") {
        // Not a session's: a revoked hold's note (`crate::server::revoked`),
        // `id` is its key.
        let key = bytes(*id);
        let deadline = match *rest {
            [deadline] => int(deadline)?,
            [deadline, token, reason] => {
                let deadline = int(deadline)?;
                revoked::apply_reason(ctx, key, bytes(token), bytes(reason));
                deadline
            }
            _ => return Err(ArgError::Syntax.into()),
        };
        revoked::apply(ctx, key, deadline);
        return Ok(Reply::Ok);
    }
    let id = parse_session_id(bytes(*id))?;
    let entry = match rest {
        [ttl, delay, deadline] if op.eq_ignore_ascii_case(b"GRANT") => {
            Apply::Grant { id, ttl: int(*ttl)?, lock_delay: int(*delay)?, deadline: int(*deadline)? }
        }
        [at, reason] if op.eq_ignore_ascii_case(b"END") => {
            let reason =
                if bytes(*reason).eq_ignore_ascii_case(b"REVOKED") { Reason::Revoked } else { Reason::Expired };
            Apply::End { id, at: int(*at)?, reason }
        }
        [] if op.eq_ignore_ascii_case(b"FORGET") => {
            session_revoked::forget_session(id);
            Apply::Forget { id }
        }
        [key, token @ ..] if token.len() <= 1 && op.eq_ignore_ascii_case(b"ATTACH") => {
            Apply::Attach { id, key: bytes(*key), token: token.first().map(|&t| bytes(t)) }
        }
        [key, token @ ..] if token.len() <= 1 && op.eq_ignore_ascii_case(b"DETACH") => {
            session_revoked::forget(ctx, id, bytes(*key), token.first().map(|&t| bytes(t)));
            Apply::Detach { id, key: bytes(*key), token: token.first().map(|&t| bytes(t)) }
        }
        [key, deadline, reason, token @ ..] if token.len() <= 1 && op.eq_ignore_ascii_case(b"REVOKEHOLD") => {
            let token = token.first().map(|&t| bytes(t));
            session_revoked::apply_revoke(ctx, id, bytes(*key), token, int(*deadline)?, bytes(*reason));
            return Ok(Reply::Ok);
        }
        _ => return Err(ArgError::Syntax.into()),
    };
    session::apply(ctx, entry);
    Ok(Reply::Ok)
}

fn parse_signed(arg: &[u8]) -> Option<i64> {
    std::str::from_utf8(arg).ok()?.parse().ok()
}
