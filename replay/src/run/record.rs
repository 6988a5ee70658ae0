//! A request's outcome in its record: a connection that could not be had, an exchange cut by
//! the stop, or what the exchange measured; and the live counters that follow each.

use super::Ctx;
use crate::connection::{ConnectError, Connection};
use crate::exchange::{Gaps, Measurement};
use crate::rx_stamp::Stamp;
use crate::secrets::Secrets;
use canary_core::{ErrorKind, MonoTime, RequestError, RequestRecord, Status};
use std::sync::atomic::Ordering;

/// The connection `rec` goes out on: its setup time (none when pooled), socket, and how long
/// the request, due and no longer held, waited for it to open. `rec`'s hold must be known.
pub(super) fn connected(rec: &mut RequestRecord, conn: &Connection, t0: MonoTime) {
    rec.connect_ms = conn.connect_time.map(|d| d.as_secs_f64() * 1e3);
    rec.socket_cookie = conn.cookie;
    rec.connect_wait_ms = match conn.connect_time {
        Some(_) => waited_until(rec, conn.opened_at.ms_since(t0)),
        // A pooled connection is there as soon as it is taken.
        None => 0.0,
    };
}

/// How long `rec` waited, once due and no longer held, for what came at `at_ms`: a slow
/// connect or TLS handshake is the network's or the server's time, not canaryd's (it opened
/// the connection [`Config::prepare_ahead`](super::Config::prepare_ahead) before the deadline,
/// or, under a concurrency ceiling, when the request got its slot).
fn waited_until(rec: &RequestRecord, at_ms: f64) -> f64 {
    (at_ms - rec.scheduled_at_ms - rec.hold_ms).max(0.0)
}

/// `rec`'s wait for its connection, never more than its lag past the hold: whatever remains
/// is canaryd's own (`dispatch_lag`), never below zero.
fn bound_connect_wait(rec: &mut RequestRecord) {
    let after_hold = (rec.schedule_lag_ms - rec.hold_ms).max(0.0);
    rec.connect_wait_ms = rec.connect_wait_ms.clamp(0.0, after_hold);
}

/// `rec` as a request that got no connection (`e`, known at `failed_at`): never sent; recorded
/// as sent and ended now, an error, its lag past the hold up to the failure a wait for the
/// connection, not canaryd's delay.
pub(super) fn connect_failed(
    ctx: &Ctx,
    mut rec: RequestRecord,
    e: &ConnectError,
    failed_at: MonoTime,
    warmup: bool,
) -> (RequestRecord, Gaps) {
    let now = MonoTime::now();
    rec.sent_at_ms = now.ms_since(ctx.t0);
    rec.ended_at_ms = rec.sent_at_ms;
    rec.schedule_lag_ms = (rec.sent_at_ms - rec.scheduled_at_ms).max(0.0);
    rec.connect_wait_ms = waited_until(&rec, failed_at.ms_since(ctx.t0));
    bound_connect_wait(&mut rec);
    rec.status = Status::Error;
    // What the TLS library says may quote the server's certificate (every name of a
    // mismatched one): kept short, scrubbed and printable as any other error.
    rec.error = Some(shown(connect_error(e), &ctx.secrets));
    if !warmup {
        ctx.progress.done.fetch_add(1, Ordering::Relaxed);
        ctx.progress.errors.fetch_add(1, Ordering::Relaxed);
    }
    (rec, Gaps::default())
}

/// A failure to connect, classified: canaryd's own exhaustion is not the target's fault.
pub(super) fn connect_error(e: &ConnectError) -> RequestError {
    match e.client_exhausted {
        true => RequestError {
            kind: ErrorKind::ClientResources,
            http_status: None,
            message: format!("canaryd is out of resources, the target is not at fault: {e}"),
        },
        false => RequestError {
            kind: ErrorKind::Connect,
            http_status: None,
            message: e.to_string(),
        },
    }
}

/// `m` ended by the hard stop while its request waited for a connection to be sent again:
/// what it measured stays (its first send among it), it ends now, and its error says why.
pub(super) fn stopped(m: &mut Measurement) {
    m.end = Stamp::read(MonoTime::now());
    m.error = Some(crate::exchange::grace_over());
    m.reusable = false;
}

