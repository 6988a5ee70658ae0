//! The plotters side of [`Plot`]: one frame and one SVG group per layer, on identical layouts.

use super::{Colour, Mark, Plot};
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::ops::Range;

/// Margins and label areas: the same for the frame and every layer, so they line up.
const MARGIN: u32 = 10;
const X_LABELS: u32 = 40;
const Y_LABELS: u32 = 64;
const FONT: &str = "sans-serif";

/// The plot as one `<svg>` element, on `ranges` (its own, [`Plot::ranges`]; its marks held
/// near them, [`Plot::clipped`]).
pub(super) fn svg(plot: &Plot, ranges: ((f64, f64), (f64, f64))) -> Result<String, String> {
    let ((x0, x1), (y0, y1)) = ranges;
    let lin = |a: f64, b: f64| -> Range<f64> { a..b };
    match (plot.x.log, plot.y.log) {
        (false, false) => render(plot, lin(x0, x1), lin(y0, y1)),
        (true, false) => render(plot, lin(x0, x1).log_scale(), lin(y0, y1)),
        (false, true) => render(plot, lin(x0, x1), lin(y0, y1).log_scale()),
        (true, true) => render(plot, lin(x0, x1).log_scale(), lin(y0, y1).log_scale()),
    }
}

fn render<X, Y>(plot: &Plot, x: X, y: Y) -> Result<String, String>
where
    X: AsRangedCoord<Value = f64> + Clone,
    Y: AsRangedCoord<Value = f64> + Clone,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let (w, h) = plot.size;
    let mut frame = String::new();
    {
        let root = SVGBackend::with_string(&mut frame, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .margin(MARGIN)
            .x_label_area_size(X_LABELS)
            .y_label_area_size(Y_LABELS)
            .build_cartesian_2d(x.clone(), y.clone())
            .map_err(|e| err(&e))?;
        let xfmt = |v: &f64| plot.x.tick(*v);
        let yfmt = |v: &f64| plot.y.tick(*v);
        let x_labels = if plot.x.categories.is_empty() {
            8
        } else {
            plot.x.categories.len() + 1
        };
        chart
            .configure_mesh()
            .x_desc(plot.x.label.as_str())
            .y_desc(plot.y.label.as_str())
            .x_labels(x_labels)
            .y_labels(6)
            .x_label_formatter(&xfmt)
            .y_label_formatter(&yfmt)
            .max_light_lines(0)
            .bold_line_style(RGBColor(232, 232, 232))
            .axis_style(RGBColor(150, 150, 150))
            .label_style((FONT, 12).into_font().color(&RGBColor(60, 60, 60)))
            .axis_desc_style((FONT, 13).into_font().color(&RGBColor(40, 40, 40)))
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    let mut groups = String::new();
    for layer in &plot.layers {
        let mut layer_svg = String::new();
        let marks;
        {
            let root = SVGBackend::with_string(&mut layer_svg, (w, h)).into_drawing_area();
            let mut chart = ChartBuilder::on(&root)
                .margin(MARGIN)
                .x_label_area_size(X_LABELS)
                .y_label_area_size(Y_LABELS)
                .build_cartesian_2d(x.clone(), y.clone())
                .map_err(|e| err(&e))?;
            let (ylo, yhi) = {
                let r = chart.y_range();
                (r.start, r.end)
            };
            let c = rgb(layer.colour);
            marks = match &layer.mark {
                Mark::Line(p) => {
                    chart
                        .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))
                        .map_err(|e| err(&e))?;
                    p.len()
                }
                Mark::LinePoints(p) => {
                    chart
                        .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))
                        .map_err(|e| err(&e))?;
                    chart
                        .draw_series(p.iter().map(|&q| Circle::new(q, 3, c.filled())))
                        .map_err(|e| err(&e))?;
                    p.len()
                }
                Mark::Points(p) => {
                    chart
                        .draw_series(p.iter().map(|&q| Circle::new(q, 2, c.mix(0.7).filled())))
                        .map_err(|e| err(&e))?;
                    p.len()
                }
                Mark::Crosses(p) => {
                    chart
                        .draw_series(p.iter().map(|&q| Cross::new(q, 4, c.stroke_width(2))))
                        .map_err(|e| err(&e))?;
                    p.len()
                }
                Mark::Bars(b) => {
                    chart
                        .draw_series(b.iter().map(|&(x0, x1, y0, y1)| {
                            Rectangle::new([(x0, y0.max(ylo)), (x1, y1)], c.mix(0.85).filled())
                        }))
                        .map_err(|e| err(&e))?;
                    b.len()
                }
                Mark::Band(b) => {
                    let mut outline: Vec<(f64, f64)> =
                        b.iter().map(|&(x, _, hi)| (x, hi)).collect();
                    outline.extend(b.iter().rev().map(|&(x, lo, _)| (x, lo.max(ylo))));
                    chart
                        .draw_series(std::iter::once(Polygon::new(outline, c.mix(0.25).filled())))
                        .map_err(|e| err(&e))?;
                    b.len()
                }
                Mark::Intervals(b) => {
                    let line = c.stroke_width(2);
                    chart
                        .draw_series(b.iter().map(|&(x, lo, hi)| {
                            PathElement::new(vec![(x, lo.max(ylo)), (x, hi)], line)
                        }))
                        .map_err(|e| err(&e))?;
                    // The caps, 10 px wide whatever the x range: the ends are the figures.
                    let cap = |q: (f64, f64)| {
                        EmptyElement::at(q) + PathElement::new(vec![(-5, 0), (5, 0)], line)
                    };
                    chart
                        .draw_series(
                            b.iter()
                                .flat_map(|&(x, lo, hi)| [cap((x, lo.max(ylo))), cap((x, hi))]),
                        )
                        .map_err(|e| err(&e))?;
                    b.len()
                }
                Mark::Span(x0, x1) => {
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(*x0, ylo), (*x1, yhi)],
                            c.mix(0.18).filled(),
                        )))
                        .map_err(|e| err(&e))?;
                    1
                }
                Mark::VRule(x) => {
                    chart
                        .draw_series(std::iter::once(PathElement::new(
                            vec![(*x, ylo), (*x, yhi)],
                            c.stroke_width(1),
                        )))
                        .map_err(|e| err(&e))?;
                    1
                }
            };
            root.present().map_err(|e| err(&e))?;
        }
        // On the group: plotters sets no dash on its paths, so they inherit it.
        let dash = layer
            .dash
            .map(|d| format!(" stroke-dasharray=\"{d}\""))
            .unwrap_or_default();
        groups.push_str(&format!(
            "<g class=\"series\" data-name=\"{}\" data-marks=\"{marks}\"{dash}>{}</g>\n",
            crate::html::attr(&layer.name),
            inner(&layer_svg)
        ));
    }
    // Sized by CSS (width 100%, height from the viewBox), so the page reflows.
    let body = inner(&frame);
    Ok(format!(
        "<svg class=\"plot\" viewBox=\"0 0 {w} {h}\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"{}\">\n{body}{groups}</svg>",
        crate::html::attr(&plot.title)
    ))
}

fn rgb(c: Colour) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

/// The elements of a plotters SVG document, without its `<svg>` wrapper.
fn inner(doc: &str) -> &str {
    let start = doc.find('>').map_or(0, |i| i + 1);
    let end = doc.rfind("</svg>").unwrap_or(doc.len());
    doc[start..end].trim_start_matches('\n')
}
