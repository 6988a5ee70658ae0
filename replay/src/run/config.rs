//! [`Config`]: the dispatcher's settings of one run, their defaults, and the checks
//! [`run()`](super::run()) makes before it opens anything.

use super::{Balance, Cancellation};
use crate::plan::{Setting, SettingError};
use crate::schedule::Schedule;
use crate::start::StartAt;
use crate::target::Target;
use canary_core::{ContextBaseline, Goodput, InFlightCap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The most warm-up requests a run sends. They are sent one at a time, their ids count down
/// from `u32::MAX` (clear of the measured requests', below
/// [`MAX_REQUEST_COUNT`](crate::MAX_REQUEST_COUNT)), and their records are held in memory
/// until the measured phase starts (about 1 KB each; more with `record_chunks`), so they are
/// bounded: unbounded, a count past 3.3 billion took their ids down into the measured ones'
/// (past 2^32 they wrapped), and memory grew with it. Ten thousand sequential requests are
/// far more than any server needs to warm up.
pub const MAX_WARMUP_REQUESTS: usize = 10_000;

/// The dispatcher's settings of one run: the target, and how the run goes. The speedup is
/// the schedule's ([`Schedule::new`]); the observers are given to [`run()`](super::run()).
#[derive(Debug, Clone)]
pub struct Config {
    /// The server.
    pub target: Target,
    /// More URLs of the same service (`--url` repeated): the same settings as `target` but
    /// the URL; requests are spread over `target` and these by `balance`.
    pub replicas: Vec<Target>,
    /// How requests are spread when there are replicas.
    pub balance: Balance,
    /// At most this many requests in flight; the rest wait (and the wait is recorded as hold).
    pub concurrency: Option<usize>,
    /// Requests sent, one at a time, before the measured phase; left out of statistics. At
    /// most [`MAX_WARMUP_REQUESTS`].
    pub warmup_requests: usize,
    /// After a stop, in-flight requests get this long to finish.
    pub grace_period: Duration,
    /// SLOs for goodput.
    pub goodput: Goodput,
    /// Where artifacts go; `None` keeps results in memory only.
    pub output_dir: Option<PathBuf>,
    /// Add every inter-chunk gap to each record.
    pub record_chunks: bool,
    /// How long before its deadline a request is prepared (prompt built, connection opened).
    pub prepare_ahead: Duration,
    /// Prefix of `x-request-id` values.
    pub run_id: String,
    /// Share of requests whose `traceparent` is flagged sampled (decided on the trace id, as
    /// the exporter decides which spans to send).
    pub trace_sample_ratio: f64,
    /// Mixed into the text of prompt blocks no hash id covers (rows without hash ids, tokens
    /// past a row's last id, warm-up requests), so that text is new to the server on every
    /// run. Blocks of hash ids never depend on it: they stay equal across runs (and shards)
    /// so the trace's prefix sharing is replayed. [`Config::new`] draws a fresh one; set it to
    /// repeat a run's exact prompts (it is reported as `prompt_salt` in `summary.json`).
    pub prompt_salt: u64,
    /// [`run()`](super::run()) refuses a schedule with a row asking for more input or output
    /// tokens than this: prompts and response caps are sized by those numbers. Default
    /// [`DEFAULT_LENGTH_LIMIT`](crate::trace::DEFAULT_LENGTH_LIMIT), as when loading; from 1
    /// to [`MAX_LENGTH_LIMIT`](crate::trace::MAX_LENGTH_LIMIT) ([`Config::validate`]).
    pub length_limit: u32,
    /// Requests cancelled on purpose (never warm-up ones); `None`: none.
    pub cancellation: Option<Cancellation>,
    /// Start the schedule at this wall-clock instant (shared by every shard) instead of as
    /// soon as the run is ready; see [`StartAt`] for a run that begins after it.
    pub start_at: Option<StartAt>,
    /// The run the context is compared with (the daemon's newest baseline run): what
    /// changed since is `summary.json`'s `context_changes`. `None`: not compared.
    pub baseline_context: Option<ContextBaseline>,
    /// Keep the run's figures in slices of this duration from its start (issue 18).
    pub slice_duration: Option<Duration>,
    /// Prepare the requests and read the responses on a runtime of the run's own, sized by
    /// its planned load (the default; [`crate::run_work`]). False runs them on the caller's
    /// runtime: a library caller's choice, and tests whose simulator must share the client's
    /// one thread.
    pub own_runtime: bool,
    /// Told the run's in-flight ceiling once it is set, before the first request (warm-up
    /// included): the ceiling counts the files the run opened itself, which a caller
    /// checking the open-file limit earlier cannot know.
    pub on_in_flight_cap: Option<CapHook>,
    /// Asked, when the run was stopped before its end, why its caller's own limits stopped
    /// it (a deadline, a target that answered nothing); `None`: they did not (a signal did).
    /// `summary.json` says it as `cut`, and its `interrupted` is then false.
    pub stop_reason: Option<StopReason>,
}

/// Why a run's caller stopped it ([`Config::stop_reason`]).
#[derive(Clone)]
pub struct StopReason(pub Arc<dyn Fn() -> Option<String> + Send + Sync>);

impl std::fmt::Debug for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopReason")
    }
}

