//! The decisions of the four lock commands, as the reference scripts make
//! them (seed 000: `renewLockScript`, `releaseLockScript`,
//! `acquireOrTakeoverLockScript`, and `SET NX PX` for acquire). Each takes
//! what the key holds now and answers whether the command's effect applies;
//! the caller performs the effect. No Redis types, so every rule is testable
//! and fuzzable without a server.

use crate::cjson::{self, Decoded, Field};
use crate::value;

/// What a key holds when a command looks at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// No such key (or it has expired).
    Absent,
    /// A string value.
    Str(&'a [u8]),
    /// A list, hash, set, stream, module type...: the scripts' `GET` fails.
    OtherType,
}

/// A key's remaining time to live, as `PTTL` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remaining {
    /// The key has no expiry (`PTTL` = -1).
    Persistent,
    /// Milliseconds left, never negative.
    Ms(i64),
}

pub use crate::error::WrongType;

/// Who owns a stored value, as the renew and release scripts decide it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner<'a> {
    /// The raw value: it is not a table, or its `owner` is absent or `false`.
    Raw(&'a [u8]),
    /// A table whose `owner` is a string.
    Str(cjson::JsonStr<'a>),
    /// A table whose `owner` is truthy but not a string: no token equals it.
    Unmatchable,
}

/// `owner = current; if ok and type(decoded) == 'table' and decoded['owner'] then owner = decoded['owner'] end`
///
/// One form more, that only the module writes: a session-held lock
/// (`crate::value::Held`, docs/sessions.md) is owned by its `token`, which
/// the scripts never see (its `owner` is `null`).
#[inline(always)]
pub fn owner_of(value: &[u8]) -> Owner<'_> {
    if let Some(raw) = value::held_token(value) {
        return Owner::Str(cjson::JsonStr::from_raw(raw));
    }
    match cjson::decode(value) {
        Decoded::Table { owner: Field::Str(s), .. } => Owner::Str(s),
        Decoded::Table { owner: Field::Other, .. } => Owner::Unmatchable,
        Decoded::Table { owner: Field::Absent | Field::False, .. } | Decoded::NotTable => Owner::Raw(value),
    }
}

/// `owner == ARGV[1]`, Lua string equality (byte-exact).
pub fn owns(value: &[u8], token: &[u8]) -> bool {
    match owner_of(value) {
        Owner::Raw(raw) => raw == token,
        Owner::Str(s) => s.decodes_to(token),
        Owner::Unmatchable => false,
    }
}

/// What LOCK.INFO reports about a stored value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    /// The owner as the scripts see it; `None` when no token can own it
    /// (a structured `owner` that is truthy but not a string).
    pub owner: Option<Vec<u8>>,
    /// The structured value's `runId`, when it is a string.
    pub run_id: Option<Vec<u8>>,
    /// Whether the value decodes as a table (a JSON object or array).
    pub structured: bool,
}

pub fn describe(value: &[u8]) -> Described {
    let (structured, run_id) = match cjson::decode(value) {
        Decoded::Table { run_id: Field::Str(s), .. } => (true, Some(s.to_vec())),
        Decoded::Table { .. } => (true, None),
        Decoded::NotTable => (false, None),
    };
    let owner = match owner_of(value) {
        Owner::Raw(raw) => Some(raw.to_vec()),
        Owner::Str(s) => Some(s.to_vec()),
        Owner::Unmatchable => None,
    };
    Described { owner, run_id, structured }
}

/// `SET key token NX PX ttl`: only an absent key is granted, whatever else it holds.
pub fn may_acquire(entry: Entry<'_>) -> bool {
    matches!(entry, Entry::Absent)
}

/// The renew script: `PEXPIRE` when `token` owns the value.
pub fn may_renew(entry: Entry<'_>, token: &[u8]) -> Result<bool, WrongType> {
    held_by(entry, token)
}

/// The release script: `DEL` when `token` owns the value.
pub fn may_release(entry: Entry<'_>, token: &[u8]) -> Result<bool, WrongType> {
    held_by(entry, token)
}

fn held_by(entry: Entry<'_>, token: &[u8]) -> Result<bool, WrongType> {
    match entry {
        Entry::Absent => Ok(false),
        Entry::Str(value) => Ok(owns(value, token)),
        Entry::OtherType => Err(WrongType),
    }
}

