//! Exemplars on the latency histograms: each bucket of each series keeps the last sampled
//! request that fell in it (the OpenTelemetry spec's aligned-bucket reservoir), with the
//! trace and span id it carried in `traceparent`, so a Grafana user clicks from a TTFT spike
//! to that request's span.
//!
//! Why not the SDK: opentelemetry_sdk 0.33 never samples exemplars (its aggregators emit
//! none) and its data points cannot be built outside it. So [`ExemplarClient`], the HTTP
//! client of the metrics exporter only, adds them to the OTLP request on its way out:
//! decode, attach to the matching histogram points, encode. A body it cannot decode is sent
//! as it is. Exemplars sent in a request the collector accepted are forgotten; the others
//! go again with the next export.

use bytes::Bytes;
use opentelemetry::KeyValue;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue as ProtoKeyValue};
use opentelemetry_proto::tonic::metrics::v1::{exemplar, metric, Exemplar};
use prost::Message;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Series (metric and attribute set) that keep exemplars; beyond it a new series has none.
/// Series are workloads × targets × error kinds, far fewer in practice.
const MAX_SERIES: usize = 1024;

/// A series: the metric's name and its attributes as sorted `key=value` pairs.
type SeriesKey = (String, Vec<(String, String)>);

#[derive(Debug, Clone, Copy)]
struct Sampled {
    value: f64,
    time_unix_nano: u64,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    seq: u64,
}

/// The reservoir: per series, per bucket, the last sampled request.
#[derive(Debug, Default)]
pub(crate) struct Exemplars {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    series: BTreeMap<SeriesKey, BTreeMap<usize, Sampled>>,
    seq: u64,
}

impl Exemplars {
    /// Offers a measurement of `metric` with `attrs`, in seconds, from the request whose
    /// `traceparent` held `trace_id` and `span_id` (hex); one without valid ids is ignored.
    pub fn offer(
        &self,
        metric: &str,
        bounds: &[f64],
        attrs: &[KeyValue],
        value: f64,
        trace_id: &str,
        span_id: &str,
    ) {
        let (Some(trace_id), Some(span_id)) = (hex::<16>(trace_id), hex::<8>(span_id)) else {
            return;
        };
        if trace_id == [0; 16] || span_id == [0; 8] || !value.is_finite() {
            return;
        }
        // OTLP explicit buckets: bucket i holds (bounds[i-1], bounds[i]].
        let bucket = bounds.partition_point(|b| *b < value);
        let key = (metric.to_string(), series_attrs(attrs));
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !s.series.contains_key(&key) && s.series.len() >= MAX_SERIES {
            return;
        }
        s.seq += 1;
        let seq = s.seq;
        s.series.entry(key).or_default().insert(
            bucket,
            Sampled {
                value,
                time_unix_nano: unix_nanos(),
                trace_id,
                span_id,
                seq,
            },
        );
    }

    /// Adds the held exemplars to the histogram points of `body` (an OTLP metrics request);
    /// the new body, and the newest exemplar it holds (for [`Exemplars::sent`]).
    fn attach(&self, body: &[u8]) -> Option<(Vec<u8>, u64)> {
        let mut req = ExportMetricsServiceRequest::decode(body).ok()?;
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut newest = 0;
        for m in req
            .resource_metrics
            .iter_mut()
            .flat_map(|r| r.scope_metrics.iter_mut())
            .flat_map(|s| s.metrics.iter_mut())
        {
            let Some(metric::Data::Histogram(h)) = &mut m.data else {
                continue;
            };
            for p in &mut h.data_points {
                let key = (m.name.clone(), proto_attrs(&p.attributes));
                let Some(buckets) = s.series.get(&key) else {
                    continue;
                };
                for e in buckets.values() {
                    newest = newest.max(e.seq);
                    p.exemplars.push(Exemplar {
                        filtered_attributes: Vec::new(),
                        time_unix_nano: e.time_unix_nano,
                        span_id: e.span_id.to_vec(),
                        trace_id: e.trace_id.to_vec(),
                        value: Some(exemplar::Value::AsDouble(e.value)),
                    });
                }
            }
        }
        Some((req.encode_to_vec(), newest))
    }

    /// The collector took every exemplar up to `seq`: they are not sent again.
    fn sent(&self, seq: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for buckets in s.series.values_mut() {
            buckets.retain(|_, e| e.seq > seq);
        }
        s.series.retain(|_, b| !b.is_empty());
    }
}

