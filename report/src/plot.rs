//! Charts as inline SVG, drawn by `plotters` in Rust: no script, no font file, nothing fetched.
//!
//! A [`Plot`] is axes plus named layers (a line, points, bars, a band). The frame (axes,
//! grid, tick labels) and each layer are drawn by plotters on identical layouts, and every
//! layer lands in its own `<g class="series">` group, so a browser test can count what each
//! chart really drew. The legend is HTML, beside the SVG.

mod draw;

use crate::html::{attr, esc};

/// One of the report's colours (Tableau 10: distinct, and readable by most colour-blind
/// readers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Colour(pub u8, pub u8, pub u8);

impl Colour {
    /// The series palette, in order.
    pub const PALETTE: [Colour; 10] = [
        Colour(0x4e, 0x79, 0xa7),
        Colour(0xf2, 0x8e, 0x2b),
        Colour(0x59, 0xa1, 0x4f),
        Colour(0xb0, 0x7a, 0xa1),
        Colour(0x76, 0xb7, 0xb2),
        Colour(0xed, 0xc9, 0x48),
        Colour(0x9c, 0x75, 0x5f),
        Colour(0xff, 0x9d, 0xa7),
        Colour(0xba, 0xb0, 0xac),
        Colour(0xe1, 0x57, 0x59),
    ];
    /// Errors and failures.
    pub const ERROR: Colour = Colour(0xd6, 0x27, 0x28);
    /// Reference lines (knees, thresholds).
    pub const RULE: Colour = Colour(0x55, 0x55, 0x55);
    /// Shaded intervals (where the diagnosis held).
    pub const SPAN: Colour = Colour(0xb0, 0x7a, 0xa1);

    /// The `i`-th palette colour (wrapping).
    pub fn nth(i: usize) -> Colour {
        Colour::PALETTE[i % Colour::PALETTE.len()]
    }

    /// The `i`-th line's dash pattern (SVG `stroke-dasharray`): solid through the palette's
    /// first round, then dashed, dotted and dash-dotted, so the 11th run's line is not the
    /// 1st's. Past four rounds (40 lines) they repeat.
    pub fn nth_dash(i: usize) -> Option<&'static str> {
        [None, Some("7 4"), Some("2 3"), Some("9 3 2 3")][(i / Colour::PALETTE.len()) % 4]
    }

    /// `#rrggbb`.
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// What a layer draws, in data coordinates.
#[derive(Debug, Clone, PartialEq)]
pub enum Mark {
    /// A polyline through the points.
    Line(Vec<(f64, f64)>),
    /// A dot per point.
    Points(Vec<(f64, f64)>),
    /// A polyline through the points, with a dot on each.
    LinePoints(Vec<(f64, f64)>),
    /// A cross per point (errors, marked events).
    Crosses(Vec<(f64, f64)>),
    /// Filled rectangles `(x0, x1, y0, y1)`: histogram and stacked bars.
    Bars(Vec<(f64, f64, f64, f64)>),
    /// A filled band `(x, low, high)`: a time bucket's minimum to maximum.
    Band(Vec<(f64, f64, f64)>),
    /// A vertical bar with a cap at each end per `(x, low, high)`: a quantity known only to
    /// lie between two bounds (a capacity's bracket), drawn as the pair it is, not a point.
    Intervals(Vec<(f64, f64, f64)>),
    /// A vertical reference line at x.
    VRule(f64),
    /// A shaded stretch of x, `(x0, x1)`, the chart's full height: an interval where a
    /// condition held. Add it first, so the data is drawn over it.
    Span(f64, f64),
}

impl Mark {
    fn is_empty(&self) -> bool {
        match self {
            Mark::Line(p) | Mark::Points(p) | Mark::LinePoints(p) | Mark::Crosses(p) => {
                p.is_empty()
            }
            Mark::Bars(b) => b.is_empty(),
            Mark::Band(b) | Mark::Intervals(b) => b.is_empty(),
            Mark::VRule(_) | Mark::Span(..) => false,
        }
    }

