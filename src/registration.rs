//! The one registration table: every command's name, handler, flags, key
//! spec, ACL categories and documentation (`COMMAND INFO`, `COMMAND DOCS`,
//! redis-cli's argument hints).

use std::ffi::{c_char, c_int};

use redis_module::raw::{self, RedisModuleCtx};

use crate::boundary::api::rm;
use crate::boundary::entry::command_fn;
use crate::command_info::{set_info, Arg, Command};
use crate::commands::{election, guard, holders, lock, multi, revoke, session, top};

command_fn!(acquire_cmd => lock::acquire);
command_fn!(renew_cmd => lock::renew);
command_fn!(release_cmd => lock::release);
command_fn!(takeover_cmd => lock::takeover);
command_fn!(info_cmd => lock::info);
command_fn!(fence_floor_cmd => lock::fence_floor);
command_fn!(elect_cmd => election::elect);
command_fn!(proclaim_cmd => election::proclaim);
command_fn!(leader_cmd => election::leader);
command_fn!(observe_cmd => election::observe);
command_fn!(sem_acquire_cmd => holders::sem_acquire);
command_fn!(sem_renew_cmd => holders::sem_renew);
command_fn!(sem_release_cmd => holders::sem_release);
command_fn!(sem_info_cmd => holders::sem_info);
command_fn!(rw_acquire_cmd => holders::rw_acquire);
command_fn!(rw_renew_cmd => holders::rw_renew);
command_fn!(rw_release_cmd => holders::rw_release);
command_fn!(rw_info_cmd => holders::rw_info);
command_fn!(top_cmd => top::top);
command_fn!(evicted_cmd => lock::evicted);
command_fn!(revoke_cmd => revoke::revoke);
command_fn!(session_grant_cmd => session::grant);
command_fn!(session_keepalive_cmd => session::keepalive);
command_fn!(session_revoke_cmd => session::revoke);
command_fn!(session_info_cmd => session::info);
command_fn!(session_adopt_cmd => session::adopt);
command_fn!(session_list_cmd => session::list);
command_fn!(session_apply_cmd => session::apply);

