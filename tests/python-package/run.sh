#!/usr/bin/env bash
# make python-package-test: builds the greenboost wheel from python/greenboost offline
# (pip wheel --no-build-isolation, with the setuptools and wheel of the python3 on PATH,
# which scripts/install-deps.sh installs), installs it into a fresh venv, and runs
# python/greenboost/tests/test_installed.py with the venv's python from outside the
# tree. Ends with `N passed, M failed` (the build and install count as one check each).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
check() { # NAME STATUS [DETAIL-FILE]
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "ok   $1"
  else failed=$((failed + 1)); echo "FAIL $1"; [ -z "${3:-}" ] || tail -20 "$3"; fi
}
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
# A copy: setuptools writes build/ and greenboost.egg-info beside the sources it builds.
cp -r "$root/python/greenboost" "$tmp/src"
python3 -m pip wheel --no-build-isolation --no-deps --no-index -w "$tmp/dist" "$tmp/src" >"$tmp/build.log" 2>&1
rc=$?
wheels=("$tmp"/dist/greenboost-*-py3-none-any.whl)
[ "$rc" -eq 0 ] && [ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ]; rc=$?
check "pip wheel builds one pure-Python wheel offline (${wheels[0]##*/})" "$rc" "$tmp/build.log"
[ "$rc" -eq 0 ] || { echo "(scripts/install-deps.sh installs setuptools and wheel for $(command -v python3))"; finish; }
# --system-site-packages: the base interpreter's numpy (and torch where it is) for the
# views that the examples' tests check; the venv's own site-packages come first.
{ python3 -m venv --system-site-packages "$tmp/venv" \
  && "$tmp/venv/bin/python" -m pip install --no-index --no-deps "${wheels[0]}"; } >"$tmp/install.log" 2>&1
check "the wheel installs into a fresh venv" $? "$tmp/install.log"
[ "$failed" -eq 0 ] || finish
cd "$tmp"
"$tmp/venv/bin/python" "$root/python/greenboost/tests/test_installed.py" | tee "$tmp/test.log"
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/test.log" | tail -1)
if [ -z "$summary" ]; then failed=$((failed + 1)); echo "FAIL test_installed.py ended without its summary"
else passed=$((passed + ${summary%% *})); f=${summary##*, }; failed=$((failed + ${f%% *})); fi
finish