    /// Every (x, y) the mark covers, for auto ranges (`None` y: any y).
    fn extent(&self) -> Vec<(f64, Option<f64>)> {
        match self {
            Mark::Line(p) | Mark::Points(p) | Mark::LinePoints(p) | Mark::Crosses(p) => {
                p.iter().map(|&(x, y)| (x, Some(y))).collect()
            }
            Mark::Bars(b) => b
                .iter()
                .flat_map(|&(x0, x1, y0, y1)| [(x0, Some(y0)), (x1, Some(y1))])
                .collect(),
            Mark::Band(b) | Mark::Intervals(b) => b
                .iter()
                .flat_map(|&(x, lo, hi)| [(x, Some(lo)), (x, Some(hi))])
                .collect(),
            Mark::VRule(x) => vec![(*x, None)],
            Mark::Span(x0, x1) => vec![(*x0, None), (*x1, None)],
        }
    }
}

/// A named layer of a plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Its legend entry.
    pub name: String,
    /// Its colour.
    pub colour: Colour,
    /// Its lines' dash pattern (SVG `stroke-dasharray`); solid when `None`.
    pub dash: Option<&'static str>,
    /// What it draws.
    pub mark: Mark,
}

/// An axis: linear or logarithmic, with its range (automatic when `None`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Axis {
    /// Its label, with the unit.
    pub label: String,
    /// Logarithmic.
    pub log: bool,
    /// Fixed range.
    pub range: Option<(f64, f64)>,
    /// Names for the integer ticks 0, 1, 2, … (bars by category); other ticks unlabelled.
    pub categories: Vec<String>,
}

impl Axis {
    /// A linear axis with an automatic range.
    pub fn linear(label: &str) -> Axis {
        Axis {
            label: label.into(),
            ..Default::default()
        }
    }

    /// A logarithmic axis with an automatic range.
    pub fn log(label: &str) -> Axis {
        Axis {
            label: label.into(),
            log: true,
            ..Default::default()
        }
    }

    /// A linear axis of named categories at 0, 1, 2, ….
    pub fn categories(label: &str, names: Vec<String>) -> Axis {
        let n = names.len() as f64;
        Axis {
            label: label.into(),
            log: false,
            range: Some((-0.6, n - 0.4)),
            categories: names,
        }
    }

    /// The label of the tick at `v`.
    fn tick(&self, v: f64) -> String {
        if self.categories.is_empty() {
            return tick(v);
        }
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 {
            self.categories.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    }

    /// This axis with a fixed range.
    pub fn range(mut self, lo: f64, hi: f64) -> Axis {
        self.range = Some((lo, hi));
        self
    }
}

/// A chart: a title, two axes, layers and a note under it.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// An HTML id, unique in the page (`ttft-cdf`).
    pub id: String,
    /// Its title.
    pub title: String,
    /// The x axis.
    pub x: Axis,
    /// The y axis.
    pub y: Axis,
    /// Width and height in SVG pixels.
    pub size: (u32, u32),
    /// The layers, drawn in order.
    pub layers: Vec<Layer>,
    /// A sentence under the chart (what is exact, what was downsampled).
    pub note: Option<String>,
}

/// Width and height of a chart in a two-column grid.
pub const HALF: (u32, u32) = (560, 280);
/// Width and height of a full-width timeline.
pub const WIDE: (u32, u32) = (1140, 240);

impl Plot {
    /// An empty plot.
    pub fn new(id: &str, title: &str, x: Axis, y: Axis, size: (u32, u32)) -> Plot {
        Plot {
            id: id.into(),
            title: title.into(),
            x,
            y,
            size,
            layers: Vec::new(),
            note: None,
        }
    }

    /// Adds a layer; an empty one is left out (nothing to draw, nothing to count).
    pub fn layer(&mut self, name: &str, colour: Colour, mark: Mark) -> &mut Plot {
        if !mark.is_empty() {
            self.layers.push(Layer {
                name: name.into(),
                colour,
                dash: None,
                mark,
            });
        }
        self
    }

