//! The daemon's status page (`GET /`) and its on-demand run reports (`GET /runs/{id}/report`),
//! served by `canaryd run` against `canaryd sim`, loaded in headless Chromium like a reader's
//! browser: no console error, no request but the page's own, every chart drawn with data; and
//! the endpoint's connection caps against clients that say nothing or never read.

mod common;

use canary_testkit::browser::{chromium, Browser};
use common::page::{chart, check};
use common::{api_runs as runs, eventually, http};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;

/// The response head of `GET path` (status line and headers), lower-cased.
fn head(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n").unwrap().0.to_lowercase()
}

#[test]
fn the_status_page_lists_runs_per_workload_and_serves_each_report_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    // Two workloads: one that passes, one whose SLO no request can meet (a fail verdict).
    let workload = |name: &str, extra: &str| {
        format!(
            "[workloads.{name}]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 30\n\
             speedup = 20\nscale_lengths = 0.05\nevery = \"2s\"\n{extra}\n"
        )
    };
    let config = dir.path().join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n{}{}",
            dir.path().join("state").display(),
            workload("chat", ""),
            workload(
                "strict",
                "slos = \"request_latency:0.001\"\nmin_good_fraction = 0.99"
            ),
        ),
    )
    .unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    let listed = eventually(120, "two runs of each workload", || {
        let all = runs(status);
        let n = |w: &str| all.iter().filter(|r| r["workload"] == w).count();
        (n("chat") >= 2 && n("strict") >= 2).then_some(all)
    });
    assert!(listed
        .iter()
        .filter(|r| r["workload"] == "strict")
        .all(|r| r["verdict_kind"] == "fail"));

    // The page and a report, over plain HTTP: HTML with the offline policy as a header too.
    let (code, page) = http(status, "GET", "/", "");
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<h1>canaryd status</h1>") && !page.contains("<script"));
    let h = head(status, "/");
    assert!(h.contains("content-type: text/html; charset=utf-8"), "{h}");
    assert!(
        h.contains("content-security-policy: default-src 'none'"),
        "{h}"
    );
    let id = listed[0]["id"].as_str().unwrap();
    let (code, report) = http(status, "GET", &format!("/runs/{id}/report"), "");
    assert_eq!(code, 200, "{report}");
    assert!(report.contains("canaryd report") && report.contains("id=\"ttft-cdf\""));
    let (code, body) = http(status, "GET", "/runs/no-such-run/report", "");
    assert_eq!(code, 404);
    assert!(body.contains("no run \"no-such-run\""), "{body}");
    assert_eq!(http(status, "POST", "/", "").0, 405, "read-only");

    let bin = match chromium() {
        Ok(bin) => bin,
        Err(why) => return canary_testkit::skip("chromium", &why),
    };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut b = Browser::launch(&bin).unwrap();
    let url = format!("http://127.0.0.1:{status}/");
    let charts = check(&mut b, &url, &shots.join("status.png"));
    // One trend chart per workload, each with a point per listed run (at least two).
    for id in ["trend-0", "trend-1"] {
        let series = chart(&charts, id);
        let p99 = series
            .iter()
            .find(|s| s.0 == "TTFT p99")
            .unwrap_or_else(|| panic!("{id}: {series:?}"));
        assert!(
            p99.1 >= 4,
            "{id}: two runs, a vertex and a dot each: {series:?}"
        );
    }
    // Every `strict` run failed, and is marked so on its chart.
    assert!(chart(&charts, "trend-1")
        .iter()
        .any(|s| s.0 == "not a pass"));

    // What the reader sees, counted in the DOM: a line per workload in the overview, a row and
    // a report link per run listed, the failing verdict.
    let load = b.open(&url, 1240).unwrap();
    let seen: Value = serde_json::from_str(
        b.eval(
            &load,
            r#"JSON.stringify({
              overview: [...document.querySelectorAll('table.overview tbody tr')].map(r => r.cells[0].textContent),
              rows: document.querySelectorAll('table.runs tbody tr').length,
              reports: [...document.querySelectorAll('a.report')].map(a => a.href),
              fails: document.querySelectorAll('span.verdict.fail').length,
              diagnoses: [...document.querySelectorAll('table.runs tbody tr')].map(r => {
                const d = r.querySelector('.bottleneck');
                return [r.querySelector('a.report').href, d && d.textContent, d && d.title];
              }),
              overview_why: [...document.querySelectorAll('table.overview small.why')].length,
              sections: [...document.querySelectorAll('section h2')].map(h => h.textContent)
            })"#,
        )
        .unwrap()
        .as_str()
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        seen["overview"],
        serde_json::json!(["chat", "strict"]),
        "{seen}"
    );
    let rows = seen["rows"].as_u64().unwrap();
    assert!(rows >= 4, "{seen}");
    let reports = seen["reports"].as_array().unwrap();
    assert_eq!(reports.len() as u64, rows, "{seen}");
    assert!(seen["fails"].as_u64().unwrap() >= 2, "{seen}");
    // Each run's diagnosis class, with its why on hover, as the API has it for that run; the
    // overview prints the why of each workload's last run.
    for row in seen["diagnoses"].as_array().unwrap() {
        let href = row[0].as_str().unwrap();
        let id = href
            .rsplit_once("/runs/")
            .and_then(|(_, r)| r.strip_suffix("/report"))
            .unwrap();
        let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
        assert_eq!(code, 200, "{body}");
        let api: Value = serde_json::from_str(&body).unwrap();
        let d = &api["diagnosis"];
        assert!(d["class"].is_string(), "run {id} has no diagnosis: {api}");
        assert_eq!(row[1], d["class"], "{id}: {seen}");
        assert_eq!(row[2], d["why"], "{id}: {seen}");
    }
    assert_eq!(seen["overview_why"], 2, "{seen}");
    assert!(
        seen["sections"][0].as_str().unwrap().starts_with("chat"),
        "{seen}"
    );

    // A run's report, followed from the page's own link: a full report, offline.
    let link = reports[0].as_str().unwrap();
    assert!(link.starts_with(&format!("{url}runs/")), "{link}");
    let charts = check(&mut b, link, &shots.join("status-run-report.png"));
    chart(&charts, "ttft-cdf");
    assert!(chart(&charts, "ttft-time")[0].1 > 0);
    eprintln!("screenshots: {}", shots.display());
}

