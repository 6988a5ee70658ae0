//! Opening connections with and without kernel receive timestamps, on real sockets.

use super::*;
use std::sync::atomic::AtomicUsize;

/// A loopback listener that accepts and holds connections; its port.
fn listener() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming() {
            held.extend(c.ok());
        }
    });
    port
}

fn connector(port: u16, rx_stamps: bool) -> Connector {
    Connector::new(
        "127.0.0.1",
        port,
        None,
        Duration::from_secs(5),
        64 << 10,
        rx_stamps,
    )
    .unwrap()
}

#[tokio::test]
async fn connections_read_with_kernel_stamps_unless_turned_off() {
    let port = listener();
    let on = connector(port, true);
    assert!(on.open().await.unwrap().io.rx.is_some());
    assert_eq!(on.rx_state(), ("on", None));
    let off = connector(port, false);
    assert!(off.open().await.unwrap().io.rx.is_none());
    assert_eq!(off.rx_state(), ("off", None));
}

#[tokio::test]
async fn a_refused_socket_option_is_reported_once_and_connections_read_without_stamps() {
    static ASKED: AtomicUsize = AtomicUsize::new(0);
    fn refuse(_: &TcpStream) -> std::io::Result<()> {
        ASKED.fetch_add(1, Ordering::Relaxed);
        Err(std::io::Error::from_raw_os_error(libc::ENOPROTOOPT))
    }
    let mut c = connector(listener(), true);
    Arc::get_mut(&mut c.rx).unwrap().enable = refuse;
    for _ in 0..3 {
        let conn = c.open().await.expect("the connection opens all the same");
        assert!(conn.io.rx.is_none());
    }
    // Asked once; from then on the connector knows.
    assert_eq!(ASKED.load(Ordering::Relaxed), 1);
    let (state, why) = c.rx_state();
    assert_eq!(state, "refused");
    assert!(
        why.as_deref()
            .unwrap()
            .starts_with("setsockopt(SO_TIMESTAMPING): "),
        "{why:?}"
    );
}
