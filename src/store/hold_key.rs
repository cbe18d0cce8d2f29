//! One hold of a session (a lock key's database and name, and a holder's
//! token): the pure encoding is `redis_lock_rules::hold_key`; a session's
//! set of them, `redis_lock_rules::hold_set`.

pub use redis_lock_rules::hold_key::HoldKey;
