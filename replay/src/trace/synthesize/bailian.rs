//! Writing a synthesized trace as Bailian JSONL: sessions said as `parent_chat_id` links.
//!
//! canaryd keeps a Bailian row's session (its root's `chat_id`), turn (its depth in the chain)
//! and `type` ([`RowKinds`](crate::trace::RowKinds)), not its own `chat_id`. So chat ids are
//! given anew: a first turn keeps its session's id (the root's own), so the trace read back has
//! the same sessions; every later turn gets the lowest id no session uses, in row order, and
//! links to the session's first row one turn shallower. Sessions, turns, types and their order
//! come back as they were; a chain that branched (two replies to one chat) comes back as turns
//! of one session at the same depth, which is how canaryd replays it anyway.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use canary_core::TraceRequest;
use serde::{Serialize, Serializer};

use super::{SynthesisError, Written};
use crate::trace::{RowKinds, Trace};

/// Every row's chat id and parent, by position, and the rows' types.
pub(super) struct Chats<'t> {
    ids: Vec<u64>,
    parents: Vec<Option<u64>>,
    kinds: Option<&'t RowKinds>,
}

impl<'t> Chats<'t> {
    /// The links of `trace`'s rows; a later turn with no turn before it in its session (which
    /// a loaded Bailian trace never has) is refused, naming its line.
    pub(super) fn of(trace: &'t Trace) -> Result<Chats<'t>, SynthesisError> {
        let n = trace.requests.len();
        let mut ids: Vec<Option<u64>> = vec![None; n];
        let mut taken = HashSet::new();
        for (i, r) in trace.requests.iter().enumerate() {
            if let (0, Some(session)) = (r.turn, r.session) {
                if !taken.insert(session) {
                    return Err(row_error(
                        &r,
                        format!("is a second first turn of session {session}"),
                    ));
                }
                ids[i] = Some(session);
            }
        }
        let mut next = 0u64;
        let ids: Vec<u64> = ids
            .into_iter()
            .map(|id| {
                id.unwrap_or_else(|| {
                    while taken.contains(&next) {
                        next += 1;
                    }
                    next += 1;
                    next - 1
                })
            })
            .collect();
        // The first row of each (session, turn), in row order.
        let mut first: HashMap<(u64, u32), u64> = HashMap::new();
        for (r, &id) in trace.requests.iter().zip(&ids) {
            if let Some(session) = r.session {
                first.entry((session, r.turn)).or_insert(id);
            }
        }
        let mut parents = Vec::with_capacity(n);
        for r in &trace.requests {
            let parent = match (r.turn, r.session) {
                (0, _) => None,
                (turn, Some(session)) => match first.get(&(session, turn - 1)) {
                    Some(&id) => Some(id),
                    None => {
                        return Err(row_error(
                            &r,
                            format!(
                                "is turn {} of session {session}, which has no turn {turn}",
                                turn + 1
                            ),
                        ))
                    }
                },
                (turn, None) => {
                    return Err(row_error(&r, format!("is turn {} of no session", turn + 1)))
                }
            };
            parents.push(parent);
        }
        Ok(Chats {
            ids,
            parents,
            kinds: trace.kinds.as_ref(),
        })
    }

    /// Writes `r` as `w` says, as one Bailian line.
    pub(super) fn write_row(
        &self,
        out: &mut impl Write,
        r: &TraceRequest,
        w: &Written<'_>,
    ) -> std::io::Result<()> {
        let i = r.index as usize;
        let row = Row {
            chat_id: self.ids[i],
            parent_chat_id: Parent(self.parents[i]),
            timestamp: r.timestamp_us as f64 / 1e6 / w.speedup,
            input_length: w.input,
            output_length: w.output,
            kind: self.kinds.and_then(|k| k.get(r.line)),
            turn: r.turn.saturating_add(1),
            hash_ids: w.hash_ids,
        };
        serde_json::to_writer(&mut *out, &row)?;
        out.write_all(b"\n")
    }
}

fn row_error(r: &TraceRequest, reason: String) -> SynthesisError {
    SynthesisError::Row {
        line: r.line,
        reason,
    }
}

/// One row in the order the format's documentation lists its fields.
#[derive(Serialize)]
struct Row<'a> {
    chat_id: u64,
    parent_chat_id: Parent,
    /// Seconds.
    timestamp: f64,
    input_length: u32,
    output_length: u32,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    /// 1-based.
    turn: u32,
    #[serde(skip_serializing_if = "<[u64]>::is_empty")]
    hash_ids: &'a [u64],
}

