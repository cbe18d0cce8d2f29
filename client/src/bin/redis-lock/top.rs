//! `redis-lock top`: contention live, as `top` and `redis-cli --stat`
//! show a machine: every refresh reads `INFO lock` and `LOCK.TOP` from
//! each server (one, every master of a cluster, or several `--url`s), and
//! shows the rates and wait percentiles since the last refresh above the
//! most contended keys. `--once` prints one frame as text, `--json` one
//! JSON object per refresh (with `--once`, one).
//!
//! The terminal view (ratatui on crossterm) is restored on every way out:
//! `q`, Esc, Ctrl-C (a key in raw mode), SIGINT/SIGTERM/SIGHUP (a flag the
//! loop checks), an error, and a panic (ratatui's hook restores first).

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Text};
use ratatui::widgets::Paragraph;
use redis::{Connection, ConnectionInfo, IntoConnectionInfo, Value};
use redis_lock_client::cluster_seed_urls;

use crate::args::TopArgs;
use crate::fail::{redis_fail, usage, Fail, EXIT_REDIS};
use crate::frame::{self, Snapshot};
use crate::masters::masters;
use crate::scan::connect;
use crate::stats::{self, Delta, Reading, Sort};
use crate::target::Servers;

/// One server: its connection (opened again after a failure) and its
/// last reading.
struct Source {
    name: String,
    info: ConnectionInfo,
    con: Option<Connection>,
    last: Option<Reading>,
}

/// `redis-lock top [--url URL]... [--cluster] [--once] [--json] [--count N] [--interval S] [--sort S]`
pub fn cmd_top(a: TopArgs) -> Result<ExitCode, Fail> {
    let infos: Vec<ConnectionInfo> = match a.target.servers() {
        Servers::One(url) => vec![parse(&url)?],
        Servers::Quorum(urls) => urls.iter().map(|u| parse(u)).collect::<Result<_, _>>()?,
        Servers::Cluster(seeds) => masters(&cluster_seed_urls(&seeds)).map_err(|e| Fail(EXIT_REDIS, e))?,
    };
    let mut sources: Vec<Source> =
        infos.into_iter().map(|info| Source { name: info.addr().to_string(), info, con: None, last: None }).collect();
    let interval = a.interval;
    if a.once || a.json {
        // Rates need two readings, an interval apart.
        let mut at = Instant::now();
        poll(&mut sources, a.count, &mut at, a.sort);
        loop {
            std::thread::sleep(interval);
            let s = poll(&mut sources, a.count, &mut at, a.sort);
            let out = if a.json { frame::json(&s) + "\n" } else { frame::text(&s, a.sort, interval).join("\n") + "\n" };
            let mut stdout = std::io::stdout();
            // A closed pipe (`| head`) ends a --json stream.
            if stdout.write_all(out.as_bytes()).and_then(|_| stdout.flush()).is_err() || a.once {
                return Ok(ExitCode::from(if s.errors.is_empty() { 0 } else { EXIT_REDIS }));
            }
        }
    }
    live(&mut sources, &a)
}

fn parse(url: &str) -> Result<ConnectionInfo, Fail> {
    url.into_connection_info().map_err(|e| usage(format!("bad URL {url:?}: {e}")))
}

/// Reads every server: what changed since `at` (then set to now).
fn poll(sources: &mut [Source], count: u32, at: &mut Instant, sort: Sort) -> Snapshot {
    let now = Instant::now();
    let elapsed = now.duration_since(*at);
    *at = now;
    let mut delta = Delta::default();
    let mut keys = Vec::new();
    let mut errors = Vec::new();
    for s in sources.iter_mut() {
        match read(s, count) {
            Ok((reading, top)) => {
                delta.add(s.last.as_ref(), &reading);
                s.last = Some(reading);
                match top {
                    Ok(k) => keys.extend(k),
                    Err(e) => errors.push(format!("{}: {e}", s.name)),
                }
            }
            Err(e) => {
                // Reconnect next time; its next reading starts afresh.
                s.con = None;
                s.last = None;
                errors.push(format!("{}: {e}", s.name));
            }
        }
    }
    sort.apply(&mut keys);
    keys.truncate(usize::try_from(count).unwrap_or(usize::MAX));
    Snapshot { servers: sources.iter().map(|s| s.name.clone()).collect(), elapsed, delta, keys, errors }
}