/// A callback given the run's [`InFlightCap`] ([`Config::on_in_flight_cap`]).
#[derive(Clone)]
pub struct CapHook(pub Arc<dyn Fn(&InFlightCap) + Send + Sync>);

impl std::fmt::Debug for CapHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapHook")
    }
}

impl Config {
    /// Checks a warm-up request count is at most [`MAX_WARMUP_REQUESTS`] (a front end may
    /// check a flag's value with it before building a plan).
    pub fn check_warmup_requests(n: usize) -> Result<(), SettingError> {
        if n > MAX_WARMUP_REQUESTS {
            return Err(SettingError::new(
                Setting::WarmupRequests,
                format!(
                    "expected at most {MAX_WARMUP_REQUESTS} warm-up requests (each is held in \
                     memory until the measured phase starts), found {n}"
                ),
            ));
        }
        Ok(())
    }

    /// Defaults for everything but the target.
    pub fn new(target: Target) -> Config {
        Config {
            target,
            replicas: Vec::new(),
            balance: Balance::default(),
            concurrency: None,
            warmup_requests: crate::Plan::WARMUP_REQUESTS,
            grace_period: crate::Plan::GRACE_PERIOD,
            goodput: Goodput::default(),
            output_dir: None,
            record_chunks: false,
            prepare_ahead: Duration::from_millis(50),
            run_id: format!("run-{:08x}", crate::ids::next_u64() as u32),
            trace_sample_ratio: 1.0,
            // 53 bits: exact in every JSON reader (summary.json reports it).
            prompt_salt: crate::ids::next_u64() >> 11,
            length_limit: crate::trace::DEFAULT_LENGTH_LIMIT,
            cancellation: None,
            start_at: None,
            baseline_context: None,
            slice_duration: None,
            own_runtime: true,
            on_in_flight_cap: None,
            stop_reason: None,
        }
    }
}

impl Config {
    /// Checks the settings [`run()`](super::run()) would otherwise trip on: a concurrency
    /// ceiling of 0 (no request could ever be sent), a zero connect timeout (no connection
    /// could ever open), a CA bundle that cannot be loaded (whatever the target's scheme: it
    /// serves `https` metrics endpoints too), extra headers that frame the request, and
    /// `extra_inputs` replacing fields canaryd sets itself.
    /// [`run()`](super::run()) calls it first; callers may call it earlier to fail before
    /// starting anything.
    pub fn validate(&self) -> Result<(), SettingError> {
        let positive = |setting, d: Duration| match d.is_zero() {
            true => Err(SettingError::new(
                setting,
                "expected a positive duration, found 0",
            )),
            false => Ok(()),
        };
        Self::check_warmup_requests(self.warmup_requests)?;
        let max = crate::trace::MAX_LENGTH_LIMIT;
        if !(1..=max).contains(&self.length_limit) {
            return Err(SettingError::new(
                Setting::LengthLimit,
                format!(
                    "expected 1 to {max} tokens (the longest context announced; a prompt is \
                     sized by it), found {}",
                    self.length_limit
                ),
            ));
        }
        positive(Setting::ConnectTimeout, self.target.connect_timeout)?;
        positive(Setting::RequestTimeout, self.target.timeout)?;
        self.target.limits.validate()?;
        if let Some(c) = &self.cancellation {
            c.validate()?;
        }
        if self.concurrency == Some(0) {
            return Err(SettingError::new(
                Setting::Concurrency,
                "expected at least 1 request in flight, found 0",
            ));
        }
        if let Some(start) = &self.start_at {
            start.place()?;
        }
        if let Some(d) = self.slice_duration {
            positive(Setting::SliceDuration, d)?;
        }
        self.check_slos_have_values()?;
        self.check_ca_bundle()?;
        self.check_client_identity()?;
        self.target
            .check_headers()
            .map_err(|reason| SettingError::new(Setting::Headers, reason))?;
        self.target
            .check_extra_inputs()
            .map_err(|reason| SettingError::new(Setting::ExtraInputs, reason))
    }

