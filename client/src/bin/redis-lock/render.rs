//! `list`'s output: an aligned table, or one JSON array.

use std::borrow::Cow;
use std::fmt::Write;

use serde::Serialize;

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
pub fn printable(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect()
}

/// One array of objects, in `rows`' order, one object a line (a reader
/// can `grep` or diff it as it can the table); absent values are `null`,
/// and a key of another type has format `"other"` and nulls elsewhere.
pub fn json(rows: &[Row]) -> String {
    let objects: Vec<String> = rows.iter().map(|r| to_json(&JsonRow::of(r))).collect();
    if objects.is_empty() {
        return "[]\n".into();
    }
    format!("[\n  {}\n]\n", objects.join(",\n  "))
}

/// A row as `list --json` names its fields, in this order.
#[derive(Serialize)]
struct JsonRow<'a> {
    server: &'a str,
    key: Cow<'a, str>,
    owner: Option<Cow<'a, str>>,
    run_id: Option<Cow<'a, str>>,
    format: &'static str,
    ttl_ms: Option<i64>,
    fence: Option<u64>,
    waiters: Option<u64>,
}

impl<'a> JsonRow<'a> {
    fn of(r: &'a Row) -> Self {
        let text = |b: &'a Option<Vec<u8>>| b.as_deref().map(String::from_utf8_lossy);
        let (server, key) = (r.server.as_str(), String::from_utf8_lossy(&r.key));
        match &r.state {
            State::Lock { owner, run_id, format, ttl_ms, fence, waiters } => JsonRow {
                server,
                key,
                owner: text(owner),
                run_id: text(run_id),
                format,
                ttl_ms: Some(*ttl_ms),
                fence: *fence,
                waiters: Some(*waiters),
            },
            State::Other => JsonRow {
                server,
                key,
                owner: None,
                run_id: None,
                format: "other",
                ttl_ms: None,
                fence: None,
                waiters: None,
            },
        }
    }
}

/// Serialising a struct of strings and numbers into a `String` cannot fail.
fn to_json(v: &impl Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// A JSON string literal of bytes, those that are not UTF-8 as U+FFFD:
/// how every text field is written (the escaping the tests pin).
#[cfg(test)]
fn json_string(b: &[u8]) -> String {
    to_json(&String::from_utf8_lossy(b))
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
