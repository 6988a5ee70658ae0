//! Mooncake JSONL (and the aiperf superset of it).
//!
//! Required: `timestamp` (ms, integer or float), `input_length`, `output_length` (both ≥ 1).
//! Optional: `hash_ids` (512-token blocks; absent or `[]` means a unique prompt, and no block
//! rule), `session_id` (string or integer), `delay` (ms after the previous turn of the
//! session ends), `text_input` or `messages` (a verbatim prompt), `extra` (an object merged
//! into the request body). Unknown fields are ignored, except Bailian's `chat_id` and
//! `parent_chat_id`, which are refused (a Bailian row is no Mooncake row).
//!
//! Sessions get compact keys 0, 1, 2… in order of first appearance, and turns are numbered in
//! order of appearance within a session. A later turn may omit `timestamp` if it has `delay`:
//! it then gets the previous turn's timestamp, a lower bound on when it can be sent, which keeps
//! it after that turn in the sorted order; the scheduler uses `delay_us`, and the selection's
//! window and `analyze-trace` time it at the previous turn's time plus the delay. Timestamps of one
//! session must not go backwards.

use std::collections::HashMap;
use std::io::BufRead;

use canary_core::{TracePrompt, TraceRequest};
use serde::Deserialize;

use super::field::{HashIds, Row, Scalar};
use super::read::{exact, line_u32, Lines, Rows};
use super::skipped::{Messages, SkippedMessages};
use super::{Prompts, TraceError, TraceFormat, MAX_SPAN};

/// One Mooncake line as written, every field lenient (see [`super::field`]); `messages` as
/// `M` reads it: a [`serde_json::Value`] kept, or [`SkippedMessages`] checked.
#[derive(Deserialize)]
struct RawRow<'a, M> {
    #[serde(borrow, default)]
    timestamp: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    input_length: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    output_length: Option<Scalar<'a>>,
    #[serde(default)]
    hash_ids: Option<HashIds>,
    #[serde(borrow, default)]
    session_id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    delay: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    text_input: Option<Scalar<'a>>,
    #[serde(default = "absent")]
    messages: Option<M>,
    #[serde(default)]
    extra: Option<serde_json::Value>,
    /// Bailian's chain fields, refused: a Bailian row read as Mooncake loses its chain and
    /// has its seconds read as milliseconds.
    #[serde(default)]
    chat_id: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    parent_chat_id: Option<serde::de::IgnoredAny>,
}

/// An absent field (`#[serde(default)]` would ask `M: Default` of a generic one).
fn absent<M>() -> Option<M> {
    None
}

/// Per-session state while reading.
struct Session {
    key: u64,
    next_turn: u32,
    last_timestamp_us: u64,
}

/// Session ids as strings, so that `"7"` and `7` name the same session.
#[derive(Default)]
struct Sessions {
    by_id: HashMap<Box<str>, Session>,
}

impl Sessions {
    fn get_or_insert(&mut self, id: &str) -> &mut Session {
        if !self.by_id.contains_key(id) {
            let key = self.by_id.len() as u64;
            self.by_id.insert(
                id.into(),
                Session {
                    key,
                    next_turn: 0,
                    last_timestamp_us: 0,
                },
            );
        }
        self.by_id.get_mut(id).expect("inserted above")
    }
}

pub(super) fn parse<R: BufRead>(
    lines: &mut Lines<'_, R>,
    rows: &mut Rows<'_>,
) -> Result<(), TraceError> {
    match rows.opts.prompts {
        Prompts::Keep => read::<R, serde_json::Value>(lines, rows),
        Prompts::Skip => read::<R, SkippedMessages>(lines, rows),
    }
}

