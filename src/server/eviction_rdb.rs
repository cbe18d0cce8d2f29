//! The eviction window across a load (docs/eviction.md, "Holds loaded
//! rather than written"): holds in an RDB (a restart, an AOF's preamble, a
//! replica's full sync) were written by no code of the loading process,
//! so they are in neither its table nor its window. The RDB therefore
//! carries the saving process's latest lease end (tracked holds' and the
//! window's, [`eviction::latest_end`]) as aux data of the keyless type
//! `lkwindows`, and the load opens the window until then: an eviction
//! before it of a key the table does not know is counted, logged and told
//! as one that may have been a lock (`lock_evicted_unverified`).
//! Session-held holds are covered by their sessions, restored with them
//! (`crate::store::session_rdb`).
//!
//! Format (encoding version 0): one signed number, the end (Unix ms).
//! Written only while it is ahead (Redis 7.2+; 7.0 writes it always), so
//! an RDB saved with nothing held loads without the module.

use std::ffi::c_int;

use redis_module::native_types::RedisType;
use redis_module::raw::{self, RedisModuleIO};

use crate::boundary::api::rm;
use crate::boundary::aux::aux_only;
use crate::server::{eviction, eviction_window};

unsafe extern "C" fn aux_save(rdb: *mut RedisModuleIO, _when: c_int) {
    raw::save_signed(rdb, eviction::latest_end());
}

/// Redis 7.2+ calls this instead of `aux_save`: nothing once every lease
/// given has ended.
unsafe extern "C" fn aux_save2(rdb: *mut RedisModuleIO, when: c_int) {
    if eviction::latest_end() > rm!(RedisModule_Milliseconds)() {
        aux_save(rdb, when);
    }
}

unsafe extern "C" fn aux_load(rdb: *mut RedisModuleIO, _encver: c_int, _when: c_int) -> c_int {
    match raw::load_signed(rdb) {
        Ok(until) => {
            eviction_window::loaded(until);
            raw::REDISMODULE_OK as c_int
        }
        Err(_) => raw::REDISMODULE_ERR as c_int,
    }
}

/// A data type with no keys, only aux data: the RDB home of the window.
pub static WINDOW_TYPE: RedisType =
    RedisType::new("lkwindows", 0, aux_only(Some(aux_load), Some(aux_save), Some(aux_save2)));
