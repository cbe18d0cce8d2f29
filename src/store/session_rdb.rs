//! The sessions' RDB home (docs/sessions.md): aux data of a data type with
//! no keys, as the fence mark's (`crate::store::fence`). Written only when
//! this node has a session, so an RDB without sessions loads without the
//! module. An AOF with its RDB preamble carries them the same way.
//!
//! Format (encoding version 0): the count, then per session its id (two
//! unsigned halves), TTL, lock-delay, absolute deadline, how it ended (0:
//! alive, 1: expired, 2: revoked) and when, and its holds (count, then
//! database and key name each; a semaphore's or read-write lock's holder:
//! its database with bit 30 set, and its key name, token and the token's
//! length as 4 little-endian bytes).

use std::ffi::c_int;

use redis_lock_rules::hold_set::HoldSet;
use redis_lock_rules::session::{Ended, Reason, Session};
use redis_module::native_types::RedisType;
use redis_module::raw::{self, RedisModuleIO};

use crate::boundary::aux::aux_only;
use crate::boundary::ctx::Ctx;
use crate::server::{events, eviction_window};
use crate::store::session::{counted, table, HoldKey, HOLDER};

unsafe extern "C" fn aux_save(rdb: *mut RedisModuleIO, _when: c_int) {
    let t = table();
    raw::save_unsigned(rdb, t.len() as u64);
    for (id, s) in t.iter() {
        raw::save_unsigned(rdb, (id >> 64) as u64);
        raw::save_unsigned(rdb, id as u64);
        raw::save_signed(rdb, s.ttl);
        raw::save_signed(rdb, s.lock_delay);
        raw::save_signed(rdb, s.deadline);
        let (how, at) = match s.ended {
            None => (0, 0),
            Some(Ended { at, reason: Reason::Expired }) => (1, at),
            Some(Ended { at, reason: Reason::Revoked }) => (2, at),
        };
        raw::save_unsigned(rdb, how);
        raw::save_signed(rdb, at);
        raw::save_unsigned(rdb, s.holds.len() as u64);
        for hold in s.holds {
            // A holder's: its database with HOLDER set, and its key name,
            // token and token length (4 bytes, little-endian).
            let (db, name, token) = hold.split();
            match token {
                None => {
                    raw::save_signed(rdb, i64::from(db));
                    raw::save_slice(rdb, name);
                }
                Some(token) => {
                    raw::save_signed(rdb, i64::from(db | HOLDER));
                    let len = (token.len() as u32).to_le_bytes();
                    raw::save_slice(rdb, &[name, token, &len].concat());
                }
            }
        }
    }
}

/// Redis 7.2+ calls this instead of `aux_save`: nothing without sessions.
unsafe extern "C" fn aux_save2(rdb: *mut RedisModuleIO, when: c_int) {
    if !table().is_empty() {
        aux_save(rdb, when);
    }
}

unsafe extern "C" fn aux_load(rdb: *mut RedisModuleIO, _encver: c_int, _when: c_int) -> c_int {
    match load(rdb) {
        Ok(()) => {
            // Sessions came with the RDB: their table now needs the flush
            // and promotion events (`crate::store::session::on_db_event`).
            if !table().is_empty() {
                if let Some(from_io) = raw::RedisModule_GetContextFromIO {
                    events::need_db(Ctx(from_io(rdb)));
                }
            }
            raw::REDISMODULE_OK as c_int
        }
        Err(_) => raw::REDISMODULE_ERR as c_int,
    }
}

fn load(rdb: *mut RedisModuleIO) -> Result<(), redis_module::error::Error> {
    let now = Ctx(std::ptr::null_mut()).now_ms();
    let mut t = table();
    // The RDB holds every session of the node it was saved on.
    t.clear();
    let n = raw::load_unsigned(rdb)?;
    for _ in 0..n {
        let id = (u128::from(raw::load_unsigned(rdb)?) << 64) | u128::from(raw::load_unsigned(rdb)?);
        let (ttl, lock_delay, deadline) = (raw::load_signed(rdb)?, raw::load_signed(rdb)?, raw::load_signed(rdb)?);
        let how = raw::load_unsigned(rdb)?;
        let at = raw::load_signed(rdb)?;
        let ended = match how {
            1 => Some(Ended { at, reason: Reason::Expired }),
            2 => Some(Ended { at, reason: Reason::Revoked }),
            _ => None,
        };
        let mut holds = HoldSet::default();
        for _ in 0..raw::load_unsigned(rdb)? {
            let db = raw::load_signed(rdb)? as c_int;
            let key = raw::load_string_buffer(rdb)?;
            holds.insert(&loaded_hold(db, key.as_ref()));
        }
        if ended.is_none() && !holds.is_empty() {
            // Its holds are in no table of this process: the window's.
            eviction_window::loaded_session(id, deadline, now);
        }
        t.restore(id, Session { id, ttl, lock_delay, deadline, ended, holds });
    }
    counted(&t);
    Ok(())
}

/// A hold as saved: see `aux_save`.
fn loaded_hold(db: c_int, b: &[u8]) -> HoldKey {
    if db & HOLDER == 0 || b.len() < 4 {
        return HoldKey::new(db, b, None);
    }
    let (rest, len) = b.split_at(b.len() - 4);
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    let (name, token) = rest.split_at(rest.len().saturating_sub(len));
    HoldKey::new(db & !HOLDER, name, Some(token))
}

/// A data type with no keys, only aux data: the RDB home of the sessions.
pub static SESSION_TYPE: RedisType =
    RedisType::new("lksession", 0, aux_only(Some(aux_load), Some(aux_save), Some(aux_save2)));
