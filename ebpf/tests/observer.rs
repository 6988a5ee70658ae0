//! [`KernelObserver`] in a process with other connections than the run's: an exporter's, a
//! scraper's, another run's. A run counts only its own sockets' events; a hook that does not
//! attach leaves the others working.

use crate::load::cookie;
use crate::tracer_or_skip;
use canary_core::{
    Aggregator, Goodput, KernelRunSummary, MonoTime, Observer, RequestRecord, Source, SourceState,
};
use canary_ebpf::{KernelObserver, RequestSpan, SocketLog, Tracer};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

/// A loopback peer: each connection gets 300 bytes back for its 1000, then stays open until
/// the client closes it, so every connection makes the same four client events (connect,
/// established, one send, one arrival) while the test holds it.
fn peer() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1000];
                if s.read_exact(&mut buf).is_ok() && s.write_all(&[b'a'; 300]).is_ok() {
                    let _ = s.read(&mut buf);
                }
            });
        }
    });
    addr
}

/// One request on a new connection; the connection is returned to keep it open.
fn exchange(addr: SocketAddr) -> (TcpStream, MonoTime, MonoTime) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    let sent = MonoTime::now();
    c.write_all(&[b'x'; 1000]).unwrap();
    let mut buf = [0u8; 300];
    c.read_exact(&mut buf).unwrap();
    (c, sent, MonoTime::now())
}

/// One of the run's requests, annotated as the replay does.
fn request(obs: &KernelObserver, addr: SocketAddr, t0: MonoTime, warmup: bool) -> TcpStream {
    let (c, sent, read) = exchange(addr);
    let ms = |t: MonoTime| t.since(t0).as_secs_f64() * 1e3;
    let mut rec = RequestRecord {
        warmup,
        sent_at_ms: ms(sent),
        ended_at_ms: ms(read),
        ttft_ms: Some(ms(read) - ms(sent)),
        connect_ms: Some(0.1),
        socket_cookie: Some(cookie(&c)),
        ..Default::default()
    };
    obs.annotate(&mut rec, t0);
    assert!(rec.kernel.is_some(), "the run's own request is joined");
    c
}

fn finish(obs: &KernelObserver) -> (KernelRunSummary, SourceState) {
    let summary = Aggregator::new(Goodput::default()).summary();
    let now = MonoTime::now();
    let mut fut = obs.finish(now, now, &summary);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let telemetry = loop {
        if let std::task::Poll::Ready(t) = fut.as_mut().poll(&mut cx) {
            break t;
        }
    };
    let state = telemetry.sources[&Source::Ebpf].clone();
    (telemetry.kernel.expect("kernel section"), state)
}

fn observer_or_skip() -> Option<()> {
    drop(tracer_or_skip()?);
    Some(())
}

/// A run: one warm-up request and two measured ones, with `foreign` connections of the same
/// process (an OTLP exporter's, a /metrics scraper's: no record names them) before and
/// between them.
fn run(addr: SocketAddr, foreign: usize) -> KernelRunSummary {
    let obs = KernelObserver::start(false).expect("observer");
    let t0 = MonoTime::now();
    let mut open = Vec::new();
    for warmup in [true, false, false] {
        for _ in 0..foreign {
            open.push(exchange(addr).0);
        }
        open.push(request(&obs, addr, t0, warmup));
    }
    finish(&obs).0
}

#[test]
fn a_run_counts_only_its_own_requests_events_and_measured_requests() {
    let Some(()) = observer_or_skip() else {
        return;
    };
    let addr = peer();
    let alone = run(addr, 0);
    let beside = run(addr, 4);
    // Connect, established, one send, one arrival for each of the run's three connections;
    // the exporter's and scraper's connections are not the run's.
    assert_eq!(alone.events, 12, "{alone:?}");
    assert_eq!(beside.events, alone.events, "{beside:?}");
    assert_eq!(beside.events_over_cap, 0);
    // Measured requests only: the warm-up one is joined but not counted.
    assert_eq!((alone.requests_joined, alone.requests_unseen), (2, 0));
    assert_eq!((beside.requests_joined, beside.requests_unseen), (2, 0));
    assert_eq!(alone.server_wait.as_ref().map(|s| s.count), Some(2));
}

#[test]
fn concurrent_runs_in_one_process_do_not_count_each_others_sockets() {
    let Some(()) = observer_or_skip() else {
        return;
    };
    let addr = peer();
    let a = KernelObserver::start(false).expect("observer a");
    let b = KernelObserver::start(false).expect("observer b");
    let t0 = MonoTime::now();
    let mut open = Vec::new();
    // Interleaved, as two workloads of the daemon run: each tracer sees every connection.
    for _ in 0..3 {
        open.push(request(&a, addr, t0, false));
        open.push(request(&b, addr, t0, false));
        open.push(request(&b, addr, t0, false));
    }
    let (ka, _) = finish(&a);
    let (kb, _) = finish(&b);
    assert_eq!((ka.events, ka.requests_joined), (12, 3), "{ka:?}");
    assert_eq!((kb.events, kb.requests_joined), (24, 6), "{kb:?}");
}

/// A kernel without one hook (before 6.4 there is no `sk_data_ready`): the others attach, the
/// figures they feed are kept, the lost ones are named with the kernel's release. The hook is
/// left out through the diagnostic `CANARY_EBPF_SKIP_HOOK` path, since this kernel has it.
#[test]
fn without_sk_data_ready_the_other_hooks_still_time_connect_and_write() {
    let Some(()) = observer_or_skip() else {
        return;
    };
    let mut tracer =
        Tracer::start_skipping(std::process::id(), Some("sk_data_ready")).expect("tracer");
    let missing = tracer.missing();
    assert_eq!(missing.len(), 1, "{missing:?}");
    let said = missing[0].to_string();
    let release = canary_ebpf::kernel_release();
    for part in [
        "sk_data_ready",
        "Linux 6.4",
        release.as_str(),
        "server_wait",
    ] {
        assert!(said.contains(part), "{part:?} not in {said:?}");
    }
    let addr = peer();
    let (c, sent, read) = exchange(addr);
    let ours = cookie(&c);
    let mut log = SocketLog::default();
    tracer.drain(|e| log.push(e));
    let t = log
        .timing(&RequestSpan {
            cookie: ours,
            sent_ns: sent.as_nanos(),
            end_ns: read.as_nanos(),
            first_token_ns: Some(read.as_nanos()),
            chunk_reads_ns: vec![read.as_nanos()],
            new_connection: true,
            new_tls_connection: false,
        })
        .expect("kernel timing from the other hooks");
    assert!(t.connect_ms.is_some(), "{t:?}");
    assert!(t.request_write_ms.is_some(), "{t:?}");
    assert_eq!(t.bytes_sent, Some(1000));
    assert_eq!((t.server_wait_ms, t.client_overhead_ms), (None, None));
    drop(c);
}
