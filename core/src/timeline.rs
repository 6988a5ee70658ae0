//! [`ClientTimeline`]: the client's figures over the run's time, in a bounded number of
//! buckets, so the diagnosis can say where errors, slow first tokens or late reads
//! happened. Buckets are keyed by each request's send time; when a run outgrows them their
//! width doubles and neighbours merge, so memory never grows with the run's length and the
//! result does not depend on the order records arrive in.

use crate::record::{ErrorKind, RequestRecord};

/// The client's figures of the requests sent in one bucket of time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClientBucket {
    /// Requests sent.
    pub sent: u64,
    /// Of those, requests the target failed (canaryd's own failures left out).
    pub target_errors: u64,
    /// Completed requests with a TTFT.
    pub ttft_n: u64,
    /// Sum of their TTFTs, ms.
    pub ttft_sum_ms: f64,
    /// Requests whose first-token read delay the kernel measured (eBPF).
    pub read_delay_n: u64,
    /// Sum of those delays (kernel receive → canaryd's read), ms.
    pub read_delay_sum_ms: f64,
}

impl ClientBucket {
    fn add(&mut self, o: &ClientBucket) {
        self.sent += o.sent;
        self.target_errors += o.target_errors;
        self.ttft_n += o.ttft_n;
        self.ttft_sum_ms += o.ttft_sum_ms;
        self.read_delay_n += o.read_delay_n;
        self.read_delay_sum_ms += o.read_delay_sum_ms;
    }

    /// Mean TTFT, ms.
    pub fn ttft_mean_ms(&self) -> Option<f64> {
        (self.ttft_n > 0).then(|| self.ttft_sum_ms / self.ttft_n as f64)
    }

    /// Mean first-token read delay, ms.
    pub fn read_delay_mean_ms(&self) -> Option<f64> {
        (self.read_delay_n > 0).then(|| self.read_delay_sum_ms / self.read_delay_n as f64)
    }

    /// Share of the requests sent that the target failed.
    pub fn error_share(&self) -> Option<f64> {
        (self.sent > 0).then(|| self.target_errors as f64 / self.sent as f64)
    }
}

/// The run's requests in time buckets of equal width, from the run's start.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTimeline {
    width_ms: f64,
    buckets: Vec<ClientBucket>,
}

impl Default for ClientTimeline {
    fn default() -> Self {
        ClientTimeline {
            width_ms: ClientTimeline::FIRST_WIDTH_MS,
            buckets: Vec::new(),
        }
    }
}

impl ClientTimeline {
    /// The most buckets kept.
    pub const MAX_BUCKETS: usize = 256;
    /// The width buckets start with: a run under 256 s keeps this resolution (finer
    /// buckets would hold too few requests to say where a rate held).
    pub const FIRST_WIDTH_MS: f64 = 1000.0;

    /// Adds one measured request (warm-up requests are left out by the caller).
    pub fn add(&mut self, r: &RequestRecord) {
        let t = r.sent_at_ms.max(0.0);
        let mut i = (t / self.width_ms) as usize;
        while i >= Self::MAX_BUCKETS {
            self.halve();
            i = (t / self.width_ms) as usize;
        }
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, ClientBucket::default());
        }
        let b = &mut self.buckets[i];
        b.sent += 1;
        let client_side = r.error.as_ref().is_some_and(|e| e.kind.is_client_side());
        if !r.is_ok() && !client_side {
            let cancelled = r
                .error
                .as_ref()
                .is_some_and(|e| e.kind == ErrorKind::Cancelled);
            b.target_errors += u64::from(!cancelled);
        }
        if let (true, Some(ttft)) = (r.is_ok(), r.ttft_ms) {
            b.ttft_n += 1;
            b.ttft_sum_ms += ttft;
        }
        if let Some(d) = r.kernel.as_ref().and_then(|k| k.client_overhead_ms) {
            b.read_delay_n += 1;
            b.read_delay_sum_ms += d;
        }
    }

    /// Doubles the width: bucket pairs merge.
    fn halve(&mut self) {
        let merged = self
            .buckets
            .chunks(2)
            .map(|pair| {
                let mut b = pair[0];
                if let Some(second) = pair.get(1) {
                    b.add(second);
                }
                b
            })
            .collect();
        self.buckets = merged;
        self.width_ms *= 2.0;
    }

    /// Each bucket's width, ms.
    pub fn width_ms(&self) -> f64 {
        self.width_ms
    }

    /// The buckets, from the run's start; bucket `i` holds requests sent in
    /// `[i × width, (i + 1) × width)`.
    pub fn buckets(&self) -> &[ClientBucket] {
        &self.buckets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RequestError, Status};

    fn rec(sent: f64, ttft: Option<f64>) -> RequestRecord {
        let mut r = RequestRecord {
            sent_at_ms: sent,
            ttft_ms: ttft,
            ..Default::default()
        };
        if ttft.is_none() {
            r.status = Status::Error;
            r.error = Some(RequestError {
                kind: ErrorKind::HttpStatus,
                http_status: Some(503),
                message: String::new(),
            });
        }
        r
    }

    #[test]
    fn buckets_double_as_the_run_grows_whatever_the_order() {
        let mut a = ClientTimeline::default();
        let mut b = ClientTimeline::default();
        let recs: Vec<RequestRecord> = (0..1000)
            .map(|i| rec(i as f64 * 300.0, (i % 10 != 0).then_some(20.0)))
            .collect();
        for r in &recs {
            a.add(r);
        }
        for r in recs.iter().rev() {
            b.add(r);
        }
        assert_eq!(a, b);
        // 300 s of requests: 1 s → 2 s buckets (150 of them).
        assert_eq!(a.width_ms(), 2000.0);
        assert_eq!(a.buckets().len(), 150);
        let sent: u64 = a.buckets().iter().map(|b| b.sent).sum();
        let errors: u64 = a.buckets().iter().map(|b| b.target_errors).sum();
        assert_eq!((sent, errors), (1000, 100));
        assert_eq!(a.buckets()[0].ttft_mean_ms(), Some(20.0));
        // 0, 0.3, …, 1.8 s: 7 requests, the first failed.
        assert_eq!(a.buckets()[0].sent, 7);
        assert_eq!(a.buckets()[0].target_errors, 1);
    }
}
