//! What a server scraper saw go wrong over its life, for its one warning of each kind and its
//! source's detail: failed scrapes (an outage mid-run left no trace once the endpoint answered
//! again), lines of pages it could not read, values it left out as out of range and
//! histogram series it left out as contradicting themselves.

use crate::engine::{BadHistogram, LeftOut, OutOfRange};
use crate::prometheus::ParseIssue;

/// Examples kept of each kind of trouble.
const EXAMPLES: usize = 3;

/// A scraper's tally.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    scrapes: usize,
    failed: usize,
    first_failure: Option<String>,
    pages_with_issues: usize,
    skipped_lines: usize,
    issues: Vec<String>,
    left_out_pages: usize,
    left_out: Vec<String>,
    kinds: Vec<OutOfRange>,
    merged_pages: usize,
    merged: Vec<String>,
    bad_pages: usize,
    bad: Vec<String>,
}

/// What is news about one page: the first page with parse issues, the first with values left
/// out, each said once per scraper.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct News {
    /// The first page with parse issues: warn.
    pub issues: bool,
    /// The first page with values left out: warn.
    pub left_out: bool,
}

impl Notes {
    /// Records a failed scrape.
    pub fn failed(&mut self, reason: &str) {
        self.scrapes += 1;
        self.failed += 1;
        self.first_failure.get_or_insert_with(|| reason.to_owned());
    }

    /// Records a page read: its parse issues, skipped lines and values left out.
    pub fn page(&mut self, issues: &[ParseIssue], skipped: usize, left_out: &[LeftOut]) -> News {
        self.scrapes += 1;
        let mut news = News::default();
        if !issues.is_empty() || skipped > 0 {
            news.issues = self.pages_with_issues == 0;
            self.pages_with_issues += 1;
            self.skipped_lines += skipped;
            for i in issues {
                if self.issues.len() < EXAMPLES {
                    self.issues.push(i.to_string());
                }
            }
        }
        if !left_out.is_empty() {
            news.left_out = self.left_out_pages == 0;
            self.left_out_pages += 1;
            for l in left_out {
                // One example of each kind first: a percent and an Inf are different faults.
                if !self.kinds.contains(&l.why) && self.left_out.len() < EXAMPLES {
                    self.kinds.push(l.why);
                    self.left_out.push(l.to_string());
                }
            }
        }
        news
    }

    /// Records a page's signals kept merged only (past `growth::MAX_SERIES`); true on the
    /// first such page (warn).
    pub fn merged(&mut self, merged_only: &[String]) -> bool {
        if merged_only.is_empty() {
            return false;
        }
        self.merged_pages += 1;
        for m in merged_only {
            // The signal's name, without its count of label sets (which may change).
            let name = m.split(" (").next().unwrap_or(m);
            if self.merged.len() < 2 * EXAMPLES && !self.merged.iter().any(|x| x == name) {
                self.merged.push(name.to_owned());
            }
        }
        self.merged_pages == 1
    }

    /// Records a page's histogram series left out as contradicting themselves; true on the
    /// first such page (warn).
    pub fn bad_histograms(&mut self, bad: &[BadHistogram]) -> bool {
        if bad.is_empty() {
            return false;
        }
        self.bad_pages += 1;
        for b in bad {
            // One example of each histogram: its label sets are often alike.
            if self.bad.len() < EXAMPLES && !self.bad.iter().any(|x| x.starts_with(b.name)) {
                self.bad.push(b.to_string());
            }
        }
        self.bad_pages == 1
    }

    /// The histogram series left out, in words (`None` without any).
    pub fn bad(&self) -> Option<String> {
        (self.bad_pages > 0).then(|| {
            format!(
                "histogram series left out on {} of {} pages, their numbers contradicting \
                 themselves, so no server figure is made from them (first: {})",
                self.bad_pages,
                self.scrapes,
                self.bad.join("; ")
            )
        })
    }

    /// The signals kept merged only, in words (`None` without any).
    pub fn merged_only(&self) -> Option<String> {
        (self.merged_pages > 0).then(|| {
            format!(
                "{} of {} pages had counters or histograms over {} label sets ({}): their \
                 growth is judged merged over label sets, so a label set that vanishes or \
                 restarts reads as a reset of the sum",
                self.merged_pages,
                self.scrapes,
                crate::growth::MAX_SERIES,
                self.merged.join(", ")
            )
        })
    }

    /// The parse issues, in words (`None` without any).
    pub fn issues(&self) -> Option<String> {
        (self.pages_with_issues > 0).then(|| {
            format!(
                "parse issues on {} of {} pages, {} lines skipped (first: {})",
                self.pages_with_issues,
                self.scrapes,
                self.skipped_lines,
                self.issues.join("; ")
            )
        })
    }

    /// The values left out, in words (`None` without any).
    pub fn left_out(&self) -> Option<String> {
        (self.left_out_pages > 0).then(|| {
            format!(
                "out-of-range values left out on {} of {} pages ({})",
                self.left_out_pages,
                self.scrapes,
                self.left_out.join("; ")
            )
        })
    }

    /// `what` followed by everything that went wrong so far, `; `-separated.
    pub fn detail(&self, what: &str) -> String {
        let failed = self.first_failure.as_ref().map(|first| {
            format!(
                "{} of {} scrapes failed (first: {first})",
                self.failed, self.scrapes
            )
        });
        std::iter::once(what.to_owned())
            .chain(failed)
            .chain(self.issues())
            .chain(self.left_out())
            .chain(self.bad())
            .chain(self.merged_only())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::parse;

    #[test]
    fn failures_issues_and_left_out_values_are_counted_and_said_once() {
        let mut n = Notes::default();
        assert_eq!(n.detail("u (vllm_v1)"), "u (vllm_v1)");
        let page = parse("ok 1\nbad{ 2\nworse x\n");
        let left = [LeftOut {
            name: "vllm:kv_cache_usage_perc",
            value: 87.5,
            why: OutOfRange::ShareOutside01,
        }];
        let news = n.page(&page.errors, page.skipped_lines, &left);
        assert_eq!(
            news,
            News {
                issues: true,
                left_out: true
            }
        );
        n.failed("u: HTTP status 503");
        assert_eq!(
            n.page(&page.errors, page.skipped_lines, &left),
            News::default()
        );
        assert_eq!(
            n.detail("u"),
            "u; 1 of 3 scrapes failed (first: u: HTTP status 503); parse issues on 2 of 3 \
             pages, 4 lines skipped (first: line 2: bad label set: \"bad{ 2\"; line 3: bad \
             value: \"worse x\"; line 2: bad label set: \"bad{ 2\"); out-of-range values left \
             out on 2 of 3 pages (vllm:kv_cache_usage_perc = 87.5 (a share outside 0..1 (a \
             percent?)))"
        );
    }

    #[test]
    fn signals_kept_merged_only_are_said_once_and_kept_in_the_detail() {
        let mut n = Notes::default();
        assert!(!n.merged(&[]));
        n.page(&[], 0, &[]);
        let wide = ["vllm:time_to_first_token_seconds (64 label sets)".to_owned()];
        assert!(n.merged(&wide));
        n.page(&[], 0, &[]);
        assert!(!n.merged(&wide));
        n.page(&[], 0, &[]);
        assert!(!n.merged(&[]));
        assert_eq!(
            n.detail("u"),
            "u; 2 of 3 pages had counters or histograms over 16 label sets \
             (vllm:time_to_first_token_seconds): their growth is judged merged over label \
             sets, so a label set that vanishes or restarts reads as a reset of the sum"
        );
    }
}
