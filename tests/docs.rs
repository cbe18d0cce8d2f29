//! The reference pages against the module's own tables, so they cannot
//! drift: every registered command (`docs/commands.md`), every `INFO lock`
//! field (`docs/info.md`) and every config (`docs/configuration.md`).
//!
//! The tables are read from a running server with the module loaded —
//! `COMMAND LIST FILTERBY MODULE lock`, `COMMAND INFO`, `COMMAND DOCS`,
//! `INFO lock` after every family has waited and held, `CONFIG GET lock.*`
//! — never by parsing `src/`: what a user sees is what the server says, and
//! the module's sources may move. Each test names the page and the row to
//! fix when it fails. The CLI's pages are checked against the binary's own
//! `--help` by `client/tests/cli_docs.rs`.

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;
use redis_lock_harness::{workspace_root, Server};

/// A page of the repository, as text.
fn page(path: &str) -> String {
    let p = workspace_root().join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The rows of the first Markdown table whose header row starts with
/// `header` (cells trimmed; `\|` inside a cell is a literal `|`).
fn table(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(header));
    assert!(lines.next().is_some(), "no table with header {header:?}");
    lines
        .skip(1) // the |---| row
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let inner = l.trim().trim_start_matches('|').trim_end_matches('|');
            let mut cells = vec![String::new()];
            let mut chars = inner.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '\\' if chars.peek() == Some(&'|') => cells.last_mut().unwrap().push(chars.next().unwrap()),
                    '|' => cells.push(String::new()),
                    c => cells.last_mut().unwrap().push(c),
                }
            }
            cells.into_iter().map(|c| c.trim().to_string()).collect()
        })
        .collect()
}

/// The `code spans` of a piece of Markdown, in order.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Command names (`LOCK.ACQUIRE`, `SEM.INFO`, …) named in a piece of text,
/// lower-cased as Redis names them.
fn command_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    for family in ["LOCK.", "SEM.", "RWLOCK.", "SESSION."] {
        let mut from = 0;
        while let Some(at) = text[from..].find(family) {
            let start = from + at;
            from = start + family.len();
            // `RWLOCK.` also contains `LOCK.`: take a name only at a word start.
            if start > 0 && bytes[start - 1].is_ascii_alphanumeric() {
                continue;
            }
            let rest: String = text[from..].chars().take_while(|c| c.is_ascii_uppercase()).collect();
            if !rest.is_empty() {
                names.insert(format!("{family}{rest}").to_lowercase());
            }
        }
    }
    names
}

