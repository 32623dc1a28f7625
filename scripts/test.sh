#!/usr/bin/env bash
# The project's test command. Works from any directory:
#
#   scripts/test.sh [--quick] [extra args passed to `cargo test`]
#
# --quick is the inner loop (a few minutes): the Rust unit tests (`--lib`)
# and the Python tests not marked slow (`-m "not slow"`; conftest.py marks
# the modules that record whole training programs), no browser tests. The
# full command is what `.ci/run` runs.
#
# Steps:
#   1. scripts/setup-venv.sh        (.venv with maturin, pytest, hypothesis, numpy, torch)
#   2. cargo build --release --workspace (the CLI, for the Python and browser
#      tests; cargo test and maturin reuse its crates)
#   3. cargo test --release --workspace --no-fail-fast (the release build's
#      dependencies and crates serve it: one build of each; the release
#      profile has no link-time optimisation, so the ~90 test binaries link
#      quickly)
#   4. if a Python package (pyproject.toml using maturin) exists: maturin develop --release
#   5. pytest -q on python/tests and/or tests/python, if they contain test files
#   6. browser tests of the HTML report (tests/browser/run.mjs, headless
#      Chromium from $CHROMIUM or /usr/bin/chromium; npm ci into
#      tests/browser/node_modules when that is missing or stale; screenshots
#      in target/browser-shots). Skipped without Chromium, except under CI=true
#      where a missing Chromium (or node/npm) is a failure.
#
# `.venv/bin` is put first on PATH so Rust tests that spawn `python3` get the
# venv's interpreter (with torch). Real snapshot fixtures are read from
# tests/fixtures/real (in the repository).
#
# Ends with a plain line `N passed, N failed` (cargo test, pytest and browser
# test totals) and exits non-zero if any step failed.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# Each step's seconds go to $VRAMSCOPE_STEP_TIMES where it is set (.ci/run
# prints them at the end of its log).
step_label=""
step_start=$SECONDS
step_done() {
    if [[ -n "${VRAMSCOPE_STEP_TIMES:-}" && -n "$step_label" ]]; then
        printf '  %5d s  %s\n' $((SECONDS - step_start)) "$step_label" >>"$VRAMSCOPE_STEP_TIMES"
    fi
    step_label="$*"
    step_start=$SECONDS
}
say() {
    step_done "$*"
    printf '\n==> %s\n' "$*" >&2
}
fail_step() { printf '\ntest.sh: FAILED step: %s\n' "$*" >&2; }

logdir="$(mktemp -d "${TMPDIR:-/tmp}/vramscope-test.XXXXXX")"
trap 'rm -rf -- "$logdir"' EXIT

quick=""
if [[ "${1:-}" == "--quick" ]]; then
    quick=1
    shift
fi
cargo_scope=()
pytest_marks=()
if [[ -n "$quick" ]]; then
    cargo_scope=(--lib)
    pytest_marks=(-m "not slow")
fi

failed_steps=()
passed=0
failed=0

# 1. Python environment.
say "setting up .venv (scripts/setup-venv.sh)"
if ! scripts/setup-venv.sh; then
    fail_step "scripts/setup-venv.sh"
    exit 1
fi
# The same environment scripts/setup-venv.sh made (VRAMSCOPE_VENV moves it).
export VIRTUAL_ENV="${VRAMSCOPE_VENV:-$repo_root/.venv}"
export PATH="$VIRTUAL_ENV/bin:$PATH"
unset PYTHONHOME

# 2. Build.
# The whole workspace, the Python extension's crate too: its proc macros
# (pyo3's) turn on features of `syn` that every derive macro then shares, so
# a build without it would leave `cargo test --workspace` below to rebuild
# every crate and dependency a second time (about 110 s of compiling, 55 s
# of two cores). maturin reuses these crates and rebuilds only pyo3 and the
# extension, with its `extension-module` feature.
say "cargo build --release --workspace"
if ! cargo build --release --workspace; then
    fail_step "cargo build --release --workspace"
    exit 1
fi

# 3. Rust tests (output shown and kept for the summary).
say "cargo test --release --workspace --no-fail-fast ${cargo_scope[*]} $*"
cargo_log="$logdir/cargo-test.log"
if ! cargo test --release --workspace --no-fail-fast "${cargo_scope[@]}" "$@" 2>&1 | tee "$cargo_log"; then
    fail_step "cargo test --workspace"
    failed_steps+=("cargo test")
fi
# Lines look like: "test result: ok. 12 passed; 0 failed; 1 ignored; ..."
read -r cp cf < <(awk '
    /^test result: / {
        for (i = 1; i <= NF; i++) {
            if ($(i) ~ /^passed;?$/) p += $(i-1)
            if ($(i) ~ /^failed;?$/) f += $(i-1)
        }
    }
    END { printf "%d %d\n", p, f }' "$cargo_log")
passed=$((passed + cp))
failed=$((failed + cf))

# The browser tools (playwright-core) serve a pytest too (the cycle
# detector's page), so they are installed before pytest runs.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    if [[ ! -f tests/browser/node_modules/.package-lock.json ||
          tests/browser/package-lock.json -nt tests/browser/node_modules/.package-lock.json ]]; then
        say "npm ci --prefix tests/browser"
        npm ci --prefix tests/browser --no-audit --no-fund || say "npm ci failed; the browser checks will fail"
    fi
fi

