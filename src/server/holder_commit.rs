//! A semaphore's or read-write lock's commit as the server layer's hooks
//! read it (hold timing, `crate::server::timings`; eviction's tracker,
//! `crate::server::eviction`): the storage layer builds one and hands it
//! to both before it writes.

use redis_lock_rules::holders::{Summary, Tag};
use redis_module::raw::RedisModuleString;

use crate::boundary::ctx::Ctx;

/// A semaphore's or read-write lock's commit, as the server layer's hooks
/// (hold timing, eviction's tracker) see it, before it is written: the key
/// `name` that `summary` describes (`None`: absent) at the scan's `now`,
/// the places it prunes (`ended`), and what else it does (`edit`).
pub struct Commit<'a> {
    pub ctx: Ctx,
    pub name: *mut RedisModuleString,
    pub summary: Option<&'a Summary>,
    pub edit: HolderEdit<'a>,
    pub ended: &'a [*mut RedisModuleString],
    pub now: i64,
    /// The short id of the session that holds the place the edit puts.
    pub session: Option<u64>,
}

/// What a semaphore's or read-write lock's commit does besides pruning, as
/// the hooks see it (the storage layer's edit, with tokens as bytes).
#[derive(Clone, Copy)]
pub enum HolderEdit<'a> {
    Keep,
    /// A grant or a renewal: the place now ends at `at`; `tag`: the key's
    /// kind and delay when they change.
    Put {
        token: &'a [u8],
        at: i64,
        tag: Option<Tag>,
    },
    /// A release.
    Remove {
        token: &'a [u8],
    },
}
