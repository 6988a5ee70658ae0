//! `GET /sim/truth`: its query, and one bounded page of the ground-truth ring as JSON lines.

use crate::truth::{TruthStore, MAX_PAGE};

/// What `GET /sim/truth?since=SEQ&limit=N` asks for: records with `seq > since`, at most
/// `limit` of them (at most [`MAX_PAGE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TruthQuery {
    pub since: u64,
    pub limit: usize,
}

impl TruthQuery {
    /// Parses a query string; other parameters are ignored. The error, for a 400, names the
    /// parameter: a mistyped `since` read as 0 sent the whole ring.
    pub fn parse(query: Option<&str>) -> Result<TruthQuery, String> {
        let mut q = TruthQuery {
            since: 0,
            limit: MAX_PAGE,
        };
        for pair in query.unwrap_or_default().split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "since" => {
                    q.since = value
                        .parse()
                        .map_err(|_| format!("since={value}: expected a sequence number"))?;
                }
                "limit" => {
                    q.limit = match value.parse::<usize>() {
                        Ok(n) if n > 0 => n.min(MAX_PAGE),
                        _ => return Err(format!("limit={value}: expected a count of 1 or more")),
                    };
                }
                _ => {}
            }
        }
        Ok(q)
    }
}

/// The page `q` asks for, one JSON line per record, and whether records were left for a next
/// page.
pub(super) fn render(truth: &TruthStore, q: TruthQuery) -> (Vec<u8>, bool) {
    let page = truth.page(q.since, q.limit);
    let mut out = Vec::new();
    for r in &page.records {
        let _ = serde_json::to_writer(&mut out, r);
        out.push(b'\n');
    }
    (out, page.more)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        let q = |s| TruthQuery::parse(s);
        let all = TruthQuery {
            since: 0,
            limit: MAX_PAGE,
        };
        assert_eq!(q(None), Ok(all));
        assert_eq!(q(Some("")), Ok(all));
        assert_eq!(
            q(Some("x=1&since=7&limit=20")),
            Ok(TruthQuery {
                since: 7,
                limit: 20
            })
        );
        assert_eq!(q(Some("limit=99999999")).unwrap().limit, MAX_PAGE);
        assert!(q(Some("since=abc")).unwrap_err().contains("since=abc"));
        assert!(q(Some("since=")).unwrap_err().contains("since"));
        assert!(q(Some("limit=0")).unwrap_err().contains("limit=0"));
        assert!(q(Some("limit=-1")).unwrap_err().contains("limit"));
    }
}
