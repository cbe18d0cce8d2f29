//! Eviction's state across a load (docs/eviction.md, "Holds loaded rather
//! than written"), as aux data of the keyless type `lkwindows`:
//!
//! - **The window's end.** Holds in an RDB (a restart, an AOF's preamble,
//!   a replica's full sync) were written by no code of the loading
//!   process, so they are in neither its table nor its window. The RDB
//!   carries the saving process's latest lease end (tracked holds' and the
//!   window's, `eviction::latest_end`), and the load opens the window
//!   until then: an eviction before it of a key the table does not know is
//!   counted, logged and told as one that may have been a lock
//!   (`lock_evicted_unverified`). Session-held holds are covered by their
//!   sessions, restored with them (`crate::store::session_rdb`).
//! - **The sessions' evicted holds** (`crate::store::session_evicted`),
//!   so that a restarted or promoted node still tells their holders.
//!
//! Format (encoding version 0): the end (signed, Unix ms); the count of
//! notes, and per note its session (two unsigned halves), database, key,
//! token, when it was evicted and until when it is kept. Written only
//! while the end is ahead or a note is kept (Redis 7.2+; 7.0 writes it
//! always), so an RDB saved with nothing held loads without the module.

use std::ffi::c_int;

use redis_module::native_types::RedisType;
use redis_module::raw::{self, RedisModuleIO};

use crate::boundary::api::rm;
use crate::boundary::aux::aux_only;
use crate::server::{eviction, eviction_window};
use crate::store::hold_key::HoldKey;
use crate::store::session_evicted::{self, Note};

unsafe extern "C" fn aux_save(rdb: *mut RedisModuleIO, _when: c_int) {
    raw::save_signed(rdb, eviction::latest_end());
    let notes = session_evicted::all();
    raw::save_unsigned(rdb, notes.len() as u64);
    for (id, hold, e) in notes {
        let (db, key, token) = hold.split();
        raw::save_unsigned(rdb, (id >> 64) as u64);
        raw::save_unsigned(rdb, id as u64);
        raw::save_signed(rdb, i64::from(db));
        raw::save_slice(rdb, key);
        raw::save_slice(rdb, token.unwrap_or_default());
        raw::save_signed(rdb, e.at);
        raw::save_signed(rdb, e.until);
    }
}

/// Redis 7.2+ calls this instead of `aux_save`: nothing once every lease
/// given has ended and no note is kept.
unsafe extern "C" fn aux_save2(rdb: *mut RedisModuleIO, when: c_int) {
    if eviction::latest_end() > rm!(RedisModule_Milliseconds)() || session_evicted::kept() {
        aux_save(rdb, when);
    }
}

unsafe extern "C" fn aux_load(rdb: *mut RedisModuleIO, _encver: c_int, _when: c_int) -> c_int {
    match load(rdb) {
        Ok(()) => raw::REDISMODULE_OK as c_int,
        Err(_) => raw::REDISMODULE_ERR as c_int,
    }
}

fn load(rdb: *mut RedisModuleIO) -> Result<(), redis_module::error::Error> {
    let until = raw::load_signed(rdb)?;
    let mut notes: Vec<Note> = Vec::new();
    for _ in 0..raw::load_unsigned(rdb)? {
        let id = (u128::from(raw::load_unsigned(rdb)?) << 64) | u128::from(raw::load_unsigned(rdb)?);
        let db = raw::load_signed(rdb)? as c_int;
        let key = raw::load_string_buffer(rdb)?;
        let token = raw::load_string_buffer(rdb)?;
        let (at, kept) = (raw::load_signed(rdb)?, raw::load_signed(rdb)?);
        notes.push((id, HoldKey::new(db, key.as_ref(), Some(token.as_ref())), session_evicted::eviction(at, kept)));
    }
    eviction_window::loaded(until);
    // The RDB holds every note of the node it was saved on.
    session_evicted::restore(notes);
    Ok(())
}

/// A data type with no keys, only aux data: the RDB home of eviction's state.
pub static WINDOW_TYPE: RedisType =
    RedisType::new("lkwindows", 0, aux_only(Some(aux_load), Some(aux_save), Some(aux_save2)));
