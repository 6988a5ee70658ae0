//! Where in the run a condition held: the longest stretch of consecutive samples that met
//! it, how long it held in all, and its peak there.

use super::Interval;

/// One span of time and whether the condition held over it, with the figure's value there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Span {
    pub start_s: f64,
    pub end_s: f64,
    pub held: bool,
    pub value: f64,
}

/// Spans of consecutive samples stamped at `t_s`: each covers the time since the previous
/// one, clipped to the run (`[0, end_s]`). The first sample (the state in force at the
/// start) covers nothing unless it is the only one.
pub(super) fn spans_between<T>(
    points: &[T],
    t: impl Fn(&T) -> f64,
    end_s: f64,
    held: impl Fn(&T) -> Option<(bool, f64)>,
) -> Vec<Span> {
    let mut out = Vec::new();
    for (i, p) in points.iter().enumerate() {
        let Some((h, value)) = held(p) else { continue };
        let (a, b) = match i {
            0 if points.len() > 1 => continue,
            0 => (0.0, end_s.max(t(p))),
            _ => (t(&points[i - 1]), t(p)),
        };
        let (a, b) = (a.max(0.0), b.min(end_s.max(0.0)));
        if b > a {
            out.push(Span {
                start_s: a,
                end_s: b,
                held: h,
                value,
            });
        }
    }
    out
}

/// The longest stretch of held spans (adjacent in time), with the totals; `None` when the
/// condition never held.
pub(super) fn longest(spans: &[Span], condition: &str, run_s: f64) -> Option<Interval> {
    let mut best: Option<(f64, f64, f64)> = None; // start, end, peak
    let mut cur: Option<(f64, f64, f64)> = None;
    let mut held_s = 0.0;
    for s in spans {
        if !s.held {
            cur = None;
            continue;
        }
        held_s += s.end_s - s.start_s;
        cur = Some(match cur {
            Some((a, b, peak)) if (s.start_s - b).abs() < 1e-9 || s.start_s <= b => {
                (a, s.end_s.max(b), peak.max(s.value))
            }
            _ => (s.start_s, s.end_s, s.value),
        });
        let c = cur.expect("just set");
        if best.is_none_or(|(a, b, _)| c.1 - c.0 > b - a) {
            best = Some(c);
        }
    }
    let (start_s, end_s, peak) = best?;
    Some(Interval {
        start_s,
        end_s,
        held_s,
        share_of_run: if run_s > 0.0 {
            (held_s / run_s).min(1.0)
        } else {
            0.0
        },
        condition: condition.to_string(),
        peak,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_stretch_wins_and_totals_add_up() {
        // Samples every 2 s; held at 4..8 and 12..20.
        let pts: Vec<(f64, bool, f64)> = (0..=10)
            .map(|i| {
                let t = 2.0 * i as f64;
                let h = (3..=4).contains(&i) || (7..=10).contains(&i);
                (t, h, if h { 0.9 + i as f64 / 100.0 } else { 0.1 })
            })
            .collect();
        let spans = spans_between(&pts, |p| p.0, 20.0, |p| Some((p.1, p.2)));
        assert_eq!(spans.len(), 10);
        let i = longest(&spans, "kv >= 0.9", 20.0).unwrap();
        assert_eq!((i.start_s, i.end_s), (12.0, 20.0));
        assert_eq!(i.held_s, 12.0);
        assert!((i.share_of_run - 0.6).abs() < 1e-12);
        assert!((i.peak - 1.0).abs() < 1e-12);
        let never: Vec<Span> = spans.iter().map(|s| Span { held: false, ..*s }).collect();
        assert!(longest(&never, "x", 20.0).is_none());
    }
}
