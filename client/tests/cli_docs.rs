//! The CLI's pages against the binary's own help, so they cannot drift:
//! `docs/cli.md` and `client/README.md` each show a synopsis of every
//! subcommand `redis-lock --help` lists, naming every option its `--help`
//! lists and no other; `client/README.md`'s option table names every
//! spelling (short, long, alias) and its exit-status table has a row per
//! subcommand with the statuses the help gives. Where a synopsis repeats
//! `--url` (`[--url URL]...`), the binary accepts several; where it does
//! not, several are a usage error (exit 2): checked against two servers.

mod cli_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use cli_support::{cli, stderr, stdout};
use redis_lock_harness::Server;

/// A page of the repository, as text.
fn page(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The subcommands `redis-lock --help` lists (not `help`).
fn subcommands() -> Vec<String> {
    let o = cli(&["--help"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let help = stdout(&o);
    let names: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 5, "subcommands in {help}");
    names
}

/// One option of a subcommand: every spelling of it (`-w`,
/// `--wait-seconds`, `--timeout`), from `redis-lock SUB --help`.
fn options(sub: &str) -> Vec<Vec<String>> {
    let o = cli(&[sub, "--help"]);
    assert_eq!(o.status.code(), Some(0), "{sub} --help: {}", stderr(&o));
    let help = stdout(&o);
    let mut opts: Vec<Vec<String>> = Vec::new();
    for line in help.lines().skip_while(|l| !l.starts_with("Options:")).skip(1) {
        if !line.starts_with(' ') && !line.is_empty() {
            break; // the exit-status epilogue
        }
        let t = line.trim_start();
        let indent = line.len() - t.len();
        // An option's own line: `  -w, --wait-seconds <SECONDS>` or `      --ttl <MS>`.
        if t.starts_with('-') && indent <= 6 {
            let names: Vec<String> = t
                .split(|c: char| c == ',' || c.is_whitespace())
                .take_while(|w| !w.starts_with('<'))
                .filter(|w| w.starts_with('-'))
                .map(str::to_string)
                .collect();
            opts.push(names);
        } else if let Some(aliases) = t.strip_prefix("[alias: ").or_else(|| t.strip_prefix("[aliases: ")) {
            let last = opts.last_mut().expect("an alias after its option");
            last.extend(aliases.trim_end_matches(']').split(", ").map(str::to_string));
        }
    }
    opts.retain(|names| !names.iter().any(|n| n == "--help" || n == "--version"));
    opts
}

/// The synopses of a page: in its ```text blocks, each line starting with
/// `redis-lock SUB`, with the indented lines that continue it.
fn synopses(text: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut in_block = false;
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = line == "```text";
            current = None;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(rest) = line.strip_prefix("redis-lock ") {
            let sub = rest.split_whitespace().next().unwrap_or_default().to_string();
            assert!(!out.contains_key(&sub), "two synopses of {sub}");
            out.insert(sub.clone(), rest.to_string());
            current = Some(sub);
        } else if let (Some(sub), true) = (&current, line.starts_with(' ')) {
            let s = out.get_mut(sub).unwrap();
            s.push(' ');
            s.push_str(line.trim());
        } else {
            current = None;
        }
    }
    out
}

/// The option spellings in a synopsis (`[--wait MS | -w SECONDS | -n]`
/// gives `--wait`, `-w`, `-n`); `--` alone (before CMD) is not one.
fn spellings(synopsis: &str) -> BTreeSet<String> {
    synopsis
        .split(|c: char| c.is_whitespace() || "[]|()".contains(c))
        .map(|w| w.trim_end_matches("..."))
        .filter(|w| w.starts_with('-') && *w != "--")
        .map(str::to_string)
        .collect()
}

#[test]
fn the_synopses_show_every_subcommand_and_option() {
    let subs = subcommands();
    for path in ["client/README.md", "docs/cli.md"] {
        let syn = synopses(&page(path));
        for sub in &subs {
            let s = syn.get(sub).unwrap_or_else(|| panic!("{path}: no synopsis of `redis-lock {sub}`"));
            let shown = spellings(s);
            let opts = options(sub);
            for names in &opts {
                assert!(
                    names.iter().any(|n| shown.contains(n)),
                    "{path}: the synopsis of {sub} shows none of {names:?}: {s}"
                );
            }
            let real: BTreeSet<&String> = opts.iter().flatten().collect();
            for n in &shown {
                assert!(
                    real.contains(n),
                    "{path}: the synopsis of {sub} shows {n}, which `{sub} --help` does not list"
                );
            }
        }
        for sub in syn.keys() {
            // The top-level line (`redis-lock --version | --help | help SUBCOMMAND`).
            if !sub.starts_with('-') {
                assert!(subs.contains(sub), "{path}: a synopsis of `redis-lock {sub}`, which the binary does not have");
            }
        }
    }
}

#[test]
fn the_readme_options_table_names_every_spelling() {
    let text = page("client/README.md");
    let table: Vec<&str> = text
        .lines()
        // The CLI's table (the library's has a third column, `meaning`).
        .skip_while(|l| l.trim() != "| option | default |")
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(table.len() > 2, "client/README.md: the CLI's `| option | default |` table");
    let named: BTreeSet<String> = table
        .iter()
        .map(|row| row.split('|').nth(1).unwrap_or_default())
        .flat_map(|cell| {
            cell.split('`').skip(1).step_by(2).map(|s| s.split_whitespace().next().unwrap_or_default().to_string())
        })
        .collect();
    for sub in subcommands() {
        for names in options(&sub) {
            for n in names {
                assert!(named.contains(&n), "client/README.md's option table has no `{n}` (an option of {sub})");
            }
        }
    }
}

/// The exit statuses (numbers) a piece of text gives.
fn numbers(text: &str) -> BTreeSet<u32> {
    text.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).filter_map(|w| w.parse().ok()).collect()
}