# 4 + 5. Python tests.
py_test_dirs=()
for d in python/tests tests/python; do
    if [[ -d "$d" ]] && find "$d" -name 'test_*.py' -o -name '*_test.py' | grep -q .; then
        py_test_dirs+=("$d")
    fi
done

if [[ ${#py_test_dirs[@]} -gt 0 ]]; then
    # Build the Python extension into the venv if the project ships one.
    for pyproject in python/pyproject.toml pyproject.toml; do
        if [[ -f "$pyproject" ]] && grep -q maturin "$pyproject"; then
            pydir="$(dirname "$pyproject")"
            say "maturin develop --release (in $pydir)"
            if ! (cd "$pydir" && maturin develop --release); then
                fail_step "maturin develop --release ($pydir)"
                failed_steps+=("maturin develop")
            fi
            break
        fi
    done

    # On two or more cores the modules run on as many workers (pytest-xdist,
    # at most 4; VRAMSCOPE_TEST_WORKERS=1 runs them in this process), each
    # module whole on one worker so its recordings are made once. Most tests
    # run one small program at a time, which keeps one core busy.
    workers="${VRAMSCOPE_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}"
    [[ "$workers" -gt 4 ]] && workers=4
    py_workers=()
    if [[ "$workers" -gt 1 ]] && python -c "import xdist" 2>/dev/null; then
        py_workers=(-n "$workers" --dist loadfile --no-loadscope-reorder)
    fi
    say "pytest -q ${py_workers[*]} ${py_test_dirs[*]}"
    py_log="$logdir/pytest.log"
    set +e
    # --durations: where the suite's time goes, in every CI log.
    python -m pytest -q --durations=25 "${py_workers[@]}" "${pytest_marks[@]}" "${py_test_dirs[@]}" 2>&1 | tee "$py_log"
    py_rc=${PIPESTATUS[0]}
    set -e
    if [[ $py_rc -eq 5 ]]; then
        echo "test.sh: pytest collected no tests; treating as success" >&2
    elif [[ $py_rc -ne 0 ]]; then
        fail_step "pytest (exit $py_rc)"
        failed_steps+=("pytest")
    fi
    # Last summary line looks like: "3 failed, 40 passed, 2 errors in 1.23s"
    read -r pp pf < <(awk '
        / in [0-9.]+s/ && (/passed/ || /failed/ || /error/) { line = $0 }
        END {
            p = 0; f = 0
            n = split(line, w, /[ ,=]+/)
            for (i = 2; i <= n; i++) {
                if (w[i] == "passed") p = w[i-1]
                if (w[i] == "failed") f += w[i-1]
                if (w[i] == "error" || w[i] == "errors") f += w[i-1]
            }
            printf "%d %d\n", p, f
        }' "$py_log")
    passed=$((passed + pp))
    failed=$((failed + pf))
fi

# 6. Browser tests of the HTML report.
chromium_bin="${CHROMIUM:-/usr/bin/chromium}"
browser_missing=""
if [[ ! -x "$chromium_bin" ]]; then
    browser_missing="Chromium not found at $chromium_bin (apt-get install chromium, or set CHROMIUM)"
elif ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    browser_missing="node/npm not found on PATH (Node.js 20 or later is needed)"
fi
if [[ -n "$quick" ]]; then
    say "skipping browser tests (--quick)"
elif [[ -n "$browser_missing" ]]; then
    if [[ "${CI:-}" == "true" ]]; then
        fail_step "browser tests: $browser_missing"
        failed_steps+=("browser tests")
        failed=$((failed + 1))
    else
        say "skipping browser tests: $browser_missing"
    fi
else
    export CHROMIUM="$chromium_bin"
    browser_ok=1
    # node_modules is a cache: reinstall only when missing or older than the lock file.
    if [[ ! -f tests/browser/node_modules/.package-lock.json ||
          tests/browser/package-lock.json -nt tests/browser/node_modules/.package-lock.json ]]; then
        say "npm ci --prefix tests/browser"
        if ! npm ci --prefix tests/browser --no-audit --no-fund; then
            fail_step "npm ci --prefix tests/browser"
            failed_steps+=("npm ci")
            failed=$((failed + 1))
            browser_ok=0
        fi
    fi
    if [[ $browser_ok -eq 1 ]]; then
        say "node tests/browser/run.mjs --out target/browser-shots"
        browser_log="$logdir/browser.log"
        set +e
        node tests/browser/run.mjs --out target/browser-shots 2>&1 | tee "$browser_log"
        browser_rc=${PIPESTATUS[0]}
        set -e
        # Last line looks like: "40 passed, 0 failed"
        read -r bp bf < <(awk '
            /^[0-9]+ passed, [0-9]+ failed$/ { p = $1; f = $3; seen = 1 }
            END { if (seen) printf "%d %d\n", p, f; else print "0 1" }' "$browser_log")
        if [[ $browser_rc -ne 0 ]]; then
            fail_step "browser tests (exit $browser_rc)"
            failed_steps+=("browser tests")
            [[ $bf -eq 0 ]] && bf=1
        fi
        passed=$((passed + bp))
        failed=$((failed + bf))
    fi
fi

step_done
echo
if [[ ${#failed_steps[@]} -gt 0 ]]; then
    echo "test.sh: failed steps: ${failed_steps[*]}" >&2
    echo "$passed passed, $failed failed"
    exit 1
fi
echo "$passed passed, $failed failed"
