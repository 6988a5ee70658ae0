#!/usr/bin/env bash
# The whole test suite, runnable on a fresh machine: installs what it needs, then checks
# formatting, lints and runs every test. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Third-party builds are cached outside the repo, so later runs (and fresh clones) reuse them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step() { printf '\n=== %s\n' "$*"; }

step "toolchain"
cargo --version
rustup component add rustfmt clippy >/dev/null 2>&1 || true

step "format"
cargo fmt --all -- --check

step "lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests"
cargo test --workspace --locked
