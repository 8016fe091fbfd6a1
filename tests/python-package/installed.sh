#!/usr/bin/env bash
# installed.sh WHEEL: the greenboost wheel installed into a fresh venv of the python3 on
# PATH (on this machine, or in make deb-test's Debian 12 root), and
# python/greenboost/tests/test_installed.py run with the venv's python from outside the
# tree. Ends with `N passed, M failed` (the install counts as one check).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
wheel=${1:?usage: installed.sh WHEEL}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# No pip cache: in make deb-test's root, nothing may be left outside the venv.
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_CACHE_DIR=1
# --system-site-packages: the base interpreter's numpy (and torch where it is) for the
# views that the examples' tests check, and its pytest; the venv's own site-packages
# come first.
if { python3 -m venv --system-site-packages "$tmp/venv" \
     && "$tmp/venv/bin/python" -m pip install --no-index --no-deps "$wheel"; } >"$tmp/install.log" 2>&1; then
  echo "ok   the wheel installs into a fresh venv ($(python3 -c 'import platform; print("Python", platform.python_version())'))"
else
  echo "FAIL the wheel installs into a fresh venv"; tail -20 "$tmp/install.log"; echo "0 passed, 1 failed"; exit 1
fi
cd "$tmp" || exit 1
"$tmp/venv/bin/python" "$root/python/greenboost/tests/test_installed.py" >"$tmp/test.log" 2>&1
grep -Ev '^[0-9]+ passed, [0-9]+ failed$' "$tmp/test.log"
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/test.log" | tail -1)
[ -n "$summary" ] || { echo "FAIL test_installed.py ended without its summary"; echo "1 passed, 1 failed"; exit 1; }
passed=${summary%% *} failed=${summary##*, }; failed=${failed%% *}
echo "$((passed + 1)) passed, $failed failed"
[ "$failed" -eq 0 ]
