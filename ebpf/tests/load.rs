//! The programs load, follow this process's own connections by cookie, and ignore the rest.

use crate::tracer_or_skip;
use canary_core::MonoTime;
use canary_ebpf::{tcp_state, EventKind, RequestSpan, SocketEvent, SocketLog};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

pub(crate) fn cookie(fd: &impl AsRawFd) -> u64 {
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: valid fd, out-pointer and length for SO_COOKIE.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "SO_COOKIE");
    cookie
}

/// Set when `in_its_own_pid_namespace_it_still_follows_its_own_connections` runs the test
/// below as the first process of a new PID namespace.
const IN_PID_NAMESPACE: &str = "CANARY_EBPF_TEST_IN_PID_NAMESPACE";

#[test]
fn follows_own_connection_by_cookie() {
    if std::env::var_os(IN_PID_NAMESPACE).is_some() {
        // Proof that it runs where the kernel knows it by another pid than its own.
        assert_eq!(
            std::process::id(),
            1,
            "not the first process of a new PID namespace"
        );
    }
    let Some(mut tracer) = tracer_or_skip() else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The peer answers 1000 request bytes with 300 bytes, a pause, then 200 more. The pause is
    // 1 s, so that only a stall of ours as long could reach it in the check below.
    const PAUSE: Duration = Duration::from_millis(1000);
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let accepted = cookie(&s);
        let mut buf = [0u8; 1000];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&[b'a'; 300]).unwrap();
        std::thread::sleep(PAUSE);
        s.write_all(&[b'b'; 200]).unwrap();
        accepted
    });
    let mut client = TcpStream::connect(addr).unwrap();
    client.set_nodelay(true).unwrap();
    let ours = cookie(&client);
    let sent = MonoTime::now();
    client.write_all(&[b'x'; 1000]).unwrap();
    let mut first = [0u8; 300];
    client.read_exact(&mut first).unwrap();
    let first_read = MonoTime::now();
    let mut rest = [0u8; 200];
    client.read_exact(&mut rest).unwrap();
    let second_read = MonoTime::now();
    let accepted = server.join().unwrap();
    drop(client);

    // Drained until our socket's close is in (the last of its events), for at most 30 s.
    let mut log = SocketLog::default();
    let mut events: Vec<SocketEvent> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        tracer.drain(|e| {
            log.push(e);
            events.push(e);
        });
        let closed = events
            .iter()
            .any(|e| e.cookie == ours && e.kind() == Some(EventKind::Close));
        if closed || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(tracer.lost(), 0);
    let mine: Vec<&SocketEvent> = events.iter().filter(|e| e.cookie == ours).collect();
    assert!(
        events.iter().all(|e| e.cookie != accepted),
        "the accepted (server) socket must not be tracked"
    );
    let states: Vec<u32> = mine
        .iter()
        .filter(|e| e.kind() == Some(EventKind::State))
        .map(|e| e.state)
        .collect();
    assert_eq!(
        &states[..2],
        &[tcp_state::SYN_SENT, tcp_state::ESTABLISHED],
        "{mine:?}"
    );
    let sent_bytes: u64 = mine
        .iter()
        .filter(|e| e.kind() == Some(EventKind::Send))
        .map(|e| u64::from(e.bytes))
        .sum();
    assert_eq!(sent_bytes, 1000);
    let data: Vec<&&SocketEvent> = mine
        .iter()
        .filter(|e| e.kind() == Some(EventKind::Data))
        .collect();
    // One arrival per write of the peer (the pause keeps them apart); TCP then counts the
    // peer's FIN as one more byte, which the join takes out again.
    let received: Vec<u64> = data.iter().map(|e| e.bytes_received).collect();
    assert_eq!(&received[..2], &[300, 500], "{data:?}");
    assert!(mine.iter().any(|e| e.kind() == Some(EventKind::Close)));
    // The kernel's clock is the client's: both arrivals lie between the client's own
    // timestamps (the FIN comes later, when the peer closes).
    assert!(data[..2]
        .iter()
        .all(|d| d.ts_ns >= sent.as_nanos() && d.ts_ns <= second_read.as_nanos()));

    let t = log
        .timing(&RequestSpan {
            cookie: ours,
            sent_ns: sent.as_nanos(),
            end_ns: second_read.as_nanos(),
            first_token_ns: Some(first_read.as_nanos()),
            chunk_reads_ns: vec![first_read.as_nanos(), second_read.as_nanos()],
            new_connection: true,
            new_tls_connection: false,
        })
        .expect("kernel timing");
    assert_eq!(t.bytes_sent, Some(1000));
    assert_eq!(t.bytes_received, Some(500));
    assert!(t.connect_ms.is_some() && t.srtt_us.is_some(), "{t:?}");
    // The TTFT parts are the distances between these very events: the request's last send
    // before the response, the response's first bytes (which carry the "first token" here),
    // and the client's read of them.
    let ms = |ns: u64| ns as f64 / 1e6;
    let first_in = data[0].ts_ns;
    let last_send = mine
        .iter()
        .filter(|e| e.kind() == Some(EventKind::Send) && e.ts_ns <= first_in)
        .map(|e| e.ts_ns)
        .max()
        .expect("a send before the response");
    assert!(last_send >= sent.as_nanos(), "the send is the client's");
    assert_eq!(t.request_write_ms, Some(ms(last_send - sent.as_nanos())));
    assert_eq!(t.server_wait_ms, Some(ms(first_in - last_send)));
    assert_eq!(t.remainder_ms, Some(0.0), "{t:?}");
    assert_eq!(
        t.client_overhead_ms,
        Some(ms(first_read.as_nanos() - first_in))
    );
    // The pause was the peer's, between the two arrivals: it must not show up as delay of
    // ours in reading the second part.
    let pause_ms = PAUSE.as_secs_f64() * 1e3;
    assert!(t.chunk_delay_p99_ms.unwrap() < pause_ms, "{t:?}");
}

/// A container without the host's PID namespace: the programs must still know canaryd's
/// connections (they compare the pid as canaryd's own namespace numbers it). The test above
/// runs again as the first process of a new PID namespace (`unshare --pid --fork`, util-linux).
#[test]
fn in_its_own_pid_namespace_it_still_follows_its_own_connections() {
    if std::env::var_os(IN_PID_NAMESPACE).is_some() {
        return;
    }
    let Some(tracer) = tracer_or_skip() else {
        return;
    };
    drop(tracer);
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--"])
        .arg(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "load::follows_own_connection_by_cookie",
            "--nocapture",
        ])
        .env(IN_PID_NAMESPACE, "1")
        .output()
        .expect("run unshare (util-linux)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // It ran, and passed: not filtered away, not skipped.
    assert!(text.contains("1 passed"), "{text}");
    assert!(!text.contains("SKIP"), "{text}");
}
