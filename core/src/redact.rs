//! What of a URL may be shown: logs, errors, summaries, `doctor` and `check-config` all quote
//! endpoints, and a URL's user info or query may carry a token.

/// `url` without user info, query or fragment.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    // Everything up to the last `@` may be user info: a password can hold `/`, `?` or `#`,
    // so the authority's end cannot be trusted before it is gone. Hiding a path that holds
    // an `@` too is the safe side.
    let rest = rest.rsplit('@').next().unwrap_or(rest);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    match scheme {
        "" => rest.to_string(),
        _ => format!("{scheme}://{rest}"),
    }
}

/// Replaces each URL it was given by its [`redact_url`] form in text shown to people: a
/// source's state quotes its endpoint as configured.
#[derive(Debug, Clone, Default)]
pub struct Redactions(Vec<(String, String)>);

impl Redactions {
    /// Redacts `url` from now on.
    pub fn add(&mut self, url: &str) {
        let shown = redact_url(url);
        if shown != url {
            self.0.push((url.to_string(), shown));
        }
    }

    /// `s` with every URL added shown redacted.
    pub fn text(&self, s: &str) -> String {
        self.0
            .iter()
            .fold(s.to_string(), |s, (raw, shown)| s.replace(raw, shown))
    }

    /// A source state whose text is redacted.
    pub fn state(&self, state: crate::SourceState) -> crate::SourceState {
        state.map_text(|s| self.text(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SourceState;

    #[test]
    fn source_states_never_show_user_info_or_query() {
        let mut r = Redactions::default();
        r.add("http://u:pw-SECRET@gpu1:8000/metrics?token=TOK-SECRET");
        r.add("http://127.0.0.1:9400/metrics");
        let state = r.state(SourceState::unavailable(
            "http://u:pw-SECRET@gpu1:8000/metrics?token=TOK-SECRET: cannot connect",
        ));
        assert_eq!(
            state,
            SourceState::unavailable("http://gpu1:8000/metrics: cannot connect")
        );
        let ok = SourceState::available("http://127.0.0.1:9400/metrics: 1 GPU(s)");
        assert_eq!(r.state(ok.clone()), ok);
    }
}