    /// Adds the `i`-th of many like layers (runs overlaid): the palette's `i`-th colour, and
    /// past the palette's ten a dash pattern too ([`Colour::nth_dash`]), in the legend as well.
    pub fn nth_layer(&mut self, name: &str, i: usize, mark: Mark) -> &mut Plot {
        let before = self.layers.len();
        self.layer(name, Colour::nth(i), mark);
        if let Some(l) = self.layers.get_mut(before) {
            l.dash = Colour::nth_dash(i);
        }
        self
    }

    /// Sets the note.
    pub fn note(&mut self, note: impl Into<String>) -> &mut Plot {
        self.note = Some(note.into());
        self
    }

    /// The chart as an HTML `<figure>`: caption with legend, SVG, note.
    pub fn to_html(&self) -> Result<String, crate::ReportError> {
        let ranges = self.ranges();
        let (drawn, outside) = self.clipped(ranges);
        let svg = draw::svg(&drawn, ranges).map_err(|what| crate::ReportError::Draw {
            chart: self.id.clone(),
            what,
        })?;
        let mut legend = String::new();
        for l in &self.layers {
            // The swatch as the mark is drawn: a band or a span as translucent as on the
            // chart, so a band and the line through it in one colour are told apart.
            let opacity = match l.mark {
                Mark::Band(_) => ";opacity:0.25",
                Mark::Span(..) => ";opacity:0.18",
                _ => "",
            };
            // A dashed line's swatch is dashed too: colour, then a gap, repeated.
            let background = match l.dash {
                None => l.colour.hex(),
                Some(_) => format!(
                    "repeating-linear-gradient(90deg,{0} 0 3px,transparent 3px 5px)",
                    l.colour.hex()
                ),
            };
            legend.push_str(&format!(
                "<span class=\"key\"><i style=\"background:{background}{opacity}\"></i>{}</span>",
                esc(&l.name)
            ));
        }
        let mut note = self.note.clone();
        if outside > 0 {
            let said = if outside == 1 {
                "1 point lies beyond the axes and is not drawn".to_string()
            } else {
                format!("{outside} points lie beyond the axes and are not drawn")
            };
            note = Some(match note {
                Some(n) => format!("{}; {said}.", n.trim_end_matches('.')),
                None => format!("{said}."),
            });
        }
        let note = note
            .as_deref()
            .map(|n| format!("<p class=\"note\">{}</p>", esc(n)))
            .unwrap_or_default();
        Ok(format!(
            "<figure class=\"chart\" id=\"{}\" data-series=\"{}\"><figcaption><b>{}</b> {legend}</figcaption>{svg}{note}</figure>\n",
            attr(&self.id),
            self.layers.len(),
            esc(&self.title)
        ))
    }

    /// The data ranges of both axes, from the fixed ones or the layers' data.
    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let pts: Vec<(f64, Option<f64>)> =
            self.layers.iter().flat_map(|l| l.mark.extent()).collect();
        let xs = pts.iter().map(|p| p.0);
        let ys = pts.iter().filter_map(|p| p.1);
        (
            drawable(
                self.x.range.unwrap_or_else(|| auto(xs, self.x.log)),
                self.x.log,
            ),
            drawable(
                self.y.range.unwrap_or_else(|| auto(ys, self.y.log)),
                self.y.log,
            ),
        )
    }
}

/// How far past its axis range a mark's coordinate is drawn, in ranges (linear) or in the
/// range's ratio (log): a line to a point far outside still leaves the chart in its direction,
/// and no coordinate reaches the pixel values that overflow plotters' `i32` arithmetic (a
/// 1e9 ms TTFT on a time axis of seconds panicked `canaryd report`).
const CLIP_SPANS: f64 = 2.0;

/// `v` on an axis of `range` (as drawn) held within [`CLIP_SPANS`] of it; NaN stays NaN.
fn clip(v: f64, (lo, hi): (f64, f64), log: bool) -> f64 {
    if log {
        if v <= 0.0 {
            // Not on a log axis at all: at its far low end, as plotters maps it.
            return v;
        }
        let (l, h) = (lo.log10(), hi.log10());
        let span = (h - l) * CLIP_SPANS;
        return 10f64.powf(v.log10().clamp(l - span, h + span));
    }
    let span = (hi - lo) * CLIP_SPANS;
    v.clamp(lo - span, hi + span)
}