/// Clients that connect and say nothing cannot take the daemon's descriptors nor lock a
/// probe out: with more silent connections open than the endpoint serves (256, 64 from one
/// address), `/healthz` still answers 200, each new connection closing the oldest silent one
/// (said in the log); the silent ones left are closed 10 s after they were accepted, and the
/// endpoint answers as before.
#[test]
fn silent_clients_are_capped_and_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let config = dir.path().join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
             [workloads.chat]\ntarget = \"sim\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
             max_requests = 5\nspeedup = 20\nscale_lengths = 0.05\n",
            dir.path().join("state").display(),
        ),
    )
    .unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    let mut silent: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", status)).unwrap())
        .collect();
    for s in &silent {
        s.set_nonblocking(true).unwrap();
    }
    // A probe, while they are open: served.
    for _ in 0..3 {
        let (code, body) = http(status, "GET", "/healthz", "");
        assert_eq!(code, 200, "{body}");
    }
    // Every one is closed by the daemon in the end: most at once for newer ones, the rest
    // when their time to send a request runs out.
    eventually(120, "every silent connection closed by the daemon", || {
        silent.retain_mut(|s| {
            matches!(s.read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        });
        silent.is_empty().then_some(())
    });
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains(
            "64 from 127.0.0.1 connections open: closed the oldest that had sent no request"
        ),
        "{log}"
    );
    let (code, body) = http(status, "GET", "/healthz", "");
    assert_eq!(code, 200, "{body}");
}

