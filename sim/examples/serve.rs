//! Runs the sim from the command line with the same flags as `canaryd sim`:
//! `cargo run -p canary-sim --example serve -- --port 8000 --profile fast`.

use clap::Parser;

#[derive(Parser)]
#[command(about = "canary-sim: a simulated OpenAI-compatible inference server")]
struct Cli {
    #[command(flatten)]
    args: canary_sim::Args,
}

fn main() {
    if let Err(e) = canary_sim::run_blocking(Cli::parse().args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
