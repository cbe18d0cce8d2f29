//! Validation of command arguments, with the exact error replies. Every
//! check runs before the key is looked at, so a bad call changes nothing.

pub use crate::error::ArgError;
use crate::number::parse_positive;
pub use crate::number::parse_ttl;

/// Key and token must both be non-empty.
pub fn check_key_and_token(key: &[u8], token: &[u8]) -> Result<(), ArgError> {
    if key.is_empty() || token.is_empty() {
        Err(ArgError::KeyOrTokenMissing)
    } else {
        Ok(())
    }
}

/// The first byte no token of a semaphore or read-write lock may start
/// with: their keys store each holder's hold limit under `HOLD_PREFIX +
/// token` (`crate::holders::hold_member`), so such a token could forge one.
/// Here, with the check, because the holders' bookkeeping builds on the
/// arguments, not the other way round.
pub const HOLD_PREFIX: u8 = 0;

/// Key and token of a semaphore or read-write lock command: non-empty, and
/// the token not starting with the NUL byte that marks a holder's
/// hold-limit member ([`HOLD_PREFIX`]).
pub fn check_holder_key_and_token(key: &[u8], token: &[u8]) -> Result<(), ArgError> {
    check_key_and_token(key, token)?;
    if token.first() == Some(&HOLD_PREFIX) {
        return Err(ArgError::TokenReserved);
    }
    Ok(())
}

/// The absolute expiry (Unix ms) of a lock granted at `now_ms` for `ttl_ms`.
pub fn expiry_at(now_ms: i64, ttl_ms: i64) -> Result<i64, ArgError> {
    now_ms.checked_add(ttl_ms).ok_or(ArgError::TtlTooLarge)
}

/// The longest `LOCKDELAY` (ms), as Consul caps its sessions' `LockDelay`.
pub const MAX_LOCK_DELAY_MS: i64 = 60_000;

/// Options after the fixed arguments of a grant command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrantOptions {
    /// `FENCE`: reply with the grant's fencing token (nil on refusal).
    pub fence: bool,
    /// `WAIT timeout-ms`: block until granted or timed out (0 = no timeout).
    pub wait: Option<i64>,
    /// `LOCKDELAY ms`: after the lease ends involuntarily, the key refuses
    /// every acquire for this long (see [`crate::lease`]).
    pub lock_delay: Option<i64>,
    /// `MAXHOLD ms`: renewals never end the lease past grant time + this.
    pub max_hold: Option<i64>,
    /// `SESSION id`: the lock is held by this session (docs/sessions.md).
    pub session: Option<u128>,
}

/// Which options a command takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grammar {
    /// LOCK.ACQUIRE: `[FENCE] [WAIT timeout-ms] [LOCKDELAY ms] [MAXHOLD ms]`.
    Acquire,
    /// LOCK.TAKEOVER: `[FENCE] [LOCKDELAY ms] [MAXHOLD ms]`.
    Takeover,
    /// SEM.ACQUIRE and RWLOCK.ACQUIRE: `[FENCE] [WAIT timeout-ms]
    /// [LOCKDELAY ms] [MAXHOLD ms] [SESSION id]` (one delay per key, in
    /// its tag; one hold limit per holder, see `crate::holders`; a
    /// session-held holder, `crate::held::session_member`).
    Holders,
}

impl Grammar {
    fn takes_wait(self) -> bool {
        matches!(self, Grammar::Acquire | Grammar::Holders)
    }

    fn takes_lock_delay(self) -> bool {
        matches!(self, Grammar::Acquire | Grammar::Takeover | Grammar::Holders)
    }

    fn takes_max_hold(self) -> bool {
        matches!(self, Grammar::Acquire | Grammar::Takeover | Grammar::Holders)
    }

    fn takes_session(self) -> bool {
        matches!(self, Grammar::Acquire | Grammar::Holders)
    }
}

/// A session id as the server issues it: 32 lowercase hex digits (128
/// random bits). Anything else names no session.
pub fn parse_session_id(arg: &[u8]) -> Result<u128, ArgError> {
    if arg.len() != 32 || !arg.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
        return Err(ArgError::SessionUnknown);
    }
    let text = std::str::from_utf8(arg).map_err(|_| ArgError::SessionUnknown)?;
    u128::from_str_radix(text, 16).map_err(|_| ArgError::SessionUnknown)
}

/// A session id's text: what [`parse_session_id`] reads.
pub fn session_id_text(id: u128) -> String {
    format!("{id:032x}")
}

