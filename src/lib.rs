use redis_module::{redis_module, Context, RedisString, Status};
fn init(_ctx: &Context, _args: &[RedisString]) -> Status { Status::Ok }
redis_module! {
    name: "lock",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
    commands: [],
}
