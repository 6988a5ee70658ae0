//! The cap on interim (1xx) responses before a request's final one, the same for every HTTP
//! client canaryd has: the replay's requests, `doctor`'s probe, the telemetry scrapes. hyper
//! reads past 1xx heads by itself, however many come: a server answering `100 Continue`
//! forever would have a request parse heads until its timeout, a core busy.

/// Interim responses a request may take before its final one. RFC 9110 allows several (a
/// `100 Continue`, then `103 Early Hints` with more links each); servers send one or two, so
/// 16 is far above any real answer and still bounds a flood to 16 heads, each within hyper's
/// head size cap.
pub const MAX_INTERIM: u32 = 16;
