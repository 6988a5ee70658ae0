# VictoriaMetrics single-node (Debian trixie's package), for the test that runs every
# dashboard's PromQL against real exported data. Sourced by scripts/test.sh: exports
# CANARYD_VICTORIA_METRICS, or returns non-zero (an error on CI, CI=true; elsewhere the test
# skips, counted, saying why).
#
# The system's apt configuration is left alone: a private sources.list, lists and cache
# under ~/.cache/canaryd-vm, `apt-get download` and `dpkg -x` (no install, no root needed
# beyond what apt-get update itself wants). Bookworm's 1.79 is too old to take OTLP.

canaryd_setup_victoria_metrics() {
    local cache="$HOME/.cache/canaryd-vm"
    local bin="$cache/root/usr/bin/victoria-metrics"
    if [ ! -x "$bin" ]; then
        mkdir -p "$cache/lists/partial" "$cache/apt-cache/archives/partial" "$cache/debs"
        echo "deb http://deb.debian.org/debian trixie main" >"$cache/sources.list"
        local apt=(apt-get -q
            -o "Dir::Etc::sourcelist=$cache/sources.list"
            -o "Dir::Etc::sourceparts=-"
            -o "Dir::State::Lists=$cache/lists"
            -o "Dir::Cache=$cache/apt-cache")
        if ! "${apt[@]}" update >"$cache/apt.log" 2>&1; then
            echo "victoria-metrics: apt-get update of Debian trixie failed (see $cache/apt.log); the dashboard PromQL test will skip"
            return 1
        fi
        if ! (cd "$cache/debs" && "${apt[@]}" download victoria-metrics >>"$cache/apt.log" 2>&1); then
            echo "victoria-metrics: download failed (see $cache/apt.log); the dashboard PromQL test will skip"
            return 1
        fi
        local deb
        deb="$(ls -t "$cache"/debs/victoria-metrics_*.deb | head -n1)"
        if ! dpkg -x "$deb" "$cache/root"; then
            echo "victoria-metrics: could not unpack $deb; the dashboard PromQL test will skip"
            return 1
        fi
    fi
    if "$bin" -help >/dev/null 2>&1; then
        export CANARYD_VICTORIA_METRICS="$bin"
        echo "victoria-metrics: $(basename "$(ls -t "$cache"/debs/victoria-metrics_*.deb | head -n1)" .deb) at $bin"
    else
        echo "victoria-metrics: $bin does not run here; the dashboard PromQL test will skip"
        return 1
    fi
}
canaryd_setup_victoria_metrics
