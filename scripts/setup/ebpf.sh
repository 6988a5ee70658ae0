# Installs what the eBPF programs need to build: clang (compiles ebpf/src/bpf/*.bpf.c) and
# libbpf-dev (the bpf_helpers.h family of headers). Sourced by scripts/test.sh; returns non-zero
# when they are missing and cannot be installed (an error on CI, CI=true; elsewhere canary-ebpf
# builds a stub and its tests skip, counted, saying why).
canaryd_setup_ebpf() {
    if command -v clang >/dev/null 2>&1 && [ -e /usr/include/bpf/bpf_helpers.h ]; then
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "ebpf: clang or libbpf-dev missing and no apt-get here; eBPF tests will skip"
        return 1
    fi
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
            echo "ebpf: clang or libbpf-dev missing and not root; eBPF tests will skip"
            return 1
        fi
    fi
    if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        $sudo apt-get install -y -qq --no-install-recommends clang libbpf-dev; } >/dev/null 2>&1; then
        echo "ebpf: could not install clang and libbpf-dev (network?); eBPF tests will skip"
        return 1
    fi
    echo "ebpf: installed $(clang --version | head -n1) and libbpf-dev"
}
canaryd_setup_ebpf
