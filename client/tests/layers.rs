//! The crate's modules import each other without a cycle: each layer uses
//! only the ones below it (errors and options at the bottom, pure
//! decisions, the transports, the modes, the facade on top; see the
//! docs/repository.md). The check reads `client/src/**/*.rs`: an
//! edge for every `crate::a::b` path in code (not comments), to the
//! longest module path it names, with the crate root's re-exports
//! (`crate::Error`) resolved to the modules that define them, and for the
//! `use child::...` of a parent module. No tool to install, and it runs
//! with the rest of the client's tests (`scripts/test`, and so CI).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("client/src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            // The CLI is a separate crate target, not a module.
            if p.file_name().is_some_and(|n| n != "bin") {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `quorum/lock.rs` → `quorum::lock`, `quorum/mod.rs` → `quorum`, `lib.rs` → `crate`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts == ["lib"] {
        return "crate".into();
    }
    parts.join("::")
}

/// Code without comments and without the unit tests at the end of a file.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// Every `crate::x::y::Z` path: its segments.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
        out.push(path.split("::").filter(|s| !s.is_empty()).map(String::from).collect());
    }
    out
}

#[test]
fn the_client_modules_import_each_other_without_a_cycle() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let texts: BTreeMap<String, String> =
        files.iter().map(|f| (module_of(&src, f), code(&std::fs::read_to_string(f).unwrap()))).collect();
    let modules: BTreeSet<&str> = texts.keys().map(String::as_str).collect();
    // The root's `pub use m::{A, B}`: which module each re-exported name is from.
    let mut reexports: BTreeMap<String, String> = BTreeMap::new();
    for line in texts["crate"].lines().filter_map(|l| l.trim().strip_prefix("pub use ")) {
        let (module, names) = line.trim_end_matches(';').split_once("::").expect("pub use m::...");
        for n in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            reexports.insert(n.trim().to_string(), module.to_string());
        }
    }
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (m, text) in &texts {
        if m == "crate" {
            continue;
        }
        let deps = edges.entry(m.as_str()).or_default();
        for path in crate_paths(text) {
            // The longest prefix that is a module, else a root re-export.
            let target = (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|p| modules.contains(p.as_str()));
            let target = target.or_else(|| path.first().and_then(|n| reexports.get(n).cloned()));
            if let Some(t) = target.filter(|t| t != m) {
                deps.insert(t);
            }
        }
        // A parent's `use child::...` (and `pub use child::...`).
        for child in modules.iter().filter_map(|c| c.strip_prefix(&format!("{m}::"))) {
            if text.contains(&format!("use {child}::")) {
                deps.insert(format!("{m}::{child}"));
            }
        }
    }
    // Depth-first search for a back edge.
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
            if let Some(cycle) = visit(m, &edges, &mut state, &mut Vec::new()) {
                panic!("import cycle: {}", cycle.join(" → "));
            }
        }
    }
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