    /// Loads the CA bundle as a run would. An `http` target's bundle was only for its `https`
    /// metrics endpoints, and a bad one was a warning there, the scrapes falling back to the
    /// system's roots, where an `https` target's failed the run: both are refused now, before
    /// anything starts.
    fn check_ca_bundle(&self) -> Result<(), SettingError> {
        let Some(path) = &self.target.ca_bundle else {
            return Ok(());
        };
        match canary_tls::check_bundle(path) {
            Ok(_) => Ok(()),
            Err(canary_tls::TlsError::CaBundle { reason, .. }) => {
                Err(SettingError::new(Setting::CaBundle, reason).with_value(path.display()))
            }
            Err(other) => Err(SettingError::new(Setting::CaBundle, other.to_string())),
        }
    }

    /// Loads the client certificate and key as a run would, whatever the scheme (an `http`
    /// target's `https` metrics endpoints present them too): a missing file, a key that is
    /// not the certificate's, is refused before anything starts. The key's contents are never
    /// quoted.
    fn check_client_identity(&self) -> Result<(), SettingError> {
        use canary_tls::TlsError;
        let Some(id) = &self.target.client_identity else {
            return Ok(());
        };
        match canary_tls::check_identity(id) {
            Ok(()) => Ok(()),
            Err(TlsError::ClientCert { path, reason }) => {
                Err(SettingError::new(Setting::ClientCert, reason).with_value(path.display()))
            }
            Err(TlsError::ClientKey { path, reason }) => {
                Err(SettingError::new(Setting::ClientKey, reason).with_value(path.display()))
            }
            Err(other) => Err(SettingError::new(Setting::ClientKey, other.to_string())),
        }
    }

