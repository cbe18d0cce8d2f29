//! The crate's modules keep their layers (docs/repository.md, the client
//! row): each imports only its own layer and those below, with no import
//! cycle, every module is in a layer, and no file is over 500 lines; the
//! `redis-lock` CLI (`src/bin/redis-lock/`) likewise with its own layers.
//! The check is the harness's (`redis_lock_harness::layers`, which says
//! what counts as an import); it reads the sources, so it runs with the
//! rest of the client's tests (`scripts/test`, and so CI) with no tool to
//! install.

use std::path::PathBuf;

use redis_lock_harness::layers::{assert_layers, Layers, Sources};

/// The library's layers, bottom first.
const LIBRARY: Layers = &[
    ("bottom", &["error", "failure", "options", "trace"]),
    // Taking `now` and replies, doing no I/O.
    ("pure decisions", &["cmd", "watchdog", "retry", "revocation", "loss", "attach", "votes", "state", "info"]),
    ("runtime", &["runtime", "engine", "session", "keepalive", "adopt"]),
    ("transport", &["send", "transport", "single", "cluster", "wait"]),
    // `quorum::round` runs one step on every server (tokio tasks over the
    // quorum's nodes) and tallies it: part of the quorum mode.
    ("modes", &["holding", "lock", "replicas", "quorum", "observe"]),
    ("facade", &["client", "named", "election", "multi", "crate"]),
];

/// The CLI's layers, bottom first.
const CLI: Layers = &[
    // Exit statuses, `top`'s pure readings, one server's locks, `run`'s
    // process supervision.
    ("base", &["fail", "stats", "scan", "supervise"]),
    // A cluster's masters; `list`'s and `top`'s output.
    ("cluster and output", &["masters", "render", "frame"]),
    ("command line", &["args", "target"]),
    ("commands", &["run", "elect", "leader", "info", "release", "revoke", "list", "top"]),
    ("dispatch", &["crate"]),
];

/// No file of the client's library or CLI is longer than this.
const MAX_LINES: usize = 500;

fn library() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn cli() -> PathBuf {
    library().join("bin/redis-lock")
}

#[test]
fn the_library_keeps_its_layers() {
    assert_layers(library(), LIBRARY, Some(MAX_LINES));
    let modules = Sources::read(library()).unwrap().modules().count();
    assert!(modules > 30, "found {modules} modules: is the source walk right?");
}

#[test]
fn the_cli_keeps_its_layers() {
    assert_layers(cli(), CLI, Some(MAX_LINES));
    let modules = Sources::read(cli()).unwrap().modules().count();
    assert!(modules > 12, "found {modules} CLI modules: is the source walk right?");
}

/// The check itself, on the real sources: a cycle planted into them is
/// found, through a module path, a root re-export and an item of the root,
/// and so is an import up the layers that makes no cycle.
#[test]
fn a_planted_cycle_or_upward_import_is_found() {
    let planted = |src: PathBuf, layers: Layers, into: &str, code: &str| {
        let mut s = Sources::read(src).unwrap();
        s.plant(into, code);
        s.problems(layers, None)
    };
    let cycle = |problems: &[String]| problems.iter().any(|p| p.starts_with("import cycle"));
    // The library: `client` builds on `error`; `error` reaching up is a cycle.
    assert!(cycle(&planted(library(), LIBRARY, "error", "use crate::client::LockClient;")));
    assert!(cycle(&planted(library(), LIBRARY, "error", "use crate::LockClient;")), "through a root re-export");
    // `options` using `cmd` makes no cycle (`cmd` does not use `options`),
    // but runs up a layer.
    let p = planted(library(), LIBRARY, "options", "fn f() { crate::cmd::LockCmd::renew(); }");
    assert_eq!(p, ["options (layer bottom) imports cmd (layer pure decisions, higher): crate::cmd::LockCmd::renew"]);
    // The CLI: `list` uses `scan`; `scan` using `list`, or the root, is one.
    assert!(cycle(&planted(cli(), CLI, "scan", "use crate::list::cmd_list;")));
    assert!(cycle(&planted(cli(), CLI, "scan", "use crate::dispatch;")), "through an item of the root");
    assert!(cycle(&planted(cli(), CLI, "scan", "use crate::{usage, list::cmd_list};")), "in a group");
}
