#!/usr/bin/env bash
# make lint: the static gates, plus the shim's own unit tests (no suite builds the shim
# as a test binary otherwise). One check per gate, each run even when an earlier one
# failed; ends with `N passed, M failed`, exit status 1 on any failure.
#
#   fmt          cargo fmt --all -- --check (rustfmt.toml at the root)
#   clippy       cargo clippy --workspace --all-targets --all-features (the shim's
#                lock-order check included), every warning an error, plus
#                undocumented_unsafe_blocks and missing_safety_doc
#   shim-layers  scripts/check-layers.py shim (shim/README.md's file map)
#   kmod-layers  scripts/check-layers.py kmod (kmod/README.md's file map)
#   kmod-glue    scripts/check-kmod-glue.py (glue.h against its Rust mirrors)
#   shim-stats   scripts/check-shim-stats.py (the C and Python mirrors of the shim's
#                counters against ShimStats in stats.rs)
#   shim-stats-selftest  scripts/check-shim-stats-selftest.py (defects planted in a
#                temporary copy: shim-stats must fail on each)
#   kmod-safety  scripts/check-kmod-safety.py (SAFETY comments in kmod/)
#   kmod-fmt     scripts/check-kmod-fmt.sh (kmod/ is outside the workspace)
#   shim-unit    cargo test -p greenboost-shim --features lock-order (the lock order's
#                own tests need the check)
#   selftest     scripts/lint-selftest.sh: each structural check fails on its defect,
#                planted in a temporary copy
#
# kmod's clippy gate (scripts/check-kmod-clippy.sh) needs a Rust-enabled kernel tree and
# the kernel rustc's clippy: make kmod-test runs it, on the rust guest's test kernel.
# GB_VERBOSE=1 also prints the layer checkers' `ok`/`note` lines (always in the log).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo=${CARGO:-cargo}
passed=0 failed=0 failures=()

# gate NAME CMD... : runs CMD, counts it
gate() {
  local name=$1 rc; shift
  echo "=== $name: $*"
  if [ "${GB_VERBOSE:-0}" = 1 ]; then
    "$@" 2>&1; rc=$?
  else
    "$@" 2>&1 | grep -v '^ok \|^note '; rc=${PIPESTATUS[0]}
  fi
  if [ "$rc" -eq 0 ]; then
    echo "ok   $name"; passed=$((passed + 1))
  else
    echo "FAIL $name (exit status $rc)"; failed=$((failed + 1)); failures+=("$name")
  fi
}

gate fmt "$cargo" fmt --all -- --check
gate clippy "$cargo" clippy --workspace --all-targets --all-features -- -D warnings \
  -W clippy::undocumented_unsafe_blocks -W clippy::missing_safety_doc
gate shim-layers python3 scripts/check-layers.py shim
gate kmod-layers python3 scripts/check-layers.py kmod
gate kmod-glue python3 scripts/check-kmod-glue.py
gate shim-stats python3 scripts/check-shim-stats.py
gate shim-stats-selftest python3 scripts/check-shim-stats-selftest.py
gate kmod-safety python3 scripts/check-kmod-safety.py
gate kmod-fmt scripts/check-kmod-fmt.sh
gate shim-unit "$cargo" test -p greenboost-shim --features lock-order
gate selftest scripts/lint-selftest.sh

[ "$failed" -eq 0 ] || echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