    /// Refuses an SLO no request can meet: without streaming a response's tokens come in one
    /// event, so there is no time between them (ITL, TTST) nor a per-user rate, and every
    /// request would fall short of the term (it read 0 ms and met it, before ITL needed two
    /// events).
    fn check_slos_have_values(&self) -> Result<(), SettingError> {
        use canary_core::SloMetric::{
            InterTokenLatency, OutputTokenThroughputPerUser, TimeToSecondToken,
        };
        let needs_stream = |m| {
            matches!(
                m,
                InterTokenLatency | TimeToSecondToken | OutputTokenThroughputPerUser
            )
        };
        match self.goodput.slos.iter().find(|s| needs_stream(s.metric)) {
            Some(slo) if !self.target.streaming => Err(SettingError::new(
                Setting::Goodput,
                format!(
                    "{} needs streamed responses: without streaming the tokens come in one \
                     event, with no time between them, and no request could meet it",
                    slo.metric.name()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Checks what [`run()`](super::run()) would be asked to do with `schedule`: every length
    /// within [`Config::length_limit`] (a prompt is sized by it), and an end within
    /// [`MAX_SPAN`](crate::trace::MAX_SPAN) (a speedup of 1e-12 never ends).
    pub fn check_schedule(&self, schedule: &Schedule) -> Result<(), SettingError> {
        let limit = self.length_limit;
        let mut rows = schedule.rows_in_order();
        if let Some(r) = rows.find(|r| r.input_tokens() > limit || r.output_tokens() > limit) {
            return Err(SettingError::new(
                Setting::LengthLimit,
                format!(
                    "line {} asks for {} input and {} output tokens, over the limit of {limit}",
                    r.line(),
                    r.input_tokens(),
                    r.output_tokens()
                ),
            ));
        }
        let max = crate::trace::MAX_SPAN;
        if schedule.min_duration() > max {
            return Err(SettingError::new(
                Setting::Speedup,
                format!(
                    "at {}x the schedule would take more than {} days",
                    crate::trace::Number(schedule.timing().speedup()),
                    max.as_secs() / 86_400
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Endpoint;

    // Audit f5, item 6: a bad bundle beside an `http` target was only a warning (its
    // `https` metrics fell back to the system's roots), where beside an `https` one it failed
    // the run.
    #[test]
    fn a_bad_ca_bundle_is_refused_whatever_the_scheme() {
        let dir = tempfile::tempdir().unwrap();
        let typo = dir.path().join("typo.pem");
        for url in ["http://h:1", "https://h:1"] {
            let mut c = Config::new(Target::new(url, Endpoint::Chat, "m").unwrap());
            c.target.ca_bundle = Some(typo.clone());
            let e = c.validate().unwrap_err();
            assert_eq!(e.setting, Setting::CaBundle, "{url}");
            assert_eq!(
                e.spelled("--ca-bundle"),
                format!(
                    "--ca-bundle {}: No such file or directory (os error 2)",
                    typo.display()
                )
            );
        }
    }

    #[test]
    fn a_bad_client_identity_is_refused_by_its_setting() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("client.pem"), dir.path().join("typo.key"));
        std::fs::write(&cert, canary_testkit::ClientPki::new().cert_pem).unwrap();
        let mut c = Config::new(Target::new("http://h:1", Endpoint::Chat, "m").unwrap());
        c.target.client_identity = Some(canary_tls::ClientIdentity {
            cert: cert.clone(),
            key: key.clone(),
        });
        let e = c.validate().unwrap_err();
        assert_eq!(e.setting, Setting::ClientKey);
        assert_eq!(
            e.spelled("--client-key"),
            format!(
                "--client-key {}: No such file or directory (os error 2)",
                key.display()
            )
        );
        c.target.client_identity = Some(canary_tls::ClientIdentity {
            cert: key.clone(),
            key: cert,
        });
        let e = c.validate().unwrap_err();
        assert_eq!(e.setting, Setting::ClientCert);
    }

    #[test]
    fn an_slo_between_tokens_needs_streaming() {
        let mut c = Config::new(Target::new("http://h:1", Endpoint::Chat, "m").unwrap());
        c.goodput = "time_to_first_token:500 inter_token_latency:50"
            .parse()
            .unwrap();
        assert!(c.validate().is_ok(), "streamed: every term has a value");
        c.target.streaming = false;
        let e = c.validate().unwrap_err();
        assert_eq!(e.setting, Setting::Goodput);
        assert!(
            e.to_string()
                .contains("inter_token_latency needs streamed responses"),
            "{e}"
        );
        for ok in ["time_to_first_token:500", "request_latency:2000"] {
            c.goodput = ok.parse().unwrap();
            assert!(c.validate().is_ok(), "{ok}");
        }
    }

    // Warm-up requests had no ceiling: their ids count down from u32::MAX, and a count past
    // 3.3 billion took them into the measured ones' (past 2^32 they wrapped).
    #[test]
    fn warmup_requests_are_bounded() {
        let mut c = Config::new(Target::new("http://h:1", Endpoint::Chat, "m").unwrap());
        c.warmup_requests = MAX_WARMUP_REQUESTS;
        assert!(c.validate().is_ok());
        c.warmup_requests = MAX_WARMUP_REQUESTS + 1;
        let e = c.validate().unwrap_err();
        assert_eq!(e.setting, Setting::WarmupRequests);
        assert!(
            e.spelled("--warmup-requests")
                .starts_with("--warmup-requests: expected at most 10000 warm-up requests"),
            "{e}"
        );
    }
}
