# What the deployment and privilege tests run: systemd-analyze (Debian's `systemd` package),
# which rates the systemd unit's hardening (daemon/tests/deploy.rs), and setpriv (util-linux),
# which drops every capability for the unprivileged eBPF test (daemon/tests/kernel.rs).
# Sourced by scripts/test.sh. Installs only what is missing, so a second run does nothing and a
# host that already has them is left alone; returns non-zero when something is missing and
# cannot be installed (an error on CI, CI=true; elsewhere those tests skip, counted).
#
# Installing `systemd` in a container that does not run it is safe: its maintainer scripts see
# no running systemd (/run/systemd/system) and start nothing; --no-install-recommends keeps out
# systemd-sysv, which would replace /sbin/init.
canaryd_setup_systemd() {
    local missing=()
    command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
    command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
    if [ "${#missing[@]}" -eq 0 ]; then
        echo "systemd: $(systemd-analyze --version | head -n1), $(setpriv --version)"
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "systemd: ${missing[*]} missing and no apt-get here; their tests will skip"
        return 1
    fi
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
            echo "systemd: ${missing[*]} missing and not root; their tests will skip"
            return 1
        fi
    fi
    if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null 2>&1; then
        echo "systemd: could not install ${missing[*]} (network?); their tests will skip"
        return 1
    fi
    if ! command -v systemd-analyze >/dev/null 2>&1 || ! command -v setpriv >/dev/null 2>&1; then
        echo "systemd: installed ${missing[*]} but systemd-analyze or setpriv is still missing"
        return 1
    fi
    echo "systemd: installed ${missing[*]}"
}
canaryd_setup_systemd
