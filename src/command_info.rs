//! What `COMMAND DOCS` and the key specs say of a command's arguments:
//! the argument kinds of `crate::registration`'s table and their module-API
//! form.

use std::ffi::{c_int, CStr};
use std::ptr::null;

use redis_module::raw::{self, RedisModuleCommandArg};

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
    /// How many keys follow (`numkeys`, first): the key spec counts by it.
    NumKeys(&'static CStr),
    /// The keys `NumKeys` counts (`key [key ...]`).
    Keys(&'static CStr),
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
        Arg::NumKeys(n) => (n, INTEGER, None, 0),
        Arg::Keys(n) => (n, KEY, None, multiple),
    };
    RedisModuleCommandArg {
        name: name.as_ptr(),
        type_,
        // The one key spec is index 0; -1 for arguments that are no key.
        key_spec_index: if matches!(a, Arg::Key(_) | Arg::Keys(_)) { 0 } else { -1 },
        token: token.map_or(null(), CStr::as_ptr),
        summary: null(),
        since: null(),
        flags,
        deprecated_since: null(),
        subargs: std::ptr::null_mut(),
        display_text: null(),
    }
}
