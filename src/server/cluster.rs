//! Redis Cluster: where a waiter may be granted a lock.
//!
//! A grant made from a timer or an event must not create the key on a node
//! that does not serve its slot: when MIGRATE moves a lock to another node
//! it deletes it here, and that deletion is not a release. So in cluster
//! mode a queue is served only on a master that owns the key's slot and is
//! neither migrating nor importing it; otherwise its waiters are answered
//! with the redirection a command would get (`MOVED`, `TRYAGAIN`,
//! `CLUSTERDOWN`), and clients re-send where the key now lives.

use std::ffi::{CStr, CString};

use redis_lock_rules::cluster::{key_slot, slot_state, NodesView, SlotState};

use crate::boundary::api::rm;
use crate::boundary::ctx::Ctx;

/// The error to send `key`'s waiters instead of a grant, or `None` where a
/// grant may be made (always outside cluster mode).
pub fn redirect(ctx: Ctx, key: &[u8]) -> Option<CString> {
    if !ctx.in_cluster() {
        return None;
    }
    let slot = key_slot(key);
    // Only masters grant; a replica's queues were emptied when it became one.
    let state = if !ctx.is_master() {
        SlotState::Moving
    } else {
        // Rare (a grant to a waiter, in cluster mode): the module API has no
        // call for a slot's migration state, CLUSTER NODES has it.
        slot_state(&cluster_call(ctx, c"NODES")?, slot)
    };
    let text = match state {
        SlotState::Served => return None,
        SlotState::Moving => format!("TRYAGAIN slot {slot} is moving; the lock was not granted here, retry"),
        SlotState::Elsewhere { addr } => format!("MOVED {slot} {addr}"),
        SlotState::Unassigned => "CLUSTERDOWN Hash slot not served".to_string(),
    };
    CString::new(text).ok()
}

/// This node's reading of the cluster (`CLUSTER NODES`, parsed once), or
/// `None` outside a cluster or when the call fails (callers then redirect
/// nobody).
pub fn nodes_view(ctx: Ctx) -> Option<NodesView> {
    if !ctx.in_cluster() {
        return None;
    }
    Some(NodesView::parse(&cluster_call(ctx, c"NODES")?))
}

/// `CLUSTER <sub>`: its string or status reply, `None` on error (callers
/// then decide as outside a cluster).
pub fn cluster_call(ctx: Ctx, sub: &CStr) -> Option<String> {
    unsafe {
        let reply = rm!(RedisModule_Call)(ctx.0, c"CLUSTER".as_ptr(), c"c".as_ptr(), sub.as_ptr());
        if reply.is_null() {
            return None;
        }
        let mut len = 0usize;
        let ptr = rm!(RedisModule_CallReplyStringPtr)(reply, &mut len);
        let text = (!ptr.is_null())
            .then(|| String::from_utf8_lossy(std::slice::from_raw_parts(ptr.cast::<u8>(), len)).into_owned());
        rm!(RedisModule_FreeCallReply)(reply);
        text
    }
}
