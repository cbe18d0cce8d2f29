//! The key specs of `COMMAND INFO` as the module API takes them: where a
//! command's keys are and how it uses them. Plain C data; Redis copies it.

use std::ptr::null;

use redis_module::raw::{self, RedisModuleCommandKeySpec};

type Bs = raw::RedisModuleCommandKeySpec__bindgen_ty_1;
type Fk = raw::RedisModuleCommandKeySpec__bindgen_ty_2;

/// The key at argument 1, used as `flags` say.
pub fn at_one(flags: u32) -> RedisModuleCommandKeySpec {
    let range = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 { lastkey: 0, keystep: 1, limit: 0 };
    spec(flags, raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE, Fk { range })
}

/// `numkeys key [key ...]` from argument 1: the count first, the keys
/// right after it, each used as `flags` say.
pub fn counted(flags: u32) -> RedisModuleCommandKeySpec {
    let keynum = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 { keynumidx: 0, firstkey: 1, keystep: 1 };
    spec(flags, raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM, Fk { keynum })
}

fn spec(flags: u32, find_keys_type: raw::RedisModuleKeySpecFindKeysType, fk: Fk) -> RedisModuleCommandKeySpec {
    RedisModuleCommandKeySpec {
        notes: null(),
        flags: u64::from(flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: Bs { index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 } },
        find_keys_type,
        fk,
    }
}

/// The keys only the getkeys API can report (LOCK.GUARD's inner
/// command): where they are and how they are used are unknown to the spec.
/// `VARIABLE_FLAGS` makes Redis ask the module for every call's keys
/// instead of trusting the specs.
pub fn reported_only() -> RedisModuleCommandKeySpec {
    RedisModuleCommandKeySpec {
        notes: c"the keys of the inner command, reported through the getkeys API".as_ptr(),
        flags: u64::from(
            raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INCOMPLETE | raw::REDISMODULE_CMD_KEY_VARIABLE_FLAGS,
        ),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_UNKNOWN,
        // SAFETY: plain data; with an unknown search type Redis reads neither union.
        bs: unsafe { std::mem::zeroed() },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_UNKNOWN,
        fk: unsafe { std::mem::zeroed() },
    }
}
