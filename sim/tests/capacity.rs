//! The `capacity` profile under open-loop load below and above its closed-form capacity.
//!
//! Rates and queue times come from the sim's own truth (its clock, not the client's), with
//! generous tolerances: the point is the shape (served = offered below; a plateau at the
//! formula and a growing queue above), not the host's speed. The plateau is measured in the
//! engine's time: wall time minus what a starved engine dropped (it never catches up on it).

use std::time::{Duration, Instant};

use canary_core::MonoTime;
use canary_sim::{Profile, SimHandle, TruthRecord};

use crate::client::{completion_body, request};
use crate::sim_with;

const ISL: u32 = 32;
const OSL: u32 = 16;

/// Sends `rate × secs` streaming requests at a constant rate from `start`, each on its own
/// connection, without waiting for replies (open loop); returns when all have been answered.
async fn open_loop(sim: &SimHandle, start: Instant, rate: f64, secs: f64) -> Vec<TruthRecord> {
    let n = (rate * secs) as usize;
    let mut replies = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until((start + Duration::from_secs_f64(i as f64 / rate)).into()).await;
        // Distinct words: no prefix-cache hits.
        let prompt: Vec<String> = (0..ISL).map(|w| format!("r{i}w{w}")).collect();
        let body = completion_body(&prompt.join(" "), OSL, true);
        let addr = sim.addr;
        replies.push(tokio::spawn(async move {
            request(addr, "POST", "/v1/completions", &[], &body)
                .await
                .status
        }));
    }
    for r in replies {
        assert_eq!(r.await.unwrap(), 200);
    }
    // A record is kept right after its reply is written, maybe a moment after the client read
    // it.
    let mut truth = sim.truth();
    for _ in 0..100 {
        if truth.len() == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        truth = sim.truth();
    }
    assert_eq!(truth.len(), n);
    truth.sort_by_key(|t| t.arrival_ns);
    truth
}

/// The clock and the engine's dropped time at `at`.
async fn sample(sim: &SimHandle, at: Instant) -> (u64, Duration) {
    tokio::time::sleep_until(at.into()).await;
    (MonoTime::now().as_nanos(), sim.engine_lag_dropped())
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Token chunks written in `(a, b]`, over all requests.
fn tokens_between(truth: &[TruthRecord], a: u64, b: u64) -> usize {
    truth
        .iter()
        .flat_map(|t| &t.chunk_ns[..t.completion_tokens as usize])
        .filter(|&&c| c > a && c <= b)
        .count()
}

/// Whether the waiting intervals `[arrival, admitted)` (sorted by arrival) cover `[a, b]`.
fn waiting_throughout(by_arrival: &[TruthRecord], a: u64, b: u64) -> bool {
    let mut covered = a;
    for t in by_arrival {
        if t.arrival_ns > covered {
            break;
        }
        covered = covered.max(t.admitted_ns.unwrap());
    }
    covered > b
}

fn queue_s(t: &TruthRecord) -> f64 {
    secs(t.admitted_ns.unwrap() - t.arrival_ns)
}

fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q) as usize]
}

async fn capacity_sim() -> SimHandle {
    sim_with(|c| {
        c.profile = Profile::capacity_profile();
        c.block_size = 512;
    })
    .await
}

/// A runtime for one sim alone: its engine's wake-ups then wait on the host, not behind the
/// other sim's or the clients' tasks (which a shared 2-worker runtime put into the waits).
fn sim_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn below_and_above_the_known_capacity() {
    let (below_rt, above_rt) = (sim_runtime(), sim_runtime());
    let below = below_rt.block_on(capacity_sim());
    let above = above_rt.block_on(capacity_sim());
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    clients.block_on(below_and_above(&below, &above));
}

async fn below_and_above(below: &SimHandle, above: &SimHandle) {
    let cap = Profile::capacity_profile().capacity(ISL, OSL);
    assert!(
        cap.exact && (100.0..115.0).contains(&cap.requests_per_s),
        "{cap:?}"
    );
    let start = Instant::now();
    let at = |s: f64| start + Duration::from_secs_f64(s);
    let (low, high, (t1, d1), (t2, d2)) = tokio::join!(
        open_loop(below, start, 0.5 * cap.requests_per_s, 1.2),
        open_loop(above, start, 2.0 * cap.requests_per_s, 1.2),
        sample(above, at(0.2)),
        sample(above, at(2.0)),
    );

    // Below: every request is served at the offered rate and hardly waits (a request arriving
    // mid-step waits for that step, a few ms).
    let span = |v: &[TruthRecord], f: fn(&TruthRecord) -> u64| {
        let (lo, hi) = v
            .iter()
            .map(f)
            .fold((u64::MAX, 0), |(l, h), x| (l.min(x), h.max(x)));
        secs(hi - lo)
    };
    let offered = (low.len() - 1) as f64 / span(&low, |t| t.arrival_ns);
    let served = (low.len() - 1) as f64 / span(&low, |t| t.engine_last_token_ns.unwrap());
    assert!(
        (served / offered - 1.0).abs() < 0.15,
        "served {served:.1}/s of {offered:.1}/s offered"
    );
    let waits: Vec<f64> = low.iter().map(queue_s).collect();
    let wait_p90 = quantile(waits, 0.9);
    assert!(
        wait_p90 < 0.015,
        "queue below capacity: p90 {wait_p90:.4} s"
    );

    // Above: the engine was saturated from t1 to t2 (some request waited at every moment)...
    assert!(
        waiting_throughout(&high, t1, t2),
        "the queue emptied within the window"
    );
    // ...and served at the formula's rate, in its own time.
    let engine_s = secs(t2 - t1) - (d2 - d1).as_secs_f64();
    let plateau = tokens_between(&high, t1, t2) as f64 / OSL as f64 / engine_s;
    eprintln!(
        "capacity {:.1}/s; below: offered {offered:.1}/s, served {served:.1}/s, wait p90 \
         {:.1} ms; above: plateau {plateau:.1}/s over {engine_s:.3} s of engine time \
         ({:?} dropped)",
        cap.requests_per_s,
        wait_p90 * 1e3,
        d2 - d1
    );
    assert!(
        (plateau / cap.requests_per_s - 1.0).abs() < 0.10,
        "plateau {plateau:.1}/s vs capacity {:.1}/s ({:?} dropped by a busy host)",
        cap.requests_per_s,
        d2 - d1
    );
    // The queue grew for as long as the load lasted: arrivals outpace service by ~107/s, so the
    // median wait grows from ~0.1 s (first fifth of arrivals) to ~1 s (last fifth).
    let n = high.len();
    let first: Vec<f64> = high[..n / 5].iter().map(queue_s).collect();
    let last: Vec<f64> = high[n - n / 5..].iter().map(queue_s).collect();
    let (early, late) = (quantile(first, 0.5), quantile(last, 0.5));
    assert!(
        late > 0.5 && late > 4.0 * early,
        "queue {early:.3} s → {late:.3} s"
    );
}
