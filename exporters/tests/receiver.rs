//! A real OTLP/HTTP receiver on loopback: accepts `/v1/traces`, `/v1/metrics` and `/v1/logs`
//! posts, keeps them, and decodes them with the reference protobuf types
//! (`opentelemetry-proto`), the way a collector would.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// A collector that accepts connections and reads every byte sent, but never answers: each
/// export waits for a response that does not come. On its own threads (no runtime needed),
/// so a process-level test can use it too; stops accepting when dropped.
pub struct Silent {
    pub addr: SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// Connections accepted so far.
    pub accepted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Silent {
    pub fn start() -> Silent {
        use std::io::Read;
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (s, a) = (stop.clone(), accepted.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        a.fetch_add(1, Ordering::Relaxed);
                        let s = s.clone();
                        conn.set_nonblocking(false).unwrap();
                        conn.set_read_timeout(Some(std::time::Duration::from_millis(100)))
                            .unwrap();
                        std::thread::spawn(move || {
                            let mut buf = [0u8; 65536];
                            while !s.load(Ordering::Relaxed) {
                                match conn.read(&mut buf) {
                                    Ok(0) => return,
                                    Ok(_) => {}
                                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                                    Err(_) => return,
                                }
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            }
        });
        Silent {
            addr,
            stop,
            accepted,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One POST as received.
#[derive(Debug, Clone)]
pub struct Post {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// How the receiver answers each export (HTTP 200 every time).
#[derive(Debug, Clone, Default)]
pub enum Answer {
    /// An empty body: a full success.
    #[default]
    Empty,
    /// A protobuf `Export*ServiceResponse` whose `partial_success` rejects `items` of the
    /// signal (spans, data points, log records) with `message`.
    Rejected { items: i64, message: String },
    /// The same as OTLP/JSON (`application/json`).
    RejectedJson { items: i64, message: String },
    /// A body of this many bytes.
    Huge(usize),
    /// An error status with an empty body, and a `Retry-After` when given.
    Status {
        code: u16,
        retry_after: Option<String>,
    },
    /// An error status whose body says why: a `google.rpc.Status` (protobuf) with
    /// `message` when `proto`, else `message` as plain text.
    Refused {
        code: u16,
        message: String,
        proto: bool,
    },
    /// The n-th export to a path gets the n-th answer (the last one from then on).
    Series(Vec<Answer>),
}

impl Answer {
    fn body(&self, path: &str) -> (&'static str, Bytes) {
        use opentelemetry_proto::tonic::collector::logs::v1::{
            ExportLogsPartialSuccess, ExportLogsServiceResponse,
        };
        use opentelemetry_proto::tonic::collector::metrics::v1::{
            ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
        };
        use opentelemetry_proto::tonic::collector::trace::v1::{
            ExportTracePartialSuccess, ExportTraceServiceResponse,
        };
        const PROTO: &str = "application/x-protobuf";
        match self {
            Answer::Empty | Answer::Status { .. } | Answer::Series(_) => (PROTO, Bytes::new()),
            Answer::Huge(n) => (PROTO, Bytes::from(vec![0u8; *n])),
            Answer::Refused {
                code,
                message,
                proto: true,
            } => {
                // google.rpc.Status { code = 1, message = 2 }.
                let mut body = Vec::new();
                prost::encoding::int32::encode(1, &i32::from(*code), &mut body);
                prost::encoding::string::encode(2, message, &mut body);
                (PROTO, Bytes::from(body))
            }
            Answer::Refused { message, .. } => ("text/plain", Bytes::from(message.clone())),
            Answer::Rejected { items, message } => {
                let message = message.clone();
                let body = match path {
                    "/v1/traces" => ExportTraceServiceResponse {
                        partial_success: Some(ExportTracePartialSuccess {
                            rejected_spans: *items,
                            error_message: message,
                        }),
                    }
                    .encode_to_vec(),
                    "/v1/metrics" => ExportMetricsServiceResponse {
                        partial_success: Some(ExportMetricsPartialSuccess {
                            rejected_data_points: *items,
                            error_message: message,
                        }),
                    }
                    .encode_to_vec(),
                    _ => ExportLogsServiceResponse {
                        partial_success: Some(ExportLogsPartialSuccess {
                            rejected_log_records: *items,
                            error_message: message,
                        }),
                    }
                    .encode_to_vec(),
                };
                (PROTO, Bytes::from(body))
            }
            Answer::RejectedJson { items, message } => {
                let key = match path {
                    "/v1/traces" => "rejectedSpans",
                    "/v1/metrics" => "rejectedDataPoints",
                    _ => "rejectedLogRecords",
                };
                let body = serde_json::json!({
                    "partialSuccess": { key: items.to_string(), "errorMessage": message }
                });
                ("application/json", Bytes::from(body.to_string()))
            }
        }
    }
}

impl Answer {
    /// The answer to the export that is the `nth` (from 0) to its path.
    fn nth(&self, nth: usize) -> &Answer {
        match self {
            Answer::Series(all) => all.get(nth).or(all.last()).unwrap_or(&Answer::Empty),
            one => one,
        }
    }
}

/// The receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    posts: Arc<Mutex<Vec<Post>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start() -> Receiver {
        Receiver::start_on(0).await
    }

    /// On a given loopback port (0: any).
    pub async fn start_on(port: u16) -> Receiver {
        Receiver::start_answering(port, Answer::Empty).await
    }

    /// On a given loopback port (0: any), answering each export with `answer`.
    pub async fn start_answering(port: u16, answer: Answer) -> Receiver {
        let answer = Arc::new(answer);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let posts: Arc<Mutex<Vec<Post>>> = Arc::default();
        let p = posts.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let p = p.clone();
                let answer = answer.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let p = p.clone();
                        let answer = answer.clone();
                        async move {
                            let path = req.uri().path().to_string();
                            let headers = req
                                .headers()
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                                .collect();
                            let body = req.into_body().collect().await?.to_bytes();
                            let mut posts = p.lock().unwrap();
                            let nth = posts.iter().filter(|p| p.path == path).count();
                            let answer = answer.nth(nth);
                            let (content_type, reply) = answer.body(&path);
                            posts.push(Post {
                                path,
                                headers,
                                body,
                            });
                            drop(posts);
                            let mut response =
                                Response::builder().header("content-type", content_type);
                            if let Answer::Status { code, retry_after } = answer {
                                response = response.status(*code);
                                if let Some(r) = retry_after {
                                    response = response.header("retry-after", r.as_str());
                                }
                            }
                            if let Answer::Refused { code, .. } = answer {
                                response = response.status(*code);
                            }
                            Ok::<_, hyper::Error>(response.body(Full::new(reply)).unwrap())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Receiver { addr, posts, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap().clone()
    }

    fn bodies(&self, path: &str) -> Vec<Bytes> {
        self.posts()
            .into_iter()
            .filter(|p| p.path == path)
            .map(|p| p.body)
            .collect()
    }

    /// Every span received, with its resource attributes.
    pub fn spans(&self) -> Vec<Span> {
        let mut out = Vec::new();
        for b in self.bodies("/v1/traces") {
            let req = ExportTraceServiceRequest::decode(b).expect("valid OTLP trace protobuf");
            for rs in req.resource_spans {
                for ss in rs.scope_spans {
                    out.extend(ss.spans);
                }
            }
        }
        out
    }

    /// The metrics of the last export (cumulative: it holds every point so far).
    pub fn last_metrics(&self) -> Vec<Metric> {
        let Some(b) = self.bodies("/v1/metrics").pop() else {
            return Vec::new();
        };
        let req = ExportMetricsServiceRequest::decode(b).expect("valid OTLP metrics protobuf");
        req.resource_metrics
            .into_iter()
            .flat_map(|rm| rm.scope_metrics)
            .flat_map(|sm| sm.metrics)
            .collect()
    }

    /// The metrics of each export, in the order they came.
    pub fn all_metrics(&self) -> Vec<Vec<Metric>> {
        self.bodies("/v1/metrics")
            .into_iter()
            .map(|b| {
                ExportMetricsServiceRequest::decode(b)
                    .expect("valid OTLP metrics protobuf")
                    .resource_metrics
                    .into_iter()
                    .flat_map(|rm| rm.scope_metrics)
                    .flat_map(|sm| sm.metrics)
                    .collect()
            })
            .collect()
    }

    /// Every metric named `name` in every metrics export, in the order they came: several
    /// exporters in one process (a sweep's points, then its series) each post their own.
    pub fn metrics_named(&self, name: &str) -> Vec<Metric> {
        self.bodies("/v1/metrics")
            .into_iter()
            .flat_map(|b| {
                ExportMetricsServiceRequest::decode(b)
                    .expect("valid OTLP metrics protobuf")
                    .resource_metrics
            })
            .flat_map(|rm| rm.scope_metrics)
            .flat_map(|sm| sm.metrics)
            .filter(|m| m.name == name)
            .collect()
    }

    /// The resource attributes of the last metrics export.
    pub fn metrics_resource(&self) -> Vec<(String, String)> {
        let Some(b) = self.bodies("/v1/metrics").pop() else {
            return Vec::new();
        };
        let req = ExportMetricsServiceRequest::decode(b).unwrap();
        req.resource_metrics
            .into_iter()
            .flat_map(|rm| rm.resource)
            .flat_map(|r| r.attributes)
            .map(|kv| (kv.key, text(kv.value.as_ref())))
            .collect()
    }

    /// Every log record received.
    pub fn logs(&self) -> Vec<LogRecord> {
        let mut out = Vec::new();
        for b in self.bodies("/v1/logs") {
            let req = ExportLogsServiceRequest::decode(b).expect("valid OTLP logs protobuf");
            for rl in req.resource_logs {
                for sl in rl.scope_logs {
                    out.extend(sl.log_records);
                }
            }
        }
        out
    }
}

/// An attribute value as text (numbers in Rust's `Display` form).
pub fn text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// Attributes as a key -> text map.
pub fn attrs(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}
