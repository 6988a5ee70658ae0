//! `canaryd synthesize IN OUT`: a new trace from an existing one, as `aiperf synthesize` makes
//! one (the `--synthesis-*` spellings are accepted): shared prefixes and unique prompts scaled
//! apart, prefix roots multiplied, lengths capped, time sped up. OUT is in IN's format
//! (Bailian stays Bailian with its 16-token blocks; BurstGPT becomes Mooncake, see
//! [`canary_replay::written_format`]); `canaryd analyze-trace OUT` (and every replay) reads it
//! back.

use crate::cli::ranged::at_least_one;
use crate::cli::replay::positive_number;
use anyhow::{Context, Result};
use canary_replay::{Synthesis, SynthesisError, TraceFormat};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Flags of `canaryd synthesize`.
#[derive(Debug, clap::Args)]
pub struct SynthesizeArgs {
    /// The trace to start from (Mooncake JSONL, Bailian JSONL or BurstGPT CSV).
    pub input: PathBuf,
    /// Where to write the new trace, in the input's format (Bailian JSONL for Bailian, else
    /// Mooncake JSONL); refused if it exists.
    pub output: PathBuf,
    /// Input format; detected when omitted.
    #[arg(long)]
    pub format: Option<TraceFormat>,
    /// Divide every timestamp and session delay by this.
    #[arg(
        long,
        visible_alias = "synthesis-speedup-ratio",
        default_value_t = 1.0,
        value_parser = positive_number
    )]
    pub speedup_ratio: f64,
    /// Multiply shared-prefix lengths (a row's leading blocks that other rows share).
    #[arg(
        long,
        visible_alias = "synthesis-prefix-len-multiplier",
        default_value_t = 1.0,
        value_parser = positive_number
    )]
    pub prefix_len_multiplier: f64,
    /// Copy every prefix tree this many times, each row going to one copy.
    #[arg(
        long,
        visible_alias = "synthesis-prefix-root-multiplier",
        default_value_t = 1,
        value_parser = at_least_one
    )]
    pub prefix_root_multiplier: u32,
    /// Multiply unique-prompt lengths (what follows the shared prefix).
    #[arg(
        long,
        visible_alias = "synthesis-prompt-len-multiplier",
        default_value_t = 1.0,
        value_parser = positive_number
    )]
    pub prompt_len_multiplier: f64,
    /// Cap every input length at N tokens.
    #[arg(long, visible_alias = "synthesis-max-isl", value_name = "N", value_parser = at_least_one)]
    pub max_isl: Option<u32>,
    /// Cap every output length at N tokens.
    #[arg(long, visible_alias = "synthesis-max-osl", value_name = "N", value_parser = at_least_one)]
    pub max_osl: Option<u32>,
    /// Picks each row's prefix copy (default 0).
    #[arg(long, default_value_t = 0)]
    pub random_seed: u64,
    /// Skip bad rows of the input, counting them, instead of refusing the file.
    #[arg(long)]
    pub skip_invalid: bool,
    #[command(flatten)]
    pub trace_limits: crate::cli::replay::TraceLimits,
}

