#!/usr/bin/env bash
# make python-package-test: builds the greenboost wheel offline (build-wheel.sh), installs
# it into a fresh venv and runs python/greenboost/tests/test_installed.py with it
# (installed.sh; make deb-test does the same in its Debian 12 root). Ends with
# `N passed, M failed` (the build counts as one check).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! wheel=$("$here/build-wheel.sh" "$tmp/dist" 2>"$tmp/build.log"); then
  echo "FAIL pip wheel builds one pure-Python wheel offline"; tail -20 "$tmp/build.log"
  echo "(scripts/install-deps.sh installs setuptools and wheel for $(command -v python3))"
  echo "0 passed, 1 failed"; exit 1
fi
echo "ok   pip wheel builds one pure-Python wheel offline (${wheel##*/})"
"$here/installed.sh" "$wheel" >"$tmp/installed.log" 2>&1
grep -Ev '^[0-9]+ passed, [0-9]+ failed$' "$tmp/installed.log"
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/installed.log" | tail -1)
[ -n "$summary" ] || { echo "1 passed, 1 failed"; exit 1; }
passed=${summary%% *} failed=${summary##*, }; failed=${failed%% *}
echo "$((passed + 1)) passed, $failed failed"
[ "$failed" -eq 0 ]
