#!/usr/bin/env bash
# run-suite.sh NAME CMD... : runs one test suite, keeps its log in build/test-logs/NAME.log
# and ends with the plain line `NAME: N passed, M failed`. The counts come from the
# suite's own closing `N passed, M failed` line, from pytest's closing summary
# (`1 failed, 89 passed, 18 skipped, 2 errors in 0.4s`, counts in any order; an error
# is a failure, a skip is not a pass), or from cargo's `test result:` lines.
# A suite that exits non-zero without reporting a failure counts one failure.
set -uo pipefail
name=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/build/test-logs"
log=$root/build/test-logs/$name.log
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
summary=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
pytest_summary=$(grep -E '^=*( ?[0-9]+ [a-z]+,?)+ in [0-9.]+s( \([^)]*\))? ?=*$' "$log" | tail -1)
# pytest_count WORD: the count before WORD in pytest's summary (0 when absent).
pytest_count() { grep -oE "[0-9]+ $1" <<<"$pytest_summary" | grep -oE '^[0-9]+' || echo 0; }
if [ -n "$summary" ]; then
  passed=$(sed -E 's/^([A-Za-z-]+: )?([0-9]+) passed.*/\2/' <<<"$summary")
  failed=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$summary")
elif [ -n "$pytest_summary" ]; then
  passed=$(pytest_count passed)
  failed=$(( $(pytest_count failed) + $(pytest_count 'errors?') ))
else
  passed=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | paste -sd+ | bc 2>/dev/null)
  failed=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) failed.*/\1/' | paste -sd+ | bc 2>/dev/null)
  passed=${passed:-0}; failed=${failed:-0}
fi
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "$name: exited with status $rc without reporting a failed test" >&2
  failed=1
fi
echo "$name: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
