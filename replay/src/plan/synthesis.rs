//! Trace synthesis on the fly (`--synthesis-*`, `synthesis_*` keys): the transforms of
//! `canaryd synthesize` (aiperf's `--synthesis-*`) applied to a loaded trace in memory, before
//! its window, shard and caps are selected and its schedule built.
//!
//! The rows are exactly those `canaryd synthesize IN OUT` writes and a replay of OUT reads
//! back: the trace is synthesized and parsed again in the format written (Bailian for Bailian,
//! Mooncake otherwise), through the same two functions, the text passing through a bounded
//! pipe rather than held whole. Only the rows' line numbers are put back to the input's, so
//! records still point at the file the user gave.

use super::load::LoadError;
use super::pipe;
use super::setting::{Setting, SettingError};
use crate::trace::{self, LoadOptions, Synthesis, SynthesisReport, Trace};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

impl Synthesis {
    /// Checks each setting, naming the one that is wrong (as a plan's [`Setting`]): every
    /// factor positive and finite, every cap and the root multiplier 1 or more.
    pub fn validate_settings(&self) -> Result<(), SettingError> {
        validate(self)
    }
}

/// [`Synthesis::validate_settings`].
pub(super) fn validate(s: &Synthesis) -> Result<(), SettingError> {
    let positive = |setting, v: f64| match v.is_finite() && v > 0.0 {
        true => Ok(()),
        false => Err(SettingError::new(setting, "expected a positive number").with_value(v)),
    };
    positive(Setting::SynthesisSpeedupRatio, s.speedup_ratio)?;
    positive(
        Setting::SynthesisPrefixLenMultiplier,
        s.prefix_len_multiplier,
    )?;
    positive(
        Setting::SynthesisPromptLenMultiplier,
        s.prompt_len_multiplier,
    )?;
    let at_least_one = |setting, v: Option<u32>| match v {
        Some(0) => Err(SettingError::new(setting, "expected 1 or more").with_value(0)),
        _ => Ok(()),
    };
    at_least_one(
        Setting::SynthesisPrefixRootMultiplier,
        Some(s.prefix_root_multiplier),
    )?;
    at_least_one(Setting::SynthesisMaxIsl, s.max_isl)?;
    at_least_one(Setting::SynthesisMaxOsl, s.max_osl)
}

/// A synthesized row's `field` over the length limit, named by its line in the input.
fn over_limit(trace: &Trace, line: u64, field: &'static str, n: u64, limit: u32) -> LoadError {
    trace::TraceError::InvalidValue {
        path: trace.path.clone(),
        line,
        field,
        expected: format!("at most {limit} tokens once synthesized (length_limit)"),
        found: n.to_string(),
    }
    .into()
}

/// Why synthesis refused `trace`, named as the front ends name it.
fn refusal(trace: &Trace, e: trace::SynthesisError) -> LoadError {
    match e {
        // Refused before the row was built: named as the length check in [`apply`] names it.
        trace::SynthesisError::TooLong {
            line,
            tokens,
            limit,
        } => over_limit(trace, u64::from(line), "input_length", tokens, limit),
        // The ratio is the setting to change: named as the front end spells it.
        e @ trace::SynthesisError::Time { .. } => LoadError::Setting(SettingError::new(
            Setting::SynthesisSpeedupRatio,
            format!("too small for {}: {e}", trace.path.display()),
        )),
        reason => LoadError::Synthesis {
            path: trace.path.clone(),
            reason,
        },
    }
}

