//! `check-config` says once that an `[otlp.headers]` value cannot be read here: it used to
//! say it twice, as "OTLP export off: …" and as the header's own warning.

use super::canaryd;
use crate::common::text;

#[test]
fn an_unset_otlp_header_variable_is_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("canaryd.toml"),
        "[targets.t]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n\
         [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
         [otlp]\nendpoint = \"http://127.0.0.1:4318\"\n\
         [otlp.headers]\nx-bad = { env = \"CANARYD_TEST_NEVER_SET_71\" }\n",
    )
    .unwrap();
    let out = canaryd(&["check-config", "canaryd.toml"], dir.path());
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(0), "{msg}");
    assert_eq!(
        msg.matches("CANARYD_TEST_NEVER_SET_71 is not set").count(),
        1,
        "{msg}"
    );
    assert!(msg.contains("OTLP export stays off"), "{msg}");
}
