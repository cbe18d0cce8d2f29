//! The layer check of a crate target's modules: no import cycle, no import
//! that runs up the declared layers, no module outside them, and
//! (optionally) no file over a number of lines.
//!
//! It reads the `.rs` files under a target's source directory (no tool to
//! install, nothing to build) and draws an edge from a module to each
//! module it names:
//! - every `crate::a::b` path in code (not in comments or string
//!   literals), to the longest module path it names; a group
//!   (`crate::{a, b::{C, D}}`) is a path per member;
//! - every `super::…` path, resolved from the module's parent;
//! - a module's `use child::…` (or `use self::child::…`) of its own child;
//! - a path to an item of the crate root: to the module the root
//!   re-exports it from (`pub use error::Error` makes `crate::Error` an
//!   edge to `error`), else to the root itself, which holds every
//!   top-level module (so a module reaching back into it is a cycle).
//!
//! Unit tests at the end of a file (`#[cfg(test)] mod tests`) are left out:
//! they may use anything. The root is named `crate` (from `lib.rs` or
//! `main.rs`); `quorum/round.rs` is `quorum::round`, `quorum/mod.rs` is
//! `quorum`. A top-level `bin/` directory is skipped: a crate's binaries are
//! targets of their own, checked with their own layers.
//!
//! Layers are declared bottom first, each with the module paths in it; a
//! module belongs to the layer whose path is its longest prefix (by whole
//! segments: `quorum` holds `quorum::lock`, a `quorum::round` entry takes
//! that one elsewhere). Modules of one layer may import each other (the
//! cycle check still applies), a module may import any layer below its own.
//!
//! This file uses only `std` so that a crate which the harness depends on
//! (`rules/`) can include it by path instead of depending on the harness.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The layers of a crate target, bottom first: a name and the module paths
/// in it (`"crate"` is the root).
pub type Layers<'a> = &'a [(&'a str, &'a [&'a str])];

/// The crate root's module name.
pub const ROOT: &str = "crate";

/// The checked text of one module.
#[derive(Clone, Debug)]
struct Source {
    /// Relative to the source directory.
    file: PathBuf,
    /// Code without comments, string contents and the unit tests at the end.
    code: String,
    /// Lines of the whole file.
    lines: usize,
}

/// A crate target's modules, read from its source directory.
#[derive(Clone, Debug)]
pub struct Sources {
    modules: BTreeMap<String, Source>,
}

/// Which modules each module imports, and for each import one path that
/// makes it (for the report).
pub type Edges = BTreeMap<String, BTreeMap<String, String>>;

impl Sources {
    /// Reads every `.rs` file under `src` (not a top-level `bin/`).
    pub fn read(src: impl AsRef<Path>) -> std::io::Result<Sources> {
        let src = src.as_ref();
        let mut files = Vec::new();
        walk(src, src, &mut files)?;
        let mut modules = BTreeMap::new();
        for file in files {
            let text = std::fs::read_to_string(&file)?;
            let rel = file.strip_prefix(src).unwrap_or(&file).to_path_buf();
            let source = Source { code: code(&text), lines: text.lines().count(), file: rel };
            modules.insert(module_of(src, &file), source);
        }
        Ok(Sources { modules })
    }

    /// The module paths found (`crate` for the root).
    pub fn modules(&self) -> impl Iterator<Item = &str> {
        self.modules.keys().map(String::as_str)
    }

    /// Appends `code` to `module`, as if written at the end of its file
    /// before its tests: how a test shows that the check finds what it
    /// should. Panics if there is no such module.
    pub fn plant(&mut self, module: &str, code: &str) {
        let m = self.modules.get_mut(module).unwrap_or_else(|| panic!("no module {module} to plant into"));
        m.code.push('\n');
        m.code.push_str(&self::code(code));
        m.code.push('\n');
    }

    /// The import graph (see the module docs for what makes an edge).
    pub fn edges(&self) -> Edges {
        let modules: BTreeSet<&str> = self.modules().collect();
        let top: Vec<&str> = modules.iter().copied().filter(|m| *m != ROOT && !m.contains("::")).collect();
        let longest = |path: &[String]| -> Option<String> {
            (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|p| modules.contains(p.as_str()))
        };
        // The root's `use m::{A, B as C}`: which module each name it brings
        // into the root (and so may pass on) is from.
        let mut reexports: BTreeMap<String, String> = BTreeMap::new();
        if let Some(root) = self.modules.get(ROOT) {
            for (path, name) in use_trees(&root.code) {
                let path = match path.first().map(String::as_str) {
                    Some("crate" | "self") => path[1..].to_vec(),
                    _ => path,
                };
                if path.first().is_some_and(|f| top.contains(&f.as_str())) {
                    if let Some(m) = longest(&path) {
                        reexports.insert(name, m);
                    }
                }
            }
        }
        let mut edges: Edges = BTreeMap::new();
        // The root declares (and so holds) every top-level module.
        edges.insert(ROOT.into(), top.iter().map(|m| (m.to_string(), format!("mod {m}"))).collect());
        for (m, source) in &self.modules {
            if m == ROOT {
                continue;
            }
            let deps = edges.entry(m.clone()).or_default();
            let mut add = |path: Vec<String>, shown: String| {
                // The longest prefix that is a module, else a root
                // re-export, else an item of the root itself.
                let target = longest(&path)
                    .or_else(|| path.first().and_then(|n| reexports.get(n).cloned()))
                    .unwrap_or_else(|| ROOT.into());
                if &target != m {
                    deps.entry(target).or_insert(shown);
                }
            };
            for path in prefixed_paths(&source.code, "crate") {
                let shown = format!("crate::{}", path.join("::"));
                add(path, shown);
            }
            // `super::x` from `a::b` is `a::x`; `super::super::x` from
            // `a::b` is `x` (an item of the root).
            let parent: Vec<String> = m.split("::").map(String::from).collect();
            for path in prefixed_paths(&source.code, "super") {
                let ups = path.iter().take_while(|s| *s == "super").count() + 1;
                let Some(base) = parent.len().checked_sub(ups) else { continue };
                let shown = format!("super::{}", path.join("::"));
                add(parent[..base].iter().chain(&path[ups - 1..]).cloned().collect(), shown);
            }
            // A parent's `use child::…` (2018 paths name children directly).
            for (path, _) in use_trees(&source.code) {
                let path = if path.first().is_some_and(|f| f == "self") { path[1..].to_vec() } else { path };
                let Some(first) = path.first() else { continue };
                if modules.contains(format!("{m}::{first}").as_str()) {
                    let shown = format!("use {}", path.join("::"));
                    add(parent.iter().chain(&path).cloned().collect(), shown);
                }
            }
        }
        edges
    }

    /// Everything wrong, as readable lines (none: the target passes):
    /// modules in no layer, layer entries that name no module, import
    /// cycles, imports up the layers, and files over `max_lines` lines.
    pub fn problems(&self, layers: Layers, max_lines: Option<usize>) -> Vec<String> {
        let mut out = Vec::new();
        let layer_of = |m: &str| -> Option<usize> {
            let mut best: Option<(usize, usize)> = None;
            for (i, (_, paths)) in layers.iter().enumerate() {
                for p in *paths {
                    let hit = if *p == ROOT {
                        m == ROOT
                    } else {
                        m == *p || m.strip_prefix(p).is_some_and(|rest| rest.starts_with("::"))
                    };
                    if hit && !matches!(best, Some((len, _)) if len >= p.len()) {
                        best = Some((p.len(), i));
                    }
                }
            }
            best.map(|(_, i)| i)
        };
        for m in self.modules() {
            if layer_of(m).is_none() {
                out.push(format!("module {m} is in no declared layer"));
            }
        }
        for (name, paths) in layers {
            for p in *paths {
                let exists = self.modules().any(|m| m == *p || m.strip_prefix(p).is_some_and(|r| r.starts_with("::")));
                if !exists {
                    out.push(format!("layer {name} names {p}, which is no module"));
                }
            }
        }
        let edges = self.edges();
        for (circle, cycle) in cycles(&edges) {
            let shown: Vec<String> = cycle
                .windows(2)
                .map(|w| format!("{} ({})", w[0], edges[&w[0]][&w[1]]))
                .chain(cycle.last().cloned())
                .collect();
            let mut line = format!("import cycle: {}", shown.join(" → "));
            if circle.len() + 1 > cycle.len() {
                let _ = write!(line, "; its circle has {} modules: {}", circle.len(), circle.join(", "));
            }
            out.push(line);
        }
        for (m, deps) in &edges {
            let Some(from) = layer_of(m) else { continue };
            for (d, shown) in deps {
                if let Some(to) = layer_of(d).filter(|&to| to > from) {
                    out.push(format!(
                        "{m} (layer {}) imports {d} (layer {}, higher): {shown}",
                        layers[from].0, layers[to].0
                    ));
                }
            }
        }
        if let Some(max) = max_lines {
            for s in self.modules.values().filter(|s| s.lines > max) {
                out.push(format!("{} has {} lines (at most {max})", s.file.display(), s.lines));
            }
        }
        out
    }
}

/// Reads `src` and returns its problems (see [`Sources::problems`]); a
/// directory that cannot be read is one.
pub fn check(src: impl AsRef<Path>, layers: Layers, max_lines: Option<usize>) -> Vec<String> {
    match Sources::read(src.as_ref()) {
        Ok(s) => s.problems(layers, max_lines),
        Err(e) => vec![format!("cannot read {}: {e}", src.as_ref().display())],
    }
}

/// [`check`], panicking with the list of problems if there are any.
pub fn assert_layers(src: impl AsRef<Path>, layers: Layers, max_lines: Option<usize>) {
    let problems = check(src.as_ref(), layers, max_lines);
    if !problems.is_empty() {
        let mut msg = format!("{} layer problem(s) in {}:\n", problems.len(), src.as_ref().display());
        for p in &problems {
            let _ = writeln!(msg, "  - {p}");
        }
        panic!("{msg}");
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            if !(dir == root && p.file_name().is_some_and(|n| n == "bin")) {
                walk(root, &p, out)?;
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// `quorum/lock.rs` → `quorum::lock`, `quorum/mod.rs` → `quorum`, the root
/// (`lib.rs`, `main.rs`) → `crate`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        return ROOT.into();
    }
    parts.join("::")
}

/// `text` with comments removed, the contents of string and character
/// literals blanked (so `"crate::x"` in a message is no import), and the
/// unit tests at the end (`#[cfg(test)] mod …`) cut off.
fn code(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && (i == 0 || !ident(b[i - 1])) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (next == Some('\\') || b.get(i + 2) == Some(&'\'')) {
            // A character literal (not a lifetime).
            i += 1;
            while i < b.len() && b[i] != '\'' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    // The unit tests at the end.
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(test)]").map(|a| a + from) {
        let rest = out[at + "#[cfg(test)]".len()..].trim_start();
        if rest.starts_with("mod ") {
            out.truncate(at);
            break;
        }
        from = at + 1;
    }
    out
}

/// Every path that starts with the keyword `word` (`crate` or `super`),
/// without it: a group is a path per member.
fn prefixed_paths(code: &str, word: &str) -> Vec<Vec<String>> {
    let lead = format!("{word}::");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find(&lead).map(|i| i + from) {
        from = i + lead.len();
        let before = code[..i].trim_end();
        // Not part of a longer name, nor the second `super` of `super::super`.
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$')
            || (word == "super" && before.ends_with("::"))
        {
            continue;
        }
        let mut trees = Vec::new();
        tree(code, &mut from, Vec::new(), &mut trees);
        out.extend(trees.into_iter().map(|(p, _)| p).filter(|p| !p.is_empty()));
    }
    out
}

/// Every `use` tree in `code`: each full path, with the name it binds.
fn use_trees(code: &str) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("use ").map(|i| i + from) {
        from = i + 4;
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut pos = from;
        let mut trees = Vec::new();
        tree(code, &mut pos, Vec::new(), &mut trees);
        out.extend(trees.into_iter().map(|(mut p, alias)| {
            let name = alias.or_else(|| p.last().cloned()).unwrap_or_default();
            if p.first().is_some_and(|f| f.is_empty()) {
                p.remove(0);
            }
            (p, name)
        }));
    }
    out
}

/// Parses a path or use tree at `*pos` (`a::b`, `a::{b, c::{D, E as F}}`,
/// `a::*`), appending each full path (after `prefix`) and its alias.
fn tree(code: &str, pos: &mut usize, mut prefix: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    let b = code.as_bytes();
    let skip_ws = |pos: &mut usize| {
        while *pos < b.len() && b[*pos].is_ascii_whitespace() {
            *pos += 1;
        }
    };
    loop {
        skip_ws(pos);
        match b.get(*pos) {
            Some(b'{') => {
                *pos += 1;
                loop {
                    skip_ws(pos);
                    match b.get(*pos) {
                        None => return,
                        Some(b'}') => {
                            *pos += 1;
                            return;
                        }
                        Some(b',') => *pos += 1,
                        _ => {
                            let before = *pos;
                            tree(code, pos, prefix.clone(), out);
                            if *pos == before {
                                // Not a tree: give up on this group.
                                return;
                            }
                        }
                    }
                }
            }
            Some(b'*') => {
                *pos += 1;
                out.push((prefix, None));
                return;
            }
            _ => {}
        }
        let start = *pos;
        while *pos < b.len() && (b[*pos].is_ascii_alphanumeric() || b[*pos] == b'_') {
            *pos += 1;
        }
        let seg = &code[start..*pos];
        if seg.is_empty() {
            out.push((prefix, None));
            return;
        }
        if seg != "self" {
            prefix.push(seg.to_string());
        }
        let after = *pos;
        skip_ws(pos);
        if code[*pos..].starts_with("::") {
            *pos += 2;
            continue;
        }
        if code[*pos..].starts_with("as ") {
            *pos += 3;
            skip_ws(pos);
            let start = *pos;
            while *pos < b.len() && (b[*pos].is_ascii_alphanumeric() || b[*pos] == b'_') {
                *pos += 1;
            }
            out.push((prefix, Some(code[start..*pos].to_string())));
            return;
        }
        *pos = after;
        out.push((prefix, None));
        return;
    }
}

/// Each circle of modules (strongly connected component of more than one
/// module), sorted, with one cycle in it as `a, b, …, a`: the shortest
/// from the circle's first module.
fn cycles(edges: &Edges) -> Vec<(Vec<String>, Vec<String>)> {
    // Tarjan's algorithm, iterative over the (small) graph.
    struct Tarjan<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, m: &'a str) {
            let n = self.index.len();
            self.index.insert(m, n);
            self.low.insert(m, n);
            self.stack.push(m);
            self.on_stack.insert(m);
            let edges = self.edges;
            for d in edges.get(m).into_iter().flat_map(|d| d.keys()) {
                let d = d.as_str();
                if !self.index.contains_key(d) {
                    self.visit(d);
                    let low = self.low[m].min(self.low[d]);
                    self.low.insert(m, low);
                } else if self.on_stack.contains(d) {
                    let low = self.low[m].min(self.index[d]);
                    self.low.insert(m, low);
                }
            }
            if self.low[m] == self.index[m] {
                let mut scc = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    scc.push(top);
                    if top == m {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort_unstable();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for m in edges.keys() {
        if !t.index.contains_key(m.as_str()) {
            t.visit(m);
        }
    }
    let mut out = Vec::new();
    for scc in &t.out {
        let inside: BTreeSet<&str> = scc.iter().copied().collect();
        let start = scc[0];
        // Breadth-first from `start` back to it, inside the circle.
        let mut before: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        'search: while let Some(m) = queue.pop_front() {
            for d in edges.get(m).into_iter().flat_map(|d| d.keys()) {
                let d = d.as_str();
                if !inside.contains(d) {
                    continue;
                }
                if d == start {
                    let mut path = vec![start.to_string()];
                    let mut at = m;
                    while at != start {
                        path.push(at.to_string());
                        at = before[at];
                    }
                    path.push(start.to_string());
                    path.reverse();
                    out.push((scc.iter().map(|m| m.to_string()).collect(), path));
                    break 'search;
                }
                if !before.contains_key(d) && d != start {
                    before.insert(d, m);
                    queue.push_back(d);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate target written to a fresh temp dir: (relative file, text).
    fn tree_of(files: &[(&str, &str)]) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "layers-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (file, text) in files {
            let p = dir.join(file);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    const LAYERS: Layers = &[("bottom", &["error", "num"]), ("middle", &["decide"]), ("top", &["api", "crate"])];

    fn clean() -> Vec<(&'static str, &'static str)> {
        vec![
            ("lib.rs", "mod api;\nmod decide;\nmod error;\nmod num;\npub use error::Error;\npub use api::Api;\n"),
            ("error.rs", "// crate::api::Api in a comment is no import\npub struct Error;\n"),
            (
                "num.rs",
                "use crate::Error;\nconst S: &str = \"crate::api\";\npub fn n() -> Result<u8, Error> { Ok(1) }\n",
            ),
            ("decide/mod.rs", "mod rule;\npub use rule::Rule;\nuse crate::{error::Error, num::{self, n}};\n"),
            ("decide/rule.rs", "pub struct Rule;\nfn f() { let _ = super::super::num::n(); }\n"),
            (
                "api.rs",
                "use crate::decide::Rule;\npub struct Api;\n#[cfg(test)]\nmod tests {\n    use crate::Api;\n}\n",
            ),
        ]
    }

    #[test]
    fn a_clean_tree_passes() {
        let dir = tree_of(&clean());
        let s = Sources::read(&dir).unwrap();
        assert_eq!(s.problems(LAYERS, Some(100)), Vec::<String>::new());
        let edges = s.edges();
        // The edges the rules promise, so a pass is not an empty graph.
        let deps = |m: &str| edges[m].keys().cloned().collect::<Vec<_>>();
        assert_eq!(deps("num"), ["error"], "through the root's re-export");
        assert_eq!(deps("decide"), ["decide::rule", "error", "num"], "a group with a nested group");
        assert_eq!(deps("decide::rule"), ["num"], "super::super");
        assert_eq!(deps("api"), ["decide"], "the tests at the end are left out");
        assert_eq!(deps("error"), Vec::<String>::new(), "comments and strings are no imports");
        assert_eq!(deps("crate"), ["api", "decide", "error", "num"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_planted_cycle_fails() {
        let mut files = clean();
        files.push(("decide/rule.rs", "use crate::api::Api;\n"));
        files.push(("api.rs", "use crate::decide::rule::Rule;\n"));
        // Same layer, so only the cycle is wrong.
        let layers: Layers = &[("bottom", &["error", "num"]), ("upper", &["decide", "api", "crate"])];
        let dir = tree_of(&files);
        let problems = check(&dir, layers, None);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("import cycle: api (crate::decide::rule::Rule) → decide::rule"),
            "{problems:?}"
        );
        let _ = std::fs::remove_dir_all(dir);
        // And planted in memory into the clean tree: through a re-export of
        // the root, and through an item of the root it does not re-export.
        let dir = tree_of(&clean());
        let mut s = Sources::read(&dir).unwrap();
        s.plant("error", "fn f() { crate::Api::new() }");
        let p = s.problems(layers, None);
        assert!(
            p.iter().any(|p| p.starts_with("import cycle") && p.contains("error (crate::Api::new) → api")),
            "{p:?}"
        );
        let mut s = Sources::read(&dir).unwrap();
        s.plant("num", "use crate::not_reexported;");
        let p = s.problems(layers, None);
        assert!(p.iter().any(|p| p.contains("num (crate::not_reexported) → crate")), "{p:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_circle_larger_than_its_shortest_cycle_is_named_whole() {
        let files = [
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "use crate::b::B;\n"),
            ("b.rs", "use crate::a::A;\nuse crate::c::C;\n"),
            ("c.rs", "use crate::b::B;\n"),
        ];
        let dir = tree_of(&files);
        let problems = check(&dir, &[("all", &["a", "b", "c", "crate"])], None);
        assert_eq!(
            problems,
            ["import cycle: a (crate::b::B) → b (crate::a::A) → a; its circle has 3 modules: a, b, c"]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_upward_import_fails() {
        let mut files = clean();
        // Nothing imports `log`, so its import up makes no cycle.
        files.push(("log.rs", "pub fn log() { crate::decide::Rule; }\n"));
        let dir = tree_of(&files);
        let layers: Layers =
            &[("bottom", &["error", "num", "log"]), ("middle", &["decide"]), ("top", &["api", "crate"])];
        let problems = check(&dir, layers, None);
        assert_eq!(
            problems,
            ["log (layer bottom) imports decide (layer middle, higher): crate::decide::Rule"],
            "no cycle, only the direction is wrong"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn undeclared_modules_stale_entries_and_long_files_fail() {
        let mut files = clean();
        files.push(("extra.rs", "pub struct X;\n"));
        files.push(("bin/tool/main.rs", "use crate::api;\n"));
        let dir = tree_of(&files);
        let layers: Layers =
            &[("bottom", &["error", "num", "gone"]), ("middle", &["decide"]), ("top", &["api", "crate"])];
        let problems = check(&dir, layers, Some(3));
        assert!(problems.contains(&"module extra is in no declared layer".to_string()), "{problems:?}");
        assert!(problems.contains(&"layer bottom names gone, which is no module".to_string()), "{problems:?}");
        assert!(problems.iter().any(|p| p == "api.rs has 6 lines (at most 3)"), "{problems:?}");
        assert!(problems.iter().all(|p| !p.contains("bin")), "a top-level bin/ is another target: {problems:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_longest_declared_prefix_places_a_module() {
        let mut files = clean();
        // decide::rule is declared at the bottom, so decide → rule is down
        // and rule → num is level.
        files.push(("decide/rule.rs", "use crate::num::n;\n"));
        let dir = tree_of(&files);
        let layers: Layers =
            &[("bottom", &["error", "num", "decide::rule"]), ("middle", &["decide"]), ("top", &["api", "crate"])];
        assert_eq!(check(&dir, layers, None), Vec::<String>::new());
        // And a module never matches by a partial segment (`decide` does not
        // hold a `decider`).
        files.push(("decider.rs", "\n"));
        files.push(("lib.rs", "mod api;\nmod decide;\nmod decider;\nmod error;\nmod num;\npub use error::Error;\n"));
        let dir2 = tree_of(&files);
        assert_eq!(check(&dir2, layers, None), ["module decider is in no declared layer"]);
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(dir2);
    }

    #[test]
    fn code_drops_comments_strings_and_tests() {
        let c = code("a // crate::x\n/* crate::y /* nested */ crate::z */ b \"crate::s\" r#\"crate::r\"# 'c' '\\'' &'a str\n#[cfg(test)]\nmod tests { crate::t }");
        assert!(!c.contains("crate::"), "{c}");
        assert!(c.contains("&'a str"), "{c}");
        assert!(c.contains('b'));
    }
}