/// Only the commands that can grow memory are `deny-oom`, as with the
/// native commands the scripts run (SET is, PEXPIRE and DEL are not): a
/// server at its memory limit must still let holders renew and release, or
/// memory pressure would turn into lost and stranded locks.
///
/// LOCK.ACQUIRE can block (WAIT), so it is `blocking`, not `fast`, as BLPOP.
///
/// Key specs: the writes read the value to decide (an answer of 0 or 1 tells
/// who owns it), so they need read and write permission (`RW` + `ACCESS`);
/// LOCK.INFO only reads (`RO`), so a user with `%R~` on the key may run it.
///
/// ACL categories follow each command's native twin: ACQUIRE as SET and
/// BLPOP, RENEW as PEXPIRE, RELEASE as DEL (but `fast`, as flagged: it
/// deletes one string), TAKEOVER as SET, INFO as GET. LOCK.FENCEFLOOR is
/// replication plumbing no application needs: `admin` and `dangerous`.
///
/// LOCK.GUARD runs any command, so it is `write` (Redis refuses it where
/// writes are refused: read-only replicas, `min-replicas-to-write`, MISCONF)
/// but not `deny-oom` (the inner command's own flag decides, see
/// `crate::guard`) nor `fast`; `getkeys-api` reports the inner command's
/// keys, which no key spec can locate. Categories: `write slow`, as the
/// general case of what it may run.
const COMMANDS: &[Command] = &[
    Command {
        name: c"lock.acquire",
        handler: acquire_cmd,
        flags: c"write deny-oom blocking",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_INSERT),
        acl: c"write string slow blocking",
        summary: c"Takes a lock when its key is free (SET key token NX PX ttl-ms), optionally with a fencing token, or waits in line for it; with SESSION id, held by that session",
        complexity: c"O(1) (with SESSION: O(log N) where N is the number of locks the session holds)",
        args: &[
            Arg::Key(c"key"),
            Arg::Str(c"token"),
            Arg::Int(c"ttl-ms"),
            Arg::Flag(c"fence", c"FENCE"),
            Arg::Option(c"timeout-ms", c"WAIT"),
            Arg::Option(c"lock-delay-ms", c"LOCKDELAY"),
            Arg::Option(c"max-hold-ms", c"MAXHOLD"),
            Arg::Text(c"id", c"SESSION"),
        ],
    },
    Command {
        name: c"lock.renew",
        handler: renew_cmd,
        flags: c"write fast",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE),
        acl: c"write keyspace fast",
        summary: c"Resets a lock's TTL when the token owns it (2: cut short by its MAXHOLD); FLOOR also raises the server's fence mark",
        complexity: c"O(1) for a bare token, O(N) for a structured value of N bytes",
        args: &[Arg::Key(c"key"), Arg::Str(c"token"), Arg::Int(c"ttl-ms"), Arg::Option(c"fence", c"FLOOR")],
    },
    Command {
        name: c"lock.release",
        handler: release_cmd,
        flags: c"write fast",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_DELETE),
        acl: c"write keyspace fast",
        summary: c"Deletes a lock when the token owns it, handing it to the first waiter",
        complexity: c"O(1) for a bare token, O(N) for a structured value of N bytes",
        args: &[Arg::Key(c"key"), Arg::Str(c"token")],
    },
    Command {
        name: c"lock.takeover",
        handler: takeover_cmd,
        flags: c"write deny-oom fast",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE),
        acl: c"write string fast",
        summary: c"Takes a lock that is free, held by the same run, or a stale legacy lock, storing {\"owner\":token,\"runId\":run-id}",
        complexity: c"O(N) where N is the size of the stored value",
        args: &[
            Arg::Key(c"key"),
            Arg::Str(c"token"),
            Arg::Str(c"run-id"),
            Arg::Int(c"ttl-ms"),
            Arg::Flag(c"fence", c"FENCE"),
            Arg::Option(c"lock-delay-ms", c"LOCKDELAY"),
            Arg::Option(c"max-hold-ms", c"MAXHOLD"),
        ],
    },
    Command {
        name: c"lock.info",
        handler: info_cmd,
        flags: c"readonly fast",
        key: Some(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
        acl: c"read string fast",
        summary: c"Describes a lock: owner, run id, format, remaining TTL, waiters, and its lock-delay and hold limit",
        complexity: c"O(N) where N is the size of the stored value",
        args: &[Arg::Key(c"key")],
    },
    Command {
        name: c"lock.fencefloor",
        handler: fence_floor_cmd,
        flags: c"write fast",
        key: None,
        acl: c"write fast admin dangerous",
        summary: c"Raises the server's fencing-token high-water mark (replication and AOF plumbing)",
        complexity: c"O(1)",
        args: &[Arg::Int(c"fence")],
    },
    Command {
        name: c"lock.guard",
        handler: guard::command,
        flags: c"write getkeys-api",
        key: Some(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
        acl: c"write slow",
        summary: c"Runs a command only while the token holds the lock, in the same step, replying what it replied; else NOTHELD and nothing runs",
        complexity: c"O(1) for a bare token, O(N) for a structured value of N bytes, plus the command's own complexity",
        args: &[Arg::Key(c"key"), Arg::Str(c"token"), Arg::Str(c"command"), Arg::Rest(c"arg")],
    },
    // Elections, on the exclusive lock's key: ELECT as LOCK.ACQUIRE (it
    // waits in the same line); PROCLAIM writes one string in place, as
    // LOCK.TAKEOVER (SET's categories, `fast`); LEADER reads as LOCK.INFO;
    // OBSERVE only reads but can block, as a readonly BLPOP would: it is
    // `readonly blocking`, so replicas run it, and inside MULTI or a script
    // it answers at once (`wait::may_block`).
    Command {
        name: c"lock.elect",
        handler: elect_cmd,
        flags: c"write deny-oom blocking",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_INSERT),
        acl: c"write string slow blocking",
        summary: c"Becomes an election's leader with a value when the key is free, or waits in line; replies the term (the grant's fencing token) or nil; with SESSION id, held by that session",
        complexity: c"O(N) where N is the size of the stored value",
        args: &[
            Arg::Key(c"key"),
            Arg::Str(c"token"),
            Arg::Int(c"ttl-ms"),
            Arg::Str(c"value"),
            Arg::Option(c"timeout-ms", c"WAIT"),
            Arg::Option(c"lock-delay-ms", c"LOCKDELAY"),
            Arg::Option(c"max-hold-ms", c"MAXHOLD"),
            Arg::Text(c"id", c"SESSION"),
        ],
    },
    Command {
        name: c"lock.proclaim",
        handler: proclaim_cmd,
        flags: c"write deny-oom fast",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE),
        acl: c"write string fast",
        summary: c"Sets the leader's value under the same term and a new revision, when the token leads",
        complexity: c"O(N) where N is the size of the stored value",
        args: &[Arg::Key(c"key"), Arg::Str(c"token"), Arg::Str(c"value")],
    },
    Command {
        name: c"lock.leader",
        handler: leader_cmd,
        flags: c"readonly fast",
        key: Some(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
        acl: c"read string fast",
        summary: c"Who leads an election: value, term, revision and remaining ttl-ms, or nil when leaderless",
        complexity: c"O(N) where N is the size of the stored value",
        args: &[Arg::Key(c"key")],
    },
    Command {
        name: c"lock.observe",
        handler: observe_cmd,
        flags: c"readonly blocking",
        key: Some(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
        acl: c"read string slow blocking",
        summary: c"Replies an election's leadership as LOCK.LEADER does, at once if its revision differs from AFTER rev, else when it changes (with WAIT)",
        complexity: c"O(N) where N is the size of the stored value",
        args: &[Arg::Key(c"key"), Arg::Option(c"rev", c"AFTER"), Arg::Option(c"timeout-ms", c"WAIT")],
    },
    // Semaphores and read-write locks: sorted sets, so their native twins
    // are ZADD (acquire, renew), ZREM (release) and ZRANGE (info), with
    // BZPOPMIN's `blocking`. The writes are O(log N) in the holders plus
    // what they change, but may prune up to 1,000 ended leases or serve
    // waiters, and INFO lists every holder without COUNT: none is `fast`.
    // RENEW and RELEASE are not `deny-oom`, as LOCK.RENEW and
    // LOCK.RELEASE are not: a server at its memory limit still lets holders
    // renew and leave.
    Command {
        name: c"sem.acquire",
        handler: sem_acquire_cmd,
        flags: c"write deny-oom blocking",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_INSERT),
        acl: c"write sortedset slow blocking",
        summary: c"Takes one of a semaphore's limit permits for the token, optionally with a fencing token, or waits in line for one; with SESSION id, held by that session",
        complexity: c"O((1 + W) log(N) + M) where N is the number of holders, W the number of waiters it grants and M the number of ended leases it removes (at most 1000)",
        args: &[
            Arg::Key(c"key"),
            Arg::Str(c"token"),
            Arg::Int(c"limit"),
            Arg::Int(c"ttl-ms"),
            Arg::Flag(c"fence", c"FENCE"),
            Arg::Option(c"timeout-ms", c"WAIT"),
            Arg::Option(c"lock-delay-ms", c"LOCKDELAY"),
            Arg::Option(c"max-hold-ms", c"MAXHOLD"),
            Arg::Text(c"id", c"SESSION"),
        ],
    },
    Command {
        name: c"sem.renew",
        handler: sem_renew_cmd,
        flags: c"write",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE),
        acl: c"write sortedset slow",
        summary: c"Gives a semaphore holder's permit a new lease of ttl-ms (2: cut short by its MAXHOLD)",
        complexity: c"O(log(N) + M) where N is the number of holders and M the number of ended leases it removes (at most 1000)",
        args: &[Arg::Key(c"key"), Arg::Str(c"token"), Arg::Int(c"ttl-ms")],
    },
    Command {
        name: c"sem.release",
        handler: sem_release_cmd,
        flags: c"write",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_DELETE),
        acl: c"write sortedset slow",
        summary: c"Returns a semaphore holder's permit, handing it to the first waiter",
        complexity: c"O((1 + W) log(N) + M) where N is the number of holders, W the number of waiters it grants and M the number of ended leases it removes (at most 1000)",
        args: &[Arg::Key(c"key"), Arg::Str(c"token")],
    },
    Command {
        name: c"sem.info",
        handler: sem_info_cmd,
        flags: c"readonly",
        key: Some(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
        acl: c"read sortedset slow",
        summary: c"Describes a semaphore: limit, holders with their remaining lease (all, or the COUNT earliest to end), waiters",
        complexity: c"O(log(N) + M) where N is the number of holders and M the number of holders listed (all of them without COUNT)",
        args: &[Arg::Key(c"key"), Arg::Option(c"count", c"COUNT")],
    },
    Command {
        name: c"rwlock.acquire",
        handler: rw_acquire_cmd,
        flags: c"write deny-oom blocking",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_INSERT),
        acl: c"write sortedset slow blocking",
        summary: c"Takes a read-write lock for the token in mode READ (shared) or WRITE (exclusive), optionally with a fencing token, or waits in line; with SESSION id, held by that session",
        complexity: c"O((1 + W) log(N) + M) where N is the number of holders, W the number of waiters it grants and M the number of ended leases it removes (at most 1000)",
        args: &[
            Arg::Key(c"key"),
            Arg::Str(c"token"),
            Arg::Str(c"mode"),
            Arg::Int(c"ttl-ms"),
            Arg::Flag(c"fence", c"FENCE"),
            Arg::Option(c"timeout-ms", c"WAIT"),
            Arg::Option(c"lock-delay-ms", c"LOCKDELAY"),
            Arg::Option(c"max-hold-ms", c"MAXHOLD"),
            Arg::Text(c"id", c"SESSION"),
        ],
    },
    Command {
        name: c"rwlock.renew",
        handler: rw_renew_cmd,
        flags: c"write",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE),
        acl: c"write sortedset slow",
        summary: c"Gives a read-write lock holder a new lease of ttl-ms (2: cut short by its MAXHOLD)",
        complexity: c"O(log(N) + M) where N is the number of holders and M the number of ended leases it removes (at most 1000)",
        args: &[Arg::Key(c"key"), Arg::Str(c"token"), Arg::Int(c"ttl-ms")],
    },
    Command {
        name: c"rwlock.release",
        handler: rw_release_cmd,
        flags: c"write",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_DELETE),
        acl: c"write sortedset slow",
        summary: c"Releases a read-write lock holder, handing the lock to the first waiters it admits",
        complexity: c"O((1 + W) log(N) + M) where N is the number of holders, W the number of waiters it grants and M the number of ended leases it removes (at most 1000)",
        args: &[Arg::Key(c"key"), Arg::Str(c"token")],
    },
    Command {
        name: c"rwlock.info",
        handler: rw_info_cmd,
        flags: c"readonly",
        key: Some(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
        acl: c"read sortedset slow",
        summary: c"Describes a read-write lock: mode, holders with their remaining lease (all, or the COUNT earliest to end), waiters",
        complexity: c"O(log(N) + M) where N is the number of holders and M the number of holders listed (all of them without COUNT)",
        args: &[Arg::Key(c"key"), Arg::Option(c"count", c"COUNT")],
    },
    // LOCK.TOP declares no key: the keys come from the module's queues, and
    // it lists only those the caller may read (see `crate::top`). Not
    // `fast`: its cost follows the number of contended keys.
    Command {
        name: c"lock.top",
        handler: top_cmd,
        flags: c"readonly",
        key: None,
        acl: c"read slow",
        summary: c"Lists the keys clients wait on now, most contended first, with their waiters, oldest wait, holders and remaining lease",
        complexity: c"O(K + n log(n)) where K is the number of keys with waiters in the database and n the number listed, plus O(log(N) + M) per listed key with N holders and M ended leases it passes over (at most 1000)",
        args: &[Arg::Option(c"count", c"COUNT")],
    },
    // LOCK.ACQUIREALL: LOCK.ACQUIRE's flags and categories over `numkeys`
    // keys, also reported through the getkeys API (Redis 7.0's cluster finds
    // a module's counted keys no other way).
    Command {
        name: c"lock.acquireall",
        handler: multi::command,
        flags: c"write deny-oom blocking getkeys-api",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_INSERT),
        acl: c"write string slow blocking",
        summary: c"Takes several locks for one token and one TTL, all or none, optionally with a fencing token per key, or waits in every key's line at once; with SESSION id, all held by that session",
        complexity: c"O(N) where N is the number of keys (at most 64) (with SESSION: O(N log(M)) where M is the number of locks the session holds)",
        args: &[
            Arg::NumKeys(c"numkeys"),
            Arg::Keys(c"key"),
            Arg::Str(c"token"),
            Arg::Int(c"ttl-ms"),
            Arg::Flag(c"fence", c"FENCE"),
            Arg::Option(c"timeout-ms", c"WAIT"),
            Arg::Option(c"lock-delay-ms", c"LOCKDELAY"),
            Arg::Option(c"max-hold-ms", c"MAXHOLD"),
            Arg::Text(c"id", c"SESSION"),
        ],
    },
    // LOCK.EVICTED reads no key (the module's own table of evicted holds),
    // but names one so that a cluster routes it to the key's node.
    Command {
        name: c"lock.evicted",
        handler: evicted_cmd,
        flags: c"readonly fast",
        key: Some(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
        acl: c"read fast",
        summary: c"Replies 1 when the token's hold of the key was lost to an eviction (among the last 10000 such), else 0",
        complexity: c"O(1)",
        args: &[Arg::Key(c"key"), Arg::Str(c"token")],
    },
    Command {
        name: c"lock.revoke",
        handler: revoke_cmd,
        flags: c"write",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE),
        acl: c"write keyspace slow",
        summary: c"Revokes a hold (a lock, a leader, a semaphore or read-write lock holder): its holder hears it on its next renewal, and the server ends the hold after GRACE ms",
        complexity: c"O(1) for a lock, O(N) for a structured value of N bytes; O(log(N) + M) for a semaphore or read-write lock with N holders, M ended leases it removes (at most 1000)",
        args: &[
            Arg::Key(c"key"),
            Arg::Text(c"token", c"TOKEN"),
            Arg::Option(c"grace-ms", c"GRACE"),
            Arg::Text(c"reason", c"REASON"),
        ],
    },
    // Sessions (docs/sessions.md): node state, no key. GRANT can add to
    // memory (`deny-oom`, as SET); KEEPALIVE and REVOKE are not, as
    // PEXPIRE and DEL are not: at the memory limit sessions still live
    // and end. APPLY is replication plumbing, as LOCK.FENCEFLOOR.
    Command {
        name: c"session.grant",
        handler: session_grant_cmd,
        flags: c"write deny-oom fast",
        key: None,
        acl: c"write fast",
        summary: c"Grants a session: one lease, kept alive by SESSION.KEEPALIVE, that keeps the locks taken with SESSION id; replies its id",
        complexity: c"O(1)",
        args: &[Arg::Int(c"ttl-ms"), Arg::Option(c"lock-delay-ms", c"LOCKDELAY")],
    },
    Command {
        name: c"session.keepalive",
        handler: session_keepalive_cmd,
        flags: c"write fast",
        key: None,
        acl: c"write fast",
        summary: c"Keeps sessions alive for their TTL, whatever they hold; replies each one's TTL, or 0 when unknown or ended",
        complexity: c"O(N) where N is the number of ids, whatever the sessions hold",
        args: &[Arg::Str(c"id"), Arg::Rest(c"id")],
    },
    Command {
        name: c"session.revoke",
        handler: session_revoke_cmd,
        flags: c"write fast",
        key: None,
        acl: c"write fast",
        summary: c"Ends a session now: its locks are released (without lock-delay), in bounded slices; REASON is told to its holder",
        complexity: c"O(1); its locks are released afterwards, at most 256 per millisecond",
        args: &[Arg::Str(c"id"), Arg::Text(c"reason", c"REASON")],
    },
    Command {
        name: c"session.info",
        handler: session_info_cmd,
        flags: c"readonly fast",
        key: None,
        acl: c"read fast",
        summary: c"Describes a session: state, TTL, time left, lock-delay, how many locks it holds and the first COUNT of them",
        complexity: c"O(log(N) + n) where N is the number of locks it holds and n the number listed",
        args: &[Arg::Str(c"id"), Arg::Option(c"count", c"COUNT")],
    },
    // SESSION.ADOPT names its key first, as every keyed command here, so
    // that a cluster routes it to the key's node.
    Command {
        name: c"session.adopt",
        handler: session_adopt_cmd,
        flags: c"write fast",
        key: Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE),
        acl: c"write fast",
        summary: c"Attaches a lock (or a semaphore or read-write holder) held by its token for a session this node does not know (its key moved here) to a live session of this node; replies 1, or 0 with nothing changed",
        complexity: c"O(1) for a lock, O(N) for its value of N bytes; O(log(N)) for a semaphore or read-write lock with N holders",
        args: &[Arg::Key(c"key"), Arg::Str(c"token"), Arg::Str(c"id")],
    },
    Command {
        name: c"session.list",
        handler: session_list_cmd,
        flags: c"readonly",
        key: None,
        acl: c"read slow",
        summary: c"Lists the ids of this node's sessions, in order (the first COUNT)",
        complexity: c"O(S log(S)) where S is the number of sessions",
        args: &[Arg::Option(c"count", c"COUNT")],
    },
    Command {
        name: c"session.apply",
        handler: session_apply_cmd,
        flags: c"write fast",
        key: None,
        acl: c"write fast admin dangerous",
        summary: c"Applies a master's session change or revocation note (replication and AOF plumbing; refused from clients)",
        complexity: c"O(log(N)) where N is the number of locks the session holds",
        args: &[Arg::Str(c"operation"), Arg::Str(c"id"), Arg::Rest(c"arg")],
    },
];

