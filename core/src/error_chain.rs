//! An error and its causes on one line, the way every log line and message of canaryd gives
//! one: `a: b: c`.

/// Formats `e` with its whole `source()` chain: "a: b: c". Some errors print their source in
/// their own message too (nvml-wrapper's `libloading error: {0}`, hyper's): each cause is said
/// once.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn each_cause_is_said_once_in_order() {
        let inner = E("connection refused", None);
        let middle = E(
            "libloading error: connection refused",
            Some(Box::new(inner)),
        );
        let outer = E("sending the request", Some(Box::new(middle)));
        assert_eq!(
            error_chain(&outer),
            "sending the request: libloading error: connection refused"
        );
        assert_eq!(error_chain(&E("alone", None)), "alone");
    }
}
