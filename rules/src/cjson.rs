//! What the Lua cjson inside redis-server (lua-cjson 2.1.0, as Debian's
//! redis 7.0 and upstream's bundled copy use it) makes of a stored value, reduced to the two facts the reference scripts look at: did
//! `pcall(cjson.decode, v)` return a table, and what are its top-level
//! `owner` and `runId` fields.
//!
//! This is not a JSON parser with cjson's name on it: it replays cjson's
//! tokenizer decision by decision, because every input cjson accepts that a
//! strict parser rejects (or the reverse) is a lock that a script and the
//! module would disagree about. The quirks reproduced here, each checked
//! against a real redis-server by the differential test:
//!
//! - decoding stops at the first NUL byte, which reads as end of input, and a
//!   value of two or more bytes whose first or second byte is NUL is refused
//!   outright (cjson's UTF-16/32 sniffing);
//! - whitespace is exactly space, `\t`, `\n`, `\r`;
//! - numbers are whatever the C library's `strtod` consumes once the token
//!   starts with `-`, a digit, `+`, or a case-insensitive `inf`/`nan`; so hex
//!   floats, `infinity`, `nan(...)`, leading zeros, `1.`, `-.5` all pass, and
//!   we call the same `strtod` the server does rather than imitate it;
//! - `true`, `false`, `null` match as prefixes, so `truex` is `true` followed
//!   by a bad token;
//! - strings take raw control and non-UTF-8 bytes as they are; the escapes are
//!   `\" \\ \/ \b \f \n \r \t \uXXXX`; a high surrogate must be followed by a
//!   `\u` low surrogate, a lone low surrogate is an error, `\u0000` is a NUL;
//! - at most 1000 arrays and objects may be open at once
//!   (`decode_max_depth`); the 1001st fails the decode;
//! - duplicate keys: the last one wins, and a later `false` or `null` replaces
//!   an earlier string.

use std::ffi::c_char;

/// The value of a top-level field, as far as the scripts can tell it apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field<'a> {
    /// The key is not there (Lua `nil`).
    Absent,
    /// JSON `false`: falsy in Lua, so the scripts fall back to the raw value.
    False,
    /// A JSON string: the still-escaped bytes between its quotes.
    Str(JsonStr<'a>),
    /// `true`, a number, `null` (cjson's lightuserdata), an object or an
    /// array: truthy, and never equal to a Lua string.
    Other,
}

/// What `pcall(cjson.decode, value)` yields, reduced to what the scripts use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// The decode failed, or produced a string, number, boolean or null.
    NotTable,
    /// The decode produced a table (a JSON object or array). An array never
    /// has string keys, so both fields are `Absent` for it.
    Table { owner: Field<'a>, run_id: Field<'a> },
}

/// The raw content of a JSON string that cjson accepted (quotes excluded,
/// escapes still in place). Compared by its decoded bytes without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsonStr<'a>(&'a [u8]);

impl<'a> JsonStr<'a> {
    /// The raw content of a JSON string cjson accepts (escapes in place),
    /// found by another reader of the same bytes (`crate::value::held_token`).
    pub fn from_raw(raw: &'a [u8]) -> Self {
        JsonStr(raw)
    }

    /// The decoded bytes, as the Lua string cjson would build.
    pub fn bytes(self) -> DecodedBytes<'a> {
        DecodedBytes { raw: self.0, pos: 0, pending: [0; 4], pending_len: 0, pending_pos: 0 }
    }

    /// Whether the decoded string is exactly `other` (Lua's `==` on strings).
    pub fn decodes_to(self, other: &[u8]) -> bool {
        // Fast path: without escapes the raw bytes are the decoded bytes.
        if !self.0.contains(&b'\\') {
            return self.0 == other;
        }
        let mut it = self.bytes();
        let mut rest = other.iter();
        loop {
            match (it.next(), rest.next()) {
                (None, None) => return true,
                (Some(a), Some(&b)) if a == b => continue,
                _ => return false,
            }
        }
    }

    /// The decoded bytes collected into a vector.
    pub fn to_vec(self) -> Vec<u8> {
        self.bytes().collect()
    }
}

