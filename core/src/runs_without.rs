//! The wording of a figure over fewer runs than a `--runs N` experiment's estimates are over:
//! some runs gave none (too short for a rate), or none did. One wording for the command's
//! table, its report page and `canaryd compare`, so a figure over fewer runs never reads as one
//! over all of them.

/// `run-3 (1 measured request: a rate needs at least 2); run-4 (…)`: each run (its folder)
/// and why it has no figure.
pub fn listed<'a>(without: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    without
        .into_iter()
        .map(|(dir, why)| format!("{dir} ({why})"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `over 2 of 3 runs; without a figure: run-3 (…)`: a figure whose mean is over the `with`
/// runs that gave one, the others named with why.
pub fn over_some<'a>(with: u64, without: &[(&'a str, &'a str)]) -> String {
    format!(
        "over {with} of {} runs; without a figure: {}",
        with + without.len() as u64,
        listed(without.iter().copied())
    )
}

/// `no figure: none of the 2 runs gave one: run-1 (…); run-2 (…)`.
pub fn none_gave<'a>(without: &[(&'a str, &'a str)]) -> String {
    format!(
        "no figure: none of the {} runs gave one: {}",
        without.len(),
        listed(without.iter().copied())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_without_a_figure_are_named_with_why() {
        let why = "1 measured request: a rate needs at least 2";
        assert_eq!(
            over_some(2, &[("run-3", why)]),
            "over 2 of 3 runs; without a figure: run-3 (1 measured request: a rate needs at \
             least 2)"
        );
        assert_eq!(
            none_gave(&[("run-1", why), ("run-2", why)]),
            "no figure: none of the 2 runs gave one: run-1 (1 measured request: a rate needs \
             at least 2); run-2 (1 measured request: a rate needs at least 2)"
        );
    }
}
