//! Calling the Redis module API without a panic path.
//!
//! The crate exposes each API function as an `Option` that Redis fills in at
//! `RedisModule_Init`. [`missing`] checks once, at load, that every function
//! the commands call is there (the module refuses to load otherwise), so the
//! call sites can use them directly through [`rm!`] instead of choosing
//! between `unwrap` (a panic inside redis-server) and an error path that can
//! never run.

/// Declares the functions the module needs and the load-time check.
macro_rules! required {
    ($($name:ident),* $(,)?) => {
        /// The first required API function this server does not provide.
        pub fn missing() -> Option<&'static str> {
            // SAFETY: plain reads of statics written once by RedisModule_Init
            // on the main thread, before any command runs.
            $(if unsafe { redis_module::raw::$name }.is_none() { return Some(stringify!($name)); })*
            None
        }
    };
}

required!(
    RedisModule_OpenKey,
    RedisModule_CloseKey,
    RedisModule_KeyType,
    RedisModule_StringDMA,
    RedisModule_StringSet,
    RedisModule_StringTruncate,
    RedisModule_ValueLength,
    RedisModule_GetExpire,
    RedisModule_SetAbsExpire,
    RedisModule_DeleteKey,
    RedisModule_StringPtrLen,
    RedisModule_CreateString,
    RedisModule_FreeString,
    RedisModule_Milliseconds,
    RedisModule_Replicate,
    RedisModule_NotifyKeyspaceEvent,
    RedisModule_SignalModifiedKey,
    RedisModule_ReplyWithLongLong,
    RedisModule_ReplyWithError,
    RedisModule_WrongArity,
    RedisModule_CreateCommand,
    RedisModule_GetCommand,
    RedisModule_SetCommandInfo,
    RedisModule_SetModuleOptions,
    RedisModule_RegisterInfoFunc,
    RedisModule_InfoAddSection,
    RedisModule_InfoAddFieldULongLong,
    RedisModule_InfoAddFieldCString,
    RedisModule_ReplyWithArray,
    RedisModule_ReplyWithStringBuffer,
    RedisModule_ReplyWithNull,
    RedisModule_ReplyWithSimpleString,
    RedisModule_CreateDataType,
    RedisModule_GetAbsExpire,
    RedisModule_BlockClient,
    RedisModule_UnblockClient,
    RedisModule_SetDisconnectCallback,
    RedisModule_GetBlockedClientPrivateData,
    RedisModule_GetClientId,
    RedisModule_CreateTimer,
    RedisModule_StopTimer,
    RedisModule_SubscribeToKeyspaceEvents,
    RedisModule_SubscribeToServerEvent,
    RedisModule_GetContextFlags,
    RedisModule_GetSelectedDb,
    RedisModule_SelectDb,
    RedisModule_RetainString,
    RedisModule_AvoidReplicaTraffic,
    RedisModule_Call,
    RedisModule_CallReplyStringPtr,
    RedisModule_FreeCallReply,
    RedisModule_RegisterNumericConfig,
    RedisModule_RegisterBoolConfig,
    RedisModule_RegisterEnumConfig,
    RedisModule_LoadConfigs,
    RedisModule_RegisterCommandFilter,
    RedisModule_CommandFilterArgsCount,
    RedisModule_CommandFilterArgGet,
    // LOCK.GUARD
    RedisModule_CallReplyType,
    RedisModule_ReplyWithCallReply,
    RedisModule_IsKeysPositionRequest,
    RedisModule_KeyAtPosWithFlags,
    RedisModule_GetCommandKeysWithFlags,
    RedisModule_Free,
    // Semaphores and read-write locks (src/holders.rs).
    RedisModule_ZsetAdd,
    RedisModule_ZsetRem,
    RedisModule_ZsetFirstInScoreRange,
    RedisModule_ZsetRangeEndReached,
    RedisModule_ZsetRangeCurrentElement,
    RedisModule_ZsetRangeNext,
    RedisModule_ZsetRangeStop,
    RedisModule_ZsetScore,
    RedisModule_ZsetLastInScoreRange,
    RedisModule_ZsetRangePrev,
    RedisModule_CallReplyInteger,
    // Sessions (src/store/session.rs): ids from the server's CSPRNG.
    RedisModule_GetRandomBytes,
);

/// `rm!(RedisModule_OpenKey)` is that API function, which [`missing`] has
/// checked to be present at load. Only for functions listed there; expands
/// to a read of the crate's `static mut`, so it is used inside `unsafe`.
macro_rules! rm {
    ($name:ident) => {
        // `missing()` returned None at load for every function named with
        // this macro, and Redis never clears them afterwards.
        redis_module::raw::$name.unwrap_unchecked()
    };
}
pub(crate) use rm;