/// Parses the options (case-insensitive, any order; repeating one keeps the last).
pub fn parse_grant_options<'a>(
    grammar: Grammar,
    args: impl IntoIterator<Item = &'a [u8]>,
) -> Result<GrantOptions, ArgError> {
    let mut opts = GrantOptions::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg.eq_ignore_ascii_case(b"FENCE") {
            opts.fence = true;
        } else if arg.eq_ignore_ascii_case(b"WAIT") && grammar.takes_wait() {
            let timeout = args.next().ok_or(ArgError::Syntax)?;
            opts.wait = Some(parse_timeout(timeout)?);
        } else if arg.eq_ignore_ascii_case(b"LOCKDELAY") && grammar.takes_lock_delay() {
            opts.lock_delay = Some(parse_lock_delay(args.next().ok_or(ArgError::Syntax)?)?);
        } else if arg.eq_ignore_ascii_case(b"SESSION") && grammar.takes_session() {
            opts.session = Some(parse_session_id(args.next().ok_or(ArgError::Syntax)?)?);
        } else if arg.eq_ignore_ascii_case(b"MAXHOLD") && grammar.takes_max_hold() {
            opts.max_hold =
                Some(parse_positive(args.next().ok_or(ArgError::Syntax)?).map_err(|_| ArgError::MaxHoldInvalid)?);
        } else {
            return Err(ArgError::Syntax);
        }
    }
    Ok(opts)
}

/// `LOCKDELAY ms`: 0 to [`MAX_LOCK_DELAY_MS`], in Redis's strict integer
/// syntax (no sign, no leading zeros).
fn parse_lock_delay(arg: &[u8]) -> Result<i64, ArgError> {
    if arg == b"0" {
        return Ok(0);
    }
    parse_positive(arg).ok().filter(|&ms| ms <= MAX_LOCK_DELAY_MS).ok_or(ArgError::LockDelayInvalid)
}

/// The checks of `MAXHOLD` against the grant's ttl-ms, made before the key
/// is opened: a hold limit shorter than the first lease would cap the grant
/// itself. (Whether now + `MAXHOLD` fits the clock is checked with the
/// clock, by [`crate::lease::grant`].)
#[inline]
pub fn check_lease_terms(opts: &GrantOptions, ttl_ms: i64) -> Result<(), ArgError> {
    match opts.max_hold {
        Some(max) if max < ttl_ms => Err(ArgError::MaxHoldBelowTtl),
        _ => Ok(()),
    }
}

/// A WAIT timeout: 0 (wait forever) or a positive number of milliseconds.
pub fn parse_timeout(arg: &[u8]) -> Result<i64, ArgError> {
    if arg == b"0" {
        return Ok(0);
    }
    parse_positive(arg).map_err(|_| ArgError::TimeoutInvalid)
}

/// Options after the fixed arguments of LOCK.RENEW: `[FLOOR fence]`
/// (case-insensitive; repeating it keeps the last). Returns the floor.
pub fn parse_renew_options<'a>(args: impl IntoIterator<Item = &'a [u8]>) -> Result<Option<u64>, ArgError> {
    let mut floor = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if !arg.eq_ignore_ascii_case(b"FLOOR") {
            return Err(ArgError::Syntax);
        }
        floor = Some(parse_fence(args.next().ok_or(ArgError::Syntax)?)?);
    }
    Ok(floor)
}

/// The absolute end (Unix ms) of a wait of `timeout_ms` starting at
/// `now_ms`; `None` for 0 (no timeout). Refused like BLPOP's timeout when
/// it does not fit the clock.
pub fn wait_deadline(now_ms: i64, timeout_ms: i64) -> Result<Option<i64>, ArgError> {
    if timeout_ms == 0 {
        return Ok(None);
    }
    now_ms.checked_add(timeout_ms).map(Some).ok_or(ArgError::TimeoutOutOfRange)
}

/// A fence floor as LOCK.FENCEFLOOR takes it: a non-negative 64-bit integer.
pub fn parse_fence(arg: &[u8]) -> Result<u64, ArgError> {
    let text = std::str::from_utf8(arg).map_err(|_| ArgError::FenceNotInteger)?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || (text.len() > 1 && text.starts_with('0')) {
        return Err(ArgError::FenceNotInteger);
    }
    text.parse::<i64>().ok().and_then(|v| u64::try_from(v).ok()).ok_or(ArgError::FenceNotInteger)
}

