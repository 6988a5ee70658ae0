//! Human-readable byte sizes: `65536`, `64KiB`, `1MiB`, `16 MiB`, `2GB`. A bare number is
//! bytes; `KiB`/`MiB`/`GiB` (also `K`, `M`, `G`) are powers of 1024, `KB`/`MB`/`GB` of 1000.

/// The largest size [`parse`] accepts: 1 TiB, far past any cap that makes sense in memory.
pub const MAX: u64 = 1 << 40;

/// Parses a size of at most [`MAX`] bytes, naming what was wrong on failure.
pub fn parse(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected a number of bytes such as \"64KiB\""))?;
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => {
            return Err(format!(
                "invalid size {s:?}: unknown unit {unit:?}, expected B, KiB, MiB or GiB"
            ))
        }
    };
    let bytes = value * scale as f64;
    if !(bytes.is_finite() && bytes <= MAX as f64) {
        return Err(format!("invalid size {s:?}: at most 1 TiB"));
    }
    Ok(bytes.round() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_and_without_units() {
        assert_eq!(parse("65536"), Ok(65536));
        assert_eq!(parse("64KiB"), Ok(64 << 10));
        assert_eq!(parse("64k"), Ok(64 << 10));
        assert_eq!(parse("1 MiB"), Ok(1 << 20));
        assert_eq!(parse("1.5MiB"), Ok(3 << 19));
        assert_eq!(parse("2GB"), Ok(2_000_000_000));
        for bad in ["", "x", "5 parsecs", "-1", "2TiB", "1e400"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse("5 parsecs")
            .unwrap_err()
            .contains("unknown unit \"parsecs\""));
    }
}