/// Runs `canaryd synthesize`; the exit code.
pub fn synthesize(args: &SynthesizeArgs) -> Result<i32> {
    let s = Synthesis {
        speedup_ratio: args.speedup_ratio,
        prefix_len_multiplier: args.prefix_len_multiplier,
        prefix_root_multiplier: args.prefix_root_multiplier,
        prompt_len_multiplier: args.prompt_len_multiplier,
        max_isl: args.max_isl,
        max_osl: args.max_osl,
        seed: args.random_seed,
    };
    // Before reading anything: a bad factor, or an OUT that exists, is the user's to fix first
    // (the whole input used to be loaded before OUT was looked at). The link below still
    // refuses an OUT made meanwhile.
    s.validate()?;
    // Every synthesized row is built in memory and must be one a run takes.
    let max = canary_replay::trace::MAX_LENGTH_LIMIT;
    if args.trace_limits.length_limit > max {
        anyhow::bail!(
            "--length-limit {}: expected at most {max} tokens (the longest a run takes)",
            args.trace_limits.length_limit
        );
    }
    csv_named(&args.output)?;
    if args.output.symlink_metadata().is_ok() {
        anyhow::bail!(
            "{} exists: choose another name or remove it",
            args.output.display()
        );
    }
    // A row with a prompt is refused below (its length cannot be scaled): checked, not kept,
    // so a trace of them is refused without being held.
    let opts = args
        .trace_limits
        .load_options(args.format, args.skip_invalid);
    let trace = canary_replay::load(&args.input, &opts)?;
    // The trace is written beside OUT and linked to its name only when whole (a link, unlike
    // a rename, refuses an OUT that exists): a failure half-way (a row refused, a full disk)
    // never leaves part of a trace at OUT, where it used to leave one that a rerun refused to
    // overwrite.
    let (partial, file) = Partial::create(&args.output)
        .with_context(|| format!("creating a file beside {}", args.output.display()))?;
    let report = write(args, &trace, &s, opts.length_limit, file)?;
    std::fs::hard_link(&partial.path, &args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    drop(partial);
    let skipped = match trace.report.invalid_skipped {
        0 => String::new(),
        n => format!("; {n} invalid rows of the input skipped"),
    };
    outln!(
        "wrote {} rows ({} capped, {} distinct blocks) to {} (exact){skipped}",
        report.rows,
        report.capped,
        report.blocks,
        args.output.display()
    )?;
    Ok(0)
}

/// Refuses an OUT named `.csv`: what is written is JSONL (Mooncake, or Bailian for a Bailian
/// input), whatever the input (a BurstGPT CSV becomes Mooncake), and a `.csv` name made every
/// reader that goes by the name (a spreadsheet, `pandas.read_csv`) misread it, where canaryd
/// wrote it without a word.
fn csv_named(out: &Path) -> Result<()> {
    let csv = out
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    if csv {
        anyhow::bail!(
            "{}: synthesize writes JSONL (Mooncake, or Bailian for a Bailian input; a BurstGPT \
             CSV becomes Mooncake), not CSV: name it .jsonl",
            out.display()
        );
    }
    Ok(())
}

/// The file OUT is written into before it is linked to OUT's name: created by this process
/// (exclusively: `OUT.partial-PID`, or `OUT.partial-PID-N` when that name is taken), and
/// removed when dropped. A file already there is never opened, emptied or removed: the name
/// used to be `OUT.partial` whoever made it, truncated and then deleted (a user's half-download
/// of that name lost), and two runs to one OUT wrote into one file.
struct Partial {
    path: PathBuf,
}

impl Partial {
    /// Creates a partial file beside `out` under a name nothing holds; it and the file.
    fn create(out: &Path) -> std::io::Result<(Partial, File)> {
        let name = out.file_name().unwrap_or_default();
        let pid = std::process::id();
        for n in 0..1000 {
            let mut partial = name.to_os_string();
            partial.push(match n {
                0 => format!(".partial-{pid}"),
                n => format!(".partial-{pid}-{n}"),
            });
            let path = out.with_file_name(partial);
            // O_EXCL: never a file (or a link) already there.
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
            {
                Ok(file) => return Ok((Partial { path }, file)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{}.partial-{pid} to -999 all exist", name.to_string_lossy()),
        ))
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes `trace` synthesized by `s` into `file` (OUT's partial file); what was written.
fn write(
    args: &SynthesizeArgs,
    trace: &canary_replay::Trace,
    s: &Synthesis,
    length_limit: u32,
    file: File,
) -> Result<canary_replay::SynthesisReport> {
    let mut out = std::io::BufWriter::new(file);
    // What loading the written trace will allow.
    let report = canary_replay::synthesize(trace, s, length_limit, &mut out)
        .map_err(|e| match e {
            e @ SynthesisError::Time { .. } => {
                anyhow::Error::new(e).context("--speedup-ratio is too small for this trace")
            }
            e => e.into(),
        })
        .with_context(|| format!("synthesizing from {}", args.input.display()))?;
    out.flush()
        .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(report)
}

/// Trace synthesis on the fly, for `canaryd replay` and `canaryd profile --trace`: the
/// transforms of `canaryd synthesize`, with aiperf's `--synthesis-*` spellings (and the short
/// ones where replay has no flag of that name), applied to the loaded trace before its window,
/// shard and caps are selected. The run replays the rows `canaryd synthesize` would write.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SynthesisArgs {
    /// Divide every timestamp and session delay by this before replaying: the pace is then
    /// this times `--speedup` (as `canaryd synthesize --speedup-ratio R` and a replay of its
    /// output at `--speedup S`).
    #[arg(long, value_name = "R", value_parser = positive_number)]
    pub synthesis_speedup_ratio: Option<f64>,
    /// Multiply shared-prefix lengths (a row's leading blocks that other rows share).
    #[arg(long, visible_alias = "prefix-len-multiplier", value_name = "F", value_parser = positive_number)]
    pub synthesis_prefix_len_multiplier: Option<f64>,
    /// Copy every prefix tree this many times, each row going to one copy.
    #[arg(long, visible_alias = "prefix-root-multiplier", value_name = "N", value_parser = at_least_one)]
    pub synthesis_prefix_root_multiplier: Option<u32>,
    /// Multiply unique-prompt lengths (what follows the shared prefix).
    #[arg(long, visible_alias = "prompt-len-multiplier", value_name = "F", value_parser = positive_number)]
    pub synthesis_prompt_len_multiplier: Option<f64>,
    /// Cap every input length at N tokens, dropping the blocks past it.
    #[arg(long, visible_alias = "max-isl", value_name = "N", value_parser = at_least_one)]
    pub synthesis_max_isl: Option<u32>,
    /// Cap every output length at N tokens.
    #[arg(long, visible_alias = "max-osl", value_name = "N", value_parser = at_least_one)]
    pub synthesis_max_osl: Option<u32>,
    /// Picks each row's prefix copy with --synthesis-prefix-root-multiplier (default 0;
    /// `canaryd profile` takes --random-seed when this is not given).
    #[arg(long, value_name = "N")]
    pub synthesis_seed: Option<u64>,
}

impl SynthesisArgs {
    /// The first transform flag given, to refuse it where there is no trace.
    pub fn first_given(&self) -> Option<&'static str> {
        [
            (
                "--synthesis-speedup-ratio",
                self.synthesis_speedup_ratio.is_some(),
            ),
            (
                "--synthesis-prefix-len-multiplier",
                self.synthesis_prefix_len_multiplier.is_some(),
            ),
            (
                "--synthesis-prefix-root-multiplier",
                self.synthesis_prefix_root_multiplier.is_some(),
            ),
            (
                "--synthesis-prompt-len-multiplier",
                self.synthesis_prompt_len_multiplier.is_some(),
            ),
            ("--synthesis-max-isl", self.synthesis_max_isl.is_some()),
            ("--synthesis-max-osl", self.synthesis_max_osl.is_some()),
            ("--synthesis-seed", self.synthesis_seed.is_some()),
        ]
        .into_iter()
        .find(|f| f.1)
        .map(|f| f.0)
    }

    /// The synthesis the flags ask for, `None` when no transform is given; unset factors are
    /// 1 (no change). Checked by the plan, which names the flag.
    pub fn synthesis(&self, seed: Option<u64>) -> Option<Synthesis> {
        self.first_given()?;
        let d = Synthesis::default();
        Some(Synthesis {
            speedup_ratio: self.synthesis_speedup_ratio.unwrap_or(d.speedup_ratio),
            prefix_len_multiplier: self
                .synthesis_prefix_len_multiplier
                .unwrap_or(d.prefix_len_multiplier),
            prefix_root_multiplier: self
                .synthesis_prefix_root_multiplier
                .unwrap_or(d.prefix_root_multiplier),
            prompt_len_multiplier: self
                .synthesis_prompt_len_multiplier
                .unwrap_or(d.prompt_len_multiplier),
            max_isl: self.synthesis_max_isl,
            max_osl: self.synthesis_max_osl,
            seed: self.synthesis_seed.or(seed).unwrap_or(d.seed),
        })
    }
}

#[cfg(test)]
mod csv_name_tests {
    use clap::Parser;
    use std::path::Path;

    /// `canaryd synthesize in.csv out.csv` wrote Mooncake JSONL into a file named `.csv`,
    /// without a word: refused before anything is read or written, naming OUT and why.
    #[test]
    fn an_output_named_csv_is_refused_before_anything_is_written() {
        let input = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/traces/burstgpt_readme_rows.csv");
        let dir = tempfile::tempdir().unwrap();
        let run = |out: &Path| {
            let cli = crate::Cli::try_parse_from([
                "canaryd".as_ref(),
                "synthesize".as_ref(),
                input.as_os_str(),
                out.as_os_str(),
            ])
            .unwrap();
            let crate::Command::Synthesize(args) = cli.command else {
                panic!("not synthesize")
            };
            super::synthesize(&args)
        };
        let out = dir.path().join("out.CSV");
        let e = format!("{:#}", run(&out).unwrap_err());
        assert!(
            e.contains("out.CSV: synthesize writes JSONL") && e.contains("name it .jsonl"),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // The same input to a .jsonl name is written.
        let out = dir.path().join("out.jsonl");
        assert_eq!(run(&out).unwrap(), 0);
        assert!(std::fs::metadata(&out).unwrap().len() > 0);
    }
}
