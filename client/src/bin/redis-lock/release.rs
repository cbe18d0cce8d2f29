//! `redis-lock release`: give up a lock by its token, from outside.

use std::process::ExitCode;

use redis_lock_client::{ClientOptions, Error};

use crate::args::Target;
use crate::fail::{redis_fail, usage, Fail};
use crate::target::{open_quorum, Servers};

/// `redis-lock release [--url URL]... [--cluster] KEY TOKEN`
pub fn cmd_release(target: &Target, key: &str, token: &str) -> Result<ExitCode, Fail> {
    let released = match target.servers() {
        Servers::Quorum(urls) => open_quorum(&urls, false)?.release_token(key, token),
        _ => target.open(ClientOptions::new())?.release_token(key, token),
    };
    match released {
        Ok(()) => {
            println!("released {key}");
            Ok(ExitCode::SUCCESS)
        }
        Err(Error::NotHeld { .. }) => Err(Fail(1, format!("{key:?} is not held by that token"))),
        Err(e @ Error::InvalidArgument(_)) => Err(usage(e.to_string())),
        Err(e) => Err(redis_fail(e)),
    }
}
