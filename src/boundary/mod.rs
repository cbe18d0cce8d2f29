//! Layer 1, the boundary with redis-server: the module API checked at load
//! (`api`), the command context (`ctx`), the panic guard and the one reply
//! sender every command and blocked client goes through (`entry`), the
//! reply vocabulary (`reply`, `errors`), key specs (`keyspec`), data types
//! that hold only RDB aux data (`aux`), timers that own their data
//! (`timer`), and the thread's CPU clock (`cpu`). It imports nothing of
//! the module above it.

pub mod api;
pub mod aux;
pub mod cpu;
pub mod ctx;
pub mod entry;
pub mod errors;
pub mod keyspec;
pub mod reply;
pub mod timer;
