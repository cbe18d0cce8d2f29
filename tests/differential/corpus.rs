//! Stored values on which a strict JSON parser and Redis's cjson part ways,
//! or that once exposed a disagreement. Each runs through every command.

fn text(values: &[&str]) -> Vec<Vec<u8>> {
    values.iter().map(|v| v.as_bytes().to_vec()).collect()
}

pub fn values() -> Vec<Vec<u8>> {
    let mut v = text(&[
        // Legacy bare tokens and scalars.
        "tok",
        "3f2a9c",
        "\"tok\"",
        "123",
        "-0",
        "true",
        "null",
        "",
        " ",
        "{",
        "}",
        "[",
        "tok{",
        // The lock-delay's tombstone (module-written: nobody owns it), and
        // lease fields in anything but the module's exact encoding, which
        // must stay plain values (an ended hold limit or lease is not
        // settled, a renewal is not capped).
        r#"{"owner":null,"delayedUntil":1}"#,
        r#"{"owner":"tok","lockDelay":5000,"leaseEnd":1} "#,
        r#"{"owner":"tok", "holdUntil":1}"#,
        r#"{"owner":"tok","holdUntil":01}"#,
        r#"{"owner":"tok","holdUntil":1.0}"#,
        r#"{"owner":"t\u006fk","holdUntil":1}"#,
        r#"{"leaseEnd":1,"owner":"tok","lockDelay":5000}"#,
        r#"{"owner":"tok","leaseEnd":1,"lockDelay":5000}"#,
        r#"{"owner":"tok","runId":"run-1","holdUntil":1,"x":1}"#,
        // A session's hold, and one revoked (LOCK.REVOKE): `owner` is null,
        // so the scripts refuse them to every token, and so does the module
        // to every token but the holder's (which no case uses: the module
        // lets its holder renew or release it, by design). Their session is
        // unknown to the server: without an expiry the module gives them an
        // orphan's end (`main.rs` expects it), nothing else.
        r#"{"owner":null,"session":"0123456789abcdef0123456789abcdef","token":"held-tok"}"#,
        r#"{"owner":null,"session":"0123456789abcdef0123456789abcdef","token":"held-tok","revoked":"drain","holdUntil":9999999999999}"#,
        // Structured values as writers produce them.
        r#"{"owner":"tok","runId":"run-1"}"#,
        r#"{"runId":"run-1","owner":"tok"}"#,
        r#"{"owner":"tok"}"#,
        r#"{"runId":"run-1"}"#,
        r#"{}"#,
        r#"[]"#,
        r#"["tok"]"#,
        r#"[{"owner":"tok"}]"#,
        // Owner kinds: false falls back to the raw value, the rest never match.
        r#"{"owner":false,"runId":"run-1"}"#,
        r#"{"owner":true}"#,
        r#"{"owner":null}"#,
        r#"{"owner":0}"#,
        r#"{"owner":{}}"#,
        r#"{"owner":[]}"#,
        r#"{"owner":""}"#,
        // runId kinds.
        r#"{"owner":"tok","runId":null}"#,
        r#"{"owner":"tok","runId":false}"#,
        r#"{"owner":"tok","runId":1}"#,
        r#"{"owner":"tok","runId":""}"#,
        r#"{"owner":"tok","runId":["run-1"]}"#,
        // Duplicate keys: the last wins.
        r#"{"owner":"tok","owner":"other"}"#,
        r#"{"owner":"tok","owner":false}"#,
        r#"{"owner":"tok","owner":null}"#,
        r#"{"runId":"run-1","runId":"x"}"#,
        r#"{"runId":"x","runId":"run-1"}"#,
        // Escapes in keys and values.
        r#"{"\u006fwner":"tok","run\u0049d":"run-1"}"#,
        r#"{"owner":"t\u006fk"}"#,
        r#"{"owner":"t\/k"}"#,
        r#"{"owner":"\ud83d\ude00"}"#,
        r#"{"owner":"\uD83D\uDE00"}"#,
        r#"{"owner":"\ud800"}"#,
        r#"{"owner":"\udc00"}"#,
        r#"{"owner":"\ud800\u0041"}"#,
        r#"{"owner":"\u12"}"#,
        r#"{"owner":"\x"}"#,
        r#"{"owner":"\u0000"}"#,
        r#"{"owner":"a\u2028b"}"#,
        r#"{"owner":"\u003c\u003e\u0026"}"#,
        r#"{"owner":"\b\f\n\r\t\"\\"}"#,
        // Numbers strtod takes and cjson lets through.
        r#"{"owner":"tok","n":0x1F}"#,
        r#"{"owner":"tok","n":007}"#,
        r#"{"owner":"tok","n":1.}"#,
        r#"{"owner":"tok","n":-.5}"#,
        r#"{"owner":"tok","n":+5}"#,
        r#"{"owner":"tok","n":inf}"#,
        r#"{"owner":"tok","n":-Infinity}"#,
        r#"{"owner":"tok","n":NaN}"#,
        r#"{"owner":"tok","n":nan(x1_)}"#,
        r#"{"owner":"tok","n":0x1p-2}"#,
        r#"{"owner":"tok","n":0x.8}"#,
        r#"{"owner":"tok","n":1e400}"#,
        // ...and near misses it refuses.
        r#"{"owner":"tok","n":.5}"#,
        r#"{"owner":"tok","n":1e}"#,
        r#"{"owner":"tok","n":0x}"#,
        r#"{"owner":"tok","n":infinit}"#,
        r#"{"owner":"tok","n":nan(}"#,
        r#"{"owner":"tok","n":+-1}"#,
        r#"{"owner":"tok","n":- 1}"#,
        r#"{"owner":"tok","n":tru}"#,
        r#"{"owner":"tok","n":True}"#,
        r#"{"owner":"tok","n":truex}"#,
        r#"{"owner":"tok","n":nul}"#,
        // Structure errors.
        r#"{"owner":"tok",}"#,
        r#"{"owner":"tok"} x"#,
        r#"{"owner" "tok"}"#,
        r#"{owner:"tok"}"#,
        r#"{"owner":"tok"}}"#,
        r#"[1,]"#,
        r#"[,1]"#,
        r#"{"owner":"tok""#,
        // Whitespace: four bytes count, others do not.
        " \t\r\n{ \"owner\" : \"tok\" } \r\n",
        "\u{b}{\"owner\":\"tok\"}",
        "{\"owner\":\"tok\"}\u{c}",
        "\u{a0}{\"owner\":\"tok\"}",
    ]);
    v.extend([
        // A NUL ends cjson's input; a NUL in the first two bytes fails it.
        b"{\"owner\":\"tok\"}\0trailing garbage".to_vec(),
        b"{\"owner\":\"t\0k\"}".to_vec(),
        b"\0{\"owner\":\"tok\"}".to_vec(),
        b"{\0\"owner\":\"tok\"}".to_vec(),
        b"t\0".to_vec(),
        b"\0".to_vec(),
        // Raw control and non-UTF-8 bytes inside strings pass through.
        b"{\"owner\":\"t\x01\x1f\xff\xfek\"}".to_vec(),
        b"{\"owner\":\"tok\",\"runId\":\"r\xc3\"}".to_vec(),
        b"\xff\xfe".to_vec(),
    ]);
    // Nesting at cjson's limit: 1000 open containers decode, 1001 do not.
    for n in [999usize, 1000, 1001] {
        v.push(format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes());
        v.push(format!("{}1{}", "{\"owner\":".repeat(n), "}".repeat(n)).into_bytes());
        v.push(format!("{{\"owner\":\"tok\",\"d\":{}{}}}", "[".repeat(n - 1), "]".repeat(n - 1)).into_bytes());
    }
    v.push(format!("[{}]", vec![format!("{}{}", "[".repeat(999), "]".repeat(999)); 3].join(",")).into_bytes());
    v
}