fn text_of(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) | Value::Set(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

/// A flat `field value field value …` array as (field, value) pairs.
fn pairs(v: &Value) -> Vec<(String, &Value)> {
    items(v).chunks(2).map(|p| (text_of(&p[0]), &p[1])).collect()
}

fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    pairs(v).into_iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

/// The module's commands, as the server lists them.
fn module_commands(c: &mut redis::Connection) -> BTreeSet<String> {
    let names: Vec<String> =
        redis::cmd("COMMAND").arg("LIST").arg("FILTERBY").arg("MODULE").arg("lock").query(c).unwrap();
    assert!(names.len() >= 10, "COMMAND LIST FILTERBY MODULE lock: {names:?}");
    names.into_iter().map(|n| n.to_lowercase()).collect()
}

/// What `COMMAND INFO` says of one command.
#[derive(Debug)]
struct Registered {
    arity: i64,
    flags: BTreeSet<String>,
    /// Empty where the server has no module API for them (Redis 7.0).
    acl: BTreeSet<String>,
    /// Per key spec: its begin-search index (None: not an index) and flags.
    key_specs: Vec<(Option<i64>, Vec<String>)>,
}

fn registered(c: &mut redis::Connection, name: &str) -> Registered {
    let reply: Value = redis::cmd("COMMAND").arg("INFO").arg(name).query(c).unwrap();
    let info = &items(&reply)[0];
    let info = items(info);
    let arity = match &info[1] {
        Value::Int(n) => *n,
        other => panic!("{name}: arity {other:?}"),
    };
    let set = |v: &Value| items(v).iter().map(text_of).collect::<BTreeSet<_>>();
    let key_specs = items(&info[8])
        .iter()
        .map(|spec| {
            let flags = field(spec, "flags").map(|f| items(f).iter().map(text_of).collect()).unwrap_or_default();
            let index = field(spec, "begin_search").and_then(|b| {
                let is_index = field(b, "type").map(text_of).as_deref() == Some("index");
                let spec = field(b, "spec")?;
                match (is_index, field(spec, "index")) {
                    (true, Some(Value::Int(i))) => Some(*i),
                    _ => None,
                }
            });
            (index, flags)
        })
        .collect();
    Registered { arity, flags: set(&info[2]), acl: set(&info[6]), key_specs }
}

/// The module registers flags by their `RedisModule_CreateCommand` names;
/// `COMMAND INFO` shows them by Redis's own, adds `module`, and shows a
/// command whose keys come from the getkeys API as `movablekeys`.
fn as_reported(registered_flag: &str) -> &str {
    match registered_flag {
        "deny-oom" => "denyoom",
        "getkeys-api" => "movablekeys",
        "no-cluster" => "no_cluster",
        other => other,
    }
}

/// The option tokens (`FENCE`, `WAIT`, …) of a `COMMAND DOCS` argument
/// list's optional arguments, nested ones (`oneof`, `block`) included.
fn option_tokens(args: &Value, tokens: &mut BTreeSet<String>, optional_above: bool) {
    for arg in items(args) {
        let optional =
            optional_above || field(arg, "flags").is_some_and(|f| items(f).iter().any(|x| text_of(x) == "optional"));
        if let (true, Some(t)) = (optional, field(arg, "token")) {
            tokens.insert(text_of(t).to_uppercase());
        }
        if let Some(nested) = field(arg, "arguments") {
            option_tokens(nested, tokens, optional);
        }
    }
}

/// How many of the top-level arguments are required (a value, not an option).
fn required_args(args: &Value) -> usize {
    items(args)
        .iter()
        .filter(|a| {
            let optional = field(a, "flags").is_some_and(|f| items(f).iter().any(|x| text_of(x) == "optional"));
            let pure = field(a, "type").map(text_of).as_deref() == Some("pure-token");
            !optional && !pure
        })
        .count()
}

/// `docs/commands.md`'s first table against `COMMAND INFO` and `COMMAND
/// DOCS`: one row per registered command, none for a command that is not;
/// per row the grammar (the option tokens and the number of required
/// arguments), the arity, the flags, the key specs and, on servers that
/// report them, the ACL categories.
#[test]
fn commands_md_lists_every_command_with_its_arity_flags_keys_and_acl() {
    let server = Server::start();
    let mut c = server.conn();
    let text = page("docs/commands.md");
    let rows = table(&text, "| command | arity |");
    let mut documented = BTreeMap::new();
    for row in &rows {
        assert_eq!(row.len(), 5, "docs/commands.md: a row of five cells: {row:?}");
        let synopsis = code_spans(&row[0]).into_iter().next().unwrap_or_else(|| panic!("no `synopsis` in {row:?}"));
        let name = synopsis.split_whitespace().next().unwrap().to_lowercase();
        assert!(documented.insert(name.clone(), (synopsis, row.clone())).is_none(), "docs/commands.md: {name} twice");
    }
    let commands = module_commands(&mut c);
    let listed: BTreeSet<String> = documented.keys().cloned().collect();
    assert_eq!(
        listed,
        commands,
        "docs/commands.md's command table against COMMAND LIST FILTERBY MODULE lock \
         (missing from the page: {:?}; on the page but not registered: {:?})",
        commands.difference(&listed).collect::<Vec<_>>(),
        listed.difference(&commands).collect::<Vec<_>>()
    );

    for (name, (synopsis, row)) in &documented {
        let reg = registered(&mut c, name);
        let upper = name.to_uppercase();

        // Grammar: the option tokens, and the required arguments.
        let docs: Value = redis::cmd("COMMAND").arg("DOCS").arg(name).query(&mut c).unwrap();
        let entry = &items(&docs)[1];
        let args = field(entry, "arguments").unwrap_or_else(|| panic!("COMMAND DOCS {name}: no arguments"));
        let mut tokens = BTreeSet::new();
        option_tokens(args, &mut tokens, false);
        let words: Vec<&str> = synopsis.split_whitespace().skip(1).collect();
        let page_tokens: BTreeSet<String> = words
            .iter()
            .skip_while(|w| !w.starts_with('['))
            .flat_map(|w| w.split(['[', ']', '|', '\\']))
            .filter(|w| w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase()))
            .map(str::to_string)
            .collect();
        assert_eq!(page_tokens, tokens, "docs/commands.md: {upper}'s options against COMMAND DOCS ({synopsis})");
        // Words outside brackets: `numkeys key [key ...] token ttl-ms` requires four.
        let mut depth = 0usize;
        let mut page_required = 0;
        for w in &words {
            let opens = w.matches('[').count();
            if depth == 0 && opens == 0 {
                page_required += 1;
            }
            depth = (depth + opens).saturating_sub(w.matches(']').count());
        }
        assert_eq!(
            page_required,
            required_args(args),
            "docs/commands.md: {upper}'s required arguments against COMMAND DOCS ({synopsis})"
        );

        // Arity.
        assert_eq!(code_spans(&row[1]), [reg.arity.to_string()], "docs/commands.md: {upper}'s arity");

        // Flags, as registered, against what COMMAND INFO reports.
        let page_flags: BTreeSet<String> = code_spans(&row[2])
            .first()
            .unwrap_or_else(|| panic!("docs/commands.md: {upper}: no `flags`"))
            .split_whitespace()
            .map(|f| as_reported(f).to_string())
            .collect();
        let reported: BTreeSet<String> = reg.flags.iter().filter(|f| *f != "module").cloned().collect();
        assert_eq!(page_flags, reported, "docs/commands.md: {upper}'s flags against COMMAND INFO");

        // Key specs: "none", or per spec its flags (and `argument N` for an index).
        let key_cell = &row[3];
        if reg.key_specs.is_empty() {
            assert!(
                key_cell.starts_with("none"),
                "docs/commands.md: {upper} declares no key, the page says {key_cell:?}"
            );
        }
        let spans = code_spans(key_cell);
        for (i, (index, flags)) in reg.key_specs.iter().enumerate() {
            let joined = flags.join(" ");
            assert_eq!(spans.get(i), Some(&joined), "docs/commands.md: {upper}'s key spec {i} flags ({key_cell:?})");
            if let Some(index) = index {
                assert!(
                    key_cell.contains(&format!("argument {index}")),
                    "docs/commands.md: {upper}: key at argument {index}"
                );
            }
        }
        assert_eq!(spans.len(), reg.key_specs.len(), "docs/commands.md: {upper}: one `flags` span per key spec");

        // ACL categories, where the server has the module API for them.
        if !reg.acl.is_empty() {
            let page_acl: BTreeSet<String> = code_spans(&row[4])
                .first()
                .map(|s| s.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default();
            // `@lock` is every command's, where the server lets a module add a
            // category; the notes under the table say so.
            let reported: BTreeSet<String> = reg.acl.iter().filter(|c| *c != "@lock").cloned().collect();
            assert_eq!(page_acl, reported, "docs/commands.md: {upper}'s ACL categories against COMMAND INFO");
        }
    }
}

/// The errors a command's flags imply are listed for exactly the commands
/// that have those flags, and the server does answer them: `READONLY` for
/// every `write` command on a replica, `OOM` for every `denyoom` one at the
/// memory limit, `UNBLOCKED` for the `blocking` ones, and the arity error
/// for each command that takes arguments.
#[test]
fn commands_md_lists_the_errors_each_command_s_flags_imply() {
    let server = Server::start();
    let mut c = server.conn();
    let text = page("docs/commands.md");
    let errors = table(&text, "| reply | commands |");
    let commands = module_commands(&mut c);
    let info: BTreeMap<String, Registered> = commands.iter().map(|n| (n.clone(), registered(&mut c, n))).collect();
    let with_flag = |flag: &str| -> BTreeSet<String> {
        info.iter().filter(|(_, r)| r.flags.contains(flag)).map(|(n, _)| n.clone()).collect()
    };
    let row_for = |reply_starts: &str| -> BTreeSet<String> {
        let rows: Vec<_> =
            errors.iter().filter(|r| code_spans(&r[0]).first().is_some_and(|s| s.starts_with(reply_starts))).collect();
        assert_eq!(rows.len(), 1, "docs/commands.md, Errors: one row for `{reply_starts}…`, found {}", rows.len());
        command_names(&rows[0][1])
    };

    // Every reply is in one row only: two rows of one reply drift apart.
    let mut seen = BTreeSet::new();
    for r in &errors {
        let reply = code_spans(&r[0]).into_iter().next().unwrap_or_default();
        let commands_cell = command_names(&r[1]);
        assert!(seen.insert((reply.clone(), commands_cell.clone())), "docs/commands.md, Errors: `{reply}` twice");
    }
    let replies: Vec<String> = errors.iter().filter_map(|r| code_spans(&r[0]).into_iter().next()).collect();
    let unique: BTreeSet<&String> = replies.iter().collect();
    assert_eq!(unique.len(), replies.len(), "docs/commands.md, Errors: a reply in two rows: {replies:?}");

    assert_eq!(row_for("READONLY"), with_flag("write"), "the READONLY row against the `write` commands");
    assert_eq!(row_for("OOM"), with_flag("denyoom"), "the OOM row against the `denyoom` commands");
    assert_eq!(
        row_for("UNBLOCKED client unblocked"),
        with_flag("blocking"),
        "the UNBLOCKED row against the `blocking` commands"
    );
    assert_eq!(
        row_for("UNBLOCKED force unblock"),
        with_flag("blocking"),
        "the role-change UNBLOCKED row against the `blocking` commands"
    );

    // The arity error: every command that replies it to a call without arguments.
    let mut arity = BTreeSet::new();
    for name in &commands {
        let r: redis::RedisResult<Value> = redis::cmd(name).query(&mut c);
        if let Err(e) = r {
            if e.to_string().contains(&format!("wrong number of arguments for '{name}' command")) {
                arity.insert(name.clone());
            }
        }
    }
    assert_eq!(
        row_for("ERR wrong number of arguments"),
        arity,
        "the arity-error row against the commands that reply it"
    );

    // And the server answers them as the rows say. OOM: at a memory limit
    // already exceeded, each command with any arguments (Redis refuses
    // before the module reads them).
    let dummy = ["k", "t", "1000", "v"];
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(1).query(&mut c).unwrap();
    for name in &commands {
        let r: redis::RedisResult<Value> = redis::cmd(name).arg(&dummy[..]).query(&mut c);
        let oom = matches!(&r, Err(e) if e.code() == Some("OOM"));
        assert_eq!(oom, info[name].flags.contains("denyoom"), "{name} at the memory limit: {r:?}");
    }
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(&mut c).unwrap();

    // READONLY: the same server as a replica (of a master that is not there:
    // it stays a replica, read-only, as one whose master is down).
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(1).query(&mut c).unwrap();
    for name in &commands {
        let r: redis::RedisResult<Value> = redis::cmd(name).arg(&dummy[..]).query(&mut c);
        let readonly = matches!(&r, Err(e) if e.code() == Some("READONLY"));
        assert_eq!(readonly, info[name].flags.contains("write"), "{name} on a replica: {r:?}");
    }
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut c).unwrap();
}