/// Whether `v` lies within `range`.
fn within(v: f64, (lo, hi): (f64, f64)) -> bool {
    v >= lo && v <= hi
}

impl Plot {
    /// This plot as it can be drawn on `ranges` (from [`Plot::ranges`]): points and crosses
    /// outside the ranges left out (they would land off the chart, or on its labels), every
    /// other coordinate held near the range ([`clip`]); and how many points were left out,
    /// for the note.
    fn clipped(&self, (xr, yr): ((f64, f64), (f64, f64))) -> (Plot, usize) {
        let (xl, yl) = (self.x.log, self.y.log);
        let cx = |v: f64| clip(v, xr, xl);
        let cy = |v: f64| clip(v, yr, yl);
        let mut outside = 0;
        let mut inside = |p: &[(f64, f64)]| -> Vec<(f64, f64)> {
            let kept: Vec<(f64, f64)> = p
                .iter()
                .copied()
                .filter(|&(x, y)| within(x, xr) && within(y, yr))
                .collect();
            outside += p.len() - kept.len();
            kept
        };
        let mut plot = self.clone();
        for l in &mut plot.layers {
            l.mark = match &l.mark {
                Mark::Line(p) => Mark::Line(p.iter().map(|&(x, y)| (cx(x), cy(y))).collect()),
                Mark::Points(p) => Mark::Points(inside(p)),
                Mark::LinePoints(p) => {
                    Mark::LinePoints(p.iter().map(|&(x, y)| (cx(x), cy(y))).collect())
                }
                Mark::Crosses(p) => Mark::Crosses(inside(p)),
                Mark::Bars(b) => Mark::Bars(
                    b.iter()
                        .map(|&(x0, x1, y0, y1)| (cx(x0), cx(x1), cy(y0), cy(y1)))
                        .collect(),
                ),
                Mark::Band(b) => Mark::Band(
                    b.iter()
                        .map(|&(x, lo, hi)| (cx(x), cy(lo), cy(hi)))
                        .collect(),
                ),
                Mark::Intervals(b) => Mark::Intervals(
                    b.iter()
                        .map(|&(x, lo, hi)| (cx(x), cy(lo), cy(hi)))
                        .collect(),
                ),
                Mark::VRule(x) => Mark::VRule(cx(*x)),
                Mark::Span(x0, x1) => Mark::Span(cx(*x0), cx(*x1)),
            };
        }
        (plot, outside)
    }
}

/// The largest magnitude an axis reaches. plotters' search for ticks never ends on an
/// infinite range, which a padded 1.7e308 (a hand-edited record) gave: `canaryd report` hung.
/// No latency, count or time comes near it.
const AXIS_LIMIT: f64 = 1e300;

/// `range` made safe to draw: finite, within [`AXIS_LIMIT`], not empty, positive on a log
/// axis.
fn drawable((lo, hi): (f64, f64), log: bool) -> (f64, f64) {
    let limit = |v: f64| {
        if v.is_nan() {
            0.0
        } else {
            v.clamp(-AXIS_LIMIT, AXIS_LIMIT)
        }
    };
    let (lo, hi) = (limit(lo), limit(hi));
    if lo < hi && (!log || lo > 0.0) {
        return (lo, hi);
    }
    // Collapsed by the limit, or empty as given: around what is left, as `auto` pads.
    let (lo, hi) = auto([lo, hi].into_iter(), log);
    (limit(lo), limit(hi))
}

/// A range covering `values` (positive ones only on a log axis), padded a little on a
/// linear axis, never empty.
fn auto(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        if hi <= lo {
            return (lo / 2.0, hi * 2.0);
        }
        return (lo / 1.15, hi * 1.15);
    }
    if hi <= lo {
        if lo == 0.0 {
            return (0.0, 1.0);
        }
        let pad = lo.abs() * 0.1;
        return (lo - pad, hi + pad);
    }
    let pad = (hi - lo) * 0.04;
    // Latencies and counts start at zero: keep the axis there rather than below it.
    let lo = if lo >= 0.0 {
        (lo - pad).max(0.0)
    } else {
        lo - pad
    };
    (lo, hi + pad)
}

