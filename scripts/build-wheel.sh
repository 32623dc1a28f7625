#!/usr/bin/env bash
# Build the wheel users install: one abi3 wheel (CPython 3.9 and later) for
# Linux x86_64, holding the Python package, the compiled core
# (vramscope._native) and so the whole command line (`vramscope ...` is the
# package's console script, which runs the same Rust CLI in-process).
#
#   scripts/build-wheel.sh [OUT_DIR]            (default: target/wheels)
#   scripts/build-wheel.sh --native [OUT_DIR]   this machine's glibc only (quicker)
#   scripts/build-wheel.sh --unoptimised [OUT_DIR]
#                                  the manylinux2014 wheel without optimisation
#                                  (Cargo.toml's wheel-check profile): for
#                                  checks of the packaging, never for users
#
# By default the wheel is manylinux2014 (glibc 2.17: RHEL/CentOS 7, Ubuntu
# 18.04 and every later distribution): maturin links it with zig (the
# `ziglang` package, which scripts/setup-venv.sh installs) against glibc
# 2.17's symbols, whatever this machine's glibc is. `--native` links with
# the system linker and tags the wheel for this machine's glibc. Either way
# `pip install vramscope-*.whl` then needs no Rust toolchain.
#
# The wheel's build keeps its own cargo target directory (target/wheel).
# Sharing the development build's was tried: on a warm tree it reused
# everything, but under `.ci/run` on a clean clone (whose clippy works in
# that directory and holds its lock) `test_wheel.py` took 170-184 s,
# against 121 s in a directory of its own.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
native=0
profile=(--release)
if [[ "${1:-}" == "--native" ]]; then
    native=1
    shift
elif [[ "${1:-}" == "--unoptimised" ]]; then
    profile=(--profile wheel-check)
    shift
fi
out="${1:-target/wheels}"
scripts/setup-venv.sh
venv="${VRAMSCOPE_VENV:-$repo_root/.venv}"
if (( native )); then
    "$venv/bin/maturin" build --release --out "$out" >&2
else
    if ! "$venv/bin/python" -c "import ziglang" 2>/dev/null; then
        echo "build-wheel: the ziglang package is missing from $venv (scripts/setup-venv.sh installs it); or use --native" >&2
        exit 1
    fi
    # maturin finds zig through the venv's python (python -m ziglang).
    PATH="$venv/bin:$PATH" CARGO_TARGET_DIR="$repo_root/target/wheel" \
        "$venv/bin/maturin" build "${profile[@]}" --zig --compatibility manylinux2014 --out "$out" >&2
fi
ls -1t "$out"/vramscope-*.whl | head -n 1
