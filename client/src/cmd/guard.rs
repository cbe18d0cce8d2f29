//! `LOCK.GUARD`'s command line and its refusals, told from the inner
//! command's own errors.

use redis::{Arg, Cmd};
use redis_lock_rules::args;

use crate::cmd::reply::is_unknown_command;
use crate::error::{Error, Result};

/// `LOCK.GUARD key token <inner's name and arguments>`, checked before
/// anything is sent: the key and token as for every lock command, and an
/// inner command that can be forwarded as it is.
pub(crate) fn guard_cmd(key: &str, token: &str, inner: &Cmd) -> Result<Cmd> {
    args::check_key_and_token(key.as_bytes(), token.as_bytes())?;
    let mut inner_args = Vec::with_capacity(inner.args_iter().len());
    for a in inner.args_iter() {
        match a {
            Arg::Simple(a) => inner_args.push(a),
            // redis-rs fills a cursor in page by page for its own iterators;
            // one guarded call cannot page.
            _ => {
                return Err(Error::InvalidArgument(
                    "LOCK.GUARD cannot forward a cursor argument (cursor_arg): pass the cursor as a plain argument"
                        .into(),
                ))
            }
        }
    }
    if inner_args.is_empty() {
        return Err(Error::InvalidArgument("LOCK.GUARD needs a command to run: this one is empty".into()));
    }
    // Sized up front, as `module_cmd` is.
    let bytes: usize = inner_args.iter().map(|a| a.len()).sum();
    let mut c = Cmd::with_capacity(3 + inner_args.len(), 10 + key.len() + token.len() + bytes);
    c.arg("LOCK.GUARD").arg(key).arg(token);
    for a in inner_args {
        c.arg(a);
    }
    Ok(c)
}

/// Why LOCK.GUARD ran nothing, when it says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GuardRefusal {
    /// `NOTHELD …`: the token does not hold the lock (absent, expired or
    /// another owner's).
    NotHeld,
    /// The server does not know LOCK.GUARD itself (no module, or an older
    /// one). Told from an unknown *inner* command, which the module answers
    /// with the same words about that command's name.
    NoModule,
}

pub(crate) fn guard_refusal(e: &redis::RedisError) -> Option<GuardRefusal> {
    if e.code() == Some("NOTHELD") {
        return Some(GuardRefusal::NotHeld);
    }
    (is_unknown_command(e) && unknown_command_name(e).is_some_and(|n| n.eq_ignore_ascii_case("LOCK.GUARD")))
        .then_some(GuardRefusal::NoModule)
}

/// The name in `unknown command 'NAME', with args …` (Redis 6 quotes it
/// with backticks: `NAME`).
fn unknown_command_name(e: &redis::RedisError) -> Option<&str> {
    let rest = e.detail()?.trim_start().get("unknown command".len()..)?.trim_start();
    let open = rest.chars().next().filter(|c| matches!(c, '\'' | '`'))?;
    let rest = &rest[open.len_utf8()..];
    rest.find(['\'', '`']).map(|end| &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn guard_wraps_the_inner_command_and_refuses_what_it_cannot_forward() {
        let packed = |c: &Cmd| String::from_utf8_lossy(&c.get_packed_command()).replace("\r\n", " ");
        let mut set = redis::cmd("SET");
        set.arg("d:{1}").arg(b"v\0w");
        let g = guard_cmd("k:{1}", "t", &set).unwrap();
        assert_eq!(packed(&g), "*6 $10 LOCK.GUARD $5 k:{1} $1 t $3 SET $5 d:{1} $3 v\0w ");
        assert!(matches!(guard_cmd("k", "t", &Cmd::new()), Err(Error::InvalidArgument(m)) if m.contains("empty")));
        assert!(matches!(guard_cmd("", "t", &set), Err(Error::InvalidArgument(_))));
        assert!(matches!(guard_cmd("k", "", &set), Err(Error::InvalidArgument(_))));
        let mut scan = redis::cmd("SCAN");
        scan.cursor_arg(0);
        assert!(matches!(guard_cmd("k", "t", &scan), Err(Error::InvalidArgument(m)) if m.contains("cursor")));
    }

    #[test]
    fn guard_refusals_are_told_from_the_inner_command_s_errors() {
        let server = |line: &str| {
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(Value::extract_error).unwrap_err()
        };
        let refusal = |line: &str| guard_refusal(&server(line));
        assert_eq!(
            refusal(
                "NOTHELD the token does not hold the lock (absent, expired, or another owner); the command did not run"
            ),
            Some(GuardRefusal::NotHeld)
        );
        // No module: Redis 7+ quotes the name, Redis 6 uses backticks.
        assert_eq!(
            refusal("ERR unknown command 'LOCK.GUARD', with args beginning with: 'k' 't' 'SET' "),
            Some(GuardRefusal::NoModule)
        );
        assert_eq!(
            refusal("ERR unknown command `lock.guard`, with args beginning with: `k`, "),
            Some(GuardRefusal::NoModule)
        );
        // An unknown inner command, as the module replies it: the module is there.
        assert_eq!(refusal("ERR unknown command 'nosuchcommand', with args beginning with: 'd' "), None);
        assert_eq!(refusal("ERR unknown command ''"), None);
        assert_eq!(refusal("ERR unknown command 'LOCK.GUARDX'"), None);
        assert_eq!(refusal("WRONGTYPE Operation against a key holding the wrong kind of value"), None);
        assert_eq!(refusal("ERR LOCK.GUARD cannot run MULTI, EXEC, DISCARD, WATCH or UNWATCH: send LOCK.GUARD calls inside MULTI instead"), None);
    }
}
