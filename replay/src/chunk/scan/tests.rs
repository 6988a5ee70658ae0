use super::*;
use crate::chunk::parse_serde;
use canary_core::Usage;

/// The scanner's answer, checked against serde_json's: `Some` only where serde_json agrees.
fn scanned(data: &str) -> Option<ChunkInfo> {
    let s = scan(data);
    if let Some(info) = &s {
        let r = parse_serde(data).unwrap_or_else(|e| panic!("{data}: serde_json errs: {e}"));
        assert_eq!(format!("{info:?}"), format!("{r:?}"), "{data}");
    }
    s
}

fn content(data: &str) -> usize {
    scanned(data).expect(data).content_bytes
}

#[test]
fn content_bytes_are_the_decoded_length() {
    // a " b \ c LF é 😀: 1+1+1+1+1+1+2+4 bytes once decoded.
    let d = r#"{"choices":[{"delta":{"content":"a\"b\\c\n\u00e9\ud83d\ude00"}}]}"#;
    assert_eq!(content(d), 12);
    assert_eq!(
        content(r#"{"choices":[{"delta":{"content":"\u20AC\/"}}]}"#),
        4
    );
    assert_eq!(content(r#"{"choices":[{"text":"é😀"}]}"#), 6);
    assert_eq!(content(r#"{"choices":[{"text":"\u0000"}]}"#), 1);
}

#[test]
fn ignored_fields_of_any_shape_are_walked_past() {
    let d = r#" { "id" : "x}{\"[" , "junk":{"a":[1,-2.5e-3,{"b":"}"}],"c":null,"d":[[],{}]},
        "choices" : [ { "index":0 , "delta" : { "role":"assistant","content" : "hi" } ,
        "logprobs":null } , {"text":null,"message":null} ] , "created":1795324161,
        "x":true,"x":false, "usage":null, "timings":null, "error":null } "#;
    assert_eq!(content(d), 2);
    // Keys with escapes inside ignored values are fine.
    assert_eq!(content(r#"{"x":{"\u0063ontent":"abc"},"choices":[]}"#), 0);
}

#[test]
fn a_finish_reason_on_the_list_or_null_is_scanned() {
    for r in ["stop", "length", "eos", "model_length", "", "Stop"] {
        let d = format!(r#"{{"choices":[{{"index":0,"delta":{{}},"finish_reason":"{r}"}}]}}"#);
        assert_eq!(scanned(&d).expect(&d).failed_finish, None);
    }
    let d = r#"{"choices":[{"finish_reason":null,"text":"ab"}]}"#;
    assert_eq!(content(d), 2);
}

#[test]
fn usage_and_timings() {
    let d = r#"{"choices":[],"usage":{"prompt_tokens":37,"completion_tokens":4294967295,
        "prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":null},
        "timings":{"prompt_ms":184.888,"predicted_ms":-0,"prompt_n":null,"cache_n":1,"x":1e999}}"#;
    let i = scanned(d).unwrap();
    let u = i.usage.unwrap();
    assert_eq!(u.completion_tokens, Some(u32::MAX));
    assert_eq!((u.cached_tokens, u.reasoning_tokens), (Some(0), None));
    let t = i.timings.unwrap();
    assert_eq!(t.prompt_ms, Some(184.888));
    assert!(t.predicted_ms.unwrap().is_sign_negative());
    let i = scanned(r#"{"usage":{},"timings":{}}"#).unwrap();
    assert_eq!(i.usage, Some(Usage::default()));
}

/// Inputs the scanner leaves to serde_json, with serde_json's verdict on each.
#[test]
fn what_it_is_unsure_of_goes_to_serde_json() {
    for (data, serde_ok) in [
        (r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#, false), // lone surrogate
        (r#"{"id":"\udc00","choices":[]}"#, true), // ignored: serde_json lets it pass
        (
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            false,
        ), // duplicate
        (r#"{"choices":[],"choices":[]}"#, false),
        (r#"{"choices":[{"delta":{"cont\u0065nt":"abc"}}]}"#, true), // escaped key
        (r#"{"error":{"message":"boom"}}"#, true),
        (r#"{"error":"boom"}"#, true),
        (r#"{"choices":[{"finish_reason":"abort"}]}"#, true), // a failed finish
        (r#"{"choices":[{"finish_reason":"st\u006fp"}]}"#, true),
        (r#"{"choices":[{"finish_reason":5}]}"#, true),
        (
            r#"{"choices":[{"finish_reason":"stop","finish_reason":null}]}"#,
            false,
        ),
        (r#"{"choices":null}"#, false),
        (r#"{"choices":[null]}"#, false),
        (r#"{"choices":[[null,null,"abc"]]}"#, true), // a struct as a sequence
        (r#"[[],null,null,null]"#, true),
        (r#"{"usage":{"prompt_tokens":-0}}"#, false),
        (r#"{"usage":{"prompt_tokens":1.0}}"#, false),
        (r#"{"usage":{"prompt_tokens":4294967296}}"#, false),
        (r#"{"usage":{"prompt_tokens":"5"}}"#, false),
        (r#"{"timings":{"prompt_ms":1e999}}"#, false),
        (r#"{"created":01,"choices":[]}"#, false),
        (r#"{"created":1.,"choices":[]}"#, false),
        (r#"{"choices":[]} x"#, false),
        (r#"{"choices":[],}"#, false),
        ("{\"id\":\"a\tb\"}", false), // a raw control character
        (r#"{"id":"\x"}"#, false),
        (r#"{"choices":[{"text":"abc"#, false),
        ("", false),
    ] {
        assert_eq!(scan(data), None, "{data}");
        assert_eq!(parse_serde(data).is_ok(), serde_ok, "{data}");
    }
}

#[test]
fn nesting_past_the_cap_goes_to_serde_json() {
    let nest = |n: usize| {
        format!(
            r#"{{"x":{}1{},"choices":[]}}"#,
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    assert!(scanned(&nest(MAX_DEPTH as usize - 1)).is_some());
    assert_eq!(scan(&nest(MAX_DEPTH as usize)), None);
    assert!(parse_serde(&nest(100)).is_ok(), "within serde_json's 128");
    // serde_json walks an ignored value without its depth limit (and a stack of its own).
    assert!(parse_serde(&nest(10_000)).is_ok());
    assert_eq!(scan(&nest(10_000)), None, "and no stack overflow");
}
