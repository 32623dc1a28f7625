#!/usr/bin/env bash
# Create (or repair) the project's Python virtual environment at <repo>/.venv
# and make sure the packages the test suite and benchmarks need are present:
#   maturin pytest hypothesis numpy torch duckdb pyarrow pandas ray perfetto
#   lightning transformers accelerate (the integrations' tests) torchao
#   (its 8-bit AdamW: the advice's check against a real run) diffusers and
#   timm (the estimate's zoo: a UNet, a ConvNeXt) mcp (the MCP SDK: `vramscope mcp` and its test)
#   ziglang (the linker scripts/build-wheel.sh uses for a manylinux2014 wheel)
#
# Idempotent: on a machine where everything is already installed it only runs
# one quick `find_spec` check with the venv's python (about a second).
#
# Environment:
#   PYTHON            interpreter used to create the venv (default: python3)
#   VRAMSCOPE_VENV    venv location (default: <repo>/.venv)
#
# Progress goes to stderr; stdout stays empty.
set -euo pipefail

log() { printf 'setup-venv: %s\n' "$*" >&2; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VRAMSCOPE_VENV:-$repo_root/.venv}"
base_python="${PYTHON:-python3}"
vpy="$venv/bin/python"

# Each of these distributions is importable under the same name (ray's
# Data library is installed as the ray[data] extra: see requirement()).
packages=(maturin pytest xdist hypothesis numpy torch duckdb pyarrow pandas ray perfetto lightning transformers accelerate torchvision torchao diffusers timm mcp ziglang)

# The pip requirement for a module name.
requirement() {
    case "$1" in
        ray) echo "ray[data]" ;;
        xdist) echo "pytest-xdist" ;;
        *) echo "$1" ;;
    esac
}

venv_ok() {
    [[ -x "$vpy" ]] && "$vpy" -m pip --version >/dev/null 2>&1
}

if ! venv_ok; then
    if ! command -v "$base_python" >/dev/null 2>&1; then
        log "error: '$base_python' not found; install Python 3 or set PYTHON=/path/to/python3"
        exit 1
    fi
    if [[ -e "$venv" ]]; then
        log "virtual environment at $venv is broken; recreating it"
        rm -rf -- "$venv"
    fi
    log "creating virtual environment at $venv with $("$base_python" --version 2>&1)"
    "$base_python" -m venv "$venv"
fi

# Prints the required modules the venv's python cannot find (space-separated).
missing_modules() {
    "$vpy" -c '
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
' "${packages[@]}"
}

read -r -a missing <<<"$(missing_modules)"
if [[ ${#missing[@]} -eq 0 ]]; then
    log "ok: $venv has ${packages[*]}"
    exit 0
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1
log "upgrading pip"
"$vpy" -m pip install --quiet --upgrade pip >&2
requirements=()
for m in "${missing[@]}"; do requirements+=("$(requirement "$m")"); done
if [[ " ${missing[*]} " == *" torch "* ]]; then
    log "installing ${requirements[*]} (torch is a large download; this can take several minutes)"
else
    log "installing ${requirements[*]}"
fi
"$vpy" -m pip install --progress-bar off "${requirements[@]}" >&2

# Verify: fail loudly if anything is still not importable.
still_missing="$(missing_modules)"
if [[ -n "$still_missing" ]]; then
    log "error: still not importable after install: $still_missing"
    exit 1
fi
log "ok: $venv has ${packages[*]}"
