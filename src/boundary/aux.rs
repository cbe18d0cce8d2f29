//! A module data type that names no key and holds only RDB aux data: where
//! the fence mark (`crate::store::fence`) and the sessions
//! (`crate::store::session_rdb`) live in an RDB. Saved before the keys, so
//! that an RDB without them loads without the module.

use std::ffi::c_int;

use redis_module::raw::{self, RedisModuleTypeAuxLoadFunc, RedisModuleTypeAuxSaveFunc, RedisModuleTypeMethods};

/// The type methods of such a type: aux load and save (`save2`: the one
/// Redis 7.2+ calls, which may write nothing), and nothing for keys.
pub const fn aux_only(
    load: RedisModuleTypeAuxLoadFunc,
    save: RedisModuleTypeAuxSaveFunc,
    save2: RedisModuleTypeAuxSaveFunc,
) -> RedisModuleTypeMethods {
    RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: None,
        rdb_save: None,
        aof_rewrite: None,
        mem_usage: None,
        digest: None,
        free: None,
        aux_load: load,
        aux_save: save,
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: save2,
    }
}
