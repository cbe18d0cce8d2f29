//! Distributed locks on Redis, for the `lock` module's `LOCK.*` commands,
//! falling back to the reference Lua scripts on servers without the module.

mod client;
mod cmd;
mod error;
mod lock;
mod options;
mod state;
mod watchdog;

pub use client::LockClient;
pub use cmd::Backend;
pub use error::{Error, Result};
pub use lock::Lock;
pub use options::{ClientOptions, LockOptions, WatchdogOptions};
pub use state::{LossReason, LostSignal};
