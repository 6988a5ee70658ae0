//! Loads HTML files in headless Chromium and prints, per file, how long the load took as the
//! browser measured it (navigation start to the end of the load event, and to the first
//! contentful paint), the wall time from navigate to the load event, errors and requests.
//! For bench/report-size.sh: `cargo run --release -p canary-testkit --example page_load -- FILE…`.

use canary_testkit::browser::{chromium, Browser};
use std::time::Instant;

fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    let bin = chromium().unwrap_or_else(|e| panic!("{e}"));
    let mut b = Browser::launch(&bin).unwrap_or_else(|e| panic!("{e}"));
    println!("file,load_event_end_ms,first_contentful_paint_ms,wall_ms,errors,requests");
    for f in files {
        let path = std::fs::canonicalize(&f).unwrap_or_else(|e| panic!("{f}: {e}"));
        let started = Instant::now();
        let load = b
            .open(&format!("file://{}", path.display()), 1240)
            .unwrap_or_else(|e| panic!("{e}"));
        // `open` waits 300 ms after the load event for late errors: not part of the load.
        let wall = started.elapsed().as_secs_f64() * 1000.0 - 300.0;
        let mut timing = |expr: &str| {
            b.eval(&load, expr)
                .ok()
                .and_then(|v| v.as_f64())
                .unwrap_or(f64::NAN)
        };
        let load_end = timing("performance.getEntriesByType('navigation')[0].loadEventEnd");
        let fcp = timing(
            "(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: NaN}).startTime",
        );
        println!(
            "{f},{load_end:.0},{fcp:.0},{wall:.0},{},{}",
            load.errors.len(),
            load.requests.len()
        );
    }
}