/// A parent chat id, or -1 for a first turn.
struct Parent(Option<u64>);

impl Serialize for Parent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(id) => s.serialize_u64(id),
            None => s.serialize_i64(-1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{parse, synthesize, LoadOptions, LoadReport, Synthesis, TraceFormat};
    use canary_core::{HashIds, TraceRows};
    use std::path::{Path, PathBuf};

    /// Rows as a loaded Bailian trace holds them (session = root chat id, turn = depth): the
    /// writer's linking, not a trace file. Session 0 is a root id the new ids must skip; session
    /// 7 branches (two turns at depth 1) and has a turn at depth 2.
    fn trace() -> Trace {
        let row = |line, ts, session, turn, input: u32| {
            let ids: Vec<u64> = (0..u64::from(input.div_ceil(16))).collect();
            TraceRequest::new(
                0,
                line,
                ts,
                Some(session),
                turn,
                input,
                5,
                HashIds::from(ids),
                16,
            )
        };
        let rows = vec![
            row(1, 0, 7, 0, 20),
            row(2, 1_000_000, 0, 0, 16),
            row(3, 2_000_000, 7, 1, 40),
            row(4, 2_500_000, 7, 1, 41),
            row(5, 3_000_000, 7, 2, 70),
        ];
        let mut requests: TraceRows = rows.into_iter().collect();
        requests.set_block_size(16);
        // Line 2 had no `type`.
        let mut kinds = RowKinds::default();
        for (line, kind) in [(1, "thinking"), (3, "text"), (4, "search"), (5, "text")] {
            kinds.set(line, kind);
        }
        Trace {
            path: PathBuf::from("t.jsonl"),
            format: TraceFormat::Bailian,
            requests,
            report: LoadReport::default(),
            kinds: Some(kinds),
            origin_us: None,
            skipped_prompts: Vec::new(),
        }
    }

    #[test]
    fn sessions_and_turns_come_back_through_new_chat_ids() {
        let t = trace();
        let mut out = Vec::new();
        synthesize(&t, &Synthesis::default(), u32::MAX, &mut out).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        let rows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ids: Vec<u64> = rows
            .iter()
            .map(|r| r["chat_id"].as_u64().unwrap())
            .collect();
        // First turns keep their session's id; later ones take the lowest free ids, skipping 0.
        assert_eq!(ids, [7, 0, 1, 2, 3], "{text}");
        let parents: Vec<i64> = rows
            .iter()
            .map(|r| r["parent_chat_id"].as_i64().unwrap())
            .collect();
        assert_eq!(parents, [-1, -1, 7, 7, 1], "{text}");
        let kinds: Vec<Option<&str>> = rows.iter().map(|r| r["type"].as_str()).collect();
        let want = [
            Some("thinking"),
            None,
            Some("text"),
            Some("search"),
            Some("text"),
        ];
        assert_eq!(kinds, want, "{text}");
        let back = parse(&out[..], Path::new("s.jsonl"), &LoadOptions::default()).unwrap();
        assert_eq!(back.format, TraceFormat::Bailian);
        let key = |t: &Trace| -> Vec<_> {
            t.requests
                .iter()
                .map(|r| {
                    (
                        r.timestamp_us,
                        r.session,
                        r.turn,
                        r.input_tokens,
                        r.hash_ids.len(),
                    )
                })
                .collect()
        };
        assert_eq!(key(&back), key(&t));
        let counted = &back.report.categories;
        assert_eq!((counted["text"], counted["unknown"]), (2, 1), "{counted:?}");
    }

    #[test]
    fn a_turn_with_nothing_before_it_is_refused_naming_its_line() {
        let mut t = trace();
        t.requests.update(4, |r| r.turn = 3).unwrap();
        let err = synthesize(&t, &Synthesis::default(), u32::MAX, &mut Vec::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 5: is turn 4 of session 7, which has no turn 3"
        );
    }
}
