//! The kernel's receive stamp of a request's first byte (`arrival_kernel_ns`): present, after
//! the client's send began, and not after the sim parsed the head (`arrival_ns`).

use canary_core::MonoTime;
use canary_sim::TruthRecord;

use crate::client::{chat_body, Client};
use crate::sim;

fn by_id<'a>(truth: &'a [TruthRecord], id: &str) -> &'a TruthRecord {
    truth
        .iter()
        .find(|r| r.request_id.as_deref() == Some(id))
        .unwrap_or_else(|| panic!("no truth record for {id}"))
}

/// Kernel arrival, with the checks every stamped request must pass: at or after `sent` (taken
/// before the client's write began) and at or before the head was parsed and the body read.
fn kernel_arrival(r: &TruthRecord, sent: MonoTime) -> u64 {
    let k = r
        .arrival_kernel_ns
        .unwrap_or_else(|| panic!("no kernel arrival: {r:?}"));
    assert!(
        k >= sent.as_nanos(),
        "stamped {k} before the send at {sent:?}"
    );
    assert!(
        k <= r.arrival_ns,
        "stamped {k} after the head was parsed at {}",
        r.arrival_ns
    );
    assert!(k <= r.body_received_ns);
    k
}

#[tokio::test]
async fn each_request_on_a_connection_gets_the_stamp_of_its_own_first_byte() {
    let sim = sim().await;
    let mut client = Client::connect(sim.addr).await;
    // A short request, then a real-sized one (about 60 KB, read in several reads), then a
    // short one again on the same keep-alive connection: each stamp is after its own send, so
    // none is an earlier request's.
    let long_prompt = vec!["word"; 12_000].join(" ");
    let mut sent = Vec::new();
    for (id, prompt) in [
        ("a", "hi there"),
        ("b", long_prompt.as_str()),
        ("c", "again"),
    ] {
        let t = MonoTime::now();
        let resp = client
            .send(
                "POST",
                "/v1/chat/completions",
                &[("x-request-id", id)],
                &chat_body(prompt, 3, false),
            )
            .await;
        assert_eq!(resp.status, 200, "{}", resp.text());
        sent.push((id, t));
    }
    let truth = sim.truth();
    let mut last = 0;
    for (id, t) in sent {
        let k = kernel_arrival(by_id(&truth, id), t);
        assert!(
            k > last,
            "{id}: stamp {k} not after the previous request's {last}"
        );
        last = k;
    }
}

#[tokio::test]
async fn a_pipelined_request_is_stamped_by_the_read_that_brought_it() {
    let sim = sim().await;
    let mut client = Client::connect(sim.addr).await;
    let one = |id: &str| {
        let body = chat_body("pipelined", 2, false);
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\nx-request-id: {id}\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    // Both requests in one write: the second's bytes arrived before the sim parsed the first
    // head, though it parses the second only after answering the first.
    let sent = MonoTime::now();
    client
        .write_raw(format!("{}{}", one("p1"), one("p2")).as_bytes())
        .await;
    for _ in 0..2 {
        assert_eq!(client.next_response().await.status, 200);
    }
    let truth = sim.truth();
    let (p1, p2) = (by_id(&truth, "p1"), by_id(&truth, "p2"));
    let k1 = kernel_arrival(p1, sent);
    let k2 = kernel_arrival(p2, sent);
    assert!(p2.arrival_ns > p1.arrival_ns);
    assert!(
        k2 <= p1.arrival_ns,
        "p2 stamped {k2}, after p1's head was parsed at {}",
        p1.arrival_ns
    );
    assert!(k1 <= k2);
}