/// `trace` changed by `s`, with the rows `canaryd synthesize` would write (each keeping its
/// input line); lengths over `length_limit` are refused, naming the row.
pub fn apply(
    trace: &Trace,
    s: &Synthesis,
    length_limit: u32,
) -> Result<(Trace, SynthesisReport), LoadError> {
    // The limit is checked below, naming the input's line rather than the text's.
    let opts = LoadOptions {
        format: Some(trace::written_format(trace.format)),
        length_limit: u32::MAX,
        max_line_bytes: usize::MAX,
        ..LoadOptions::default()
    };
    let name = format!("{} (synthesized)", trace.path.display());
    // Written on a thread of its own and parsed back as it comes, through a bounded pipe:
    // the text (about 290 bytes a row) is never held whole.
    let (written, read) = std::thread::scope(|scope| {
        let (mut tx, rx) = pipe::bounded();
        let writer = std::thread::Builder::new()
            .name("synthesis".into())
            .spawn_scoped(scope, move || {
                let report = trace::synthesize(trace, s, length_limit, &mut tx)?;
                tx.flush()?;
                Ok::<_, trace::SynthesisError>(report)
            })
            .map_err(LoadError::Loader)?;
        // `rx` is dropped when the parse ends, so a writer waiting on a full pipe fails then.
        let read = trace::parse(rx, Path::new(&name), &opts);
        let written = writer
            .join()
            .map_err(|_| LoadError::Loader(std::io::Error::other("the synthesis thread died")))?;
        Ok::<_, LoadError>((written, read))
    })?;
    let (mut out, report) = match (written, read) {
        (Ok(report), read) => (read?, report),
        // The reader stopped first (the pipe's write failed): its error says why.
        (Err(trace::SynthesisError::Io(_)), Err(e)) => return Err(e.into()),
        (Err(e), _) => return Err(refusal(trace, e)),
    };
    // One row written per row read, in order, and a speedup keeps the order: row i is row i.
    for i in 0..out.requests.len().min(trace.requests.len()) {
        let (new, line) = (out.requests.row(i), trace.requests.row(i).line());
        for (field, n) in [
            ("input_length", new.input_tokens()),
            ("output_length", new.output_tokens()),
        ] {
            if n > length_limit {
                return Err(over_limit(
                    trace,
                    u64::from(line),
                    field,
                    u64::from(n),
                    length_limit,
                ));
            }
        }
        out.requests
            .update(i, |r| r.line = line)
            .expect("only the line changes");
    }
    out.path.clone_from(&trace.path);
    out.report = trace.report.clone();
    out.kinds.clone_from(&trace.kinds);
    Ok((out, report))
}

/// `summary.json`'s `run.trace.synthesis`: the transforms applied (the [`Synthesis`] itself,
/// its fields at this level) and what they did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthesisInfo {
    /// The transforms, as asked.
    #[serde(flatten)]
    pub settings: Synthesis,
    /// Rows synthesized (the whole trace, before selection).
    pub rows: u64,
    /// Of those, rows whose input or output a cap cut.
    pub capped: u64,
    /// Distinct block ids in the synthesized trace.
    pub blocks: u64,
}