/// Reads every row, `messages` as `M`.
fn read<R: BufRead, M>(lines: &mut Lines<'_, R>, rows: &mut Rows<'_>) -> Result<(), TraceError>
where
    M: for<'de> Deserialize<'de> + Into<Messages>,
{
    let mut sessions = Sessions::default();
    let mut ignored_delays = IgnoredDelays::default();
    let mut num = itoa_buf();
    let limit = rows.opts.length_limit;
    let prompts = rows.opts.prompts;
    while let Some((line, text)) = lines.next_line()? {
        rows.report.rows += 1;
        let row = Row {
            path: rows.path,
            line,
        };
        let result = row
            .object::<RawRow<'_, M>>(text)
            .and_then(|raw| convert(row, raw, &mut sessions, &mut num, limit, prompts));
        match result {
            Ok((req, skipped_prompt)) => {
                let line = req.line;
                // Only a later turn is timed by its delay: said, as it changes nothing.
                if req.turn == 0 && req.delay_us().is_some_and(|d| d > 0) {
                    ignored_delays.add(line);
                }
                rows.push(req)?;
                if skipped_prompt {
                    rows.skipped_prompts.push(line);
                }
            }
            Err(e) => rows.reject(e)?,
        }
    }
    ignored_delays.warn(rows);
    Ok(())
}

/// Rows whose `delay` is ignored (a first turn, or no session): said once per trace, not once
/// per row (a trace that sets `delay` on every row had one warning per row, the report's
/// warning cap filled with them and every other warning omitted).
#[derive(Default)]
struct IgnoredDelays {
    /// Exact.
    count: u64,
    /// The first [`IgnoredDelays::SHOWN`] lines, in file order.
    first: Vec<u32>,
}

impl IgnoredDelays {
    /// Lines named in the warning at most.
    const SHOWN: usize = 5;

    fn add(&mut self, line: u32) {
        self.count += 1;
        if self.first.len() < Self::SHOWN {
            self.first.push(line);
        }
    }

