//! Random stored values and operations, biased towards what cjson does
//! differently from a strict JSON parser.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

/// Number forms strtod and cjson accept, and near misses they reject.
pub const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "12.5",
    "1e3",
    "1E+3",
    "1e-3",
    "007",
    "-007",
    "1.",
    "-.5",
    ".5",
    "+5",
    "+-5",
    "--5",
    "0x1F",
    "-0x1f",
    "0X1p4",
    "0x.8",
    "0x",
    "0x.",
    "0xg",
    "1e",
    "1e+",
    "1.e5",
    "inf",
    "-inf",
    "+inf",
    "Infinity",
    "-INFINITY",
    "infinit",
    "nan",
    "NaN",
    "-nan",
    "nan(123)",
    "nan(abc_1)",
    "nan(",
    "nan()",
    "nan(a-b)",
    "Inf1",
    "1..2",
    "1-",
    "9999999999999999999999",
    "1e400",
    "-1e-400",
    "0.0000001",
    "- 5",
    "0b1",
    "١",
];

const WHITESPACE: &[&str] = &[" ", "\t", "\n", "\r", "  \r\n\t"];
const BAD_WHITESPACE: &[&str] = &["\x0b", "\x0c", "\u{a0}", "\x00"];

pub struct Gen {
    pub rng: StdRng,
}

impl Gen {
    pub fn token(&mut self) -> Vec<u8> {
        let n = self.rng.gen_range(1..=12);
        match self.rng.gen_range(0..10) {
            0 => (0..n).map(|_| self.rng.gen::<u8>()).collect(),
            1 => self.utf8_text(n).into_bytes(),
            _ => (0..n).map(|_| b"0123456789abcdef"[self.rng.gen_range(0..16)]).collect(),
        }
    }

    /// Valid UTF-8 with the characters Go escapes and cjson decodes.
    pub fn utf8_text(&mut self, n: usize) -> String {
        const CHARS: &[char] = &[
            'a',
            'b',
            'Z',
            '0',
            '9',
            '-',
            '_',
            '"',
            '\\',
            '/',
            '<',
            '>',
            '&',
            '\n',
            '\t',
            '\r',
            '\u{8}',
            '\u{c}',
            '\u{0}',
            '\u{1}',
            '\u{1f}',
            '\u{7f}',
            'é',
            'ß',
            '€',
            '\u{2028}',
            '\u{2029}',
            '😀',
            '\u{ffff}',
            '\u{10ffff}',
            ' ',
            '{',
            '}',
            ':',
            ',',
        ];
        (0..n).map(|_| *CHARS.choose(&mut self.rng).unwrap_or(&'a')).collect()
    }