type Read = (Reading, Result<Vec<stats::TopKey>, String>);

/// One server's `INFO lock` and `LOCK.TOP COUNT n` (a server without it
/// still shows its counters).
fn read(s: &mut Source, count: u32) -> redis::RedisResult<Read> {
    if s.con.is_none() {
        s.con = Some(connect(s.info.clone())?);
    }
    let Some(con) = s.con.as_mut() else { unreachable!("just connected") };
    let info: String = redis::cmd("INFO").arg("lock").query(con)?;
    let top = match redis::cmd("LOCK.TOP").arg("COUNT").arg(count).query::<Value>(con) {
        Ok(v) => stats::parse_top(&s.name, v),
        Err(e) if e.kind() == redis::ErrorKind::Io || e.is_connection_dropped() => return Err(e),
        Err(e) => Err(format!("LOCK.TOP: {e}")),
    };
    Ok((stats::parse_info(&info), top))
}

/// Set by SIGINT, SIGTERM and SIGHUP: the loop then restores the
/// terminal and exits.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The live view, until `q`, Esc, Ctrl-C or a signal.
fn live(sources: &mut [Source], a: &TopArgs) -> Result<ExitCode, Fail> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    // Raw mode and the alternate screen; the panic hook it installs
    // restores the terminal before the panic message is printed.
    let mut terminal =
        ratatui::try_init().map_err(|e| usage(format!("top needs a terminal ({e}): use --once or --json")))?;
    let r = run(&mut terminal, sources, a);
    ratatui::restore();
    r
}

fn run(terminal: &mut ratatui::DefaultTerminal, sources: &mut [Source], a: &TopArgs) -> Result<ExitCode, Fail> {
    let mut sort = a.sort;
    let mut at = Instant::now();
    let mut shown = poll(sources, a.count, &mut at, sort);
    let mut next = Instant::now() + a.interval;
    loop {
        draw(terminal, &shown, sort, a.interval)?;
        loop {
            if STOP.load(Ordering::SeqCst) {
                return Ok(ExitCode::SUCCESS);
            }
            let now = Instant::now();
            if now >= next {
                shown = poll(sources, a.count, &mut at, sort);
                next = now + a.interval;
                break;
            }
            if !event::poll((next - now).min(Duration::from_millis(100))).map_err(redis_fail)? {
                continue;
            }
            match event::read().map_err(redis_fail)? {
                Event::Key(k) if k.kind == KeyEventKind::Press => match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(ExitCode::SUCCESS),
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => return Ok(ExitCode::SUCCESS),
                    KeyCode::Char(c) => {
                        let to = match c {
                            's' => Some(sort.next()),
                            'w' => Some(Sort::Waiters),
                            'o' => Some(Sort::Wait),
                            'h' => Some(Sort::Holders),
                            'k' => Some(Sort::Key),
                            _ => None,
                        };
                        if let Some(to) = to {
                            sort = to;
                            sort.apply(&mut shown.keys);
                            break;
                        }
                    }
                    _ => {}
                },
                Event::Resize(..) => break,
                _ => {}
            }
        }
    }
}

fn draw(terminal: &mut ratatui::DefaultTerminal, s: &Snapshot, sort: Sort, interval: Duration) -> Result<(), Fail> {
    let lines = frame::text(s, sort, interval);
    let table_header = 2 + s.errors.len() + 1;
    let text: Text = lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| match i {
            0 => Line::styled(l, Style::new().add_modifier(Modifier::BOLD)),
            i if i == table_header => Line::styled(l, Style::new().add_modifier(Modifier::REVERSED)),
            _ => Line::raw(l),
        })
        .collect::<Vec<_>>()
        .into();
    terminal.draw(|f| f.render_widget(Paragraph::new(text), f.area())).map_err(redis_fail)?;
    Ok(())
}
