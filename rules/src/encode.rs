//! The structured lock value, byte-for-byte as Go's `encoding/json` writes
//! `lockValue{Owner, RunID}` (seed 000), so a Go service reading a value the
//! module wrote sees exactly what it would have written itself.

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `{"owner":"<token>","runId":"<run-id>"}` as `json.Marshal` renders it.
pub fn structured_value(token: &str, run_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(token.len() + run_id.len() + 24);
    out.extend_from_slice(br#"{"owner":""#);
    push_go_string(&mut out, token);
    out.extend_from_slice(br#"","runId":""#);
    push_go_string(&mut out, run_id);
    out.extend_from_slice(br#""}"#);
    out
}

/// The inside of a Go JSON string: `json.Marshal` escapes HTML (`<`, `>`,
/// `&` as `\u003c`...), U+2028 and U+2029, uses the short escapes for
/// `\b \f \n \r \t` (Go 1.22 and later) and `\u00XX` for the other control
/// bytes, and leaves DEL and everything else as is. Input is `str`, so the
/// invalid-UTF-8 replacement Go would make cannot arise.
pub(crate) fn push_go_string(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    if plain(b) {
        out.extend_from_slice(b);
        return;
    }
    // Copy maximal runs that need no escape in one go: tokens and run ids
    // are nearly always plain, and a per-char push costs ~20x more.
    let mut run = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let escape: Option<&[u8]> = match c {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x00..=0x1f | b'<' | b'>' | b'&' => None,
            // U+2028 and U+2029 are E2 80 A8 and E2 80 A9 in UTF-8.
            0xe2 if b.get(i + 1) == Some(&0x80) && matches!(b.get(i + 2), Some(0xa8 | 0xa9)) => {
                Some(if b[i + 2] == 0xa8 { b"\\u2028" } else { b"\\u2029" })
            }
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&b[run..i]);
        match escape {
            Some(e) => out.extend_from_slice(e),
            None => {
                out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(c >> 4)], HEX[usize::from(c & 0xf)]])
            }
        }
        i += if c == 0xe2 { 3 } else { 1 };
        run = i;
    }
    out.extend_from_slice(&b[run..]);
}

/// Whether Go writes `b` unchanged: no byte it escapes and no 0xE2 that
/// could start U+2028/U+2029. Without an early exit the compiler tests 16
/// bytes per step, several times faster than the escaping loop on the
/// tokens and run ids seen in practice.
fn plain(b: &[u8]) -> bool {
    b.iter().fold(true, |ok, &c| {
        ok & (c >= 0x20 && c != b'"' && c != b'\\' && c != b'<' && c != b'>' && c != b'&' && c != 0xe2)
    })
}

/// "00" to "99": two digits per division, on every replicated write.
const PAIRS: &[u8; 200] =
    b"0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849\
5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

/// `n` in decimal, as Redis's `ll2string` writes it, in the tail of `buf`
/// (20 bytes hold every i64, `i64::MIN` included).
pub fn decimal(n: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut v = n.unsigned_abs();
    let mut i = buf.len();
    while v >= 10 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    // A last single digit (the loop leaves no leading zero: it stops
    // before a pair of 00..09), or the 0 of n = 0.
    if v > 0 || i == buf.len() {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    if n < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cjson::{decode, Decoded, Field};

    #[test]
    fn decimal_matches_display() {
        for n in [
            0,
            7,
            -7,
            9,
            10,
            99,
            100,
            101,
            -100,
            1_000,
            1_764_000_000_000,
            1_764_000_000_001,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ]
        .into_iter()
        .chain((-1100..1100).map(|n| n * 7))
        {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string().as_bytes());
        }
    }

    #[test]
    fn matches_go_json_marshal() {
        // Expected outputs written by Go's json.Marshal(lockValue{...}).
        assert_eq!(structured_value("tok", "run-1"), br#"{"owner":"tok","runId":"run-1"}"#);
        assert_eq!(structured_value("a<b>&c", "\"\\/"), br#"{"owner":"a\u003cb\u003e\u0026c","runId":"\"\\/"}"#);
        assert_eq!(
            structured_value("\u{0}\u{1f}\u{7f}", "\u{8}\u{c}\n\r\t"),
            b"{\"owner\":\"\\u0000\\u001f\x7f\",\"runId\":\"\\b\\f\\n\\r\\t\"}"
        );
        assert_eq!(
            structured_value("\u{2028}\u{2029}é😀", "r"),
            "{\"owner\":\"\\u2028\\u2029é😀\",\"runId\":\"r\"}".as_bytes()
        );
    }

    /// The rule one char at a time, as Go's encoder states it.
    fn go_string_by_char(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for c in s.chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\u{8}' => out.extend_from_slice(b"\\b"),
                '\u{c}' => out.extend_from_slice(b"\\f"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                '\u{0}'..='\u{1f}' | '<' | '>' | '&' => {
                    out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
                }
                '\u{2028}' => out.extend_from_slice(b"\\u2028"),
                '\u{2029}' => out.extend_from_slice(b"\\u2029"),
                _ => out.extend_from_slice(c.to_string().as_bytes()),
            }
        }
        out
    }

    #[test]
    fn byte_runs_escape_exactly_as_char_by_char() {
        // Every char class the encoder distinguishes, plus neighbours of the
        // U+2028/9 byte patterns (U+2027, U+202A, U+20AC share a prefix).
        let alphabet = [
            'a', 'Z', '0', '"', '\\', '\u{0}', '\u{8}', '\u{c}', '\n', '\r', '\t', '\u{1f}', '\u{7f}', '<', '>', '&',
            '/', 'é', '\u{2027}', '\u{2028}', '\u{2029}', '\u{202a}', '€', '😀',
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            let mut s = String::new();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut x = seed;
            for _ in 0..(x % 9) {
                x /= 9;
                s.push(alphabet[(x % alphabet.len() as u64) as usize]);
                x = x.rotate_left(17) ^ seed;
            }
            let mut out = Vec::new();
            push_go_string(&mut out, &s);
            assert_eq!(out, go_string_by_char(&s), "{s:?}");
        }
    }

    #[test]
    fn cjson_reads_back_what_we_write() {
        let token = "t\u{0}<\u{2028}\"\\😀\u{7f}";
        let run = "r\n&";
        let v = structured_value(token, run);
        let Decoded::Table { owner: Field::Str(o), run_id: Field::Str(r) } = decode(&v) else { panic!() };
        assert!(o.decodes_to(token.as_bytes()));
        assert!(r.decodes_to(run.as_bytes()));
    }
}