/// A tick label: few digits, no trailing zeros.
pub fn tick(v: f64) -> String {
    let a = v.abs();
    let s = if a == 0.0 {
        "0".to_string()
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.1e}")
    };
    if s.contains('.') && !s.contains('e') && !s.ends_with(['k', 'M']) {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(250.0), "250");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(3.0), "3");
        assert_eq!(tick(0.125), "0.125");
        assert_eq!(tick(0.5), "0.5");
        assert_eq!(tick(25_000.0), "25k");
        assert_eq!(tick(0.0001), "1.0e-4");
    }

    #[test]
    fn every_layer_is_its_own_group_and_empty_layers_are_left_out() {
        let mut p = Plot::new("t", "T", Axis::linear("x"), Axis::log("y"), HALF);
        p.layer(
            "line",
            Colour::nth(0),
            Mark::Line(vec![(0.0, 1.0), (1.0, 10.0), (2.0, 100.0)]),
        )
        .layer("none", Colour::nth(1), Mark::Points(vec![]))
        .layer(
            "bars",
            Colour::nth(2),
            Mark::Bars(vec![(0.0, 1.0, 1.0, 5.0)]),
        )
        .layer(
            "band",
            Colour::nth(3),
            Mark::Band(vec![(0.0, 1.0, 2.0), (1.0, 2.0, 3.0)]),
        )
        .layer("x", Colour::ERROR, Mark::Crosses(vec![(1.5, 50.0)]))
        .layer("rule", Colour::RULE, Mark::VRule(1.0))
        .layer("span", Colour::SPAN, Mark::Span(0.5, 1.5));
        let html = p.to_html().unwrap();
        assert_eq!(html.matches("<g class=\"series\"").count(), 6, "{html}");
        assert!(html.contains("data-series=\"6\""));
        assert!(
            html.contains("data-name=\"span\" data-marks=\"1\"><rect"),
            "{html}"
        );
        assert!(html.contains("<polyline"), "{html}");
        assert!(html.contains("<polygon"), "{html}");
        assert!(
            !html.contains("<svg width"),
            "sized by CSS, not fixed: {html}"
        );
        assert!(html.contains("viewBox=\"0 0 560 280\""));
    }

    #[test]
    fn an_interval_is_a_bar_with_two_caps_per_pair() {
        let mut p = Plot::new("t", "T", Axis::linear("x"), Axis::linear("y"), HALF);
        p.layer(
            "bracket",
            Colour::nth(1),
            Mark::Intervals(vec![(0.0, 30.0, 40.0), (1.0, 90.0, 110.0)]),
        );
        let html = p.to_html().unwrap();
        assert!(
            html.contains("data-name=\"bracket\" data-marks=\"2\""),
            "{html}"
        );
        // Per pair: the bar and its two caps.
        let group = html.split("data-name=\"bracket\"").nth(1).unwrap();
        let group = group.split("</g>").next().unwrap();
        assert_eq!(group.matches("<polyline").count(), 6, "{group}");
    }

    #[test]
    fn the_eleventh_run_is_told_from_the_first_by_its_dash() {
        let mut p = Plot::new("t", "T", Axis::linear("x"), Axis::linear("y"), HALF);
        for i in 0..12 {
            p.nth_layer(
                &format!("run {i}"),
                i,
                Mark::Line(vec![(0.0, 0.0), (1.0, i as f64)]),
            );
        }
        assert_eq!(p.layers[0].colour, p.layers[10].colour);
        assert_eq!((p.layers[0].dash, p.layers[10].dash), (None, Some("7 4")));
        let html = p.to_html().unwrap();
        // Drawn dashed (the group's attribute, inherited by its polyline) …
        assert!(
            html.contains("data-name=\"run 10\" data-marks=\"2\" stroke-dasharray=\"7 4\">"),
            "{html}"
        );
        assert!(
            html.contains("data-name=\"run 0\" data-marks=\"2\">"),
            "{html}"
        );
        // … and keyed dashed in the legend.
        assert_eq!(
            html.matches("repeating-linear-gradient").count(),
            2,
            "{html}"
        );
    }

    #[test]
    fn marks_far_outside_a_fixed_range_neither_panic_nor_draw_silently() {
        // A first token at 1e9 ms on a time axis of a few seconds: plotters' pixel arithmetic
        // overflowed i32 (a panic in a debug build, garbage in a release one).
        for far in [1e6, 1e9, 4.6e15, 1e300] {
            for log in [false, true] {
                let y = if log {
                    Axis::log("y")
                } else {
                    Axis::linear("y")
                };
                let mut p = Plot::new("t", "T", Axis::linear("x").range(0.0, 2.0), y, HALF);
                p.layer(
                    "dots",
                    Colour::nth(0),
                    Mark::Points(vec![(0.5, 3.0), (far, 4.0), (1.0, 5.0)]),
                )
                .layer(
                    "line",
                    Colour::nth(1),
                    Mark::Line(vec![(0.0, 1.0), (far, 2.0)]),
                )
                .layer(
                    "bars",
                    Colour::nth(2),
                    Mark::Bars(vec![(0.0, far, 1.0, 2.0)]),
                )
                .layer("rule", Colour::RULE, Mark::VRule(far))
                .note("Some note.");
                let html = p.to_html().unwrap();
                assert!(
                    html.contains("data-name=\"dots\" data-marks=\"2\""),
                    "{far} {log}: {html}"
                );
                assert!(
                    html.contains("Some note; 1 point lies beyond the axes and is not drawn."),
                    "{far} {log}: {html}"
                );
            }
        }
    }

    #[test]
    fn auto_ranges_pad_and_never_collapse() {
        assert_eq!(auto([5.0, 5.0].into_iter(), false), (4.5, 5.5));
        assert_eq!(auto([0.0].into_iter(), false), (0.0, 1.0));
        assert_eq!(auto(std::iter::empty(), true), (1.0, 10.0));
        let (lo, hi) = auto([0.0, 1.0, 100.0].into_iter(), true);
        assert!(lo > 0.0 && lo < 1.0 && hi > 100.0);
        let (lo, _) = auto([1.0, 101.0].into_iter(), false);
        assert_eq!(lo, 0.0);
    }

    #[test]
    fn a_value_near_the_largest_float_is_drawn_on_a_finite_axis() {
        // Padding 1.7e308 overflowed to infinity, where plotters' tick search never ended.
        assert_eq!(auto([1.7e308].into_iter(), false).1, f64::INFINITY);
        for (range, log) in [
            ((1.53e308, f64::INFINITY), false),
            ((0.0, 1.7e308 * 1.04), false),
            ((f64::NEG_INFINITY, f64::NAN), false),
            ((5.0, 5.0), false),
            ((0.0, 1.0), true),
            ((1.0, f64::INFINITY), true),
        ] {
            let (lo, hi) = drawable(range, log);
            assert!(
                lo.is_finite() && hi.is_finite() && lo < hi,
                "{range:?}: {lo} {hi}"
            );
            assert!(!log || lo > 0.0, "{range:?}");
        }
        assert_eq!(
            drawable((0.0, 250.0), false),
            (0.0, 250.0),
            "a usual range as given"
        );
        // And the whole chart renders (it hung before; the thread bounds a regression).
        let (done, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut p = Plot::new(
                "t",
                "T",
                Axis::linear("x"),
                Axis::linear("y").range(0.0, 1.7e308 * 1.04),
                HALF,
            );
            p.layer(
                "dots",
                Colour::nth(0),
                Mark::Points(vec![(0.0, 1.7e308), (1.0, 1.0)]),
            );
            let _ = done.send(p.to_html().is_ok());
        });
        let rendered = rx.recv_timeout(std::time::Duration::from_secs(120));
        assert_eq!(rendered, Ok(true), "the chart never finished rendering");
    }
}