/// The acquire-or-takeover script's verdict, with the reason for a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// The key was absent.
    Free,
    /// A structured value of the same run: a redelivered job reclaims its lock.
    SameRun,
    /// A legacy value whose holder has provably stopped renewing.
    StaleLegacy,
    /// Another run's lock, a structured value without a run, or a live legacy lock.
    Refused,
}

impl Takeover {
    pub fn granted(self) -> bool {
        self != Takeover::Refused
    }
}

/// The acquire-or-takeover script, for a non-empty `run_id` (an empty one is
/// plain acquire, as in the Go wrapper). `remaining` is asked only when the
/// answer depends on it: a legacy (non-table) value.
pub fn take_over(
    entry: Entry<'_>,
    run_id: &[u8],
    ttl_ms: i64,
    remaining: impl FnOnce() -> Remaining,
) -> Result<Takeover, WrongType> {
    let value = match entry {
        Entry::Absent => return Ok(Takeover::Free),
        Entry::Str(value) => value,
        Entry::OtherType => return Err(WrongType),
    };
    let granted = match cjson::decode(value) {
        Decoded::NotTable if legacy_is_stale(remaining(), ttl_ms) => Takeover::StaleLegacy,
        // `decoded['runId'] ~= wanted['runId']`: only a string can equal it.
        Decoded::Table { run_id: Field::Str(s), .. } if s.decodes_to(run_id) => Takeover::SameRun,
        _ => Takeover::Refused,
    };
    Ok(granted)
}

/// Whether [`take_over`] grants.
pub fn may_take_over(
    entry: Entry<'_>,
    run_id: &[u8],
    ttl_ms: i64,
    remaining: impl FnOnce() -> Remaining,
) -> Result<bool, WrongType> {
    take_over(entry, run_id, ttl_ms, remaining).map(Takeover::granted)
}

