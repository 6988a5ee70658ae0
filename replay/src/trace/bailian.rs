//! Alibaba Bailian (Qwen usage traces) JSONL.
//!
//! Fields: `chat_id`, `parent_chat_id` (-1 for a first turn), `timestamp` (seconds, float),
//! `input_length`, `output_length` (both ≥ 1), `type` (text, search, image, file, thinking;
//! counted in [`LoadReport::categories`](super::LoadReport::categories)), `turn` (1-based,
//! optional) and `hash_ids` (16-token blocks).
//!
//! Every row is self-contained: a follow-up turn's input already includes the history. Sessions
//! are the `parent_chat_id` chains: the session key is the root's `chat_id` and the turn is the
//! depth in the chain (0 for the root), checked against the `turn` field. Chains are resolved
//! after the whole file is read, so a child may appear before its parent in the file; this
//! needs one `chat_id → row` map entry per row while loading. A child may not be timestamped
//! before its parent (it is sent after the parent's answer): refused naming its `timestamp`,
//! as Mooncake refuses a turn earlier than the one before it.

use std::collections::HashMap;
use std::io::BufRead;

use canary_core::{TraceRequest, TraceRows};
use serde::Deserialize;

use super::field::{HashIds, Row, Scalar};
use super::read::{exact, line_u32, Lines, Rows};
use super::{TraceError, TraceFormat};

#[derive(Deserialize)]
struct RawRow<'a> {
    #[serde(borrow, default)]
    chat_id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    parent_chat_id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    timestamp: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    input_length: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    output_length: Option<Scalar<'a>>,
    #[serde(borrow, default, rename = "type")]
    kind: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    turn: Option<Scalar<'a>>,
    #[serde(default)]
    hash_ids: Option<HashIds>,
}

/// The chain fields of a kept row, parallel to `Rows::requests` until chains are resolved.
struct Link {
    chat: u64,
    parent: Option<u64>,
    turn_field: Option<u32>,
}

pub(super) fn parse<R: BufRead>(
    lines: &mut Lines<'_, R>,
    rows: &mut Rows<'_>,
) -> Result<(), TraceError> {
    let mut links = Vec::new();
    let mut by_chat: HashMap<u64, usize> = HashMap::new();
    let mut kinds = super::RowKinds::default();
    while let Some((line, text)) = lines.next_line()? {
        rows.report.rows += 1;
        let row = Row {
            path: rows.path,
            line,
        };
        let result = row
            .object::<RawRow<'_>>(text)
            .and_then(|raw| convert(row, raw, &by_chat, &rows.requests, rows.opts.length_limit));
        match result {
            Ok((req, link, kind)) => {
                by_chat.insert(link.chat, rows.requests.len());
                rows.report.count_category(kind);
                kinds.set(req.line, kind);
                rows.push(req)?;
                links.push(link);
            }
            Err(e) => rows.reject(e)?,
        }
    }
    rows.kinds = Some(kinds);
    resolve_chains(rows, &links, &by_chat)
}

fn convert<'a>(
    row: Row<'_>,
    raw: RawRow<'a>,
    by_chat: &HashMap<u64, usize>,
    kept: &TraceRows,
    limit: u32,
) -> Result<(TraceRequest, Link, &'static str), TraceError> {
    let chat = match row.required("chat_id", &raw.chat_id)? {
        Scalar::Uint(n) => *n,
        v @ Scalar::Int(_) => return Err(row.invalid("chat_id", "a non-negative integer", v)),
        v => return Err(row.wrong_type("chat_id", "a non-negative integer", v)),
    };
    if let Some(&first) = by_chat.get(&chat) {
        return Err(row.invalid(
            "chat_id",
            format!(
                "a unique id (chat {chat} already on line {})",
                kept.row(first).line()
            ),
            chat,
        ));
    }
    let parent = match row.required("parent_chat_id", &raw.parent_chat_id)? {
        Scalar::Uint(n) => Some(*n),
        Scalar::Int(-1) => None,
        v @ Scalar::Int(_) => return Err(row.invalid("parent_chat_id", "-1 or a chat id", v)),
        v => return Err(row.wrong_type("parent_chat_id", "an integer", v)),
    };
    let timestamp_us = row.time_us(
        "timestamp",
        row.required("timestamp", &raw.timestamp)?,
        "seconds",
        1_000_000,
    )?;
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
    let kind = match &raw.kind {
        None => "unknown",
        Some(Scalar::Str(s)) => match &**s {
            "text" => "text",
            "search" => "search",
            "image" => "image",
            "file" => "file",
            "thinking" => "thinking",
            _ => "other",
        },
        Some(v) => return Err(row.wrong_type("type", "a string", v)),
    };
    let turn_field = raw
        .turn
        .as_ref()
        .map(|v| row.count("turn", v, false))
        .transpose()?;
    let block_size = TraceFormat::Bailian.block_size();
    let hash_ids = row.hash_ids(raw.hash_ids)?;
    row.block_rule(input, &hash_ids, block_size)?;
    let req = TraceRequest::new(
        0,
        line_u32(row.line),
        timestamp_us,
        None,
        0,
        input,
        output,
        hash_ids,
        block_size,
    );
    Ok((
        req,
        Link {
            chat,
            parent,
            turn_field,
        },
        kind,
    ))
}

