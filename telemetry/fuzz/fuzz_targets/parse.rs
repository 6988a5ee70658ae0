//! Feeds arbitrary bytes to the Prometheus parser and the histogram math; any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let scrape = canary_telemetry::prometheus::parse(&text);
    for family in &scrape.families {
        for (_, h) in family.histograms().unwrap_or_default() {
            let _ = h.quantile(0.99);
            let _ = h.delta(&h);
        }
    }
});
