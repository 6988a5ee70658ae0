//! A small mutation fuzzer for parsers, run as an ordinary test on the stable toolchain.
//!
//! Not coverage-guided (that needs compiler instrumentation the stable toolchain does not
//! offer): it mutates real captures with grammar-aware edits, and keeps an input as a new seed
//! when the target reports an outcome not seen before (a new error class, a new shape of
//! result), which steers it past the first error a random edit usually causes.
//!
//! By default a run is a fixed number of inputs from a fixed seed, the same on every machine,
//! so CI is reproducible and bounded. `CANARYD_FUZZ_SECS=N` runs each target for N seconds
//! instead, from a seed drawn from the clock and printed, for long runs by hand. A panic in the
//! target fails the test with the input that caused it (escaped, and written in full to a file
//! named in the message), and the random seed that reproduces the run.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Seconds per target for a long run, instead of the fixed count.
pub const FUZZ_SECS: &str = "CANARYD_FUZZ_SECS";
/// Most seeds kept (the starting ones plus those with new outcomes).
const MAX_CORPUS: usize = 4096;
/// Largest input made from mutation (bytes).
const MAX_INPUT: usize = 1 << 16;

/// Values that break number parsing: signs, overflow of u32/u64/i64/f64, NaN, exponents.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "-0",
    "1.5",
    "1e309",
    "-1e309",
    "1e-320",
    "NaN",
    "inf",
    "-Infinity",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1e19",
    "0x10",
    "00012",
    ".5",
    "5.",
    "1_000",
];

/// What one fuzz run did: shown in the test output and recorded in bench/RESULTS.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuzzReport {
    /// The target's name.
    pub target: String,
    /// Inputs fed to the target.
    pub inputs: u64,
    /// Seeds at the start (real captures and hand-picked edge cases).
    pub seeds: usize,
    /// Distinct outcomes the target reported.
    pub outcomes: usize,
    /// Seeds at the end: the start plus inputs kept for a new outcome.
    pub corpus: usize,
    /// The random seed of the run (reproduces it with the same budget).
    pub rng_seed: u64,
}

impl std::fmt::Display for FuzzReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fuzz {}: {} inputs, 0 panics, {} distinct outcomes, corpus {} -> {} (seed {:#x})",
            self.target, self.inputs, self.outcomes, self.seeds, self.corpus, self.rng_seed
        )
    }
}

/// A deterministic xorshift64* generator: the same seed gives the same run everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced, xorshift cannot leave it).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// How long a run goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// This many mutated inputs (after the seeds), from a fixed random seed.
    Inputs(u64),
    /// Mutated inputs for this long, from a random seed drawn from the clock.
    Time(Duration),
}

impl Budget {
    /// [`Budget::Time`] when `CANARYD_FUZZ_SECS` is set, else `Inputs(inputs)`.
    pub fn from_env_or(inputs: u64) -> Budget {
        std::env::var(FUZZ_SECS)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(Budget::Inputs(inputs), |s| {
                Budget::Time(Duration::from_secs(s))
            })
    }
}

/// Feeds `target` its seeds, then mutations of them, and fails the test on the first panic.
/// `dictionary` holds tokens of the input's grammar (`data:`, `"timestamp"`, `le="`), spliced
/// in by some mutations. `target` returns a label of what it made of the input (an error
/// kind, `ok` and a count): an unseen label keeps the input as a seed. `inputs` is the fixed
/// budget, unless `CANARYD_FUZZ_SECS` asks for a timed run.
pub fn fuzz(
    target: &str,
    seeds: Vec<Vec<u8>>,
    dictionary: &[&[u8]],
    inputs: u64,
    run: impl FnMut(&[u8]) -> String,
) -> FuzzReport {
    fuzz_with(target, seeds, dictionary, Budget::from_env_or(inputs), run)
}

