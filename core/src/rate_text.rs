//! How a request rate is printed, and its bounds rounded outward so the printed bound still
//! holds: the capacity canary's verdicts, the sweep table and the status page print the same.
//! Also how any number given is quoted back in an error: compactly ([`number`]).

/// A rate as the verdicts print it: whole requests/s from 100 up, else two decimals at most
/// (`31.25`, `37.5`, `50`: a search's halvings print exactly).
pub fn rate(r: f64) -> String {
    rate_rounded(r, f64::round)
}

/// [`rate`] of a lower bound ("at least"), rounded down so the printed bound still holds.
pub fn rate_at_least(r: f64) -> String {
    rate_rounded(r, f64::floor)
}

/// [`rate`] of an upper bound ("below"), rounded up so the printed bound still holds.
pub fn rate_below(r: f64) -> String {
    rate_rounded(r, f64::ceil)
}

/// A number quoted back in a message, as compact as it reads: as `{}` prints it (`0.000001`,
/// `1000000`), unless that runs past 16 characters and the exponent form is shorter (`1e308`,
/// where `{}` prints 309 digits, and `1e-300`).
pub fn number(x: f64) -> String {
    let plain = format!("{x}");
    let exp = format!("{x:e}");
    if plain.len() > 16 && exp.len() < plain.len() {
        exp
    } else {
        plain
    }
}

/// Whole requests/s from 100 up; below, two decimals, or three significant digits under 1 (a
/// capacity of 0.004 req/s read "0" at two decimals).
fn rate_rounded(r: f64, round: fn(f64) -> f64) -> String {
    if r >= 100.0 {
        return number(round(r));
    }
    if r <= 0.0 || !r.is_finite() {
        return format!("{r}");
    }
    let decimals = (2 - r.log10().floor() as i32).clamp(2, 12);
    let scale = 10f64.powi(decimals);
    // Rounded to a millionth of the last digit first: 0.0041 × 1e5 is 410.00000000000006,
    // which `ceil` would make 411.
    let scaled = (r * scale * 1e6).round() / 1e6;
    let s = format!("{:.*}", decimals as usize, round(scaled) / scale);
    match s.contains('.') {
        true => s.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `--request-rate 1e308` was quoted back as a 309-digit number (audit L4).
    #[test]
    fn numbers_are_quoted_compactly() {
        let shown: Vec<String> = [
            1e308,
            -1e308,
            1e-300,
            f64::MAX,
            1e16,
            1e15,
            0.000001,
            1e6,
            0.1 + 0.2,
            12_345_678_901_234_567.0,
            f64::NAN,
            f64::INFINITY,
        ]
        .into_iter()
        .map(number)
        .collect();
        assert_eq!(
            shown,
            [
                "1e308",
                "-1e308",
                "1e-300",
                "1.7976931348623157e308",
                "1e16",
                "1000000000000000",
                "0.000001",
                "1000000",
                "0.30000000000000004",
                "12345678901234568",
                "NaN",
                "inf"
            ]
        );
        assert_eq!(rate(1e308), "1e308");
    }

    #[test]
    fn rates_print_whole_from_100_and_the_search_halvings_exactly_below() {
        let shown: Vec<String> = [530.4, 100.0, 50.0, 37.5, 31.25, 20.0, 0.1, 0.0]
            .into_iter()
            .map(rate)
            .collect();
        assert_eq!(
            shown,
            ["530", "100", "50", "37.5", "31.25", "20", "0.1", "0"]
        );
        // Bounds round outward, so what is printed still holds: at least 106 of 106.6, below
        // 110 of 109.375.
        assert_eq!(rate_at_least(106.6), "106");
        assert_eq!(rate_below(109.375), "110");
        assert_eq!(rate_at_least(12.345), "12.34");
        assert_eq!(rate_below(12.341), "12.35");
        // Under 1 req/s, three significant digits: 0.004 read "0".
        assert_eq!(rate_at_least(0.004), "0.004");
        assert_eq!(rate_below(0.0041), "0.0041");
        assert_eq!(rate_at_least(0.01234), "0.0123");
        assert_eq!(
            (rate_at_least(37.5), rate_below(37.5)),
            ("37.5".into(), "37.5".into())
        );
    }
}