#[test]
fn the_readme_exit_table_has_every_subcommand_and_its_statuses() {
    let text = page("client/README.md");
    let rows: BTreeMap<String, String> = text
        .lines()
        .skip_while(|l| !l.starts_with("| command | exit status |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            (cells[1].trim().trim_matches('`').to_string(), cells[2..].join("|"))
        })
        .collect();
    let every = rows.get("every command").expect("client/README.md: an `every command` exit-status row");
    // The help's epilogue: `  run:   CMD's status …` and its continuation lines.
    let help = stdout(&cli(&["--help"]));
    let mut epilogue: BTreeMap<String, String> = BTreeMap::new();
    let mut current = String::new();
    for line in help.lines().skip_while(|l| !l.starts_with("Exit status:")).skip(1) {
        let t = line.trim_start();
        match t.split_once(':') {
            Some((name, rest)) if line.len() - t.len() == 2 && !name.contains(' ') => {
                current = name.to_string();
                epilogue.insert(current.clone(), rest.to_string());
            }
            _ => epilogue.get_mut(&current).expect("an epilogue line after a name").push_str(line),
        }
    }
    for sub in subcommands() {
        let row = rows.get(&sub).unwrap_or_else(|| panic!("client/README.md: no exit-status row for `{sub}`"));
        let help = epilogue.get(&sub).unwrap_or_else(|| panic!("`redis-lock --help` gives no exit status for {sub}"));
        // 128+N and 126/127 are statuses too; N is not a number here.
        let page: BTreeSet<u32> = numbers(row).union(&numbers(every)).copied().collect();
        for n in numbers(help) {
            assert!(page.contains(&n), "client/README.md's exit row for {sub} lacks {n} (the help: {help})");
        }
    }
}

#[test]
fn several_urls_work_where_the_synopses_repeat_url_and_are_a_usage_error_elsewhere() {
    let (a, b) = (Server::start(), Server::start());
    let urls = ["--url", &a.url(), "--url", &b.url()];
    let readme = synopses(&page("client/README.md"));
    let cli_md = synopses(&page("docs/cli.md"));
    for sub in subcommands() {
        let s = &readme[&sub];
        if !spellings(s).contains("--url") {
            continue;
        }
        let repeated = s.contains("[--url URL]...");
        assert_eq!(
            repeated,
            cli_md[&sub].contains("[--url URL]..."),
            "client/README.md and docs/cli.md differ on several --url for {sub}"
        );
        let rest: &[&str] = match sub.as_str() {
            "run" => &["docs:k", "--", "true"],
            "elect" => &["--value", "v", "-n", "docs:e", "--", "true"],
            "leader" => &["docs:e"],
            "info" => &["docs:k"],
            "release" => &["docs:k", "tok"],
            "revoke" => &["docs:k"],
            "list" => &[],
            "top" => &["--once", "--interval", "0.1"],
            other => panic!("add a sample invocation of `{other}` to this test"),
        };
        let o = cli(&[&[sub.as_str()][..], &urls, rest].concat());
        let usage = o.status.code() == Some(2);
        assert_eq!(
            usage,
            !repeated,
            "{sub} with two --url exited {:?} ({}), its synopsis {} `[--url URL]...`",
            o.status.code(),
            stderr(&o).trim(),
            if repeated { "shows" } else { "does not show" }
        );
    }
}
