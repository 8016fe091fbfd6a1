#!/usr/bin/env bash
# `make test`: every suite that needs no GPU, one after another (a failing suite does
# not stop the others), then the time of each stage in one block (each suite, and
# inside kmod-test the kernel builds, each guest and each guest suite, from
# build/qemu/summary.txt) and the total as a plain `N passed, M failed` line.
# GB_CI_TIMINGS: a file of earlier stage times (.ci/run's install step) for the block;
# GB_CI_T0: when .ci/run started (epoch seconds), for its total.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# lint first: the static gates. install-test and deb-test after kmod-test: they reuse the
# stock-kernel headers kmod-test unpacks.
suites=(lint abi-test cli-test shim-test python-example-test python-package-test plots-test bench-test kmod-test install-test deb-test)
total_passed=0; total_failed=0; lines=(); times=()
t_all=$(date +%s)
suite_log=$(mktemp); trap 'rm -f "$suite_log"' EXIT
for suite in "${suites[@]}"; do
  t0=$(date +%s)
  make --no-print-directory "$suite" 2>&1 | tee "$suite_log"
  times+=("$suite: $(( $(date +%s) - t0 )) s")
  if [ "$suite" = kmod-test ] && [ -f build/qemu/summary.txt ] \
     && [ "$(stat -c %Y build/qemu/summary.txt)" -ge "$t0" ]; then
    # run.sh's own stages: kernel and module builds, gates, each guest and its suites
    while IFS= read -r l; do times+=("    $l"); done < <(sed -n 's/^  //p' build/qemu/summary.txt)
  fi
  out=$(grep -E '^[a-z-]+: [0-9]+ passed, [0-9]+ failed$' "$suite_log" | tail -1)
  if [ -z "$out" ]; then out="$suite: 0 passed, 1 failed"; fi
  lines+=("$out")
  p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$out"); f=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$out")
  total_passed=$((total_passed + p)); total_failed=$((total_failed + f))
done
echo "=== timings"
[ -f "${GB_CI_TIMINGS:-}" ] && cat "$GB_CI_TIMINGS"
printf '%s\n' "${times[@]}"
echo "make test in all: $(( $(date +%s) - t_all )) s"
[ -z "${GB_CI_T0:-}" ] || echo ".ci/run in all: $(( $(date +%s) - GB_CI_T0 )) s"
echo "=== summary"
printf '%s\n' "${lines[@]}"
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
