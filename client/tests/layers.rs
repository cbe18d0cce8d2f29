//! The crate's modules import each other without a cycle: each layer uses
//! only the ones below it (errors and options at the bottom, pure
//! decisions, the transports, the modes, the facade on top; see the
//! docs/repository.md), and so do the CLI's (`src/bin/redis-lock/`). The
//! check reads the `.rs` files of each crate target: an edge for every
//! `crate::a::b` path in code (not comments), to the longest module path
//! it names, with the crate root's re-exports (`crate::Error`) resolved to
//! the modules that define them and any other root item counted as the
//! root itself (which holds every top-level module, so a module reaching
//! back into it is a cycle), and for the `use child::...` of a parent
//! module. No tool to install, and it runs with the rest of the client's
//! tests (`scripts/test`, and so CI).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("client/src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            // The CLI is a separate crate target, checked on its own.
            if p.file_name().is_some_and(|n| n != "bin") {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `quorum/lock.rs` → `quorum::lock`, `quorum/mod.rs` → `quorum`, the
/// root (`lib.rs`, `main.rs`) → `crate`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        return "crate".into();
    }
    parts.join("::")
}

/// Code without comments and without the unit tests at the end of a file.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// Every `crate::x::y::Z` path: its segments. A group (`crate::{a, b::C}`)
/// is a path per member.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let segments = |p: &str| p.split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            out.extend(group.split(',').map(segments).filter(|p: &Vec<String>| !p.is_empty()));
            continue;
        }
        let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
        out.push(segments(&path));
    }
    out
}

/// One crate target's modules (`crate` for its root) and their source,
/// code only.
type Texts = BTreeMap<String, String>;

fn texts(src: &Path, files: &[PathBuf]) -> Texts {
    files.iter().map(|f| (module_of(src, f), code(&std::fs::read_to_string(f).unwrap()))).collect()
}

/// The library's modules.
fn library() -> Texts {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    texts(&src, &files)
}

/// The `redis-lock` CLI's modules.
fn cli() -> Texts {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/bin/redis-lock");
    let mut files = Vec::new();
    sources(&src, &mut files);
    texts(&src, &files)
}

/// Which modules each module imports.
fn edges(texts: &Texts) -> BTreeMap<&str, BTreeSet<String>> {
    let modules: BTreeSet<&str> = texts.keys().map(String::as_str).collect();
    let top: Vec<&str> = modules.iter().copied().filter(|m| *m != "crate" && !m.contains("::")).collect();
    // The root's `use m::{A, B}` and `pub use m::...`: which module each
    // name it passes on is from.
    let mut reexports: BTreeMap<String, String> = BTreeMap::new();
    for stmt in texts["crate"].split(';').map(str::trim) {
        let Some(rest) = ["pub use ", "pub(crate) use ", "use "].iter().find_map(|p| stmt.strip_prefix(p)) else {
            continue;
        };
        let Some((module, names)) = rest.split_once("::") else { continue };
        if !top.contains(&module) {
            continue;
        }
        for n in names.trim_matches(|c: char| c == '{' || c == '}' || c.is_whitespace()).split(',') {
            let n = n.trim();
            if !n.is_empty() {
                reexports.insert(n.to_string(), module.to_string());
            }
        }
    }
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    // The root declares (and so holds) every top-level module.
    edges.insert("crate", top.iter().map(|m| m.to_string()).collect());
    for (m, text) in texts {
        if m == "crate" {
            continue;
        }
        let deps = edges.entry(m.as_str()).or_default();
        for path in crate_paths(text) {
            // The longest prefix that is a module, else a root re-export,
            // else an item of the root itself.
            let target = (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|p| modules.contains(p.as_str()));
            let target = target.or_else(|| path.first().and_then(|n| reexports.get(n).cloned()));
            let target = target.unwrap_or_else(|| "crate".into());
            if &target != m {
                deps.insert(target);
            }
        }
        // A parent's `use child::...` (and `pub use child::...`).
        for child in modules.iter().filter_map(|c| c.strip_prefix(&format!("{m}::"))) {
            if text.contains(&format!("use {child}::")) {
                deps.insert(format!("{m}::{child}"));
            }
        }
    }
    edges
}

/// A cycle of imports, if there is one: depth-first search for a back edge.
fn cycle(edges: &BTreeMap<&str, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        m: &'a str,
        edges: &'a BTreeMap<&str, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        state.insert(m, 1);
        stack.push(m);
        for d in edges.get(m).into_iter().flatten() {
            match state.get(d.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == d).unwrap();
                    let mut cycle: Vec<String> = stack[from..].iter().map(|s| s.to_string()).collect();
                    cycle.push(d.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(d, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(m, 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if !state.contains_key(m) {
            if let Some(cycle) = visit(m, edges, &mut state, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

/// `texts`' import graph, after checking it has no cycle.
fn acyclic<'a>(texts: &'a Texts, what: &str) -> BTreeMap<&'a str, BTreeSet<String>> {
    let edges = edges(texts);
    if let Some(cycle) = cycle(&edges) {
        panic!("import cycle in {what}: {}", cycle.join(" → "));
    }
    edges
}

#[test]
fn the_client_modules_import_each_other_without_a_cycle() {
    let texts = library();
    let edges = acyclic(&texts, "the library");
    // The bottom layer imports nothing of the crate but itself.
    for bottom in ["error", "options", "failure"] {
        let deps = &edges[bottom];
        assert!(
            deps.iter().all(|d| ["error", "options", "failure"].contains(&d.as_str())),
            "{bottom} imports {deps:?}"
        );
    }
    assert!(edges.len() > 20, "found {} modules: is the source walk right?", edges.len());
}

#[test]
fn the_cli_modules_import_each_other_without_a_cycle() {
    let texts = cli();
    let edges = acyclic(&texts, "the CLI");
    assert!(edges.len() > 8, "found {} CLI modules: is the source walk right?", edges.len());
}

/// The check itself: a cycle planted in a copy of the real sources is found,
/// through a module path, through a root re-export, and through an item of
/// the root.
#[test]
fn a_planted_cycle_is_found() {
    let plant = |mut texts: Texts, into: &str, path: &str| {
        texts.get_mut(into).expect("module to plant into").push_str(&format!("\nuse {path};\n"));
        cycle(&edges(&texts))
    };
    // The library: `client` builds on `error`; `error` reaching up is a cycle.
    assert!(plant(library(), "error", "crate::client::LockClient").is_some());
    assert!(plant(library(), "error", "crate::LockClient").is_some(), "through a root re-export");
    // The CLI: `list` uses `scan`; `scan` using `list`, or the root, is one.
    assert!(plant(cli(), "scan", "crate::list::cmd_list").is_some());
    assert!(plant(cli(), "scan", "crate::dispatch").is_some(), "through an item of the root");
    assert!(plant(cli(), "scan", "crate::{usage, list::cmd_list}").is_some(), "in a group");
}