/// `if pttl > 0 and pttl > math.floor(tonumber(ARGV[2]) / 2) then return 0 end`
///
/// Lua numbers are doubles, so the comparison is made in doubles too: for
/// TTLs beyond 2^53 ms the rounding is the script's, not exact arithmetic.
pub fn legacy_is_stale(remaining: Remaining, ttl_ms: i64) -> bool {
    match remaining {
        Remaining::Persistent => true,
        Remaining::Ms(pttl) => {
            let pttl = pttl as f64;
            !(pttl > 0.0 && pttl > (ttl_ms as f64 / 2.0).floor())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: i64 = 30_000;
    fn never() -> Remaining {
        panic!("remaining TTL asked for a structured value")
    }

    #[test]
    fn owners_follow_the_scripts() {
        let cases: &[(&[u8], &[u8], bool)] = &[
            (b"tok", b"tok", true),
            (b"tok", b"tok2", false),
            (br#"{"owner":"tok","runId":"r"}"#, b"tok", true),
            (br#"{"owner":"tok","runId":"r"}"#, br#"{"owner":"tok","runId":"r"}"#, false),
            (br#"{"owner":false}"#, br#"{"owner":false}"#, true),
            (br#"{"runId":"r"}"#, br#"{"runId":"r"}"#, true),
            (br#"["tok"]"#, br#"["tok"]"#, true),
            (br#"["tok"]"#, b"tok", false),
            (br#"{"owner":null}"#, br#"{"owner":null}"#, false),
            (br#"{"owner":1}"#, b"1", false),
            (br#""tok""#, br#""tok""#, true),
            (br#""tok""#, b"tok", false),
            (br#"{"owner":"tok"}x"#, br#"{"owner":"tok"}x"#, true),
            (b"{\"owner\":\"tok\"}\0x", b"tok", true),
            (br#"{"owner":"t\u00f6k"}"#, "tök".as_bytes(), true),
        ];
        for &(value, token, want) in cases {
            assert_eq!(
                owns(value, token),
                want,
                "value {:?} token {:?}",
                String::from_utf8_lossy(value),
                String::from_utf8_lossy(token)
            );
        }
    }

    #[test]
    fn describe_reports_owner_run_and_format() {
        let d = describe(br#"{"owner":"t\u00f6k","runId":"r"}"#);
        assert_eq!(d, Described { owner: Some("tök".into()), run_id: Some(b"r".to_vec()), structured: true });
        assert_eq!(describe(b"bare"), Described { owner: Some(b"bare".to_vec()), run_id: None, structured: false });
        assert_eq!(describe(br#"{"owner":1}"#).owner, None);
        assert_eq!(describe(br#"{"owner":false}"#).owner, Some(br#"{"owner":false}"#.to_vec()));
    }

    #[test]
    fn renew_and_release_refuse_absent_keys_and_reject_other_types() {
        assert_eq!(may_renew(Entry::Absent, b"t"), Ok(false));
        assert_eq!(may_release(Entry::Absent, b"t"), Ok(false));
        assert_eq!(may_renew(Entry::OtherType, b"t"), Err(WrongType));
        assert_eq!(may_release(Entry::OtherType, b"t"), Err(WrongType));
        assert_eq!(may_release(Entry::Str(b"t"), b"t"), Ok(true));
    }

    #[test]
    fn acquire_only_takes_an_absent_key() {
        assert!(may_acquire(Entry::Absent));
        assert!(!may_acquire(Entry::Str(b"")));
        assert!(!may_acquire(Entry::OtherType));
    }

    #[test]
    fn takeover_of_structured_values_depends_only_on_the_run_id() {
        let cases: &[(&[u8], bool)] = &[
            (br#"{"owner":"x","runId":"run"}"#, true),
            (br#"{"owner":"x","runId":"other"}"#, false),
            (br#"{"owner":"x"}"#, false),
            (br#"{"owner":"x","runId":null}"#, false),
            (br#"{"owner":"x","runId":false}"#, false),
            (br#"{"runId":"r\u0075n"}"#, true),
            (br#"["run"]"#, false),
            (b"[]", false),
            (br#"{"runId":"run","runId":"x"}"#, false),
        ];
        for &(value, want) in cases {
            assert_eq!(
                may_take_over(Entry::Str(value), b"run", TTL, never),
                Ok(want),
                "{}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn takeover_of_legacy_values_needs_staleness() {
        let legacy = Entry::Str(b"bare-token");
        let at = |r| may_take_over(legacy, b"run", TTL, || r);
        assert_eq!(at(Remaining::Persistent), Ok(true));
        assert_eq!(at(Remaining::Ms(0)), Ok(true));
        assert_eq!(at(Remaining::Ms(TTL / 2)), Ok(true));
        assert_eq!(at(Remaining::Ms(TTL / 2 + 1)), Ok(false));
        assert_eq!(at(Remaining::Ms(TTL)), Ok(false));
        // Odd TTLs: the threshold is floor(ttl / 2).
        assert_eq!(may_take_over(legacy, b"r", 7, || Remaining::Ms(3)), Ok(true));
        assert_eq!(may_take_over(legacy, b"r", 7, || Remaining::Ms(4)), Ok(false));
        assert_eq!(may_take_over(legacy, b"r", 1, || Remaining::Ms(1)), Ok(false));
    }

    #[test]
    fn takeover_says_why_it_grants() {
        assert_eq!(take_over(Entry::Absent, b"r", TTL, never), Ok(Takeover::Free));
        assert_eq!(take_over(Entry::Str(br#"{"runId":"r"}"#), b"r", TTL, never), Ok(Takeover::SameRun));
        assert_eq!(take_over(Entry::Str(b"bare"), b"r", TTL, || Remaining::Persistent), Ok(Takeover::StaleLegacy));
        assert_eq!(take_over(Entry::Str(b"bare"), b"r", TTL, || Remaining::Ms(TTL)), Ok(Takeover::Refused));
    }

    #[test]
    fn takeover_grants_absent_and_rejects_other_types() {
        assert_eq!(may_take_over(Entry::Absent, b"r", TTL, never), Ok(true));
        assert_eq!(may_take_over(Entry::OtherType, b"r", TTL, never), Err(WrongType));
    }

    #[test]
    fn staleness_compares_in_doubles_like_lua() {
        // 2^53 + 1 is not a double: Lua sees ttl = 2^53, threshold 2^52.
        let ttl = (1i64 << 53) + 1;
        assert!(legacy_is_stale(Remaining::Ms(1 << 52), ttl));
        assert!(!legacy_is_stale(Remaining::Ms((1 << 52) + 2), ttl));
    }
}
