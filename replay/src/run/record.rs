//! A request's outcome in its record: a connection that could not be had, an exchange cut by
//! the stop, or what the exchange measured; and the live counters that follow each.

use super::Ctx;
use crate::connection::{ConnectError, Connection};
use crate::exchange::{Gaps, Measurement};
use crate::rx_stamp::Stamp;
use crate::secrets::Secrets;
use canary_core::{ErrorKind, MonoTime, RequestError, RequestRecord, Status};
use std::sync::atomic::Ordering;

/// The connection `rec` goes out on: its setup time (none when pooled) and socket.
pub(super) fn connected(rec: &mut RequestRecord, conn: &Connection) {
    rec.connect_ms = conn.connect_time.map(|d| d.as_secs_f64() * 1e3);
    rec.socket_cookie = conn.cookie;
}

/// `rec` as a request that got no connection (`e`): sent and ended now, an error.
pub(super) fn connect_failed(
    ctx: &Ctx,
    mut rec: RequestRecord,
    e: &ConnectError,
    warmup: bool,
) -> (RequestRecord, Gaps) {
    let now = MonoTime::now();
    rec.sent_at_ms = now.ms_since(ctx.t0);
    rec.ended_at_ms = rec.sent_at_ms;
    rec.schedule_lag_ms = (rec.sent_at_ms - rec.scheduled_at_ms).max(0.0);
    rec.status = Status::Error;
    rec.error = Some(connect_error(e));
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

/// Derives a record's metrics from a measurement; an error's message comes without the
/// target's secrets, whatever the server quoted ([`Secrets::scrub`]), and without control
/// characters ([`canary_core::printable`]).
pub(super) fn fill(rec: &mut RequestRecord, m: &Measurement, t0: MonoTime, secrets: &Secrets) {
    rec.sent_at_ms = m.sent.ms_since(t0);
    rec.ended_at_ms = m.end.read.ms_since(t0);
    rec.schedule_lag_ms = (rec.sent_at_ms - rec.scheduled_at_ms).max(0.0);
    rec.chunks = m.chunks;
    rec.usage.clone_from(&m.usage);
    rec.server_timings.clone_from(&m.timings);
    match &m.error {
        Some(e) => {
            rec.status = Status::Error;
            let mut e = e.clone();
            // Kept to a few KiB whatever made it (the cut before the scrub, whose tail rule
            // redacts a secret cut short; again after, as escapes lengthen it).
            let limit = crate::chunk::MESSAGE_LIMIT;
            e.message
                .truncate(canary_core::prefix_within(&e.message, limit).len());
            if let Some(scrubbed) = secrets.scrub(&e.message) {
                e.message = scrubbed;
            }
            // Printed as the top cause and logged in verdicts: no escape sequences, one line.
            if let std::borrow::Cow::Owned(shown) = canary_core::printable(&e.message) {
                e.message = shown;
            }
            e.message
                .truncate(canary_core::prefix_within(&e.message, limit).len());
            rec.error = Some(e);
        }
        // What arrived before the close stays; there is no end-to-end latency.
        None if m.cancelled => rec.status = Status::Cancelled,
        None => {}
    }
    crate::figures::fill_response_times(rec, m);
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