/// Registers every command. The `@lock` ACL category is added where the
/// server can (Redis 7.4+), the native categories where it can (7.2+).
pub fn register(ctx: *mut RedisModuleCtx) -> Result<(), String> {
    unsafe {
        let ok = raw::REDISMODULE_OK as c_int;
        let lock_category = raw::RedisModule_AddACLCategory.is_some_and(|add| add(ctx, c"lock".as_ptr()) == ok);
        for cmd in COMMANDS {
            // No legacy key range: the key spec declares the key.
            if rm!(RedisModule_CreateCommand)(ctx, cmd.name.as_ptr(), Some(cmd.handler), cmd.flags.as_ptr(), 0, 0, 0)
                != ok
            {
                return Err(format!("lock: could not register {}", cmd.name.to_string_lossy()));
            }
            let handle = rm!(RedisModule_GetCommand)(ctx, cmd.name.as_ptr());
            if handle.is_null() || !set_info(handle, cmd) {
                return Err(format!("lock: could not describe {}", cmd.name.to_string_lossy()));
            }
            if let Some(set_categories) = raw::RedisModule_SetCommandACLCategories {
                let categories = format!("{}{}\0", cmd.acl.to_string_lossy(), if lock_category { " lock" } else { "" });
                if set_categories(handle, categories.as_ptr().cast::<c_char>()) != ok {
                    return Err(format!("lock: could not set the ACL categories of {}", cmd.name.to_string_lossy()));
                }
            }
        }
    }
    Ok(())
}