/// The metrics exporter's HTTP client: the shared blocking client, with exemplars added to
/// each request.
#[derive(Debug)]
pub(crate) struct ExemplarClient {
    pub inner: crate::transport::ExportClient,
    pub exemplars: Arc<Exemplars>,
}

#[async_trait::async_trait]
impl HttpClient for ExemplarClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (mut parts, body) = request.into_parts();
        let Some((body, newest)) = self.exemplars.attach(&body) else {
            return self
                .inner
                .send_bytes(Request::from_parts(parts, body))
                .await;
        };
        parts.headers.remove(http::header::CONTENT_LENGTH);
        let response = self
            .inner
            .send_bytes(Request::from_parts(parts, Bytes::from(body)))
            .await?;
        if response.status().is_success() {
            self.exemplars.sent(newest);
        }
        Ok(response)
    }
}

fn series_attrs(attrs: &[KeyValue]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = attrs
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect();
    v.sort();
    v
}

fn proto_attrs(attrs: &[ProtoKeyValue]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = attrs
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                Some(any_value::Value::IntValue(i)) => i.to_string(),
                Some(any_value::Value::DoubleValue(d)) => d.to_string(),
                Some(any_value::Value::BoolValue(b)) => b.to_string(),
                _ => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect();
    v.sort();
    v
}

fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::{
        Histogram, HistogramDataPoint, Metric, ResourceMetrics, ScopeMetrics,
    };

    const T1: &str = "0af7651916cd43dd8448eb211c80319c";
    const S1: &str = "b7ad6b7169203331";

    fn body(attrs: Vec<ProtoKeyValue>) -> Vec<u8> {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "ttft".into(),
                        data: Some(metric::Data::Histogram(Histogram {
                            data_points: vec![HistogramDataPoint {
                                attributes: attrs,
                                ..Default::default()
                            }],
                            aggregation_temporality: 2,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    fn kv(k: &str, v: &str) -> ProtoKeyValue {
        ProtoKeyValue {
            key: k.into(),
            value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    fn exemplars_of(body: &[u8]) -> Vec<Exemplar> {
        let req = ExportMetricsServiceRequest::decode(body).unwrap();
        let m = &req.resource_metrics[0].scope_metrics[0].metrics[0];
        let Some(metric::Data::Histogram(h)) = &m.data else {
            panic!()
        };
        h.data_points[0].exemplars.clone()
    }

    #[test]
    fn the_last_request_per_bucket_goes_to_its_series_until_sent() {
        let x = Exemplars::default();
        let a = [KeyValue::new("w", "chat")];
        let bounds = [0.1, 1.0];
        x.offer("ttft", &bounds, &a, 0.05, T1, S1);
        // Same bucket, later: replaces the first.
        x.offer("ttft", &bounds, &a, 0.07, T1, "00000000000000a1");
        x.offer("ttft", &bounds, &a, 5.0, T1, S1);
        // Another series, an invalid id, a non-finite value: none reach `chat`'s point.
        x.offer("ttft", &bounds, &[KeyValue::new("w", "other")], 0.5, T1, S1);
        x.offer("ttft", &bounds, &a, 0.5, "zz", S1);
        x.offer("ttft", &bounds, &a, f64::NAN, T1, S1);
        x.offer("ttft", &bounds, &a, 0.5, &"0".repeat(32), S1);

        let (out, newest) = x.attach(&body(vec![kv("w", "chat")])).unwrap();
        let ex = exemplars_of(&out);
        let values: Vec<f64> = ex
            .iter()
            .map(|e| match e.value {
                Some(exemplar::Value::AsDouble(v)) => v,
                _ => panic!(),
            })
            .collect();
        assert_eq!(values, [0.07, 5.0]);
        assert_eq!(ex[0].span_id, [0, 0, 0, 0, 0, 0, 0, 0xa1]);
        assert_eq!(ex[1].trace_id, hex::<16>(T1).unwrap());
        // A point of no known series gets none; an undecodable body is left alone.
        assert!(exemplars_of(&x.attach(&body(vec![kv("w", "x")])).unwrap().0).is_empty());
        assert!(x.attach(b"\xff\xff\xff").is_none());

        // Sent: forgotten, but what arrived since stays for the next export.
        x.offer("ttft", &bounds, &a, 0.5, T1, S1);
        x.sent(newest);
        let (out, _) = x.attach(&body(vec![kv("w", "chat")])).unwrap();
        assert_eq!(exemplars_of(&out).len(), 1);
    }
}