/// Iterator over the decoded bytes of a [`JsonStr`].
pub struct DecodedBytes<'a> {
    raw: &'a [u8],
    pos: usize,
    pending: [u8; 4],
    pending_len: u8,
    pending_pos: u8,
}

impl Iterator for DecodedBytes<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        if self.pending_pos < self.pending_len {
            let b = self.pending[self.pending_pos as usize];
            self.pending_pos += 1;
            return Some(b);
        }
        let b = *self.raw.get(self.pos)?;
        if b != b'\\' {
            self.pos += 1;
            return Some(b);
        }
        let e = at(self.raw, self.pos + 1);
        if e != b'u' {
            self.pos += 2;
            return Some(simple_escape(e).unwrap_or(e));
        }
        // The scanner has already validated this escape, so the fallbacks
        // below are unreachable; they keep this total rather than panicking.
        let (cp, len) = unicode_escape(self.raw, self.pos).unwrap_or((0xFFFD, 6));
        self.pos += len;
        let c = char::from_u32(cp).unwrap_or('\u{FFFD}');
        let n = c.encode_utf8(&mut self.pending).len();
        self.pending_len = n as u8;
        self.pending_pos = 1;
        Some(self.pending[0])
    }
}

/// cjson's `decode_max_depth` default: containers open at once.
const MAX_DEPTH: usize = 1000;

/// Decode `value` the way the reference scripts' `pcall(cjson.decode, value)`
/// does, keeping only what the scripts then look at.
pub fn decode(value: &[u8]) -> Decoded<'_> {
    canonical(value).unwrap_or_else(|| tokenized(value))
}

/// [`decode`] by replaying cjson's tokenizer, for any input.
fn tokenized(value: &[u8]) -> Decoded<'_> {
    let Some(data) = input(value) else { return Decoded::NotTable };
    // The top level only becomes a table if it opens with a bracket; anything
    // else decodes (or fails) to a non-table, which the scripts treat alike.
    // Deciding that from the first byte keeps bare tokens allocation- and
    // strtod-free.
    let first = data.iter().find(|&&b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if !matches!(first, Some(b'{' | b'[')) {
        return Decoded::NotTable;
    }
    Parser { data, pos: 0 }.parse_document().unwrap_or(Decoded::NotTable)
}