    fn ws(&mut self) -> &'static str {
        match self.rng.gen_range(0..20) {
            0..=11 => "",
            12..=18 => WHITESPACE.choose(&mut self.rng).copied().unwrap_or(" "),
            _ => BAD_WHITESPACE.choose(&mut self.rng).copied().unwrap_or(" "),
        }
    }

    /// A JSON string literal for `bytes`, escaped in one of the many ways
    /// cjson decodes to the same bytes, now and then with an escape it rejects.
    pub fn json_string(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![b'"'];
        let text = String::from_utf8_lossy(bytes);
        let utf8 = std::str::from_utf8(bytes).is_ok();
        if utf8 && self.rng.gen_bool(0.5) {
            for c in text.chars() {
                self.push_char(&mut out, c);
            }
        } else {
            for &b in bytes {
                match b {
                    b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
                    0 => out.extend_from_slice(b"\\u0000"),
                    _ if self.rng.gen_bool(0.1) && b < 0x80 => {
                        out.extend_from_slice(format!("\\u{:04x}", b).as_bytes())
                    }
                    _ => out.push(b),
                }
            }
        }
        if self.rng.gen_bool(0.03) {
            let bad: &[&str] = &[
                "\\x",
                "\\u12",
                "\\ud800",
                "\\udc00",
                "\\ud800\\u0041",
                "\\ud800x",
                "\\U0041",
                "\\'",
                "\\",
                "\\u00g0",
            ];
            let pos = self.rng.gen_range(1..=out.len());
            let b = bad.choose(&mut self.rng).copied().unwrap_or("\\x");
            out.splice(pos..pos, b.bytes());
        }
        out.push(b'"');
        out
    }

    fn push_char(&mut self, out: &mut Vec<u8>, c: char) {
        let escape = self.rng.gen_bool(0.3);
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '/' if escape => out.extend_from_slice(b"\\/"),
            '\n' if escape => out.extend_from_slice(b"\\n"),
            '\t' if escape => out.extend_from_slice(b"\\t"),
            '\r' if escape => out.extend_from_slice(b"\\r"),
            '\u{8}' if escape => out.extend_from_slice(b"\\b"),
            '\u{c}' if escape => out.extend_from_slice(b"\\f"),
            '\u{0}' => out.extend_from_slice(b"\\u0000"),
            _ if escape => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let s = if self.rng.gen_bool(0.5) { format!("\\u{:04x}", u) } else { format!("\\u{:04X}", u) };
                    out.extend_from_slice(s.as_bytes());
                }
            }
            _ => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }

    fn scalar(&mut self, depth: usize) -> Vec<u8> {
        match self.rng.gen_range(0..12) {
            0..=3 => {
                let t = self.token();
                self.json_string(&t)
            }
            4..=6 => NUMBERS.choose(&mut self.rng).copied().unwrap_or("1").as_bytes().to_vec(),
            7 => b"true".to_vec(),
            8 => b"false".to_vec(),
            9 => b"null".to_vec(),
            10 if depth < 4 => self.array(depth + 1, None),
            _ if depth < 4 => self.object(depth + 1, None, None),
            _ => b"[]".to_vec(),
        }
    }

    fn key(&mut self) -> Vec<u8> {
        let keys: &[&[u8]] = &[
            b"\"owner\"",
            b"\"runId\"",
            b"\"\\u006fwner\"",
            b"\"own\\u0065r\"",
            b"\"run\\u0049d\"",
            b"\"Owner\"",
            b"\"runid\"",
            b"\"owner\\u0000\"",
            b"\"x\"",
            b"\"\"",
            b"\"ow\\/ner\"",
        ];
        keys.choose(&mut self.rng).copied().unwrap_or(b"\"x\"").to_vec()
    }

    /// An object, usually with `owner`/`runId` set to the given values.
    pub fn object(&mut self, depth: usize, owner: Option<&[u8]>, run: Option<&[u8]>) -> Vec<u8> {
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        if let Some(o) = owner {
            if self.rng.gen_bool(0.9) {
                let v = if self.rng.gen_bool(0.85) { self.json_string(o) } else { self.scalar(depth) };
                fields.push((b"\"owner\"".to_vec(), v));
            }
        }
        if let Some(r) = run {
            if self.rng.gen_bool(0.85) {
                let v = if self.rng.gen_bool(0.85) { self.json_string(r) } else { self.scalar(depth) };
                fields.push((b"\"runId\"".to_vec(), v));
            }
        }
        for _ in 0..self.rng.gen_range(0..3) {
            let (k, v) = (self.key(), self.scalar(depth));
            let at = self.rng.gen_range(0..=fields.len());
            fields.insert(at, (k, v));
        }
        if !fields.is_empty() && self.rng.gen_bool(0.1) {
            // A duplicate key: the last one wins in cjson.
            let i = self.rng.gen_range(0..fields.len());
            let dup = (fields[i].0.clone(), self.scalar(depth));
            fields.push(dup);
        }
        let mut out = Vec::new();
        out.extend_from_slice(self.ws().as_bytes());
        out.push(b'{');
        for (i, (k, v)) in fields.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(self.ws().as_bytes());
                out.push(b',');
            }
            out.extend_from_slice(self.ws().as_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(self.ws().as_bytes());
            out.push(b':');
            out.extend_from_slice(self.ws().as_bytes());
            out.extend_from_slice(v);
        }
        if self.rng.gen_bool(0.03) {
            out.push(b',');
        }
        out.extend_from_slice(self.ws().as_bytes());
        out.push(b'}');
        out.extend_from_slice(self.ws().as_bytes());
        out
    }

    fn array(&mut self, depth: usize, first: Option<&[u8]>) -> Vec<u8> {
        let mut out = vec![b'['];
        let mut items: Vec<Vec<u8>> = (0..self.rng.gen_range(0..3)).map(|_| self.scalar(depth)).collect();
        if let Some(f) = first {
            let s = self.json_string(f);
            items.insert(0, s);
        }
        for (i, it) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(self.ws().as_bytes());
            out.extend_from_slice(it);
        }
        out.push(b']');
        out
    }

    fn mutate(&mut self, mut v: Vec<u8>) -> Vec<u8> {
        for _ in 0..self.rng.gen_range(1..=3) {
            let alphabet = b"{}[]\":,\\ux0e+-.nN\0\x01\xff \t";
            let b = alphabet[self.rng.gen_range(0..alphabet.len())];
            match self.rng.gen_range(0..3) {
                0 if !v.is_empty() => {
                    let i = self.rng.gen_range(0..v.len());
                    v.remove(i);
                }
                1 if !v.is_empty() => {
                    let i = self.rng.gen_range(0..v.len());
                    v[i] = b;
                }
                _ => {
                    let i = self.rng.gen_range(0..=v.len());
                    v.insert(i, b);
                }
            }
        }
        v
    }

    /// A stored value; `owner` and `run` are what a structured value names.
    pub fn value(&mut self, owner: &[u8], run: &[u8]) -> Vec<u8> {
        match self.rng.gen_range(0..100) {
            0..=14 => owner.to_vec(),
            15..=19 => (0..self.rng.gen_range(0..16)).map(|_| self.rng.gen::<u8>()).collect(),
            20..=24 => self.scalar(0),
            25..=64 => self.object(0, Some(owner), Some(run)),
            65..=69 => redis_lock_rules::encode::structured_value(
                &String::from_utf8_lossy(owner),
                &String::from_utf8_lossy(run),
            ),
            70..=77 => self.array(0, Some(owner)),
            78..=93 => {
                let v = self.object(0, Some(owner), Some(run));
                self.mutate(v)
            }
            94..=96 => {
                // A NUL ends cjson's input: what follows it is never read.
                let mut v = self.object(0, Some(owner), Some(run));
                v.push(0);
                let tail = self.token();
                v.extend_from_slice(&tail);
                v
            }
            _ => self.nested(owner),
        }
    }

    /// Deep nesting around cjson's limit of 1000 open containers (the
    /// enclosing object is one of them).
    fn nested(&mut self, owner: &[u8]) -> Vec<u8> {
        let arrays = *[1usize, 100, 998, 999, 1000].choose(&mut self.rng).unwrap_or(&1);
        let objects = *[0usize, 1, 998, 999, 1000].choose(&mut self.rng).unwrap_or(&0);
        let mut v = br#"{"owner":"#.to_vec();
        v.extend(self.json_string(owner));
        v.extend_from_slice(br#","deep":"#);
        if self.rng.gen_bool(0.5) {
            v.extend(std::iter::repeat_n(b'[', arrays));
            v.extend(std::iter::repeat_n(b']', arrays));
        } else {
            for _ in 0..objects {
                v.extend_from_slice(br#"{"a":"#);
            }
            v.push(b'1');
            v.extend(std::iter::repeat_n(b'}', objects));
        }
        v.push(b'}');
        v
    }
}
