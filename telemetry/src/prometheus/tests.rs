//! Hand-made edge cases for the parser; the real captures are tested in `tests/fixtures.rs`.

use super::*;

#[test]
fn colon_names_and_escaped_label_values() {
    let s = parse(concat!(
        "# HELP vllm:num_requests_running Number of requests.\\nSecond line \\\\ done\n",
        "# TYPE vllm:num_requests_running gauge\n",
        "vllm:num_requests_running{model_name=\"a,b\",path=\"C:\\\\x\",q=\"say \\\"hi\\\"\",nl=\"1\\n2\"} 3\n",
    ));
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let f = s.family("vllm:num_requests_running").unwrap();
    assert_eq!(f.kind, MetricKind::Gauge);
    assert_eq!(
        f.help.as_deref(),
        Some("Number of requests.\nSecond line \\ done")
    );
    let l = &f.samples[0].labels;
    assert_eq!(l.get("model_name"), Some("a,b"));
    assert_eq!(l.get("path"), Some("C:\\x"));
    assert_eq!(l.get("q"), Some("say \"hi\""));
    assert_eq!(l.get("nl"), Some("1\n2"));
    assert_eq!(s.sum("vllm:num_requests_running"), Some(3.0));
}

#[test]
fn special_values_and_timestamps() {
    let s = parse(concat!(
        "a +Inf\n",
        "b -Inf 1700000000000\n",
        "c NaN\n",
        "d{x=\"1\"} 1.5e3 -12\n",
        "e 0x10\n",
    ));
    assert_eq!(s.sum("a"), Some(f64::INFINITY));
    assert_eq!(s.sum("b"), Some(f64::NEG_INFINITY));
    assert!(s.family("c").unwrap().samples[0].value.is_nan());
    assert_eq!(s.sum("c"), None, "NaN is left out of sums");
    let d = &s.family("d").unwrap().samples[0];
    assert_eq!((d.value, d.timestamp_ms), (1500.0, Some(-12.0)));
    assert_eq!(s.family("b").unwrap().samples[0].timestamp_ms, Some(1.7e12));
    assert_eq!(s.format(), Format::Prometheus);
    // Hex is not a Prometheus float.
    assert_eq!(s.skipped_lines, 1);
    assert_eq!(s.errors[0].line, 5);
    assert_eq!(s.errors[0].kind, IssueKind::BadValue);
}

#[test]
fn openmetrics_counter_histogram_exemplars_and_eof() {
    let s = parse(concat!(
        "# TYPE rpc counter\n",
        "# UNIT rpc requests\n",
        "rpc_total{code=\"200\"} 10 1700000000.5\n",
        "rpc_created{code=\"200\"} 1699999999\n",
        "# TYPE lat histogram\n",
        "lat_bucket{le=\"0.1\"} 1 # {trace_id=\"abc\"} 0.05 1700000000.25\n",
        "lat_bucket{le=\"1\"} 3 # {trace_id=\"def\",span=\"x\"} 0.67\n",
        "lat_bucket{le=\"+Inf\"} 4\n",
        "lat_sum 5.5\n",
        "lat_count 4\n",
        "lat_created 1699999999\n",
        "# EOF\n",
        "after 1\n",
    ));
    assert!(s.eof);
    assert_eq!(s.format(), Format::OpenMetrics);
    assert_eq!(s.families.len(), 2);
    let rpc = s.family("rpc_total").unwrap();
    assert_eq!(rpc.name, "rpc");
    assert_eq!(rpc.unit.as_deref(), Some("requests"));
    assert_eq!(rpc.samples.len(), 2);
    // OpenMetrics timestamps are seconds; Sample keeps milliseconds.
    assert_eq!(rpc.samples[0].timestamp_ms, Some(1_700_000_000_500.0));
    assert_eq!(s.sum("rpc"), Some(10.0));
    assert_eq!(s.sum("rpc_total"), Some(10.0));
    let lat = s.family("lat").unwrap();
    let ex = lat.samples[0].exemplar.as_ref().unwrap();
    assert_eq!(ex.labels.get("trace_id"), Some("abc"));
    assert_eq!((ex.value, ex.timestamp_s), (0.05, Some(1_700_000_000.25)));
    let ex = lat.samples[1].exemplar.as_ref().unwrap();
    assert_eq!((ex.labels.len(), ex.value, ex.timestamp_s), (2, 0.67, None));
    let h = s.histogram("lat").unwrap();
    assert_eq!(
        h.buckets,
        vec![(0.1, 1.0), (1.0, 3.0), (f64::INFINITY, 4.0)]
    );
    assert_eq!((h.sum, h.count), (Some(5.5), Some(4.0)));
    assert_eq!(s.skipped_lines, 1);
    assert_eq!(s.errors[0].kind, IssueKind::AfterEof);
}