/// The `INFO lock` field names, in order.
fn info_lock_fields(c: &mut redis::Connection) -> Vec<String> {
    let text: String = redis::cmd("INFO").arg("lock").query(c).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_once(':').unwrap_or_else(|| panic!("INFO line {l:?}")).0.to_string())
        .collect()
}

/// `docs/info.md` against `INFO lock`: its tables name every field the
/// module emits — on a fresh server and after every family has waited (a
/// timed-out wait each) and held (with `lock.hold-timing yes`, a release
/// each), when the fields that appear only once a family has a figure are
/// there too — and no field it does not; its example is that output.
#[test]
fn info_md_names_every_info_lock_field() {
    let server = Server::builder().arg("lock.hold-timing", "yes").start();
    let mut c = server.conn();
    let fresh = info_lock_fields(&mut c);

    let run = |c: &mut redis::Connection, args: &[&str]| {
        let _: Value = redis::cmd(args[0]).arg(&args[1..]).query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    };
    // One wait (timed out) and one timed hold (released) per family.
    for (hold, wait, release) in [
        (
            &["LOCK.ACQUIRE", "x", "a", "60000"][..],
            &["LOCK.ACQUIRE", "x", "b", "60000", "WAIT", "1"][..],
            &["LOCK.RELEASE", "x", "a"][..],
        ),
        (
            &["SEM.ACQUIRE", "s", "a", "1", "60000"],
            &["SEM.ACQUIRE", "s", "b", "1", "60000", "WAIT", "1"],
            &["SEM.RELEASE", "s", "a"],
        ),
        (
            &["RWLOCK.ACQUIRE", "r", "a", "WRITE", "60000"],
            &["RWLOCK.ACQUIRE", "r", "b", "WRITE", "60000", "WAIT", "1"],
            &["RWLOCK.RELEASE", "r", "a"],
        ),
        (
            &["LOCK.ELECT", "e", "a", "60000", "v"],
            &["LOCK.ELECT", "e", "b", "60000", "v", "WAIT", "1"],
            &["LOCK.RELEASE", "e", "a"],
        ),
    ] {
        run(&mut c, hold);
        run(&mut c, wait);
        run(&mut c, release);
    }
    let exercised = info_lock_fields(&mut c);
    for f in &fresh {
        assert!(exercised.contains(f), "{f} went away after exercising the module");
    }
    let conditional: Vec<&String> = exercised.iter().filter(|f| !fresh.contains(f)).collect();
    assert!(!conditional.is_empty(), "the distributions appear once a family has waited and held");

    // The families, as the per-family fields name them (`lock_waits_F`).
    let families: Vec<String> =
        fresh.iter().filter_map(|f| f.strip_prefix("lock_waits_")).map(str::to_string).collect();
    let families: Vec<String> = families
        .into_iter()
        .filter(|f| !["started", "granted", "timed_out", "cancelled"].contains(&f.as_str()))
        .collect();
    assert_eq!(families.len(), 4, "families {families:?}");

    let text = page("docs/info.md");
    let mut documented = BTreeSet::new();
    // Both tables have this header: the counters, then the distributions.
    let header = "| field | meaning |";
    let mut rest = text.as_str();
    while let Some(at) = rest.find(header) {
        for row in table(&rest[at..], header) {
            for name in code_spans(&row[0]) {
                match name.strip_suffix("_F") {
                    Some(stem) => documented.extend(families.iter().map(|f| format!("{stem}_{f}"))),
                    None => {
                        documented.insert(name);
                    }
                }
            }
        }
        rest = &rest[at + header.len()..];
    }
    let emitted: BTreeSet<String> = exercised.iter().cloned().collect();
    assert_eq!(
        documented,
        emitted,
        "docs/info.md's tables against INFO lock (missing from the page: {:?}; on the page but not emitted: {:?})",
        emitted.difference(&documented).collect::<Vec<_>>(),
        documented.difference(&emitted).collect::<Vec<_>>()
    );

    // The example: the output after exercising, field for field, in order.
    let example =
        text.split("$ redis-cli INFO lock\n").nth(1).expect("docs/info.md: an example of `redis-cli INFO lock`");
    let example: Vec<String> = example
        .lines()
        .take_while(|l| !l.starts_with("```"))
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_once(':').unwrap_or_else(|| panic!("docs/info.md example line {l:?}")).0.to_string())
        .collect();
    assert_eq!(example, exercised, "docs/info.md's example against INFO lock after one wait and one hold per family");
}