/// Derives a record's metrics from a measurement; an error's message as [`shown`].
pub(super) fn fill(rec: &mut RequestRecord, m: &Measurement, t0: MonoTime, secrets: &Secrets) {
    rec.sent_at_ms = m.sent.ms_since(t0);
    rec.ended_at_ms = m.end.read.ms_since(t0);
    rec.schedule_lag_ms = (rec.sent_at_ms - rec.scheduled_at_ms).max(0.0);
    bound_connect_wait(rec);
    rec.chunks = m.chunks;
    rec.usage.clone_from(&m.usage);
    rec.server_timings.clone_from(&m.timings);
    match &m.error {
        Some(e) => {
            rec.status = Status::Error;
            rec.error = Some(shown(e.clone(), secrets));
        }
        // What arrived before the close stays; there is no end-to-end latency.
        None if m.cancelled => rec.status = Status::Cancelled,
        None => {}
    }
    crate::figures::fill_response_times(rec, m);
}

/// `e` as a record shows it: its message without the target's secrets, whatever the server
/// quoted ([`Secrets::scrub`]), without control characters ([`canary_core::printable`]), and
/// kept to a few KiB whatever made it (the cut before the scrub, whose tail rule redacts a
/// secret cut short; again after, as escapes lengthen it). Printed as the top cause and
/// logged in verdicts: no escape sequences, one line.
fn shown(mut e: RequestError, secrets: &Secrets) -> RequestError {
    let limit = crate::chunk::MESSAGE_LIMIT;
    e.message
        .truncate(canary_core::prefix_within(&e.message, limit).len());
    if let Some(scrubbed) = secrets.scrub(&e.message) {
        e.message = scrubbed;
    }
    if let std::borrow::Cow::Owned(printable) = canary_core::printable(&e.message) {
        e.message = printable;
    }
    // Before a `<redacted>` the cap would cut in two.
    e.message
        .truncate(crate::secrets::Secrets::within(&e.message, limit).len());
    e
}

/// A filled record, counted in the progress, with its chunk gaps when the run keeps them.
pub(super) fn counted(
    ctx: &Ctx,
    mut rec: RequestRecord,
    m: Measurement,
    warmup: bool,
) -> (RequestRecord, Gaps) {
    if !warmup {
        ctx.progress.done.fetch_add(1, Ordering::Relaxed);
        if m.error.is_some() {
            ctx.progress.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    if ctx.config.record_chunks {
        rec.chunk_gaps_ms = Some(m.gaps.at.kept().to_vec());
        if let Some(rx) = &mut rec.rx {
            rx.userspace.chunk_gaps_ms = Some(m.gaps.read.kept().to_vec());
        }
    }
    (rec, m.gaps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{ApiKey, Endpoint, Target};

    // Audit (hostile servers), finding 9 (`s_echo_cut`): a server echoing the key at the
    // 4 KiB message cap left `…xxxx<redacted` in the record, the marker's `>` cut off.
    #[test]
    fn a_key_at_the_message_cap_is_cut_before_its_marker() {
        let key = "sk-ZQ1xAPIKEY/k+y=1";
        let mut t = Target::new("http://h:1", Endpoint::Chat, "m").unwrap();
        t.api_key = Some(ApiKey::new(key));
        let secrets = Secrets::of([&t]);
        let limit = crate::chunk::MESSAGE_LIMIT;
        for keep in 4..key.len() {
            let pad = "x".repeat(limit - keep);
            let e = RequestError {
                kind: ErrorKind::HttpStatus,
                http_status: Some(500),
                message: format!("{pad}{key} echoed"),
            };
            let message = shown(e, &secrets).message;
            assert!(message.len() <= limit, "{keep}");
            // The key's start is redacted: its marker whole where it fits, else none of it.
            let tail = &message[pad.len()..];
            let want = if pad.len() + 10 <= limit {
                "<redacted>"
            } else {
                ""
            };
            assert_eq!((message[..pad.len()] == pad, tail), (true, want), "{keep}");
        }
    }
}
