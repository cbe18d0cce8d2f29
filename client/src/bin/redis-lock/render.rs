//! `list`'s output: an aligned table, or one JSON array.

use std::fmt::Write;

use crate::scan::{Row, State};

const HEADER: [&str; 8] = ["SERVER", "KEY", "OWNER", "RUN-ID", "FORMAT", "TTL-MS", "FENCE", "WAITERS"];

/// Columns padded to their widest cell; `-` for a field with no value.
/// Control characters in keys and tokens are escaped so that each row
/// stays one line.
pub fn table(rows: &[Row]) -> String {
    let cells: Vec<[String; 8]> = rows.iter().map(cells).collect();
    let mut widths = HEADER.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(HEADER.map(String::from)).chain(cells) {
        let mut line = String::new();
        for (c, w) in row.iter().zip(widths) {
            let _ = write!(line, "{c:<w$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn cells(r: &Row) -> [String; 8] {
    let text = |b: &Option<Vec<u8>>| b.as_deref().map_or_else(|| "-".to_string(), printable);
    let (server, key) = (r.server.clone(), printable(&r.key));
    match &r.state {
        State::Lock { owner, run_id, format, ttl_ms, fence, waiters } => [
            server,
            key,
            text(owner),
            text(run_id),
            format.to_string(),
            ttl_ms.to_string(),
            fence.map_or("-".into(), |f| f.to_string()),
            waiters.to_string(),
        ],
        State::Other => [server, key, "-".into(), "-".into(), "other".into(), "-".into(), "-".into(), "-".into()],
    }
}

/// UTF-8 with U+FFFD for other bytes, control characters as escapes.
fn printable(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect()
}

/// One array of objects, in `rows`' order; absent values are `null`, and
/// a key of another type has format `"other"` and nulls elsewhere.
pub fn json(rows: &[Row]) -> String {
    let mut out = String::from("[");
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let text = |b: &Option<Vec<u8>>| b.as_deref().map_or_else(|| "null".to_string(), json_string);
        let _ = write!(out, "\n  {{\"server\":{},\"key\":{},", json_string(r.server.as_bytes()), json_string(&r.key));
        let _ = match &r.state {
            State::Lock { owner, run_id, format, ttl_ms, fence, waiters } => write!(
                out,
                "\"owner\":{},\"run_id\":{},\"format\":\"{format}\",\"ttl_ms\":{ttl_ms},\"fence\":{},\"waiters\":{waiters}}}",
                text(owner),
                text(run_id),
                fence.map_or("null".into(), |f| f.to_string()),
            ),
            State::Other => write!(out, "\"owner\":null,\"run_id\":null,\"format\":\"other\",\"ttl_ms\":null,\"fence\":null,\"waiters\":null}}"),
        };
    }
    out.push_str(if rows.is_empty() { "]\n" } else { "\n]\n" });
    out
}

/// A JSON string literal: `"` and `\` escaped, control characters as
/// `\uXXXX` (or their short forms), bytes that are not UTF-8 as U+FFFD.
fn json_string(b: &[u8]) -> String {
    let mut out = String::from("\"");
    for c in String::from_utf8_lossy(b).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(key: &[u8], owner: &[u8]) -> Row {
        Row {
            server: "h:1".into(),
            key: key.to_vec(),
            state: State::Lock {
                owner: Some(owner.to_vec()),
                run_id: None,
                format: "legacy",
                ttl_ms: -1,
                fence: Some(3),
                waiters: 2,
            },
        }
    }

    #[test]
    fn json_escapes_and_nulls() {
        assert_eq!(json_string(b"a\"b\\c\nd\x01\xff\xe2\x82\xac"), "\"a\\\"b\\\\c\\nd\\u0001\u{fffd}\u{20ac}\"");
        assert_eq!(json(&[]), "[]\n");
        let rows = [lock(b"k", b"t"), Row { server: "h:1".into(), key: b"h".to_vec(), state: State::Other }];
        assert_eq!(
            json(&rows),
            "[\n  {\"server\":\"h:1\",\"key\":\"k\",\"owner\":\"t\",\"run_id\":null,\"format\":\"legacy\",\"ttl_ms\":-1,\"fence\":3,\"waiters\":2},\n  \
             {\"server\":\"h:1\",\"key\":\"h\",\"owner\":null,\"run_id\":null,\"format\":\"other\",\"ttl_ms\":null,\"fence\":null,\"waiters\":null}\n]\n"
        );
    }

    #[test]
    fn table_aligns_and_keeps_rows_on_one_line() {
        let t = table(&[lock(b"a-long-key", b"x\ny"), lock(b"k", b"tok")]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert_eq!(lines[0], "SERVER  KEY         OWNER  RUN-ID  FORMAT  TTL-MS  FENCE  WAITERS");
        assert_eq!(lines[1], "h:1     a-long-key  x\\ny   -       legacy  -1      3      2");
        assert_eq!(lines[2], "h:1     k           tok    -       legacy  -1      3      2");
    }
}
