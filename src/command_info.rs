//! What `COMMAND DOCS` and the key specs say of a command's arguments:
//! the argument kinds of `crate::registration`'s table and their module-API
//! form.

use std::ffi::{c_int, CStr};
use std::ptr::null;

use redis_module::raw::{self, RedisModuleCommandArg, RedisModuleCommandKeySpec};

/// One argument as `COMMAND DOCS` shows it.
#[derive(Clone, Copy)]
pub enum Arg {
    Key(&'static CStr),
    Str(&'static CStr),
    Int(&'static CStr),
    /// An optional keyword alone (`FENCE`).
    Flag(&'static CStr, &'static CStr),
    /// An optional keyword and its integer (`WAIT timeout-ms`).
    Option(&'static CStr, &'static CStr),
    /// An optional keyword and its string (`REASON text`).
    Text(&'static CStr, &'static CStr),
    /// Any number of strings, none included (`[arg ...]`).
    Rest(&'static CStr),
}

/// The key spec of keys only the getkeys API can report (LOCK.GUARD's inner
/// command): where they are and how they are used are unknown to the spec.
/// `VARIABLE_FLAGS` makes Redis ask the module for every call's keys
/// instead of trusting the specs.
pub fn inner_keys_spec() -> RedisModuleCommandKeySpec {
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

pub fn arg(a: Arg) -> RedisModuleCommandArg {
    use raw::{
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER as INTEGER,
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY as KEY,
    };
    use raw::{
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN as PURE_TOKEN,
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING as STRING,
    };
    let optional = raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
    let multiple = raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
    let (name, type_, token, flags) = match a {
        Arg::Key(n) => (n, KEY, None, 0),
        Arg::Str(n) => (n, STRING, None, 0),
        Arg::Int(n) => (n, INTEGER, None, 0),
        Arg::Flag(n, t) => (n, PURE_TOKEN, Some(t), optional),
        Arg::Option(n, t) => (n, INTEGER, Some(t), optional),
        Arg::Text(n, t) => (n, STRING, Some(t), optional),
        Arg::Rest(n) => (n, STRING, None, optional | multiple),
    };
    RedisModuleCommandArg {
        name: name.as_ptr(),
        type_,
        // The one key spec is index 0; -1 for arguments that are no key.
        key_spec_index: if matches!(a, Arg::Key(_)) { 0 } else { -1 },
        token: token.map_or(null(), CStr::as_ptr),
        summary: null(),
        since: null(),
        flags,
        deprecated_since: null(),
        subargs: std::ptr::null_mut(),
        display_text: null(),
    }
}