/// Where a row's chain ends: its root's chat id, its depth, and whether the root is an orphan.
#[derive(Clone, Copy)]
struct Resolved {
    root: u64,
    depth: u32,
    orphan: bool,
}

/// Sets `session` and `turn` of every row from its parent chain.
fn resolve_chains(
    rows: &mut Rows<'_>,
    links: &[Link],
    by_chat: &HashMap<u64, usize>,
) -> Result<(), TraceError> {
    let n = links.len();
    let mut resolved: Vec<Option<Resolved>> = vec![None; n];
    // `visiting[i] == start + 1` while row i is on the current walk: finds cycles in O(n).
    let mut visiting = vec![0usize; n];
    let mut stack = Vec::new();
    for start in 0..n {
        if resolved[start].is_some() {
            continue;
        }
        // Walk up until a root, a resolved ancestor or a missing parent; `top` is the last row
        // walked and `base` its resolution.
        stack.clear();
        let mut cur = start;
        let base = loop {
            stack.push(cur);
            visiting[cur] = start + 1;
            let ts = |i: usize| rows.requests.row(i).timestamp_us();
            let problem = match links[cur].parent {
                None => {
                    break Resolved {
                        root: links[cur].chat,
                        depth: 0,
                        orphan: false,
                    }
                }
                Some(p) => match by_chat.get(&p) {
                    // A follow-up is sent after its parent's answer: one timestamped before
                    // its parent cannot be. The selection dropped it without a word when it
                    // came before its session's first turn (an orphan by then), and Mooncake's
                    // loader refuses a turn earlier than the one before it: so is this.
                    Some(&pi) if ts(cur) < ts(pi) => Err(pi),
                    Some(&pi) => match resolved[pi] {
                        Some(r) => {
                            break Resolved {
                                depth: r.depth + 1,
                                ..r
                            }
                        }
                        None if visiting[pi] == start + 1 => Ok("is part of a cycle"),
                        None => {
                            cur = pi;
                            continue;
                        }
                    },
                    None => Ok("never appears in the trace"),
                },
            };
            // An orphan, a cycle or a follow-up before its parent: an error, or with
            // skip_invalid the root of its own session.
            let line = u64::from(rows.requests.row(cur).line());
            let err = match problem {
                Ok(problem) => TraceError::OrphanParent {
                    path: rows.path.into(),
                    line,
                    chat: links[cur].chat,
                    parent: links[cur].parent.map_or(-1, |p| p as i64),
                    problem,
                },
                Err(pi) => Row {
                    path: rows.path,
                    line,
                }
                .invalid(
                    "timestamp",
                    format!(
                        "a time no earlier than its parent's (chat {} on line {}, {} s)",
                        links[pi].chat,
                        rows.requests.row(pi).line(),
                        exact(ts(pi), 1_000_000)
                    ),
                    format_args!("{} s", exact(ts(cur), 1_000_000)),
                ),
            };
            if !rows.opts.skip_invalid {
                return Err(err);
            }
            rows.report.orphans_rerooted += 1;
            rows.report
                .warn(format_args!("{err} (kept as its own session)"));
            break Resolved {
                root: links[cur].chat,
                depth: 0,
                orphan: true,
            };
        };
        let mut r = base;
        resolved[stack.pop().expect("walk pushed at least one row")] = Some(r);
        while let Some(i) = stack.pop() {
            r.depth += 1;
            resolved[i] = Some(r);
        }
    }
    for (i, (link, r)) in links.iter().zip(&resolved).enumerate() {
        let r = r.expect("every row resolved");
        let line = rows.requests.row(i).line();
        rows.requests
            .update(i, |req| {
                req.session = Some(r.root);
                req.turn = r.depth;
            })
            .map_err(|e| rows.too_large(line, e))?;
        if let Some(field) = link.turn_field {
            if !r.orphan && field != r.depth + 1 {
                let row = Row {
                    path: rows.path,
                    line: u64::from(line),
                };
                let err = row.invalid(
                    "turn",
                    format!("{} (1-based depth of the parent chain)", r.depth + 1),
                    field,
                );
                if !rows.opts.skip_invalid {
                    return Err(err);
                }
                rows.report.turn_mismatches += 1;
                rows.report
                    .warn(format_args!("{err} (turn taken from the chain)"));
            }
        }
    }
    Ok(())
}
