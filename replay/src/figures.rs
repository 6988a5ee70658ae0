//! A record's latency figures from one measurement, on two clocks: the kernel's receive
//! times where the socket stamped the response (the record's `ttft_ms` and the others), and
//! canaryd's own reads (`rx.userspace`), kept beside them so nothing is lost.

use crate::exchange::Measurement;
use crate::rx_stamp::Stamp;
use canary_core::{ChunkGaps, MonoTime, RequestRecord, UserspaceTimes};
use std::time::Duration;

/// Sets `rec`'s response figures (`ttfb_ms` … `e2e_ms`, `itl_ms`, `output_tokens_per_s`,
/// `max_chunk_gap_ms`) and `rx` from `m`. `e2e_ms` and what depends on it only when the
/// request completed; the record's `usage` must be set already (ITL counts its tokens).
pub(crate) fn fill_response_times(rec: &mut RequestRecord, m: &Measurement) {
    // A request cancelled on purpose did not complete: no e2e, no ITL.
    let completed = m.error.is_none() && !m.cancelled;
    let osl = rec.output_token_count();
    let at = times(m, |s| s.at, &m.gaps.at, completed, osl);
    let read = times(m, |s| s.read, &m.gaps.read, completed, osl);
    rec.ttfb_ms = at.ttfb_ms;
    rec.ttft_ms = at.ttft_ms;
    rec.ttfo_ms = at.ttfo_ms;
    rec.ttst_ms = at.ttst_ms;
    rec.max_chunk_gap_ms = at.max_chunk_gap_ms;
    rec.e2e_ms = at.e2e_ms;
    rec.itl_ms = at.itl_ms;
    rec.output_tokens_per_s = at.itl_ms.filter(|&itl| itl > 0.0).map(|itl| 1000.0 / itl);
    rec.rx = m.rx.clone().map(|mut rx| {
        rx.userspace = read;
        rx
    });
}

/// The figures on one clock, `pick` choosing it from each [`Stamp`].
fn times(
    m: &Measurement,
    pick: fn(&Stamp) -> MonoTime,
    gaps: &ChunkGaps,
    completed: bool,
    osl: u32,
) -> UserspaceTimes {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let since_sent = |t: Option<Stamp>| t.map(|t| ms(pick(&t).since(m.sent)));
    let ttft = since_sent(m.first_token);
    let e2e = completed.then(|| ms(pick(&m.end).since(m.sent)));
    UserspaceTimes {
        ttfb_ms: since_sent(m.head),
        ttft_ms: ttft,
        ttst_ms: match (m.first_token, m.second_token) {
            (Some(a), Some(b)) => Some(ms(pick(&b).since(pick(&a)))),
            _ => None,
        },
        ttfo_ms: since_sent(m.first_output),
        // Tokens that came in one event (a body without streaming, a server that sends its
        // whole answer in one chunk) have no time between them to measure: ITL was 0 ms.
        itl_ms: match (e2e, ttft, m.second_token) {
            (Some(e2e), Some(ttft), Some(_)) if osl > 1 => Some((e2e - ttft) / (osl - 1) as f64),
            _ => None,
        },
        max_chunk_gap_ms: gaps.max(),
        e2e_ms: e2e,
        chunk_gaps_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::{RxTiming, Usage};

    fn stamp(at_ms: u64, read_ms: u64) -> Stamp {
        Stamp {
            at: MonoTime(at_ms * 1_000_000),
            read: MonoTime(read_ms * 1_000_000),
        }
    }

    #[test]
    fn figures_on_kernel_times_and_canaryds_reads_side_by_side() {
        let mut m = Measurement {
            sent: MonoTime(0),
            head: Some(stamp(2, 3)),
            first_token: Some(stamp(10, 14)),
            second_token: Some(stamp(12, 14)),
            first_output: Some(stamp(10, 14)),
            end: stamp(30, 31),
            chunks: 3,
            rx: Some(RxTiming::default()),
            ..Default::default()
        };
        m.gaps.at = ChunkGaps::from(&[2.0, 18.0][..]);
        m.gaps.read = ChunkGaps::from(&[0.0, 17.0][..]);
        let mut rec = RequestRecord {
            usage: Some(Usage {
                completion_tokens: Some(5),
                ..Default::default()
            }),
            ..Default::default()
        };
        fill_response_times(&mut rec, &m);
        assert_eq!(
            (rec.ttfb_ms, rec.ttft_ms, rec.ttst_ms, rec.e2e_ms),
            (Some(2.0), Some(10.0), Some(2.0), Some(30.0))
        );
        assert_eq!(rec.itl_ms, Some(5.0)); // (30 - 10) / (5 - 1)
        assert_eq!(rec.output_tokens_per_s, Some(200.0));
        assert_eq!(rec.max_chunk_gap_ms, Some(18.0));
        let u = &rec.rx.as_ref().unwrap().userspace;
        assert_eq!(
            (u.ttfb_ms, u.ttft_ms, u.ttst_ms, u.e2e_ms, u.itl_ms),
            (Some(3.0), Some(14.0), Some(0.0), Some(31.0), Some(4.25))
        );
        assert_eq!(u.max_chunk_gap_ms, Some(17.0));
        assert_eq!(rec.first_token_read_delay_ms(), None, "no source labelled");

        // A failed request has no e2e, and without receive timestamps no `rx`.
        m.error = Some(canary_core::RequestError {
            kind: canary_core::ErrorKind::StreamCut,
            http_status: None,
            message: String::new(),
        });
        m.rx = None;
        let mut rec = RequestRecord::default();
        fill_response_times(&mut rec, &m);
        assert_eq!(
            (rec.ttft_ms, rec.e2e_ms, rec.itl_ms),
            (Some(10.0), None, None)
        );
        assert!(rec.rx.is_none());

        // Five tokens in one event (a body without streaming): no time between them, so no
        // ITL (it read 0 ms) and no per-user rate.
        m.error = None;
        m.second_token = None;
        m.first_token = Some(stamp(30, 31));
        let mut rec = RequestRecord {
            usage: Some(Usage {
                completion_tokens: Some(5),
                ..Default::default()
            }),
            ..Default::default()
        };
        fill_response_times(&mut rec, &m);
        assert_eq!((rec.ttft_ms, rec.e2e_ms), (Some(30.0), Some(30.0)));
        assert_eq!((rec.itl_ms, rec.output_tokens_per_s), (None, None));
    }
}
