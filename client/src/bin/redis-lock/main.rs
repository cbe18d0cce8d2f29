//! `redis-lock`: run a command under a lock; inspect, list and release locks.
//!
//! ```text
//! redis-lock run [--url URL]... [--cluster] [--ttl MS] [--wait MS | -w SECONDS | -n] [-E CODE]
//!                [--grace MS] [--max-lifetime MS] [--lock-delay MS] [--max-hold MS] [--token TOKEN]
//!                [--run-id RUN_ID | --permits N | -s | -x] KEY -- CMD [ARGS...]
//! redis-lock elect [--url URL]... [--cluster] --value V [--ttl MS] [--wait MS | -w SECONDS | -n] [-E CODE]
//!                  [--grace MS] [--max-lifetime MS] [--lock-delay MS] [--max-hold MS] [--token TOKEN] KEY -- CMD [ARGS...]
//! redis-lock leader [--url URL]... [--cluster] [--watch] [--json] KEY
//! redis-lock info [--url URL] [--cluster] KEY
//! redis-lock release [--url URL]... [--cluster] KEY TOKEN
//! redis-lock revoke [--url URL] [--cluster] [--token T] [--grace MS] [--reason R] KEY
//! redis-lock list [--url URL]... [--cluster] [--json] [--count N] [PATTERN]
//! redis-lock top [--url URL]... [--cluster] [--once] [--json] [--count N] [--interval SECONDS] [--sort S]
//! redis-lock completions bash|zsh|fish|elvish|powershell
//! ```
//!
//! With several `--url`s, `run` and `release` work on a quorum lock over
//! those servers (`QuorumClient`) and `list` lists each of them; with
//! `--cluster` the `--url`s are seed nodes of one Redis Cluster instead.
//! Exit statuses are in `args.rs` (`--help` shows them).

mod args;
mod elect;
mod fail;
mod frame;
mod info;
mod leader;
mod list;
mod masters;
mod release;
mod render;
mod revoke;
mod run;
mod scan;
mod stats;
mod supervise;
mod target;
mod top;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use args::{Cli, Cmd};
use fail::Fail;

fn main() -> ExitCode {
    // Usage errors exit 2, --help and --version 0, as clap decides.
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(Fail(code, msg)) => {
            if !msg.is_empty() {
                eprintln!("redis-lock: {msg}");
            }
            ExitCode::from(code)
        }
    }
}

fn dispatch(cmd: Cmd) -> Result<ExitCode, Fail> {
    match cmd {
        Cmd::Run(a) => run::cmd_run(a),
        Cmd::Elect(a) => elect::cmd_elect(a),
        Cmd::Leader(a) => leader::cmd_leader(a),
        Cmd::Info { target, key } => info::cmd_info(&target, &key),
        Cmd::Release { target, key, token } => release::cmd_release(&target, &key, &token),
        Cmd::Revoke(a) => revoke::cmd_revoke(a),
        Cmd::List(a) => list::cmd_list(a),
        Cmd::Top(a) => top::cmd_top(a),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "redis-lock", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    }
}