/// [`fuzz`] with an explicit budget.
pub fn fuzz_with(
    target: &str,
    seeds: Vec<Vec<u8>>,
    dictionary: &[&[u8]],
    budget: Budget,
    mut run: impl FnMut(&[u8]) -> String,
) -> FuzzReport {
    assert!(!seeds.is_empty(), "fuzz {target}: no seeds");
    let rng_seed = match budget {
        Budget::Time(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        Budget::Inputs(_) => 0x9E37_79B9_7F4A_7C15 ^ target.len() as u64,
    };
    let mut rng = Rng::new(rng_seed);
    let start = Instant::now();
    let started_with = seeds.len();
    let mut outcomes = HashSet::new();
    let mut tried = 0u64;
    let mut try_one = |input: &[u8], tried: &mut u64| {
        let outcome = match catch_unwind(AssertUnwindSafe(|| run(input))) {
            Ok(label) => label,
            Err(panic) => fail(target, rng_seed, *tried, input, panic),
        };
        *tried += 1;
        outcomes.insert(outcome)
    };
    for seed in &seeds {
        try_one(seed, &mut tried);
    }
    let mut corpus = seeds;
    let mut mutated = 0u64;
    while match budget {
        Budget::Inputs(n) => mutated < n,
        Budget::Time(limit) => start.elapsed() < limit,
    } {
        let base = &corpus[rng.below(corpus.len())];
        let other = &corpus[rng.below(corpus.len())];
        let input = mutate(&mut rng, base, other, dictionary);
        mutated += 1;
        if try_one(&input, &mut tried) && corpus.len() < MAX_CORPUS {
            corpus.push(input);
        }
    }
    let report = FuzzReport {
        target: target.to_string(),
        inputs: tried,
        seeds: started_with,
        outcomes: outcomes.len(),
        corpus: corpus.len(),
        rng_seed,
    };
    eprintln!("{report} in {:.1} s", start.elapsed().as_secs_f64());
    report
}

/// Fails the test with the input that panicked, saved in full beside the message.
fn fail(
    target: &str,
    rng_seed: u64,
    index: u64,
    input: &[u8],
    panic: Box<dyn std::any::Any + Send>,
) -> ! {
    let why = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    let file = std::env::temp_dir().join(format!(
        "canaryd-fuzz-{}-{}.bin",
        target.replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
        std::process::id()
    ));
    let saved = match std::fs::write(&file, input) {
        Ok(()) => format!("saved in {}", file.display()),
        Err(e) => format!("not saved: {e}"),
    };
    let shown: String = String::from_utf8_lossy(&input[..input.len().min(2000)])
        .escape_debug()
        .collect();
    panic!(
        "fuzz {target}: input {index} (seed {rng_seed:#x}) panicked: {why}\n\
         input ({} bytes, {saved}): \"{shown}\"",
        input.len()
    );
}

/// One to eight edits of `base`: bytes and tokens inserted, replaced or removed, lines
/// duplicated, dropped or swapped, numbers swapped for edge values, pieces of `other` spliced.
pub fn mutate(rng: &mut Rng, base: &[u8], other: &[u8], dictionary: &[&[u8]]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(v.len() + 1);
        match rng.below(11) {
            0 if !v.is_empty() => {
                let i = at.min(v.len() - 1);
                v[i] = pick_byte(rng, dictionary);
            }
            1 => v.insert(at, pick_byte(rng, dictionary)),
            2 if !dictionary.is_empty() => {
                let token = dictionary[rng.below(dictionary.len())];
                v.splice(at..at, token.iter().copied());
            }
            3 if at < v.len() => {
                let end = (at + 1 + rng.below(40)).min(v.len());
                v.drain(at..end);
            }
            4 => v.truncate(at),
            5 if !other.is_empty() => {
                let from = rng.below(other.len());
                let len = (1 + rng.below(80)).min(other.len() - from);
                v.splice(at..at, other[from..from + len].iter().copied());
            }
            6 => {
                let number = NUMBERS[rng.below(NUMBERS.len())].as_bytes();
                replace_number(&mut v, at, number);
            }
            7 | 8 => edit_lines(rng, &mut v),
            9 => v.insert(at, (rng.next_u64() & 0xff) as u8),
            _ => {
                // A run of one byte: long lines, deep nesting, many separators.
                let b = pick_byte(rng, dictionary);
                let n = 1 + rng.below(300);
                v.splice(at..at, std::iter::repeat_n(b, n));
            }
        }
    }
    v.truncate(MAX_INPUT);
    v
}

