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
use redis_lock_rules::session_gone::{parse_revoke_options, Gone};
use redis_lock_rules::{value, Entry};
use redis_module::raw::RedisModuleString;

use crate::blocked::{queue, session_end};
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::errors::SESSION_APPLY_INTERNAL;
use crate::boundary::reply::{Argv, Failure, Item, Outcome, Reply, Value};
use crate::server::counters::{self as stats, holder_counters};
use crate::server::revoked;
use crate::store::holders_key::{Edit, Hold, HoldersKey, Mark};
use crate::store::lock_key::{LockKey, NewValue};
use crate::store::session::{self, table, Apply};
use crate::store::{session_evicted, session_gone, session_revoked};

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
/// its holds are revoked (LOCK.REVOKE) or were lost to an eviction lately
/// (SESSION.INFO lists them). O(1) per id, whatever it holds.
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
                Some(ttl) if session_revoked::count(id) > 0 || session_evicted::count(id, ctx.now_ms()) > 0 => -ttl,
                Some(ttl) => ttl,
                None => 0,
            }
        })
        .collect();
    Ok(Reply::Ints(kept))
}

/// SESSION.REVOKE id [REASON text]
///
/// Replies 1 when a live session was ended (its locks released without
/// lock-delay), else 0. The reason is told to its holder (SESSION.INFO's
/// `end-reason`).
pub fn revoke(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, id, ref options @ ..] = argv else { return Err(Failure::Arity) };
    let options: Vec<&[u8]> = options.iter().map(|&o| bytes(o)).collect();
    let why = parse_revoke_options(&options)?;
    let Ok(id) = parse_session_id(bytes(id)) else { return Ok(Reply::Int(0)) };
    let revoked = session::revoke(ctx, id, why);
    if revoked {
        queue::session_ended_answer(ctx, id);
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
    // Its place: its session's again, whatever end an orphan walk gave it
    // (a hold limit's stays).
    let orphan = match (summary.own, summary.session) {
        (Some(at), Some(short)) if !summary.revoked => (session::state_of_short(short, now).0 == SessionState::Unknown)
            .then_some(held::adopted_place(at, summary.hold)),
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
    let Some(info) = t.info(id, count) else {
        drop(t);
        return Ok(session_gone::get(id, now).map_or(Reply::Nil, |g| gone_info(id, g)));
    };
    let state: &[u8] = match info.ended.map(|e| e.reason) {
        Some(reason) => ended_state(reason),
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
    let by_revoke = info.ended.is_some_and(|e| e.reason == Reason::Revoked);
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
    // An ended one's revoke reason, if told (the table keeps none).
    let why = by_revoke.then(|| session_gone::get(id, now)).flatten().and_then(|g| g.why);
    let ttl_left = (deadline - now).max(0);
    // Its holds lost to an eviction lately: key, database, token, when each.
    let evicted_holds = session_evicted::count(id, now);
    let evicted = session_evicted::list(id, count)
        .into_iter()
        .flat_map(|(hold, e)| {
            let (db, key, token) = hold.split();
            let token = token.unwrap_or_default().into();
            [Item::Bytes(key.into()), Item::Int(i64::from(db)), Item::Bytes(token), Item::Int(e.at)]
        })
        .collect();
    let described = Described { state, ttl, ttl_left, deadline, lock_delay, holds: held, why };
    Ok(described.reply(id, holds, (revoked_holds, revoked), (evicted_holds, evicted)))
}

/// SESSION.INFO's scalar fields of one session.
struct Described<'a> {
    state: &'a [u8],
    ttl: i64,
    ttl_left: i64,
    deadline: i64,
    lock_delay: i64,
    holds: usize,
    /// A revoke's REASON.
    why: Option<Box<str>>,
}

impl Described<'_> {
    /// The reply, with its first holds and its revoked ones.
    fn reply(
        self,
        id: u128,
        first: Vec<(Vec<u8>, i64)>,
        revoked: (usize, Vec<Item>),
        evicted: (usize, Vec<Item>),
    ) -> Reply {
        Reply::Fields(vec![
            (c"id", Value::Bytes(session_id_text(id).into_bytes())),
            (c"state", Value::Bytes(self.state.to_vec())),
            (c"ttl-ms", Value::Int(self.ttl)),
            (c"ttl-left-ms", Value::Int(self.ttl_left)),
            (c"deadline", Value::Int(self.deadline)),
            (c"lock-delay-ms", Value::Int(self.lock_delay)),
            (c"holds", Value::Int(self.holds as i64)),
            (c"first", Value::Holders(first)),
            (c"revoked-holds", Value::Int(revoked.0 as i64)),
            (c"revoked", Value::Items(revoked.1)),
            (c"end-reason", self.why.map_or(Value::Nil, |w| Value::Bytes(w.into_string().into_bytes()))),
            (c"evicted-holds", Value::Int(evicted.0 as i64)),
            (c"evicted", Value::Items(evicted.1)),
        ])
    }
}

/// SESSION.INFO's `state` of an ended session.
fn ended_state(reason: Reason) -> &'static [u8] {
    match reason {
        Reason::Revoked => b"revoked",
        Reason::Expired => b"expired",
    }
}

/// SESSION.INFO of a session that ended lately and whose locks are all
/// released: as while they were being released, with nothing left.
fn gone_info(id: u128, g: Gone) -> Reply {
    let state = ended_state(g.ended.reason);
    let (ttl, deadline, lock_delay, why) = (g.ttl, g.ended.at, g.lock_delay, g.why);
    Described { state, ttl, ttl_left: 0, deadline, lock_delay, holds: 0, why }.reply(
        id,
        Vec::new(),
        (0, Vec::new()),
        (0, Vec::new()),
    )
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

/// SESSION.APPLY GRANT id ttl-ms lock-delay-ms deadline | END id at EXPIRED|REVOKED [reason] | FORGET id | ATTACH id key [token] | DETACH id key [token] | REVOKEHOLD id key deadline reason [token] | EVICTHOLD id key at token | NOTE key deadline [token reason]
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
        [at, reason, why @ ..] if why.len() <= 1 && op.eq_ignore_ascii_case(b"END") => {
            let reason =
                if bytes(*reason).eq_ignore_ascii_case(b"REVOKED") { Reason::Revoked } else { Reason::Expired };
            let why = why.first().and_then(|&w| std::str::from_utf8(bytes(w)).ok());
            Apply::End { id, at: int(*at)?, reason, why }
        }
        [] if op.eq_ignore_ascii_case(b"FORGET") => {
            session_revoked::forget_session(id);
            session_evicted::forget_session(id);
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
        [key, at, token] if op.eq_ignore_ascii_case(b"EVICTHOLD") => {
            session_evicted::apply(ctx, id, bytes(*key), int(*at)?, bytes(*token));
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