#[test]
fn garbage_lines_are_skipped_and_counted() {
    let text = concat!(
        "# TYPE ok gauge\n",
        "ok 1\n",
        "{\n",
        "bad{x=\"unterminated} 1\n",
        "bad{x=1} 1\n",
        "bad{=\"\"} 1\n",
        "novalue\n",
        "two values 1 2 3\n",
        "ts 1 notanumber\n",
        "ts 1 +Inf\n",
        "9starts_with_digit 1\n",
        "# TYPE\n",
        "# TYPE weird flux\n",
        "ok{y=\"2\"} 2 # not an exemplar\n",
        "ok{z=\"3\"} 3\r\n",
        "\t\n",
        "# just a comment\n",
    );
    let s = parse(text);
    assert_eq!(s.sum("ok"), Some(6.0), "{:?}", s.errors);
    // The bad exemplar is an issue but its sample is kept.
    assert_eq!(s.skipped_lines, 11, "{:#?}", s.errors);
    assert_eq!(s.errors.len(), 12);
    assert_eq!(s.errors[0].line, 3);
    assert!(s
        .errors
        .iter()
        .any(|e| e.kind == IssueKind::BadExemplar && e.line == 14));
    assert_eq!(s.family("weird").unwrap().kind, MetricKind::Untyped);
}

/// dcgm-exporter writes a field it cannot format (seen for
/// DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION on a MIG node) with its error text in the value's
/// place: that line is skipped and counted, the family's other lines kept.
#[test]
fn an_exporters_error_text_for_a_value_is_skipped() {
    let s = parse(concat!(
        "# TYPE DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION gauge\n",
        "DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION{gpu=\"0\",GPU_I_ID=\"3\"} ERROR - FAILED TO CONVERT TO STRING\n",
        "DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION{gpu=\"1\"} 0\n",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n",
        "DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"} 27\n",
    ));
    assert_eq!(s.skipped_lines, 1, "{:?}", s.errors);
    let f = s
        .family("DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION")
        .unwrap();
    assert_eq!(f.samples.len(), 1);
    assert_eq!(f.samples[0].labels.get("gpu"), Some("1"));
    assert_eq!(s.sum("DCGM_FI_DEV_GPU_TEMP"), Some(27.0));
}

#[test]
fn issues_are_capped_but_all_counted() {
    let text = "x{\n".repeat(100);
    let s = parse(&text);
    assert_eq!(s.skipped_lines, 100);
    assert_eq!(s.errors.len(), MAX_ISSUES);
}

#[test]
fn undeclared_samples_and_suffix_rules() {
    let s = parse(concat!(
        "# TYPE g gauge\n",
        "g_count 1\n", // a gauge has no _count: its own untyped family
        "# TYPE s summary\n",
        "s{quantile=\"0.5\"} 2\n",
        "s_sum 10\n",
        "s_count 5\n",
        "loose 7\n",
        "# TYPE g counter\n",
    ));
    assert_eq!(s.family("g_count").unwrap().kind, MetricKind::Untyped);
    assert_eq!(s.family("s").unwrap().samples.len(), 3);
    assert_eq!(s.family("s_count").unwrap().name, "s");
    assert_eq!(s.family("loose").unwrap().kind, MetricKind::Untyped);
    assert_eq!(s.family("g").unwrap().kind, MetricKind::Gauge);
    assert_eq!(s.errors[0].kind, IssueKind::DuplicateType);
}

#[test]
fn utf8_quoted_names_and_labels() {
    let s = parse("{\"my.metric\",\"label.x\"=\"é\",b=\"2\"} 4\n");
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let f = s.family("my.metric").unwrap();
    assert_eq!(f.samples[0].labels.get("label.x"), Some("é"));
}

#[test]
fn labels_sorted_and_last_duplicate_wins() {
    let s = parse("m{b=\"1\",a=\"2\",b=\"3\"} 1\n");
    let l = &s.families[0].samples[0].labels;
    assert_eq!(l.iter().collect::<Vec<_>>(), vec![("a", "2"), ("b", "3")]);
    assert_eq!(l.without(&["a"]).len(), 1);
}

#[test]
fn histograms_per_label_set_and_merged() {
    let s = parse(concat!(
        "# TYPE h histogram\n",
        "h_bucket{m=\"a\",le=\"1\"} 1\n",
        "h_bucket{m=\"a\",le=\"+Inf\"} 2\n",
        "h_sum{m=\"a\"} 3\n",
        "h_count{m=\"a\"} 2\n",
        "h_bucket{m=\"b\",le=\"1.0\"} 4\n",
        "h_bucket{m=\"b\",le=\"+Inf\"} 4\n",
        "h_sum{m=\"b\"} 2\n",
        "h_count{m=\"b\"} 4\n",
    ));
    let per = s.histograms("h").unwrap();
    assert_eq!(per.len(), 2);
    assert_eq!(per[1].0.get("m"), Some("b"));
    let all = s.histogram("h").unwrap();
    assert_eq!(all.buckets, vec![(1.0, 5.0), (f64::INFINITY, 6.0)]);
    assert_eq!((all.sum, all.count), (Some(5.0), Some(6.0)));
}