/// Token and run-id of a takeover become JSON strings, so they must be UTF-8.
pub fn check_utf8(s: &[u8]) -> Result<&str, ArgError> {
    // Tokens and run ids are nearly always ASCII, which `is_ascii` confirms
    // a word at a time: ~30 instructions for a UUID against ~175 for
    // `from_utf8`, on every takeover.
    if s.is_ascii() {
        // SAFETY: ASCII is valid UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(s) });
    }
    std::str::from_utf8(s).map_err(|_| ArgError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_32_lowercase_hex_digits() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(parse_session_id(id.as_bytes()), Ok(0x0123456789abcdef0123456789abcdef));
        assert_eq!(session_id_text(0x0123456789abcdef0123456789abcdef), id);
        assert_eq!(session_id_text(1).len(), 32);
        for bad in [
            &b"0123456789ABCDEF0123456789abcdef"[..],
            b"",
            b"1",
            b"+123456789abcdef0123456789abcdef",
            b"0123456789abcdef0123456789abcdef0",
        ] {
            assert_eq!(parse_session_id(bad), Err(ArgError::SessionUnknown));
        }
        let acquire = |args: &[&[u8]]| parse_grant_options(Grammar::Acquire, args.iter().copied());
        assert_eq!(
            acquire(&[b"session", id.as_bytes()]).map(|o| o.session),
            Ok(Some(0x0123456789abcdef0123456789abcdef))
        );
        assert_eq!(acquire(&[b"SESSION"]), Err(ArgError::Syntax));
        assert_eq!(acquire(&[b"SESSION", b"x"]), Err(ArgError::SessionUnknown));
        assert_eq!(
            parse_grant_options(Grammar::Holders, [&b"SESSION"[..], id.as_bytes()]).map(|o| o.session),
            Ok(Some(0x0123456789abcdef0123456789abcdef))
        );
        assert_eq!(parse_grant_options(Grammar::Takeover, [&b"SESSION"[..], id.as_bytes()]), Err(ArgError::Syntax));
    }

    #[test]
    fn grant_options_are_case_insensitive_and_closed() {
        let acquire = |args: &[&[u8]]| parse_grant_options(Grammar::Acquire, args.iter().copied());
        let opts = |fence, wait| GrantOptions { fence, wait, ..GrantOptions::default() };
        assert_eq!(acquire(&[]), Ok(opts(false, None)));
        assert_eq!(acquire(&[b"fence"]), Ok(opts(true, None)));
        assert_eq!(acquire(&[b"WaIt", b"250", b"FENCE"]), Ok(opts(true, Some(250))));
        assert_eq!(acquire(&[b"wait", b"0"]), Ok(opts(false, Some(0))));
        assert_eq!(acquire(&[b"wait"]), Err(ArgError::Syntax));
        for bad in [&b"-1"[..], b"1.5", b"x", b"01"] {
            assert_eq!(acquire(&[b"wait", bad]), Err(ArgError::TimeoutInvalid));
        }
        assert_eq!(acquire(&[b"fences"]), Err(ArgError::Syntax));
        assert_eq!(parse_grant_options(Grammar::Takeover, [&b"wait"[..], b"10"]), Err(ArgError::Syntax));
        assert_eq!(parse_grant_options(Grammar::Takeover, [&b"Fence"[..]]), Ok(opts(true, None)));
        assert_eq!(parse_grant_options(Grammar::Holders, [&b"wait"[..], b"10"]), Ok(opts(false, Some(10))));
    }

    #[test]
    fn lease_terms_parse_on_every_grant() {
        let parse = |g, args: &[&[u8]]| parse_grant_options(g, args.iter().copied());
        let terms = |lock_delay, max_hold| GrantOptions { lock_delay, max_hold, ..GrantOptions::default() };
        for g in [Grammar::Acquire, Grammar::Takeover, Grammar::Holders] {
            assert_eq!(parse(g, &[b"lockdelay", b"5000"]), Ok(terms(Some(5000), None)));
            assert_eq!(parse(g, &[b"MaxHold", b"90000", b"LOCKDELAY", b"0"]), Ok(terms(Some(0), Some(90_000))));
            assert_eq!(parse(g, &[b"LOCKDELAY", b"60000"]), Ok(terms(Some(60_000), None)));
            assert_eq!(parse(g, &[b"LOCKDELAY", b"1", b"LOCKDELAY", b"2"]), Ok(terms(Some(2), None)));
            assert_eq!(parse(g, &[b"MAXHOLD", b"9223372036854775807"]), Ok(terms(None, Some(i64::MAX))));
            assert_eq!(parse(g, &[b"LOCKDELAY"]), Err(ArgError::Syntax));
            assert_eq!(parse(g, &[b"MAXHOLD"]), Err(ArgError::Syntax));
            for bad in [&b"60001"[..], b"-1", b"+5", b"01", b"1.5", b"", b"x", b"99999999999999999999"] {
                assert_eq!(parse(g, &[b"LOCKDELAY", bad]), Err(ArgError::LockDelayInvalid), "{bad:?}");
            }
            for bad in [&b"0"[..], b"-1", b"01", b"1e3", b"", b"9223372036854775808"] {
                assert_eq!(parse(g, &[b"MAXHOLD", bad]), Err(ArgError::MaxHoldInvalid), "{bad:?}");
            }
        }
        let full = parse(Grammar::Acquire, &[b"fence", b"maxhold", b"10", b"wait", b"5", b"lockdelay", b"7"]);
        assert_eq!(
            full,
            Ok(GrantOptions { fence: true, wait: Some(5), lock_delay: Some(7), max_hold: Some(10), session: None })
        );
        let holders = parse(Grammar::Holders, &[b"lockdelay", b"5", b"WAIT", b"10", b"fence"]);
        assert_eq!(
            holders,
            Ok(GrantOptions { fence: true, wait: Some(10), lock_delay: Some(5), max_hold: None, session: None })
        );
        assert_eq!(parse(Grammar::Holders, &[b"LOCKDELAY", b"60001"]), Err(ArgError::LockDelayInvalid));
        assert_eq!(parse(Grammar::Holders, &[b"MAXHOLD", b"5"]), Ok(terms(None, Some(5))));
    }

    #[test]
    fn max_hold_is_at_least_the_ttl() {
        let max = |max_hold| GrantOptions { max_hold, ..GrantOptions::default() };
        assert_eq!(check_lease_terms(&max(None), 30_000), Ok(()));
        assert_eq!(check_lease_terms(&max(Some(30_000)), 30_000), Ok(()));
        assert_eq!(check_lease_terms(&max(Some(29_999)), 30_000), Err(ArgError::MaxHoldBelowTtl));
        assert!(ArgError::MaxHoldBelowTtl.reply().contains("MAXHOLD"));
        assert!(ArgError::LockDelayInvalid.reply().contains("LOCKDELAY"));
    }

    #[test]
    fn renew_takes_only_a_floor() {
        let renew = |args: &[&[u8]]| parse_renew_options(args.iter().copied());
        assert_eq!(renew(&[]), Ok(None));
        assert_eq!(renew(&[b"floor", b"42"]), Ok(Some(42)));
        assert_eq!(renew(&[b"FLOOR", b"1", b"Floor", b"7"]), Ok(Some(7)));
        assert_eq!(renew(&[b"FLOOR"]), Err(ArgError::Syntax));
        assert_eq!(renew(&[b"FENCE"]), Err(ArgError::Syntax));
        assert_eq!(renew(&[b"FLOOR", b"-1"]), Err(ArgError::FenceNotInteger));
    }

    #[test]
    fn wait_deadlines_must_fit_the_clock() {
        assert_eq!(wait_deadline(1_000, 0), Ok(None));
        assert_eq!(wait_deadline(1_000, 250), Ok(Some(1_250)));
        assert_eq!(wait_deadline(1_700_000_000_000, i64::MAX), Err(ArgError::TimeoutOutOfRange));
    }

    #[test]
    fn fences_are_plain_non_negative_integers() {
        assert_eq!(parse_fence(b"0"), Ok(0));
        assert_eq!(parse_fence(b"1796237051088000"), Ok(1_796_237_051_088_000));
        for bad in [&b""[..], b"-1", b"+1", b"01", b"1.0", b"9223372036854775808", b"x"] {
            assert_eq!(parse_fence(bad), Err(ArgError::FenceNotInteger), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn expiry_overflow_is_an_error() {
        assert_eq!(expiry_at(1_000, 500), Ok(1_500));
        assert_eq!(expiry_at(1_700_000_000_000, i64::MAX), Err(ArgError::TtlTooLarge));
    }

    #[test]
    fn replies_name_what_is_wrong() {
        assert!(ArgError::TtlNotPositive.reply().contains("ttl"));
        assert!(ArgError::TtlTooLarge.reply().contains("ttl"));
        assert_eq!(check_key_and_token(b"", b"t"), Err(ArgError::KeyOrTokenMissing));
        assert_eq!(check_key_and_token(b"k", b""), Err(ArgError::KeyOrTokenMissing));
        assert_eq!(check_key_and_token(b"k", b"t"), Ok(()));
        assert_eq!(check_key_and_token(b"k", b"\0t"), Ok(()));
        assert_eq!(check_holder_key_and_token(b"k", b"\0t"), Err(ArgError::TokenReserved));
        assert_eq!(check_holder_key_and_token(b"k", b"\0"), Err(ArgError::TokenReserved));
        assert_eq!(check_holder_key_and_token(b"", b"t"), Err(ArgError::KeyOrTokenMissing));
        assert_eq!(check_holder_key_and_token(b"k", b"t\0"), Ok(()));
        assert!(ArgError::TokenReserved.reply().contains("NUL"));
        assert_eq!(check_utf8(b"\xff"), Err(ArgError::NotUtf8));
    }
}