/// `docs/configuration.md` names every config `CONFIG GET lock.*` shows,
/// each with its default, and no other.
#[test]
fn configuration_md_names_every_config_with_its_default() {
    let server = Server::start();
    let mut c = server.conn();
    let configs: BTreeMap<String, String> = redis::cmd("CONFIG").arg("GET").arg("lock.*").query(&mut c).unwrap();
    assert!(!configs.is_empty(), "CONFIG GET lock.*");
    let text = page("docs/configuration.md");
    // The list of configs: one item each, `- \`lock.name\` (… default \`V\` …)`,
    // its text running on over the indented lines below it.
    let mut items: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("- `lock.") {
            current = Some(format!("lock.{}", rest.split('`').next().unwrap()));
        } else if !line.starts_with("  ") {
            current = None;
        }
        if let Some(name) = &current {
            let item = items.entry(name.clone()).or_default();
            item.push_str(line);
            item.push(' ');
        }
    }
    let names: BTreeSet<&String> = configs.keys().collect();
    let listed: BTreeSet<&String> = items.keys().collect();
    assert_eq!(listed, names, "docs/configuration.md's list of configs against CONFIG GET lock.*");
    for (name, default) in &configs {
        let item = &items[name];
        assert!(
            item.contains(&format!("default `{default}`")),
            "docs/configuration.md: {name}'s default is `{default}`: {item}"
        );
    }
}
