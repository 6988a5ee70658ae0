# Headless Chromium (Debian's `chromium` package, and a font for its text), for the tests that
# load canaryd's HTML reports in a real browser: no console errors, no network requests, every
# chart drawn (daemon/tests/report.rs). Sourced by scripts/test.sh: exports CANARYD_CHROMIUM, or
# returns non-zero when Chromium is missing and cannot be installed (an error on CI, CI=true;
# elsewhere the browser tests skip, counted). Installs only when missing: a second run does
# nothing.
canaryd_setup_chromium() {
    if ! command -v chromium >/dev/null 2>&1; then
        if ! command -v apt-get >/dev/null 2>&1; then
            echo "chromium: missing and no apt-get here; the browser tests will skip"
            return 1
        fi
        local sudo=""
        if [ "$(id -u)" != 0 ]; then
            if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
                echo "chromium: missing and not root; the browser tests will skip"
                return 1
            fi
        fi
        if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            $sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core; } >/dev/null 2>&1; then
            echo "chromium: could not install Debian's chromium (network?); the browser tests will skip"
            return 1
        fi
    fi
    local bin
    bin="$(command -v chromium)"
    if ! "$bin" --headless --no-sandbox --version >/dev/null 2>&1; then
        echo "chromium: $bin does not run here; the browser tests will skip"
        return 1
    fi
    export CANARYD_CHROMIUM="$bin"
    echo "chromium: $("$bin" --version 2>/dev/null) at $bin"
}
canaryd_setup_chromium
