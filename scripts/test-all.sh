#!/usr/bin/env bash
# `make test`: every suite that needs no GPU, one after another (a failing suite does
# not stop the others), then the total as a plain `N passed, M failed` line.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# lint first: the static gates. install-test after kmod-test: it reuses the
# stock-kernel headers kmod-test unpacks.
suites=(lint abi-test cli-test shim-test python-example-test kmod-test install-test)
total_passed=0; total_failed=0; lines=()
suite_log=$(mktemp); trap 'rm -f "$suite_log"' EXIT
for suite in "${suites[@]}"; do
  make --no-print-directory "$suite" 2>&1 | tee "$suite_log"
  out=$(grep -E '^[a-z-]+: [0-9]+ passed, [0-9]+ failed$' "$suite_log" | tail -1)
  if [ -z "$out" ]; then out="$suite: 0 passed, 1 failed"; fi
  lines+=("$out")
  p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$out"); f=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$out")
  total_passed=$((total_passed + p)); total_failed=$((total_failed + f))
done
echo "=== summary"
printf '%s\n' "${lines[@]}"
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
