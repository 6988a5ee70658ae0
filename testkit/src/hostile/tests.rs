use super::*;

const REQUEST: &[u8] =
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";

/// Sends one request and reads until the server closes; the bytes it sent.
fn exchange(server: &HostileServer) -> Vec<u8> {
    let mut tcp = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp.write_all(REQUEST).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("the server did not end the connection: {e}"),
        }
    }
}

#[test]
fn every_mode_ends_on_its_own_within_its_bounds() {
    let limit = Duration::from_millis(500);
    for mode in [
        Hostile::EndlessLine { bytes: 100_000 },
        Hostile::EndlessEvent { bytes: 100_000 },
        Hostile::EndlessStream {
            chunks: 1000,
            every: Duration::ZERO,
        },
        Hostile::HugeBody {
            declared: 4 << 30,
            bytes: 100_000,
        },
        Hostile::HugeErrorBody { bytes: 100_000 },
        Hostile::HugeHeaders { bytes: 100_000 },
        Hostile::SlowHeaders {
            every: Duration::from_millis(10),
        },
        Hostile::Silent,
        Hostile::Garbage { bytes: 1000 },
        Hostile::EchoRequest { in_stream: false },
        Hostile::EchoRequest { in_stream: true },
        Hostile::EchoCutThenClose,
        Hostile::EchoHeadBytes,
        Hostile::EchoEncoded,
        Hostile::EchoInModelList { pad: 3 },
        Hostile::EchoAsWrongType {
            pad: 5,
            streaming: true,
        },
        Hostile::EchoAsWrongType {
            pad: 5,
            streaming: false,
        },
        Hostile::CloseAfterRequest,
        Hostile::ResetAfterRequest,
        Hostile::AnswersFirst {
            after: Duration::ZERO,
        },
        Hostile::DoneWithoutEnd {
            after: Duration::from_millis(10),
        },
        Hostile::WrongType { bytes: 100_000 },
        Hostile::NothingGenerated { streaming: true },
        Hostile::NothingGenerated { streaming: false },
        Hostile::EndOfSequenceOnly,
        Hostile::DropsSecondRequest {
            after: Duration::from_millis(10),
        },
        Hostile::DropsSecondRequestThenSilent {
            after: Duration::from_millis(10),
        },
        Hostile::StalledErrorBody,
        Hostile::AbortedGeneration { streaming: true },
        Hostile::AbortedGeneration { streaming: false },
        Hostile::AbortedThenStalls,
        Hostile::EndlessNothing { events: 4096 },
        Hostile::ErrorEvent,
        Hostile::Gzipped { status: 200 },
        Hostile::Gzipped { status: 503 },
        Hostile::PromptTime {
            first: "-1e200",
            later: "2.5",
        },
    ] {
        let server = HostileServer::lasting(mode, limit);
        let got = exchange(&server);
        assert_eq!(server.requests(), 1, "{mode:?}");
        let text = String::from_utf8_lossy(&got);
        match mode {
            Hostile::EndlessLine { bytes }
            | Hostile::EndlessEvent { bytes }
            | Hostile::HugeBody { bytes, .. }
            | Hostile::HugeErrorBody { bytes }
            | Hostile::HugeHeaders { bytes } => {
                assert!(
                    got.len() as u64 >= bytes * 9 / 10,
                    "{mode:?}: {}",
                    got.len()
                );
                assert!(text.starts_with("HTTP/1.1 "), "{mode:?}");
            }
            Hostile::EndlessNothing { events } => {
                assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
                let sent = text.matches("data: ").count() + text.matches(": ping").count();
                assert_eq!(sent as u64, events);
                assert!(!text.contains("[DONE]") && !text.contains(r#""content":"x"#));
            }
            Hostile::EndlessStream { chunks, .. } => {
                assert_eq!(text.matches("data: ").count() as u64, chunks);
                assert!(!text.contains("[DONE]"));
            }
            Hostile::EchoRequest { in_stream } => {
                let status = if in_stream {
                    "200 OK"
                } else {
                    "401 Unauthorized"
                };
                assert!(text.starts_with(&format!("HTTP/1.1 {status}")), "{text}");
                // The request's head, quoted in JSON.
                assert!(
                    text.contains(
                        r#""message":"refused: POST /v1/chat/completions HTTP/1.1\r\nhost: x"#
                    ),
                    "{text}"
                );
            }
            // The request has no `Authorization`: nothing of it is quoted.
            Hostile::EchoCutThenClose => {
                assert!(text.starts_with("HTTP/1.1 401 "), "{text}");
                assert!(text.contains("content-length: 1000\r\n"), "{text}");
                assert!(text.ends_with("\r\n\r\nrefused: "), "{text}");
            }
            Hostile::EchoHeadBytes => {
                assert!(text.starts_with("HTTP/1.1 401 "), "{text}");
                let head = String::from_utf8_lossy(&REQUEST[..REQUEST.len() - 2]);
                assert!(
                    text.ends_with(&format!("refused: {head} | as read: {head}")),
                    "{text}"
                );
            }
            // The request has no `Authorization` and no `x-` header: " |" it is.
            Hostile::EchoEncoded => {
                assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
                assert!(
                    text.contains(
                        r#"{"error":{"message":"lower= | upper= | b64=IHw= url=%20%7C html= |"}}"#
                    ),
                    "{text}"
                );
            }
            Hostile::EchoInModelList { pad } => {
                assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
                let list = format!(r#"{{"id":"{}"}},{{"id":""}}"#, "Q".repeat(pad));
                assert!(text.contains(&list), "{text}");
            }
            Hostile::EchoAsWrongType { pad, streaming } => {
                assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
                let usage = format!(r#""usage":{{"prompt_tokens":"{}"}}"#, "Q".repeat(pad));
                assert!(text.contains(&usage), "{text}");
                assert_eq!(text.contains("data: [DONE]"), streaming, "{text}");
            }
            Hostile::WrongType { bytes } => {
                assert!(text.starts_with("HTTP/1.1 200 OK"), "{mode:?}");
                let string = format!("data: {{\"choices\":\"{}\"}}", "a".repeat(bytes as usize));
                assert!(text.contains(&string), "{mode:?}");
                assert!(text.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n"), "{mode:?}");
            }
            Hostile::NothingGenerated { streaming } => {
                assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
                assert_eq!(text.contains("data: [DONE]"), streaming, "{text}");
                assert!(!text.contains("\"content\":\"x"), "{text}");
            }
            Hostile::AbortedGeneration { streaming } => {
                assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
                assert!(text.contains(r#""content":"x""#), "{text}");
                assert!(text.contains(r#""finish_reason":"abort""#), "{text}");
                assert_eq!(text.contains("data: [DONE]"), streaming, "{text}");
            }
            Hostile::AbortedThenStalls => {
                assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
                assert!(text.contains(r#""content":"x""#), "{text}");
                assert!(
                    text.ends_with("\"finish_reason\":\"abort\"}]}\n\n\r\n"),
                    "nothing after the abort: {text}"
                );
            }
            Hostile::ErrorEvent => {
                let event =
                    "event: error\ndata: {\"message\":\"engine overloaded\",\"code\":503}\n\n";
                assert!(text.contains(event), "{text}");
                assert!(text.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n"), "{text}");
            }
            Hostile::Gzipped { status } => {
                assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{text}");
                assert!(text.contains("content-encoding: gzip\r\n"), "{text}");
                let body = &got[got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
                assert!(
                    body.starts_with(b"\x1f\x8b") && body.len() == 77,
                    "{body:?}"
                );
            }
            // The first POST's prompt time, in llama.cpp's `timings` of the last chunk.
            Hostile::PromptTime { first, .. } => {
                assert!(text.contains("connection: close\r\n"), "{text}");
                let timings = format!("\"timings\":{{\"prompt_n\":5,\"prompt_ms\":{first},");
                assert!(text.contains(&timings), "{text}");
                assert!(text.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n"), "{text}");
            }
            Hostile::EndOfSequenceOnly => {
                assert!(text.contains("\"completion_tokens\":1}"), "{text}");
                assert!(text.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n"), "{text}");
            }
            // The first request's whole answer; no second came.
            Hostile::DropsSecondRequest { .. } | Hostile::DropsSecondRequestThenSilent { .. } => {
                assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
                assert!(text.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n"), "{text}");
            }
            Hostile::StalledErrorBody => {
                assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
                assert!(text.contains("content-length: 1000\r\n"), "{text}");
                assert!(
                    text.ends_with("\r\n\r\n{\"error\":{\"message\":\"busy\""),
                    "{text}"
                );
            }
            Hostile::Garbage { bytes } => assert_eq!(got.len() as u64, bytes),
            Hostile::SlowHeaders { .. } => assert!(text.starts_with("HTTP/1.1 200 OK\r\nx-")),
            Hostile::Silent | Hostile::CloseAfterRequest | Hostile::ResetAfterRequest => {
                assert!(got.is_empty(), "{mode:?}")
            }
            // A whole response, then the connection held: no end of the chunked body after
            // one, its terminator after the other.
            Hostile::AnswersFirst { .. } | Hostile::DoneWithoutEnd { .. } => {
                assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
                assert!(text.contains("data: [DONE]"), "{text}");
                let ended = text.ends_with("0\r\n\r\n");
                let first = matches!(mode, Hostile::AnswersFirst { .. });
                assert_eq!(ended, first, "{mode:?}: {text}");
            }
        }
    }
}

#[test]
fn a_second_request_is_read_held_and_closed_on_without_a_byte() {
    let after = Duration::from_millis(200);
    for mode in [
        Hostile::DropsSecondRequest { after },
        Hostile::DropsSecondRequestThenSilent { after },
    ] {
        // Each connection closes within 2 s, whatever it does.
        let server = HostileServer::lasting(mode, Duration::from_secs(2));
        let mut tcp = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        tcp.write_all(REQUEST).unwrap();
        let mut first = Vec::new();
        let mut buf = [0u8; 65536];
        while !first.ends_with(b"0\r\n\r\n") {
            match tcp.read(&mut buf) {
                Ok(n @ 1..) => first.extend_from_slice(&buf[..n]),
                other => panic!("{mode:?}: the first answer ended early: {other:?}"),
            }
        }
        tcp.write_all(REQUEST).unwrap();
        let sent = Instant::now();
        assert_eq!(
            tcp.read(&mut buf).unwrap(),
            0,
            "{mode:?}: closed without a byte"
        );
        assert!(sent.elapsed() >= after, "{mode:?}: held first");
        assert_eq!(server.requests(), 2, "{mode:?}");
        // The next connection: answered again, or silent until its end.
        let next = exchange(&server);
        assert_eq!(server.requests(), 3, "{mode:?}");
        let silent = matches!(mode, Hostile::DropsSecondRequestThenSilent { .. });
        assert_eq!(next.is_empty(), silent, "{mode:?}: {next:?}");
    }
}