/// Clients that ask and never read what they asked for cannot lock a probe out either: with
/// every connection the endpoint serves (256, 64 from each of four addresses) pipelining 400
/// `GET /api/runs?limit=1000` with a small receive buffer and reading nothing, until the
/// daemon's writes to each have stopped, `/healthz` from a fresh address, and from one of
/// theirs, answers 200: a request waiting behind an answer its client does not read does not
/// keep its connection (each such used to count as in progress for the connection's whole
/// lifetime, and a new connection was closed at once).
#[test]
fn clients_that_never_read_cannot_lock_a_probe_out() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let config = dir.path().join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
             [workloads.chat]\ntarget = \"sim\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
             max_requests = 5\nspeedup = 20\nscale_lengths = 0.05\n",
            dir.path().join("state").display(),
        ),
    )
    .unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    // A run in the history, so that each answer is a run's brief (about 1 KB), and
    // [`PIPELINED`] of them far more than the socket buffers between the daemon and a client
    // hold (at 50, a few clients were sometimes given all their answers, and were idle).
    eventually(120, "the first run in the history", || {
        (!runs(status).is_empty()).then_some(())
    });
    let ask = "GET /api/runs?limit=1000 HTTP/1.1\r\nhost: x\r\n\r\n".repeat(PIPELINED);
    let peers: Vec<[u8; 4]> = (1..=4).map(|n| [127, 0, 1, n]).collect();
    let mut stalled = Vec::new();
    for peer in &peers {
        for _ in 0..64 {
            let mut s = connect_from(*peer, status);
            s.write_all(ask.as_bytes()).unwrap();
            stalled.push(s);
        }
    }
    // Wait (not a timing assertion) until the daemon has stopped writing to every one: each
    // has answers waiting unread, as many as in the last look.
    let mut last = Vec::new();
    eventually(120, "the daemon's writes to every client stalled", || {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let now: Vec<usize> = stalled.iter().map(unread).collect();
        let stalled_now = now.iter().all(|&n| n > 0) && now == last;
        last = now;
        stalled_now.then_some(())
    });
    for from in [[127, 0, 0, 2], [127, 0, 0, 2], peers[0], [127, 0, 0, 3]] {
        let reply = healthz_from(from, status);
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.ends_with("ok\n"),
            "/healthz from {from:?} with 256 clients not reading ({} to {} bytes unread \
             each): {reply:?}\n{}",
            last.iter().min().unwrap(),
            last.iter().max().unwrap(),
            std::fs::read_to_string(dir.path().join("daemon.log")).unwrap()
        );
    }
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains("256 connections open: closed the oldest that had sent no request or had none being worked on"),
        "{log}"
    );
    assert!(!log.contains("closed a new one"), "{log}");
}

/// Requests each client that never reads sends at once.
const PIPELINED: usize = 400;

/// A TCP connection to the endpoint from `source` (a 127.x.y.z address: one test, many
/// peers), its receive buffer set to 4 KiB before it connects, so that its window stays small.
fn connect_from(source: [u8; 4], port: u16) -> std::net::TcpStream {
    use std::os::fd::FromRawFd;
    let sockaddr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor made here and owned by the stream at once;
    // every pointer is to a local that outlives the call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = std::net::TcpStream::from_raw_fd(fd);
        let size: libc::c_int = 4096;
        let set = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(set, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        let from = sockaddr(source, 0);
        let bound = libc::bind(fd, (&from as *const libc::sockaddr_in).cast(), len);
        assert_eq!(
            bound,
            0,
            "bind {source:?}: {}",
            std::io::Error::last_os_error()
        );
        let to = sockaddr([127, 0, 0, 1], port);
        let made = libc::connect(fd, (&to as *const libc::sockaddr_in).cast(), len);
        assert_eq!(made, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    }
}

/// Bytes that came on `s` and are not read yet.
fn unread(s: &std::net::TcpStream) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to a local.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(r, 0, "FIONREAD: {}", std::io::Error::last_os_error());
    n as usize
}

/// `GET /healthz` from `source`: the whole reply, or what went wrong (a reset when refused).
fn healthz_from(source: [u8; 4], port: u16) -> String {
    let mut s = connect_from(source, port);
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut reply = String::new();
    let done = s
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .and_then(|_| s.read_to_string(&mut reply));
    match done {
        Ok(_) => reply,
        Err(e) => format!("{reply}[{e}]"),
    }
}