/// A byte of a dictionary token, or any byte.
fn pick_byte(rng: &mut Rng, dictionary: &[&[u8]]) -> u8 {
    let token = dictionary.get(rng.below(dictionary.len() + 1)).copied();
    match token {
        Some(t) if !t.is_empty() => t[rng.below(t.len())],
        _ => (rng.next_u64() & 0xff) as u8,
    }
}

/// Replaces the run of digits at or after `at` (if any) with `number`.
fn replace_number(v: &mut Vec<u8>, at: usize, number: &[u8]) {
    let Some(start) = v[at.min(v.len())..]
        .iter()
        .position(u8::is_ascii_digit)
        .map(|p| p + at)
    else {
        v.splice(at..at, number.iter().copied());
        return;
    };
    let len = v[start..]
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b'.')
        .count();
    v.splice(start..start + len, number.iter().copied());
}

/// Duplicates, drops or swaps whole lines.
fn edit_lines(rng: &mut Rng, v: &mut Vec<u8>) {
    let mut lines: Vec<Vec<u8>> = v.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    let i = rng.below(lines.len());
    let j = rng.below(lines.len());
    match rng.below(3) {
        0 => {
            let copy = lines[i].clone();
            lines.insert(j, copy);
        }
        1 if lines.len() > 1 => {
            lines.remove(i);
        }
        _ => lines.swap(i, j),
    }
    *v = lines.join(&b'\n');
}

/// Windows of `lines` consecutive lines of `text`, every `step` lines: seeds cut from a large
/// real file, so that each input stays small enough to parse thousands of times.
pub fn line_windows(text: &[u8], lines: usize, step: usize) -> Vec<Vec<u8>> {
    let all: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    (0..all.len())
        .step_by(step.max(1))
        .map(|i| all[i..(i + lines).min(all.len())].concat())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs() {
        let run = || {
            let mut seen = Vec::new();
            let seeds = vec![b"a=1\nb=2\n".to_vec()];
            let report = fuzz_with("t", seeds, &[b"="], Budget::Inputs(200), |i| {
                seen.push(i.to_vec());
                format!("{}", i.len() % 7)
            });
            assert_eq!((report.inputs, report.seeds), (201, 1));
            assert!(report.corpus > 1 && report.corpus <= 8, "{report:?}");
            seen
        };
        let (a, b) = (run(), run());
        assert_eq!(a.len(), 201, "the seed, then 200 mutations");
        assert_eq!(a, b);
        assert!(
            a.iter().any(|i| i.as_slice() != b"a=1\nb=2\n"),
            "it mutates"
        );
    }

    #[test]
    fn a_panic_fails_with_the_input() {
        let result = catch_unwind(|| {
            fuzz_with(
                "t",
                vec![b"ok".to_vec()],
                &[],
                Budget::Inputs(10_000),
                |i| {
                    assert!(!i.contains(&b'!'), "found it");
                    String::new()
                },
            )
        });
        let message = *result.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("fuzz t: input"), "{message}");
        assert!(message.contains("found it"), "{message}");
        assert!(message.contains("saved in"), "{message}");
    }

    #[test]
    fn windows_cover_the_file() {
        let w = line_windows(b"1\n2\n3\n4\n5", 2, 2);
        assert_eq!(w, [b"1\n2\n".to_vec(), b"3\n4\n".to_vec(), b"5".to_vec()]);
    }
}