/// The value exactly as Go (and the module) write it,
/// `{"owner":"X","runId":"Y"}`, with X and Y free of backslashes and NULs
/// and nothing after the brace: what nearly every structured lock holds.
/// cjson's verdict on that shape is plain (a table with two string fields),
/// so the tokenizer is skipped; anything else, however close, takes the
/// full path.
fn canonical(value: &[u8]) -> Option<Decoded<'_>> {
    /// The bytes up to the closing quote and what follows it, when the
    /// string has no escape and no NUL (cjson's end of input).
    fn plain(s: &[u8]) -> Option<(&[u8], &[u8])> {
        let end = memchr::memchr3(b'"', b'\\', 0, s)?;
        (s[end] == b'"').then(|| (&s[..end], &s[end + 1..]))
    }
    let rest = value.strip_prefix(br#"{"owner":""#)?;
    let (owner, rest) = plain(rest)?;
    let rest = rest.strip_prefix(br#","runId":""#)?;
    let (run_id, rest) = plain(rest)?;
    (rest == b"}").then_some(Decoded::Table { owner: Field::Str(JsonStr(owner)), run_id: Field::Str(JsonStr(run_id)) })
}

/// Whether cjson decodes `value` at all (to anything).
pub fn is_valid(value: &[u8]) -> bool {
    input(value).is_some_and(|data| Parser { data, pos: 0 }.parse_document().is_some())
}

/// What cjson reads of `value`: nothing when its UTF-16/32 sniffing refuses
/// it (a NUL in either of the first two bytes of a longer value), else the
/// bytes before the first NUL.
fn input(value: &[u8]) -> Option<&[u8]> {
    if value.len() >= 2 && (value[0] == 0 || value[1] == 0) {
        return None;
    }
    Some(&value[..memchr::memchr(0, value).unwrap_or(value.len())])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Colon,
    Comma,
    End,
    Str(JsonStr<'a>),
    False,
    /// `true`, a number or `null`: a scalar the scripts can only see as truthy.
    Scalar,
    Error,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Owner,
    RunId,
    Neither,
}

struct Parser<'a> {
    /// The value up to (not including) its first NUL: cjson's end of input.
    data: &'a [u8],
    pos: usize,
}

#[inline]
fn at(data: &[u8], i: usize) -> u8 {
    data.get(i).copied().unwrap_or(0)
}

fn simple_escape(e: u8) -> Option<u8> {
    Some(match e {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        _ => return None,
    })
}

fn hex4(data: &[u8], i: usize) -> Option<u32> {
    let mut v = 0u32;
    for k in 0..4 {
        let d = match at(data, i + k) {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u32::from(d);
    }
    Some(v)
}

/// A `\uXXXX` escape (or surrogate pair) starting at the backslash at `i`:
/// its code point and how many bytes it spans, or `None` where cjson errors.
fn unicode_escape(data: &[u8], i: usize) -> Option<(u32, usize)> {
    let cp = hex4(data, i + 2)?;
    if cp & 0xF800 != 0xD800 {
        return Some((cp, 6));
    }
    if cp & 0x400 != 0 || at(data, i + 6) != b'\\' || at(data, i + 7) != b'u' {
        return None;
    }
    let low = hex4(data, i + 8)?;
    if low & 0xFC00 != 0xDC00 {
        return None;
    }
    Some(((((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000, 12))
}

impl<'a> Parser<'a> {
    fn next_token(&mut self) -> Token<'a> {
        while matches!(at(self.data, self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let c = at(self.data, self.pos);
        let single = match c {
            0 => return Token::End,
            b'{' => Token::ObjBegin,
            b'}' => Token::ObjEnd,
            b'[' => Token::ArrBegin,
            b']' => Token::ArrEnd,
            b',' => Token::Comma,
            b':' => Token::Colon,
            b'"' => return self.string(),
            b'-' | b'0'..=b'9' => return self.number(),
            _ => return self.word(),
        };
        self.pos += 1;
        single
    }

    fn rest(&self) -> &'a [u8] {
        &self.data[self.pos.min(self.data.len())..]
    }

    fn word(&mut self) -> Token<'a> {
        let rest = self.rest();
        if rest.starts_with(b"true") {
            self.pos += 4;
            return Token::Scalar;
        }
        if rest.starts_with(b"false") {
            self.pos += 5;
            return Token::False;
        }
        if rest.starts_with(b"null") {
            self.pos += 4;
            return Token::Scalar;
        }
        // cjson hands these to strtod too ("invalid numbers" it tolerates).
        let lead = rest.first().copied().unwrap_or(0);
        let inf_nan =
            rest.len() >= 3 && (rest[..3].eq_ignore_ascii_case(b"inf") || rest[..3].eq_ignore_ascii_case(b"nan"));
        if lead == b'+' || (matches!(lead, b'i' | b'I' | b'n' | b'N') && inf_nan) {
            return self.number();
        }
        Token::Error
    }

    fn number(&mut self) -> Token<'a> {
        match strtod_len(self.rest()) {
            0 => Token::Error,
            n => {
                self.pos += n;
                Token::Scalar
            }
        }
    }

    fn string(&mut self) -> Token<'a> {
        let start = self.pos + 1;
        let mut i = start;
        loop {
            match at(self.data, i) {
                b'"' => break,
                0 => return Token::Error,
                b'\\' => {
                    let e = at(self.data, i + 1);
                    if e == b'u' {
                        match unicode_escape(self.data, i) {
                            Some((_, len)) => i += len,
                            None => return Token::Error,
                        }
                    } else if simple_escape(e).is_some() {
                        i += 2;
                    } else {
                        return Token::Error;
                    }
                }
                _ => i += 1,
            }
        }
        self.pos = i + 1;
        Token::Str(JsonStr(&self.data[start..i]))
    }

    /// Parses one whole document; `None` wherever cjson raises an error.
    /// Iterative, so no input can run our own stack deep.
    fn parse_document(&mut self) -> Option<Decoded<'a>> {
        // Open containers, innermost last: true = object. At most MAX_DEPTH.
        let mut open: Vec<bool> = Vec::new();
        let mut owner = Field::Absent;
        let mut run_id = Field::Absent;
        let mut top_is_table = false;
        // Which top-level field the value being parsed belongs to.
        let mut field = Which::Neither;

        let mut tok = self.next_token();
        loop {
            // Parse a value starting at `tok`.
            let depth = open.len();
            let value = match tok {
                Token::ObjBegin | Token::ArrBegin => {
                    let is_obj = tok == Token::ObjBegin;
                    if depth + 1 > MAX_DEPTH {
                        return None;
                    }
                    if depth == 0 {
                        top_is_table = true;
                    }
                    open.push(is_obj);
                    let next = self.next_token();
                    let empty = if is_obj { Token::ObjEnd } else { Token::ArrEnd };
                    if next == empty {
                        open.pop();
                        Field::Other
                    } else if is_obj {
                        tok = self.object_key(next, open.len(), &mut field)?;
                        continue;
                    } else {
                        tok = next;
                        continue;
                    }
                }
                Token::Str(s) => Field::Str(s),
                Token::False => Field::False,
                Token::Scalar => Field::Other,
                _ => return None,
            };
            // A complete value at `depth`; record it if it is a top-level field.
            if depth == 1 && open.first() == Some(&true) {
                match field {
                    Which::Owner => owner = value,
                    Which::RunId => run_id = value,
                    Which::Neither => {}
                }
            }
            // Close every container this value completes, then find the next value.
            loop {
                let Some(&is_obj) = open.last() else {
                    // The document's value is complete: only the end may follow.
                    if self.next_token() != Token::End {
                        return None;
                    }
                    return Some(if top_is_table { Decoded::Table { owner, run_id } } else { Decoded::NotTable });
                };
                let next = self.next_token();
                let close = if is_obj { Token::ObjEnd } else { Token::ArrEnd };
                if next == close {
                    open.pop();
                    if open.len() == 1 && open[0] {
                        // The closed container was a top-level field's value.
                        match field {
                            Which::Owner => owner = Field::Other,
                            Which::RunId => run_id = Field::Other,
                            Which::Neither => {}
                        }
                    }
                    continue;
                }
                if next != Token::Comma {
                    return None;
                }
                let after = self.next_token();
                tok = if is_obj { self.object_key(after, open.len(), &mut field)? } else { after };
                break;
            }
        }
    }

    /// Expects `key` to be an object key followed by a colon; returns the
    /// token that starts its value. Notes which top-level field it names.
    fn object_key(&mut self, key: Token<'a>, depth: usize, field: &mut Which) -> Option<Token<'a>> {
        let Token::Str(name) = key else { return None };
        if self.next_token() != Token::Colon {
            return None;
        }
        if depth == 1 {
            *field = if name.decodes_to(b"owner") {
                Which::Owner
            } else if name.decodes_to(b"runId") {
                Which::RunId
            } else {
                Which::Neither
            };
        }
        Some(self.next_token())
    }
}

extern "C" {
    fn strtod(nptr: *const c_char, endptr: *mut *mut c_char) -> f64;
}

/// How many bytes of `s` the C library's `strtod` consumes (0: no number).
///
/// cjson calls the process's `strtod`, and so do we: the module lives in the
/// same process, so both see the same libc and the same (C) numeric locale.
/// `strtod` needs a NUL-terminated string, so the candidate span is copied.
pub fn strtod_len(s: &[u8]) -> usize {
    // strtod never consumes a byte outside this set (digits, letters for hex,
    // exponents, inf/nan and nan's n-char-sequence, sign, point, parentheses).
    let n = s
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-' | b'_' | b'(' | b')')))
        .unwrap_or(s.len());
    let mut stack = [0u8; 64];
    let mut heap;
    let buf: &mut [u8] = if n < stack.len() {
        &mut stack[..=n]
    } else {
        heap = vec![0u8; n + 1];
        &mut heap[..]
    };
    buf[..n].copy_from_slice(&s[..n]);
    buf[n] = 0;
    let start = buf.as_ptr() as *const c_char;
    let mut end: *mut c_char = std::ptr::null_mut();
    // SAFETY: `buf` is NUL-terminated and outlives the call; strtod only
    // reads up to the terminator and writes `end` within `buf`.
    unsafe {
        strtod(start, &mut end);
        if end.is_null() {
            return 0;
        }
        (end as usize).saturating_sub(start as usize).min(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(v: &str) -> Option<Field<'_>> {
        match decode(v.as_bytes()) {
            Decoded::Table { owner, .. } => Some(owner),
            Decoded::NotTable => None,
        }
    }

    fn owner_bytes(v: &[u8]) -> Option<Vec<u8>> {
        match decode(v) {
            Decoded::Table { owner: Field::Str(s), .. } => Some(s.to_vec()),
            _ => None,
        }
    }

    #[test]
    fn plain_object_yields_both_fields() {
        let d = decode(br#"{"owner":"tok","runId":"r1"}"#);
        let Decoded::Table { owner: Field::Str(o), run_id: Field::Str(r) } = d else { panic!("{d:?}") };
        assert!(o.decodes_to(b"tok"));
        assert!(r.decodes_to(b"r1"));
    }

    #[test]
    fn the_canonical_shortcut_agrees_with_the_tokenizer() {
        let near_misses: &[&[u8]] = &[
            br#"{"owner":"tok","runId":"r1"}"#,
            br#"{"owner":"","runId":""}"#,
            b"{\"owner\":\"t\x01\xff\",\"runId\":\"r\"}",
            br#"{"owner":"t\"o","runId":"r"}"#,
            br#"{"owner":"t\u0000","runId":"r"}"#,
            b"{\"owner\":\"t\0\",\"runId\":\"r\"}",
            b"{\"owner\":\"t\",\"runId\":\"r\"}\0",
            br#"{"owner":"t","runId":"r"} "#,
            br#"{"owner":"t","runId":"r"}x"#,
            br#"{"owner":"t","runId":"r""#,
            br#"{"owner":"t","runId":"r","owner":false}"#,
            br#"{"owner":"t","runId":"r"}"#,
            br#"{"owner":"t""#,
        ];
        for v in near_misses {
            let full = tokenized(v);
            assert_eq!(decode(v), full, "{:?}", String::from_utf8_lossy(v));
            if let Some(fast) = canonical(v) {
                assert_eq!(fast, full, "{:?}", String::from_utf8_lossy(v));
            }
        }
        // Every one-byte substitution or deletion of a canonical value.
        let base = br#"{"owner":"tok","runId":"r1"}"#;
        for i in 0..base.len() {
            let mut cut = base.to_vec();
            cut.remove(i);
            assert_eq!(decode(&cut), tokenized(&cut), "{:?}", String::from_utf8_lossy(&cut));
            for b in [b'"', b'\\', 0, b' ', b'}', b'{', b',', b':', b'x', 0xff] {
                let mut v = base.to_vec();
                v[i] = b;
                assert_eq!(decode(&v), tokenized(&v), "{:?}", String::from_utf8_lossy(&v));
            }
        }
        assert!(canonical(base).is_some());
        assert!(canonical(br#"{"owner":"t\"o","runId":"r"}"#).is_none());
    }

    #[test]
    fn non_tables_are_not_tables() {
        for v in ["tok", "\"tok\"", "123", "true", "null", "", " ", "3f2a", "{", "[1,]", "{}x"] {
            assert_eq!(decode(v.as_bytes()), Decoded::NotTable, "{v:?}");
        }
    }

    #[test]
    fn arrays_and_empty_objects_are_tables_without_fields() {
        for v in ["[]", "{}", "[\"owner\"]", " [1, 2] ", "[[[]]]", "{\"x\":{\"owner\":\"a\"}}"] {
            assert_eq!(decode(v.as_bytes()), Decoded::Table { owner: Field::Absent, run_id: Field::Absent }, "{v:?}");
        }
    }

    #[test]
    fn field_kinds_follow_lua_truthiness() {
        assert_eq!(owner(r#"{"owner":false}"#), Some(Field::False));
        for v in ["true", "null", "1", "{}", "[]", "-0x1p3", "nan", "Infinity"] {
            assert_eq!(owner(&format!("{{\"owner\":{v}}}")), Some(Field::Other), "{v}");
        }
    }

    #[test]
    fn last_duplicate_key_wins() {
        assert_eq!(owner(r#"{"owner":"a","owner":false}"#), Some(Field::False));
        assert_eq!(owner(r#"{"owner":"a","owner":null}"#), Some(Field::Other));
        assert_eq!(owner_bytes(br#"{"owner":1,"owner":"b"}"#), Some(b"b".to_vec()));
        assert_eq!(owner(r#"{"owner":"a","owner":{"x":[1]}}"#), Some(Field::Other));
    }

    #[test]
    fn escaped_keys_and_values_decode() {
        assert_eq!(owner_bytes(br#"{"\u006fwner":"a\/b\n\u00e9\ud83d\ude00"}"#), Some("a/b\né😀".as_bytes().to_vec()));
        assert_eq!(owner_bytes(br#"{"owner":"\u0000x"}"#), Some(b"\0x".to_vec()));
    }

    #[test]
    fn bad_escapes_fail_the_whole_decode() {
        for v in [
            r#"{"owner":"\x"}"#,
            r#"{"owner":"\ud800"}"#,
            r#"{"owner":"\udc00\udc00"}"#,
            r#"{"owner":"\ud800\u0041"}"#,
            r#"{"owner":"\u12"}"#,
        ] {
            assert_eq!(decode(v.as_bytes()), Decoded::NotTable, "{v}");
        }
    }

    #[test]
    fn raw_control_and_non_utf8_bytes_pass_through() {
        assert_eq!(owner_bytes(b"{\"owner\":\"a\x01\xff\tb\"}"), Some(b"a\x01\xff\tb".to_vec()));
    }

    #[test]
    fn a_nul_ends_the_input() {
        assert_eq!(owner_bytes(b"{\"owner\":\"a\"}\0garbage"), Some(b"a".to_vec()));
        assert_eq!(decode(b"{\"owner\":\"a\0\"}"), Decoded::NotTable);
        assert_eq!(decode(b"\0{}"), Decoded::NotTable);
        assert_eq!(decode(b"[\0]"), Decoded::NotTable);
    }

    #[test]
    fn numbers_are_what_strtod_takes() {
        for v in ["0x1F", "007", "1.", "-.5", "+5", "inf", "-Infinity", "NaN", "nan(abc)", "1e5", "0x1p-2", "-0"] {
            assert!(is_valid(format!("[{v}]").as_bytes()), "{v}");
        }
        for v in [".5", "1e", "0x", "+", "-", "infinit", "nan(", "Inf1", "--1", "+-1", "1..2", "tru", "nul"] {
            assert!(!is_valid(format!("[{v}]").as_bytes()), "{v}");
        }
    }

    #[test]
    fn literal_words_match_as_prefixes() {
        assert!(!is_valid(b"[truex]"));
        assert!(!is_valid(b"[truefalse]"));
        assert!(is_valid(b"[true,false,null]"));
        assert!(!is_valid(b"[True]"));
    }

    #[test]
    fn nesting_stops_at_a_thousand_containers() {
        let arrays = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(is_valid(arrays(1000).as_bytes()));
        assert!(!is_valid(arrays(1001).as_bytes()));
        let objects = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
        assert!(is_valid(objects(1000).as_bytes()));
        assert!(!is_valid(objects(1001).as_bytes()));
        let mixed = |n: usize| format!("{{\"a\":{}{}}}", "[".repeat(n), "]".repeat(n));
        assert!(is_valid(mixed(999).as_bytes()));
        assert!(!is_valid(mixed(1000).as_bytes()));
        // Sequential containers do not add up; only open ones count.
        assert!(is_valid(format!("[{}]", vec![arrays(999); 3].join(",")).as_bytes()));
    }

    #[test]
    fn whitespace_is_exactly_four_bytes() {
        assert!(is_valid(b" \t\r\n{ \"owner\" : \"a\" } \n"));
        assert!(!is_valid(b"\x0b{}"));
        assert!(!is_valid(b"{}\x0c"));
    }
}
