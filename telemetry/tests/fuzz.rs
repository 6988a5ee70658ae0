//! Property-style fuzzing without a fuzzing dependency: thousands of inputs mutated from the
//! real captures with a fixed-seed xorshift generator, so every run is the same. The parser
//! must never panic, and its counts must stay consistent.

use canary_telemetry::prometheus::{parse, MAX_ISSUES};

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes that matter to the grammar, so mutations hit interesting paths.
const SPICE: &[u8] = b"{}\",=\\#\n \t:_+-.eEInfNa0123456789\r";

fn mutate(rng: &mut XorShift, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = at.min(v.len() - 1);
                v[i] = SPICE[rng.below(SPICE.len())];
            }
            1 => v.insert(at, SPICE[rng.below(SPICE.len())]),
            2 if at < v.len() => {
                let end = (at + rng.below(40)).min(v.len());
                v.drain(at..end);
            }
            3 => v.truncate(at),
            4 => {
                // Splice a random chunk of the input somewhere else.
                let from = rng.below(v.len());
                let len = rng.below(60).min(v.len() - from.min(v.len()));
                let chunk: Vec<u8> = v[from..from + len].to_vec();
                let at = at.min(v.len());
                v.splice(at..at, chunk);
            }
            _ => {
                let b = (rng.next() & 0xff) as u8;
                v.insert(at.min(v.len()), b);
            }
        }
    }
    v
}

#[test]
fn mutated_captures_never_panic() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let seeds: Vec<Vec<u8>> = crate::fixtures::all()
        .into_iter()
        .map(|(_, t)| t.into_bytes())
        .chain([
            b"# TYPE h histogram\nh_bucket{le=\"1\"} 1 # {t=\"a\"} 0.5 1.5\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n# EOF\n".to_vec(),
            b"m{a=\"x\\\\y\\\"z\\n\",b=\"1,2\"} NaN 17\n{\"q.n\",c=\"d\"} -Inf\n".to_vec(),
        ])
        .collect();
    let mut parsed_lines = 0usize;
    for round in 0..3000 {
        let seed = &seeds[round % seeds.len()];
        let bytes = mutate(&mut rng, seed);
        // The parser takes &str, as a scrape body is decoded first; lossy decoding is what the
        // scraper does with invalid UTF-8.
        let text = String::from_utf8_lossy(&bytes);
        let s = parse(&text);
        assert!(s.errors.len() <= MAX_ISSUES);
        assert!(s.errors.len() <= s.skipped_lines + text.lines().count());
        assert!(s.skipped_lines <= text.split('\n').count());
        for f in &s.families {
            for (_, h) in f.histograms() {
                let _ = h.quantile(0.5);
                let _ = h.quantile(0.99);
                let _ = h.mean();
            }
        }
        let _ = s.histogram("h");
        parsed_lines += text.lines().count();
    }
    assert!(parsed_lines > 10_000);
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = XorShift(42);
    for _ in 0..2000 {
        let len = rng.below(300);
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if rng.below(3) == 0 {
                    SPICE[rng.below(SPICE.len())]
                } else {
                    (rng.next() & 0xff) as u8
                }
            })
            .collect();
        let _ = parse(&String::from_utf8_lossy(&bytes));
    }
}