impl SynthesisInfo {
    /// The block of `s`, which did `report`.
    pub fn new(s: &Synthesis, report: &SynthesisReport) -> SynthesisInfo {
        SynthesisInfo {
            settings: s.clone(),
            rows: report.rows,
            capped: report.capped,
            blocks: report.blocks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: &str = "{\"timestamp\":0,\"input_length\":1000,\"output_length\":50,\"hash_ids\":[1,2]}\n\
                        \n\
                        {\"timestamp\":10,\"input_length\":1020,\"output_length\":70,\"hash_ids\":[1,3]}\n";

    fn trace() -> Trace {
        trace::parse(
            ROWS.as_bytes(),
            Path::new("t.jsonl"),
            &LoadOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn applied_rows_are_the_written_trace_read_back_with_the_input_lines() {
        let s = Synthesis {
            speedup_ratio: 4.0,
            max_isl: Some(600),
            max_osl: Some(60),
            prompt_len_multiplier: 2.0,
            ..Synthesis::default()
        };
        let t = trace();
        let (got, report) = apply(&t, &s, trace::DEFAULT_LENGTH_LIMIT).unwrap();
        let mut text = Vec::new();
        trace::synthesize(&t, &s, u32::MAX, &mut text).unwrap();
        let file = trace::parse(text.as_slice(), Path::new("x"), &LoadOptions::default()).unwrap();
        assert_eq!(report.rows, 2);
        assert_eq!(report.capped, 2);
        assert_eq!(got.requests.len(), 2);
        for (g, f) in got.requests.iter().zip(&file.requests) {
            assert_eq!(
                (g.timestamp_us, g.input_tokens, g.output_tokens, &g.hash_ids),
                (f.timestamp_us, f.input_tokens, f.output_tokens, &f.hash_ids)
            );
        }
        let second = got.requests.get(1).unwrap();
        assert_eq!(second.timestamp_us, 2_500);
        assert_eq!((second.input_tokens, second.output_tokens), (600, 60));
        // Lines stay the input's (the blank line 2 is skipped), the path too.
        assert_eq!(second.line, 3);
        assert_eq!(got.path, Path::new("t.jsonl"));
    }

    /// A real trace whose synthesized text (about 1 MB) is several times what the pipe holds:
    /// the writer waits on the parser, and the rows are still those written whole.
    #[test]
    fn a_trace_bigger_than_the_pipe_reads_back_as_written_whole() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/traces/mooncake_synthetic.jsonl");
        let t = trace::load(&path, &LoadOptions::default()).unwrap();
        let s = Synthesis {
            speedup_ratio: 2.0,
            prefix_root_multiplier: 2,
            ..Synthesis::default()
        };
        let (got, _) = apply(&t, &s, trace::DEFAULT_LENGTH_LIMIT).unwrap();
        let mut text = Vec::new();
        trace::synthesize(&t, &s, u32::MAX, &mut text).unwrap();
        assert!(text.len() > 900_000, "{}", text.len());
        let file = trace::parse(text.as_slice(), Path::new("x"), &LoadOptions::default()).unwrap();
        assert_eq!(got.requests.len(), file.requests.len());
        for (g, f) in got.requests.iter().zip(&file.requests) {
            assert_eq!(
                (g.timestamp_us, g.input_tokens, g.output_tokens, &g.hash_ids),
                (f.timestamp_us, f.input_tokens, f.output_tokens, &f.hash_ids)
            );
        }
    }

    #[test]
    fn each_bad_setting_is_named() {
        let bad = [
            (
                Synthesis {
                    max_isl: Some(0),
                    ..Synthesis::default()
                },
                Setting::SynthesisMaxIsl,
            ),
            (
                Synthesis {
                    speedup_ratio: f64::NAN,
                    ..Synthesis::default()
                },
                Setting::SynthesisSpeedupRatio,
            ),
            (
                Synthesis {
                    prefix_root_multiplier: 0,
                    ..Synthesis::default()
                },
                Setting::SynthesisPrefixRootMultiplier,
            ),
            (
                Synthesis {
                    prompt_len_multiplier: -1.0,
                    ..Synthesis::default()
                },
                Setting::SynthesisPromptLenMultiplier,
            ),
        ];
        for (s, setting) in bad {
            assert_eq!(validate(&s).unwrap_err().setting, setting, "{s:?}");
        }
        validate(&Synthesis::default()).unwrap();
    }

    #[test]
    fn a_length_over_the_limit_is_refused_naming_the_row() {
        let s = Synthesis {
            prompt_len_multiplier: 100.0,
            ..Synthesis::default()
        };
        let e = apply(&trace(), &s, 10_000).unwrap_err().to_string();
        assert_eq!(
            e,
            "t.jsonl:1: field \"input_length\": expected at most 10000 tokens once \
             synthesized (length_limit), found 49312"
        );
        // The row on line 3 (after a blank line) is named by its line in the input.
        let e = apply(&trace(), &s, 50_000).unwrap_err().to_string();
        assert!(e.starts_with("t.jsonl:3: "), "{e}");
    }
}
