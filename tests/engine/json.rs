//! Lossless JSON: JavaScript parsing rules, key order, number printing and escaping, limits,
//! raw member access, and a byte-exact round trip of every line dsh wrote in the fixtures.

use std::path::PathBuf;

use proptest::prelude::*;
use sessionlog::json::{
    JsString, JsonError, JsonLimits, JsonObject, JsonValue, js_number_to_string, parse, raw_member,
    raw_members, stringify, validate, write_js_string,
};

fn lim() -> JsonLimits {
    JsonLimits::default()
}

fn round(text: &str) -> String {
    stringify(&parse(text, &lim()).unwrap())
}

#[test]
fn negative_zero_forms_are_refused() {
    for text in [
        "-0",
        "-0.0",
        "-0e5",
        "-0E-3",
        "-0.000e+10",
        "-1e-400",
        "[1,-0]",
        r#"{"a":-0.0}"#,
    ] {
        let err = validate(text, &lim()).unwrap_err();
        assert!(
            matches!(err, JsonError::NegativeZero { .. }),
            "{text}: {err}"
        );
        assert!(
            matches!(parse(text, &lim()), Err(JsonError::NegativeZero { .. })),
            "{text}"
        );
    }
    // Positive zero and tiny positive numbers are fine (JS reads 0).
    for text in ["0", "0.0", "0e5", "1e-400", "-1e-300"] {
        validate(text, &lim()).unwrap();
    }
    assert_eq!(round("1e-400"), "0");
    // What dsh's loaders accept: -0 read as 0.
    use sessionlog::json::{NegativeZero, parse_with, validate_with};
    validate_with("[-0,-0.0e3]", &lim(), NegativeZero::Accept).unwrap();
    let v = parse_with(r#"{"a":-0}"#, &lim(), NegativeZero::Accept).unwrap();
    assert_eq!(v.get("a").unwrap().as_u64(), Some(0));
    assert_eq!(v.get("a").unwrap().as_number().unwrap().text(), "-0");
    assert_eq!(stringify(&v), r#"{"a":0}"#);
}

#[test]
fn non_finite_numbers_are_refused() {
    for text in ["1e400", "-1e400", "[1.7976931348623159e308]"] {
        let err = validate(text, &lim()).unwrap_err();
        assert!(matches!(err, JsonError::NonFinite { .. }), "{text}: {err}");
    }
    // The largest finite double is fine.
    assert_eq!(round("1.7976931348623157e308"), "1.7976931348623157e+308");
}

#[test]
fn syntax_errors_name_the_offset() {
    let cases: &[(&str, usize)] = &[
        ("[1,]", 3),
        ("{\"a\":1,}", 7),
        ("{'a':1}", 1),
        ("01", 1),
        ("1.", 2),
        ("+1", 0),
        ("[1 2]", 3),
        ("nul", 3),
        ("\u{feff}1", 0),
        ("{\"a\" 1}", 5),
    ];
    for &(text, offset) in cases {
        let err = validate(text, &lim()).unwrap_err();
        let got = match err {
            JsonError::Syntax { offset, .. }
            | JsonError::UnexpectedEnd { offset, .. }
            | JsonError::TrailingCharacters { offset } => offset,
            other => panic!("{text}: unexpected {other}"),
        };
        assert_eq!(got, offset, "{text}");
    }
    assert!(matches!(
        validate("1 2", &lim()),
        Err(JsonError::TrailingCharacters { offset: 2 })
    ));
    assert!(matches!(
        validate("", &lim()),
        Err(JsonError::UnexpectedEnd { .. })
    ));
    assert!(matches!(
        validate("  \n", &lim()),
        Err(JsonError::UnexpectedEnd { .. })
    ));
    assert!(matches!(
        validate("\"a\u{1}b\"", &lim()),
        Err(JsonError::ControlCharacter { offset: 2, code: 1 })
    ));
    assert!(matches!(
        validate(r#""\x""#, &lim()),
        Err(JsonError::InvalidEscape { offset: 1 })
    ));
    assert!(matches!(
        validate(r#""\u12g4""#, &lim()),
        Err(JsonError::InvalidEscape { offset: 1 })
    ));
    assert!(matches!(
        validate(r#""abc"#, &lim()),
        Err(JsonError::UnexpectedEnd { .. })
    ));
    assert!(matches!(
        sessionlog::json::validate_bytes(b"\"\xff\"", &lim()),
        Err(JsonError::InvalidUtf8 { offset: 1 })
    ));
    // Whitespace JSON.parse allows around values.
    validate(" \t\r\n{ \"a\" : [ 1 , 2 ] } \n", &lim()).unwrap();
}

#[test]
fn lone_surrogates_are_accepted_and_round_trip() {
    for text in [
        r#""\ud800""#,
        r#""\udc00""#,
        r#"{"\udfff":"x\ud83dy"}"#,
        r#"["\ude00\ud83d"]"#,
        r#""\ud800\ud800""#,
    ] {
        validate(text, &lim()).unwrap();
        assert_eq!(round(text), text);
    }
    let v = parse(r#""\ud800""#, &lim()).unwrap();
    assert_eq!(v.as_str(), None);
    assert_eq!(v.as_js_string().unwrap().to_utf16(), [0xD800]);
    // Uppercase escapes print lowercase; a valid pair becomes the raw character.
    assert_eq!(round(r#""\uD800""#), r#""\ud800""#);
    assert_eq!(round(r#""\ud83d\ude00""#), "\"😀\"");
    assert_eq!(
        parse(r#""\ud83d\ude00""#, &lim()).unwrap().as_str(),
        Some("😀")
    );
}

#[test]
fn key_order_follows_javascript() {
    assert_eq!(
        round(r#"{"b":1,"10":2,"a":3,"2":4,"-1":5,"01":6}"#),
        r#"{"2":4,"10":2,"b":1,"a":3,"-1":5,"01":6}"#
    );
    assert_eq!(
        round(r#"{"4294967295":1,"4294967294":2,"0":3,"1.5":4}"#),
        r#"{"0":3,"4294967294":2,"4294967295":1,"1.5":4}"#
    );
}

#[test]
fn duplicate_keys_keep_first_position_and_last_value() {
    let text = r#"{"a":1,"b":2,"a":{"x":[1]},"c":3,"b":4}"#;
    validate(text, &lim()).unwrap();
    assert_eq!(round(text), r#"{"a":{"x":[1]},"b":4,"c":3}"#);
    // Many keys (the hashed path).
    let mut s = String::from("{");
    for i in 0..40 {
        s.push_str(&format!("\"k{}\":{},", i % 20, i));
    }
    s.push_str("\"z\":0}");
    let v = parse(&s, &lim()).unwrap();
    let o = v.as_object().unwrap();
    assert_eq!(o.len(), 21);
    assert_eq!(o.entries()[0].0, "k0");
    assert_eq!(v.get("k0").unwrap().as_u64(), Some(20));
    assert_eq!(v.get("k19").unwrap().as_u64(), Some(39));
}

#[test]
fn numbers_print_as_ecmascript() {
    let vectors: &[(&str, &str)] = &[
        ("1e21", "1e+21"),
        ("1.0", "1"),
        ("1e300", "1e+300"),
        ("0.000001", "0.000001"),
        ("1e-7", "1e-7"),
        ("1.5e-7", "1.5e-7"),
        ("1e20", "100000000000000000000"),
        ("123456789012345678901234567890", "1.2345678901234568e+29"),
        ("0.1", "0.1"),
        ("-5", "-5"),
        ("2.50", "2.5"),
        ("9007199254740993", "9007199254740992"),
        ("5e-324", "5e-324"),
        ("1E+2", "100"),
        ("0.0000001", "1e-7"),
        ("-1.5e-9", "-1.5e-9"),
        ("123e-20", "1.23e-18"),
    ];
    for &(text, js) in vectors {
        assert_eq!(round(text), js, "{text}");
        let n: f64 = text.parse().unwrap();
        assert_eq!(js_number_to_string(n), js, "{text}");
    }
    // The parsed number keeps its original text and the value JavaScript reads.
    let v = parse("2.50", &lim()).unwrap();
    assert_eq!(v.as_number().unwrap().text(), "2.50");
    assert_eq!(v.as_f64(), Some(2.5));
    assert_eq!(parse("1.0", &lim()).unwrap(), parse("1", &lim()).unwrap());
    assert_eq!(js_number_to_string(-0.0), "0");
    assert!(JsonValue::number(-0.0).is_none());
    assert!(JsonValue::number(f64::NAN).is_none());
}

#[test]
fn strings_escape_as_json_stringify() {
    let mut out = String::new();
    write_js_string(
        &mut out,
        "q\"b\\\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}/\u{2028}\u{2029}é😀",
    );
    assert_eq!(
        out,
        "\"q\\\"b\\\\\\b\\f\\n\\r\\t\\u0000\\u001f\u{7f}/\u{2028}\u{2029}é😀\""
    );
    // Escapes JSON.stringify does not use are normalised away.
    assert_eq!(round(r#""\/\u0041\u00e9\u001F""#), "\"/Aé\\u001f\"");
}

#[test]
fn accessors() {
    let v = parse(
        r#"{"n":3,"neg":-4,"big":9007199254740992,"f":1.5,"s":"x","b":true,"z":null,"a":[1,"2"],"o":{"k":"v"}}"#,
        &lim(),
    )
    .unwrap();
    assert_eq!(v.get("n").unwrap().as_u64(), Some(3));
    assert_eq!(v.get("neg").unwrap().as_i64(), Some(-4));
    assert_eq!(v.get("neg").unwrap().as_u64(), None);
    assert_eq!(
        v.get("big").unwrap().as_i64(),
        None,
        "2^53 is not a safe integer"
    );
    assert_eq!(v.get("f").unwrap().as_i64(), None);
    assert_eq!(v.get("f").unwrap().as_f64(), Some(1.5));
    assert_eq!(v.get("s").unwrap().as_str(), Some("x"));
    assert_eq!(v.get("b").unwrap().as_bool(), Some(true));
    assert!(v.get("z").unwrap().is_null());
    assert_eq!(v.get("a").unwrap().as_array().unwrap().len(), 2);
    assert_eq!(v.pointer(&["o", "k"]).unwrap().as_str(), Some("v"));
    assert!(v.get("missing").is_none());
    assert!(v.get("a").unwrap().get("0").is_none());
}

#[test]
fn depth_limit_is_enforced() {
    let small = JsonLimits {
        max_depth: 3,
        max_bytes: 1 << 20,
    };
    validate("[[[1]]]", &small).unwrap();
    assert!(matches!(
        validate("[[[[1]]]]", &small),
        Err(JsonError::TooDeep {
            offset: 3,
            max_depth: 3
        })
    ));
    assert!(matches!(
        parse(r#"{"a":{"b":{"c":{}}}}"#, &small),
        Err(JsonError::TooDeep { max_depth: 3, .. })
    ));
    let deep = "[".repeat(10_001) + &"]".repeat(10_001);
    assert!(matches!(
        validate(&deep, &lim()),
        Err(JsonError::TooDeep { .. })
    ));
}

#[test]
fn size_limit_is_enforced() {
    let tiny = JsonLimits {
        max_depth: 10,
        max_bytes: 4,
    };
    validate("1234", &tiny).unwrap();
    assert!(matches!(
        validate("12345", &tiny),
        Err(JsonError::TooLarge {
            len: 5,
            max_bytes: 4
        })
    ));
}

#[test]
fn very_deep_nesting_does_not_overflow_the_stack() {
    let raised = JsonLimits {
        max_depth: 1_000_000,
        max_bytes: 64 << 20,
    };
    let n = 20_000;
    let arrays = "[".repeat(n) + "1" + &"]".repeat(n);
    let mut objects = String::new();
    for _ in 0..n {
        objects.push_str("{\"a\":");
    }
    objects.push_str("null");
    objects.push_str(&"}".repeat(n));
    // Run on a small stack so any recursion would fail loudly.
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            for text in [arrays, objects] {
                validate(&text, &raised).unwrap();
                let v = parse(&text, &raised).unwrap();
                assert_eq!(stringify(&v), text);
                let c = v.clone();
                assert_eq!(c, v);
                drop(c);
                drop(v);
            }
            let deep = "[".repeat(300_000) + &"]".repeat(300_000);
            let v = parse(&deep, &raised).unwrap();
            drop(v);
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn raw_members_give_exact_source_text() {
    let text = r#" {"type":"x" , "data":{ "b":1.50, "a" : [ 1 ] },"d\u0061ta2":"\ud800","data":{"last":-1e3}} "#;
    let m = raw_members(text).unwrap();
    let keys: Vec<_> = m.iter().map(|m| m.key.to_string()).collect();
    assert_eq!(keys, ["type", "data", "data2", "data"]);
    assert_eq!(m[1].value, r#"{ "b":1.50, "a" : [ 1 ] }"#);
    assert_eq!(&text[m[1].span.clone()], m[1].value);
    assert_eq!(m[2].raw_key, r"d\u0061ta2");
    assert_eq!(m[2].value, r#""\ud800""#);
    // The last duplicate wins, as in JSON.parse.
    assert_eq!(
        raw_member(text, &["data"]).unwrap(),
        Some(r#"{"last":-1e3}"#)
    );
    assert_eq!(raw_member(text, &["data", "last"]).unwrap(), Some("-1e3"));
    assert_eq!(raw_member(text, &["data2"]).unwrap(), Some(r#""\ud800""#));
    assert_eq!(raw_member(text, &["type", "x"]).unwrap(), None);
    assert_eq!(
        raw_member(text, &[]).unwrap(),
        Some(&text[1..text.len() - 1])
    );
    assert!(matches!(
        raw_members("[1]"),
        Err(JsonError::NotAnObject { found: "array" })
    ));
    assert!(matches!(
        raw_member("{\"a\":-0}", &["a"]),
        Err(JsonError::NegativeZero { .. })
    ));
    assert_eq!(raw_members("{}").unwrap(), vec![]);
}

#[test]
fn serde_values_stringify_as_javascript() {
    let v: serde_json::Value =
        serde_json::from_str(r#"{"b":1.0,"10":[1e21,0.1],"a":"\u2028"}"#).unwrap();
    // serde_json's map is sorted by key; JavaScript then hoists index keys.
    assert_eq!(
        sessionlog::json::stringify_serde(&v).unwrap(),
        "{\"10\":[1e+21,0.1],\"a\":\"\u{2028}\",\"b\":1}"
    );
    let neg = serde_json::json!({"x": -0.0});
    assert!(matches!(
        sessionlog::json::stringify_serde(&neg),
        Err(JsonError::NotLosslessNumber { .. })
    ));
}

#[test]
fn object_building_api() {
    let mut o = JsonObject::new();
    o.insert("z", JsonValue::from("last"));
    o.insert("1", JsonValue::number(2.0).unwrap());
    o.insert(JsString::from_utf16(&[0xD800]), JsonValue::Null);
    let v = JsonValue::Object(o);
    assert_eq!(stringify(&v), r#"{"1":2,"z":"last","\ud800":null}"#);
}

// ---------------------------------------------------------------------------------------------
// Property: stringify is a fixed point of parse ∘ stringify.

fn arb_string() -> impl Strategy<Value = JsString> {
    prop_oneof![
        "[a-z0-9 \"\\\\/\u{0}-\u{1f}\u{7f}\u{2028}é😀]{0,8}"
            .prop_map(|s| JsString::from(s.as_str())),
        proptest::collection::vec(any::<u16>(), 0..6).prop_map(|u| JsString::from_utf16(&u)),
        (0u32..20).prop_map(|n| JsString::from(n.to_string())),
    ]
}

fn arb_value() -> impl Strategy<Value = JsonValue> {
    let leaf = prop_oneof![
        Just(JsonValue::Null),
        any::<bool>().prop_map(JsonValue::Bool),
        any::<f64>().prop_filter_map("finite, not -0", JsonValue::number),
        (-1000i64..1000).prop_filter_map("not -0", |n| JsonValue::number(n as f64)),
        arb_string().prop_map(JsonValue::String),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(JsonValue::Array),
            proptest::collection::vec((arb_string(), inner), 0..6)
                .prop_map(|e| JsonValue::Object(JsonObject::from_entries(e))),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn stringify_parse_is_a_fixed_point(v in arb_value()) {
        let text = stringify(&v);
        validate(&text, &lim()).unwrap();
        let back = parse(&text, &lim()).unwrap();
        prop_assert_eq!(&back, &v);
        prop_assert_eq!(stringify(&back), text);
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures: dsh wrote every line with JSON.stringify.

fn fixtures() -> Option<PathBuf> {
    crate::common::shared_fixtures::shared_fixtures("dsh-sessions").map(|d| d.join("dsh-sessions"))
}

#[test]
fn every_fixture_line_validates_and_round_trips_byte_for_byte() {
    let Some(dir) = fixtures() else { return };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 100,
        "expected the 120 dsh fixtures, found {}",
        files.len()
    );
    let mut lines = 0;
    let mut datas = 0;
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for (i, line) in text.lines().enumerate() {
            lines += 1;
            let name = path.file_name().unwrap().to_string_lossy();
            if let Err(e) = validate(line, &lim()) {
                failures.push(format!("{name}:{}: {e}", i + 1));
                continue;
            }
            if let Some(data) = raw_member(line, &["data"]).unwrap() {
                datas += 1;
                if let Err(e) = validate(data, &lim()) {
                    failures.push(format!("{name}:{}: data: {e}", i + 1));
                }
            }
            let again = round(line);
            if again != line {
                let at = again
                    .bytes()
                    .zip(line.bytes())
                    .take_while(|(a, b)| a == b)
                    .count();
                failures.push(format!(
                    "{name}:{}: stringify(parse(line)) differs at byte {at}: {:?} vs {:?}",
                    i + 1,
                    &line.get(at.saturating_sub(20)..(at + 20).min(line.len())),
                    &again.get(at.saturating_sub(20)..(at + 20).min(again.len())),
                ));
            }
        }
    }
    // One replay fixture's header was written by hand (Python-style `", "` and `": "`
    // separators), not by JSON.stringify; dsh refuses that file anyway (projected form).
    let hand_written = "examples-headless-agent-tests-subagent-inheritance-snapshots-parent-override-child.replay.jsonl:1: stringify(parse(line)) differs at byte 8";
    let unexpected: Vec<_> = failures
        .iter()
        .filter(|f| !f.starts_with(hand_written))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} failures:\n{}",
        unexpected.len(),
        unexpected
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        failures.len(),
        1,
        "the hand-written header line should be the only exception"
    );
    assert!(
        lines > 3000 && datas > 3000,
        "lines {lines}, data values {datas}"
    );
}