#[test]
fn empty_and_whitespace_inputs() {
    for text in ["", "\n", "\n\n  \n", "# EOF", "#", "# HELP"] {
        let s = parse(text);
        assert!(s.families.is_empty(), "{text:?}");
    }
    assert_eq!(parse("# HELP").skipped_lines, 1);
}

/// A page of `n` label sets of one histogram, each with `buckets` buckets of its own bounds.
fn wide_histogram(n: usize, buckets: usize) -> String {
    let mut page = String::from("# TYPE h histogram\n");
    for a in 0..n {
        for b in 0..buckets {
            page.push_str(&format!(
                "h_bucket{{a=\"{a}\",le=\"{}\"}} {b}\n",
                a * buckets + b
            ));
        }
        page.push_str(&format!("h_bucket{{a=\"{a}\",le=\"+Inf\"}} {buckets}\n"));
    }
    page
}

#[test]
fn a_histogram_past_the_caps_is_refused_not_built() {
    use super::{Oversized, MAX_BUCKETS, MAX_LABEL_SETS};
    // At the caps: used. One bucket of each label set is `+Inf`, shared by all.
    let s = parse(&wide_histogram(1, MAX_BUCKETS - 1));
    assert_eq!(s.histogram("h").unwrap().buckets.len(), MAX_BUCKETS);
    let s = parse(&wide_histogram(MAX_LABEL_SETS, 0));
    assert_eq!(s.histograms("h").unwrap().len(), MAX_LABEL_SETS);
    assert_eq!(s.histogram("h").unwrap().count, Some(0.0));
    // One bucket more in one label set.
    let s = parse(&wide_histogram(1, MAX_BUCKETS));
    assert_eq!(s.histograms("h").unwrap_err(), Oversized::Buckets);
    assert_eq!(s.histogram("h"), None);
    // Label sets each within the cap whose bounds, merged, are past it.
    let s = parse(&wide_histogram(4, MAX_BUCKETS / 2));
    assert_eq!(s.histograms("h").unwrap().len(), 4);
    assert_eq!(s.histogram_checked("h").unwrap_err(), Oversized::Buckets);
    // One label set more.
    let s = parse(&wide_histogram(MAX_LABEL_SETS + 1, 0));
    assert_eq!(s.histograms("h").unwrap_err(), Oversized::LabelSets);
    assert_eq!(s.histogram("h"), None);
    // 40,000 label sets (the page a hostile server sent an audit): refused at the cap.
    let s = parse(&wide_histogram(40_000, 1));
    assert_eq!(s.histograms("h").unwrap_err(), Oversized::LabelSets);
}

// One line of a million empty labels took about eight times its size before any cap was
// looked at: the label count is checked while the line is parsed.
#[test]
fn a_sample_past_the_label_cap_is_skipped_as_it_is_read() {
    let labels: Vec<String> = (0..MAX_LABELS).map(|i| format!("l{i}=\"\"")).collect();
    let at_cap = format!("vllm:num_requests_running{{{}}} 3\n", labels.join(","));
    let over = format!(
        "vllm:num_requests_waiting{{{},extra=\"\"}} 4\n",
        labels.join(",")
    );
    let s = parse(&format!("{at_cap}{over}"));
    assert_eq!(s.skipped_lines, 1);
    assert_eq!(s.errors.len(), 1);
    assert_eq!(s.errors[0].kind, IssueKind::TooManyLabels);
    assert_eq!(s.errors[0].line, 2);
    assert_eq!(s.families.len(), 1, "{:?}", s.families);
    assert_eq!(s.families[0].samples[0].value, 3.0);
}

// A page of millions of samples (within the body cap) would take gigabytes parsed, on every
// scrape: the first MAX_SAMPLES are kept, the rest skipped and said; likewise families.
#[test]
fn a_page_past_the_sample_or_family_cap_keeps_the_first_and_says_so() {
    let over = 5;
    let mut page = String::from("# TYPE vllm:num_requests_running gauge\n");
    for i in 0..MAX_SAMPLES + over {
        page.push_str(&format!("vllm:num_requests_running{{i=\"{i}\"}} 1\n"));
    }
    page.push_str("# TYPE other gauge\nother 1\n");
    let s = parse(&page);
    assert_eq!(s.skipped_lines, over + 1);
    assert!(s.errors.iter().any(|e| e.kind == IssueKind::TooMany));
    // The families the cap cut are left empty: part of a histogram's buckets would mislead.
    assert_eq!(s.families.len(), 2);
    assert!(s.families.iter().all(|f| f.samples.is_empty()));
    let mut page = String::new();
    for i in 0..MAX_FAMILIES + over {
        page.push_str(&format!("# TYPE family_{i} gauge\n"));
    }
    page.push_str("family_0 1\n");
    let s = parse(&page);
    assert_eq!(s.families.len(), MAX_FAMILIES);
    assert_eq!(s.skipped_lines, over);
    assert_eq!(
        s.families[0].samples.len(),
        1,
        "a known family still takes samples"
    );
}
