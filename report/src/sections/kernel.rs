//! Where TTFT goes, from the kernel's view of each request's socket (eBPF): its four parts in
//! time order, stacked, per TTFT band, so the tail's make-up shows beside the body's.

use super::{ms, num};
use crate::artifacts::{KernelParts, Run};
use crate::html::{esc, table};
use crate::plot::{Axis, Colour, Mark, Plot, HALF};
use crate::sample::{quantile, sorted};
use crate::ReportError;

/// A TTFT part: what it is, and its value in a record.
type Part = (&'static str, fn(&KernelParts) -> Option<f64>);

/// The TTFT parts in time order.
const PARTS: [Part; 4] = [
    ("request write", |k| k.request_write_ms),
    (
        "server wait (network, queue, work before the first byte)",
        |k| k.server_wait_ms,
    ),
    ("remainder (first byte → first-token bytes)", |k| {
        k.remainder_ms
    }),
    ("client overhead (kernel → canaryd's read)", |k| {
        k.client_overhead_ms
    }),
];

/// TTFT bands by quantile: `[from, to)` of the requests ranked by TTFT.
const BANDS: [(&str, f64, f64); 5] = [
    ("p0–p50", 0.0, 0.5),
    ("p50–p90", 0.5, 0.9),
    ("p90–p99", 0.9, 0.99),
    ("p99–p99.9", 0.99, 0.999),
    ("p99.9–max", 0.999, 1.0001),
];

/// The decomposition of one run; `None` when no record carries kernel timing, a note when
/// none carries every part.
pub fn render(run: &Run, prefix: &str) -> Result<Option<String>, ReportError> {
    // Per request, TTFT is exact only where the kernel stamped the segment that completed its
    // first token (`rx.first_token` `kernel`); otherwise (a later segment's stamp, canaryd's
    // read, receive timestamps off) it is an upper bound, and so is the remainder it leaves.
    let timed: Vec<(f64, &KernelParts, bool)> = run
        .measured()
        .filter(|r| r.ok)
        .filter_map(|r| {
            let bound = r.ttft_rx.is_none_or(|k| k.is_bound());
            Some((r.ttft_ms?, r.kernel.as_ref()?, bound))
        })
        .filter(|(t, k, _)| t.is_finite() && PARTS.iter().any(|p| p.1(k).is_some()))
        .collect();
    // The split is over the requests with every part: one without some (a new https
    // connection's first request has no server wait nor remainder) would count them as 0
    // and shrink the server's share of its band.
    let rows: Vec<(f64, &KernelParts, bool)> = timed
        .iter()
        .copied()
        .filter(|(_, k, _)| PARTS.iter().all(|p| p.1(k).is_some()))
        .collect();
    let partial = timed.len() - rows.len();
    if rows.is_empty() {
        // An https server that closes after every response: each request opened a
        // connection, so none has the server wait: said, not left out without a word.
        return Ok((partial > 0).then(|| {
            format!(
                "<p class=\"note\">{} requests have kernel timing, none of them all four parts \
                 (the first request on a new https connection has no server wait nor \
                 remainder: the server's session tickets cannot be told from its response), \
                 so TTFT is not split here.</p>\n",
                num(partial as f64)
            )
        }));
    }
    let bound = rows.iter().filter(|r| r.2).count();
    let ttfts = sorted(rows.iter().map(|r| r.0).collect());
    let n = ttfts.len();
    let mut ranked = rows.clone();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Per band: its name, requests, mean TTFT and the mean of each part.
    let mut bands: Vec<(&str, usize, f64, [f64; 4])> = Vec::new();
    for (name, from, to) in BANDS {
        let lo = (from * n as f64).floor() as usize;
        let hi = ((to * n as f64).floor() as usize).min(n);
        if hi <= lo {
            continue;
        }
        let slice = &ranked[lo..hi];
        let count = slice.len() as f64;
        let mut means = [0.0; 4];
        for (i, (_, part)) in PARTS.iter().enumerate() {
            means[i] = slice.iter().filter_map(|r| part(r.1)).sum::<f64>() / count;
        }
        let ttft = slice.iter().map(|r| r.0).sum::<f64>() / count;
        bands.push((name, slice.len(), ttft, means));
    }
    let mut plot = Plot::new(
        &format!("{prefix}kernel-parts"),
        "TTFT split by the kernel, per TTFT band (means)",
        Axis::categories(
            "requests ranked by TTFT",
            bands.iter().map(|b| b.0.to_string()).collect(),
        ),
        Axis::linear("ms"),
        HALF,
    );
    for (i, (name, _)) in PARTS.iter().enumerate() {
        let bars = bands
            .iter()
            .enumerate()
            .map(|(j, b)| {
                let below: f64 = b.3[..i].iter().sum();
                (j as f64 - 0.35, j as f64 + 0.35, below, below + b.3[i])
            })
            .filter(|b| b.3 > b.2)
            .collect();
        plot.layer(name, Colour::nth(i), Mark::Bars(bars));
    }
    let mut note = format!(
        "{} requests with all four parts; they add up to TTFT per request.",
        num(n as f64)
    );
    if partial > 0 {
        note.push_str(&format!(
            " {} more with kernel timing but not every part (the first request on a new \
             https connection has no server wait nor remainder) are left out.",
            num(partial as f64)
        ));
    }
    plot.note(note);
    let mut html = format!("<div class=\"grid\">\n{}<div>\n", plot.to_html()?);
    let head = [
        "band",
        "requests",
        "mean TTFT",
        "write",
        "server wait",
        "remainder",
        "client",
    ];
    let table_rows: Vec<Vec<String>> = bands
        .iter()
        .map(|b| {
            let mut row = vec![esc(b.0), num(b.1 as f64), ms(b.2)];
            row.extend(b.3.iter().map(|v| ms(*v)));
            row
        })
        .collect();
    html.push_str(&table("kernel", &head, &table_rows));
    let (p50, p99) = (ms(quantile(&ttfts, 0.5)), ms(quantile(&ttfts, 0.99)));
    html.push_str(&if bound == 0 {
        format!(
            "<p class=\"note\">Exact per request (kernel timestamps on canaryd's clock); TTFT \
             p50 {p50}, p99 {p99} over these requests.</p>\n"
        )
    } else {
        format!(
            "<p class=\"note\">The request write, server wait and client overhead are exact \
             per request (eBPF, kernel times on canaryd's clock); TTFT, and so the remainder \
             it leaves, is an upper bound for {} of these {} requests (their first token timed \
             by a later segment's stamp or canaryd's read, not the kernel's stamp of its own \
             segment: summary.json receive_timestamps.first_token), exact for the others; TTFT \
             p50 {p50}, p99 {p99} over these requests ({}).</p>\n",
            num(bound as f64),
            num(n as f64),
            if bound == n {
                "upper bounds"
            } else {
                "upper bounds where any of the requests' are"
            }
        )
    });
    html.push_str("</div>\n</div>\n");
    Ok(Some(html))
}
