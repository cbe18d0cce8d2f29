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
fn push_go_string(out: &mut Vec<u8>, s: &str) {
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
                let b = c as u8;
                out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
            }
            '\u{2028}' => out.extend_from_slice(b"\\u2028"),
            '\u{2029}' => out.extend_from_slice(b"\\u2029"),
            _ => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cjson::{decode, Decoded, Field};

    #[test]
    fn matches_go_json_marshal() {
        // Expected outputs written by Go's json.Marshal(lockValue{...}).
        assert_eq!(structured_value("tok", "run-1"), br#"{"owner":"tok","runId":"run-1"}"#);
        assert_eq!(structured_value("a<b>&c", "\"\\/"), br#"{"owner":"a\u003cb\u003e\u0026c","runId":"\"\\/"}"#);
        assert_eq!(structured_value("\u{0}\u{1f}\u{7f}", "\u{8}\u{c}\n\r\t"), b"{\"owner\":\"\\u0000\\u001f\x7f\",\"runId\":\"\\b\\f\\n\\r\\t\"}");
        assert_eq!(structured_value("\u{2028}\u{2029}é😀", "r"), "{\"owner\":\"\\u2028\\u2029é😀\",\"runId\":\"r\"}".as_bytes());
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
