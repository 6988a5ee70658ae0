//! The parts of a report, each rendered only when the artifacts hold its data. A section is a
//! function of the run(s) returning HTML, or nothing; [`crate::report`] lists them in order,
//! so a later section (a new slot) is one more function and one more line there.

pub mod bounds;
pub mod context;
pub mod diagnosis;
pub mod headline;
pub mod kernel;
pub mod latency;
pub mod repeats;
pub mod sweep;
pub mod telemetry;
pub mod timeline;
pub mod timeslices;

use crate::artifacts::Run;
use crate::html::esc;

/// A number with a few significant digits, no unit.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    if a >= 1e15 {
        // Past what digits read at a glance (canaryd clamps at 4.6e15; a damaged file can
        // hold 1e308): the exponent form, not 300 grouped digits.
        return format!("{v:.3e}").replace('-', "−");
    }
    if a < 1000.0 && v.fract() == 0.0 {
        return format!("{v:.0}");
    }
    if a >= 1000.0 {
        let s = format!("{v:.0}");
        // 12345 → 12,345 for reading at a glance.
        let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("−", d));
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        format!("{sign}{out}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a == 0.0 {
        "0".into()
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else if a >= 1e-6 {
        // Three significant digits, where three decimals read 0.000068 as 0.000.
        let decimals = 2 - a.log10().floor() as i32;
        format!("{v:.*}", decimals as usize)
    } else {
        format!("{v:.2e}").replace('-', "−")
    }
}

/// A duration in ms.
pub fn ms(v: f64) -> String {
    format!("{} ms", num(v))
}

/// A fraction as a percentage.
pub fn pct(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    format!("{:.2} %", v * 100.0)
}

/// A section: `<section id=…><h2>…</h2>…</section>`.
pub fn section(id: &str, title: &str, body: &str) -> String {
    format!(
        "<section id=\"{}\"><h2>{}</h2>\n{body}</section>\n",
        crate::html::attr(id),
        esc(title)
    )
}

/// Requests to draw one by one before folding them into time buckets.
pub const POINTS_MAX: usize = 2000;
/// Time buckets of a folded timeline.
pub const BUCKETS: usize = 300;

/// The x extent of a run's timelines, s from its start: every timeline of a run shares it,
/// so they line up.
pub fn time_range(run: &Run) -> (f64, f64) {
    let end = run
        .measured()
        .map(|r| r.ended_ms.max(r.sent_ms))
        .fold(0.0_f64, f64::max);
    (0.0, (end / 1000.0).max(0.001))
}