    fn warn(self, rows: &mut Rows<'_>) {
        if self.count == 0 {
            return;
        }
        let lines: Vec<String> = self.first.iter().map(u32::to_string).collect();
        let (rows_word, lines_word) = match self.count {
            1 => ("row", "line"),
            _ => ("rows", "lines"),
        };
        let more = match self.count - self.first.len() as u64 {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        rows.report.warn(format_args!(
            "{}: field \"delay\": ignored on {} {rows_word} ({lines_word} {}{more}): a row that \
             is not a later turn of a session (a first turn, or no session_id) is sent at its \
             timestamp",
            rows.path.display(),
            self.count,
            lines.join(", "),
        ));
    }
}

fn itoa_buf() -> String {
    String::with_capacity(24)
}

fn convert<M: Into<Messages>>(
    row: Row<'_>,
    raw: RawRow<'_, M>,
    sessions: &mut Sessions,
    num: &mut String,
    limit: u32,
    prompts: Prompts,
) -> Result<(TraceRequest, bool), TraceError> {
    for (field, present) in [
        ("chat_id", raw.chat_id.is_some()),
        ("parent_chat_id", raw.parent_chat_id.is_some()),
    ] {
        if present {
            return Err(row.invalid(
                field,
                "no Bailian chain field in a row read as Mooncake (its timestamps would be read \
                 as milliseconds and its chain dropped; if the trace is Bailian's, pass \
                 --format bailian)",
                "one",
            ));
        }
    }
    let input = row.length(
        "input_length",
        row.required("input_length", &raw.input_length)?,
        false,
        limit,
    )?;
    let output = row.length(
        "output_length",
        row.required("output_length", &raw.output_length)?,
        false,
        limit,
    )?;
    let block_size = TraceFormat::Mooncake.block_size();
    let hash_ids = row.hash_ids(raw.hash_ids)?;
    row.block_rule(input, &hash_ids, block_size)?;

    let timestamp = raw
        .timestamp
        .as_ref()
        .map(|v| row.time_us("timestamp", v, "milliseconds", 1_000))
        .transpose()?;
    let delay_us = raw
        .delay
        .as_ref()
        .map(|v| row.time_us("delay", v, "milliseconds", 1_000))
        .transpose()?;
    if let Some(d) = delay_us.filter(|&d| u128::from(d) > MAX_SPAN.as_micros()) {
        return Err(row.invalid(
            "delay",
            format!(
                "at most {} days ({} ms); is it in milliseconds?",
                MAX_SPAN.as_secs() / 86_400,
                MAX_SPAN.as_millis()
            ),
            format_args!("{} ms", exact(d, 1_000)),
        ));
    }

    let session_id: Option<&str> = match &raw.session_id {
        None => None,
        Some(Scalar::Str(s)) => Some(s),
        Some(Scalar::Uint(n)) => {
            use std::fmt::Write;
            num.clear();
            write!(num, "{n}").expect("writing to a String");
            Some(num.as_str())
        }
        Some(other) => {
            return Err(row.wrong_type("session_id", "a string or a non-negative integer", other))
        }
    };

    let prompt = self::prompt(row, raw.text_input, raw.messages.map(Into::into), prompts)?;
    let extra = match raw.extra {
        None => None,
        Some(serde_json::Value::Object(map)) => {
            if let Some((key, why)) = map
                .keys()
                .find_map(|k| crate::target::owned_field(k).map(|why| (k, why)))
            {
                return Err(row.invalid(
                    "extra",
                    format!("an object without fields canaryd sets ({why})"),
                    format_args!("field {key:?}"),
                ));
            }
            Some(serde_json::Value::Object(map))
        }
        Some(other) => return Err(row.wrong_type("extra", "an object", other)),
    };

    let (session, turn, timestamp_us) = match session_id {
        None => {
            let ts = timestamp.ok_or_else(|| row.missing("timestamp"))?;
            (None, 0, ts)
        }
        Some(id) => {
            // Validate before touching the map, so a rejected row creates no session.
            let (next_turn, last_us) = sessions
                .by_id
                .get(id)
                .map_or((0, 0), |s| (s.next_turn, s.last_timestamp_us));
            let ts = match timestamp {
                Some(ts) if next_turn > 0 && ts < last_us => {
                    return Err(row.invalid(
                        "timestamp",
                        format!(
                            "a time no earlier than the previous turn of session {id:?} ({} ms)",
                            exact(last_us, 1_000)
                        ),
                        exact(ts, 1_000),
                    ));
                }
                Some(ts) => ts,
                None if next_turn > 0 && delay_us.is_some() => last_us,
                None => return Err(row.missing("timestamp")),
            };
            let s = sessions.get_or_insert(id);
            let turn = s.next_turn;
            s.next_turn += 1;
            s.last_timestamp_us = ts;
            (Some(s.key), turn, ts)
        }
    };

    let mut req = TraceRequest::new(
        0,
        line_u32(row.line),
        timestamp_us,
        session,
        turn,
        input,
        output,
        hash_ids,
        block_size,
    );
    req.set_delay_us(delay_us);
    let skipped_prompt = matches!(prompt, Prompt::Skipped);
    if let Prompt::Kept(p) = prompt {
        req.set_prompt(Some(p));
    }
    req.set_extra(extra);
    Ok((req, skipped_prompt))
}

/// A row's verbatim prompt, as [`prompt`] read it.
enum Prompt {
    None,
    Kept(TracePrompt),
    /// Checked and not kept ([`Prompts::Skip`]).
    Skipped,
}

/// Checks a row's `text_input` and `messages` (`messages` wins when both are there) and keeps
/// the prompt or not: the same errors either way.
fn prompt(
    row: Row<'_>,
    text_input: Option<Scalar<'_>>,
    messages: Option<Messages>,
    prompts: Prompts,
) -> Result<Prompt, TraceError> {
    match (text_input, messages, prompts) {
        (_, Some(Messages::Array(Some(m))), Prompts::Keep) => {
            Ok(Prompt::Kept(TracePrompt::Messages(m)))
        }
        (_, Some(Messages::Array(_)), _) => Ok(Prompt::Skipped),
        (_, Some(Messages::Other(found)), _) => {
            Err(row.wrong_type("messages", "an array of chat messages", found))
        }
        (Some(Scalar::Str(s)), None, Prompts::Keep) => {
            Ok(Prompt::Kept(TracePrompt::Text(s.into_owned())))
        }
        (Some(Scalar::Str(_)), None, Prompts::Skip) => Ok(Prompt::Skipped),
        (Some(other), None, _) => Err(row.wrong_type("text_input", "a string", other)),
        (None, None, _) => Ok(Prompt::None),
    }
}
