//! What `COMMAND INFO` and `COMMAND DOCS` show of a command: the shape of
//! a row of the command table (`crate::registration`), its arguments, and
//! declaring its key specs and documentation to the server.

use std::ffi::{c_int, CStr};
use std::mem::size_of;
use std::ptr::null;

use redis_module::raw::{self, RedisModuleCommandArg, RedisModuleCommandKeySpec, RedisModuleCtx};

use crate::boundary::api::rm;
use crate::boundary::keyspec;

pub type CommandFn = unsafe extern "C" fn(*mut RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

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
    /// An optional keyword and its string (`REASON text`, `SESSION id`).
    Text(&'static CStr, &'static CStr),
    /// Any number of strings, none included (`[arg ...]`).
    Rest(&'static CStr),
    /// How many keys follow (`numkeys`, first): the key spec counts by it.
    NumKeys(&'static CStr),
    /// The keys `NumKeys` counts (`key [key ...]`).
    Keys(&'static CStr),
}

pub struct Command {
    pub name: &'static CStr,
    pub handler: CommandFn,
    /// Redis's command flags, passed verbatim.
    pub flags: &'static CStr,
    /// How argument 1, the key, is used (None: no key); with an
    /// `Arg::NumKeys` first, how every key it counts is.
    pub key: Option<u32>,
    /// The categories of the command's native twin (Redis 7.2+; 7.0 has no
    /// API for them, see docs/commands.md, the notes under the command table).
    pub acl: &'static CStr,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub args: &'static [Arg],
}

/// Declares the command's key spec and documentation. Redis copies what it
/// keeps, so the stack data may go after the call.
pub fn set_info(handle: *mut raw::RedisModuleCommand, cmd: &Command) -> bool {
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: size_of::<RedisModuleCommandKeySpec>(),
        sizeof_arg: size_of::<RedisModuleCommandArg>(),
    };
    // Each list ends with an all-zero entry.
    // SAFETY: both structs are plain data; all zeroes is their terminator.
    let mut specs =
        [unsafe { std::mem::zeroed::<RedisModuleCommandKeySpec>() }, unsafe { std::mem::zeroed() }, unsafe {
            std::mem::zeroed()
        }];
    if let Some(flags) = cmd.key {
        let counted = matches!(cmd.args.first(), Some(Arg::NumKeys(_)));
        specs[0] = if counted { keyspec::counted(flags) } else { keyspec::at_one(flags) };
        if has_flag(cmd, b"getkeys-api") && !counted {
            specs[1] = keyspec::reported_only();
        }
    }
    let mut args: Vec<RedisModuleCommandArg> = cmd.args.iter().map(|&a| arg(a)).collect();
    args.push(unsafe { std::mem::zeroed() });
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: cmd.summary.as_ptr(),
        complexity: cmd.complexity.as_ptr(),
        since: c"1.0.0".as_ptr(),
        history: std::ptr::null_mut(),
        tips: null(),
        // 0: arity -1; the handlers check their arguments themselves.
        arity: 0,
        key_specs: if cmd.key.is_some() { specs.as_mut_ptr() } else { std::ptr::null_mut() },
        args: args.as_mut_ptr(),
    };
    unsafe { rm!(RedisModule_SetCommandInfo)(handle, &info) == raw::REDISMODULE_OK as c_int }
}

/// Whether `flag` is one of the command's flags.
fn has_flag(cmd: &Command, flag: &[u8]) -> bool {
    cmd.flags.to_bytes().split(|&b| b == b' ').any(|f| f == flag)
}

fn arg(a: Arg) -> RedisModuleCommandArg {
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
