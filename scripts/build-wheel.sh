#!/usr/bin/env bash
# Build the wheel users install: one abi3 wheel (CPython 3.9 and later) for
# this platform, holding the Python package, the compiled core
# (vramscope._native) and so the whole command line (`vramscope ...` is the
# package's console script, which runs the same Rust CLI in-process).
#
#   scripts/build-wheel.sh [OUT_DIR]      (default: target/wheels)
#
# Uses the project's .venv (scripts/setup-venv.sh) for maturin. On Linux
# the wheel is tagged manylinux (maturin checks the libraries it links);
# `pip install vramscope-*.whl` then needs no Rust toolchain.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
out="${1:-target/wheels}"
scripts/setup-venv.sh
venv="${VRAMSCOPE_VENV:-$repo_root/.venv}"
"$venv/bin/maturin" build --release --out "$out" >&2
ls -1 "$out"/vramscope-*.whl | tail -n 1
