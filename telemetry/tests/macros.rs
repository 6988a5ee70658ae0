//! Small helpers shared by the integration tests.

/// Reads a capture from `/work/shared/fixtures` (relative to this crate, so it works from any
/// checkout of the workspace next to `shared/`).
macro_rules! fixture {
    ($name:literal) => {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/",
            $name
        ))
        .expect(concat!("fixture ", $name))
    };
}

/// Asserts two floats are equal within 1e-9 (relative).
macro_rules! assert_close {
    ($a:expr, $b:expr) => {{
        let (a, b): (f64, f64) = ($a, $b);
        assert!(
            (a - b).abs() <= 1e-9 * b.abs().max(1.0),
            "{} = {a}, expected {b}",
            stringify!($a)
        );
    }};
}
