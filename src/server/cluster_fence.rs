//! Fences in a Redis Cluster: the floor of the next fence comes from this
//! node's configEpoch (`redis_lock_rules::cluster_fence` has the layout and
//! why it orders fences across slot moves and failovers whatever the nodes'
//! clocks say).
//!
//! The module API has no call for the configEpoch, so it is read from
//! `CLUSTER INFO` (`cluster_my_epoch`) and cached. The cache is refreshed
//! before a fenced grant when it may be stale: after a `CLUSTER` command that
//! can change this node's epoch or slots (seen by a command filter), when
//! the node's role changed (a failover), and at least every
//! [`REFRESH_EVERY`] (an epoch-collision bump happens in the cluster's cron,
//! with no command).
//!
//! An importing node must have a larger epoch than the slot's owner *before*
//! its first fenced grant in that slot, which may come through `ASK` before
//! `CLUSTER SETSLOT … NODE` (where Redis bumps the epoch itself). So when
//! the filter sees `CLUSTER SETSLOT <slot> IMPORTING`, the next fenced grant
//! on this node first runs `CLUSTER BUMPEPOCH` (which only bumps when this
//! node's epoch is not already the largest it knows). This is per node, not
//! per slot: one extra bump per import at most.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis_lock_rules::cluster_fence;
use redis_module::raw::{self, RedisModuleCommandFilterCtx, RedisModuleCtx};

use crate::boundary::api::rm;
use crate::boundary::ctx::Ctx;
use crate::server::cluster::cluster_call;

/// How long a cached configEpoch is trusted without a `CLUSTER` command
/// or role change in between.
const REFRESH_EVERY: Duration = Duration::from_millis(100);

/// A `CLUSTER` command may have changed this node's epoch or slots.
static STALE: AtomicBool = AtomicBool::new(true);
/// `CLUSTER SETSLOT … IMPORTING` was seen: bump before the next fenced grant.
static IMPORTING: AtomicBool = AtomicBool::new(false);
/// The cached configEpoch.
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// When and in which role (master or not) the epoch was read.
static READ: Mutex<Option<(Instant, bool)>> = Mutex::new(None);

/// Registers the command filter that watches `CLUSTER` commands, on a
/// cluster node only: a filter runs before every command, and a standalone
/// server must not pay for it on each GET and SET.
pub fn register(ctx: *mut RedisModuleCtx) -> bool {
    let flags = unsafe { rm!(RedisModule_GetContextFlags)(ctx) } as u32;
    if flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER == 0 {
        return true;
    }
    let filter = unsafe {
        rm!(RedisModule_RegisterCommandFilter)(ctx, Some(on_command), raw::REDISMODULE_CMDFILTER_NOSELF as c_int)
    };
    !filter.is_null()
}

/// The lowest fence this node may hand out now, or `None` outside cluster
/// mode (or if the epoch cannot be read or does not fit): then the
/// single-server floor applies.
pub fn floor(ctx: Ctx, now_ms: i64) -> Option<u64> {
    if !ctx.in_cluster() {
        return None;
    }
    if IMPORTING.swap(false, Ordering::Relaxed) {
        // The reply ("BUMPED n" or "STILL n") does not matter: the epoch is
        // read afresh below.
        cluster_call(ctx, c"BUMPEPOCH");
        STALE.store(true, Ordering::Relaxed);
    }
    let master = ctx.is_master();
    let mut read = READ.lock().unwrap_or_else(|p| p.into_inner());
    let fresh = matches!(*read, Some((at, role)) if role == master && at.elapsed() < REFRESH_EVERY);
    if STALE.swap(false, Ordering::Relaxed) || !fresh {
        let epoch = cluster_call(ctx, c"INFO").as_deref().and_then(cluster_fence::my_epoch)?;
        EPOCH.store(epoch, Ordering::Relaxed);
        *read = Some((Instant::now(), master));
    }
    cluster_fence::floor(EPOCH.load(Ordering::Relaxed), now_ms)
}

/// An atomic slot migration starts importing slots here, or completed
/// one (`crate::migration`): as after `SETSLOT … IMPORTING`, the next
/// fenced grant first bumps this node's epoch, then reads it afresh.
pub fn importing() {
    IMPORTING.store(true, Ordering::Relaxed);
    STALE.store(true, Ordering::Relaxed);
}

/// This node's epoch or slots may have changed without a `CLUSTER`
/// command here (an atomic slot migration ended): read it afresh.
pub fn stale() {
    STALE.store(true, Ordering::Relaxed);
}

/// Argument `i` of a filtered command, if there is one.
unsafe fn arg<'a>(f: *mut RedisModuleCommandFilterCtx, i: c_int) -> Option<&'a [u8]> {
    let s = rm!(RedisModule_CommandFilterArgGet)(f, i);
    if s.is_null() {
        return None;
    }
    let mut len = 0usize;
    let p = rm!(RedisModule_StringPtrLen)(s, &mut len);
    (!p.is_null()).then(|| std::slice::from_raw_parts(p.cast::<u8>(), len))
}

/// Runs before every command: notes the `CLUSTER` subcommands that change
/// this node's epoch or slots. Never changes the command.
unsafe extern "C" fn on_command(f: *mut RedisModuleCommandFilterCtx) {
    let guarded = std::panic::catch_unwind(|| {
        if rm!(RedisModule_CommandFilterArgsCount)(f) < 2
            || !arg(f, 0).is_some_and(|a| a.eq_ignore_ascii_case(b"cluster"))
        {
            return;
        }
        let Some(sub) = arg(f, 1) else { return };
        let changes = [
            &b"setslot"[..],
            b"addslots",
            b"addslotsrange",
            b"delslots",
            b"delslotsrange",
            b"failover",
            b"bumpepoch",
            b"set-config-epoch",
            b"reset",
            b"flushslots",
        ];
        if !changes.iter().any(|c| sub.eq_ignore_ascii_case(c)) {
            return;
        }
        STALE.store(true, Ordering::Relaxed);
        if sub.eq_ignore_ascii_case(b"setslot") && arg(f, 3).is_some_and(|a| a.eq_ignore_ascii_case(b"importing")) {
            IMPORTING.store(true, Ordering::Relaxed);
        }
    });
    // Nothing above can panic that we know of; if it did, the worst case is
    // a missed refresh, never a crashed server.
    drop(guarded);
}
