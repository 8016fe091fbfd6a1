#!/usr/bin/env bash
# build-wheel.sh OUTDIR: the greenboost wheel built offline from python/greenboost into
# OUTDIR (pip wheel --no-build-isolation, with the setuptools and wheel of the python3 on
# PATH, which scripts/install-deps.sh installs); pip's output on stderr. Prints the
# wheel's path; fails unless exactly one pure-Python wheel was built.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: build-wheel.sh OUTDIR}
src=$(mktemp -d); trap 'rm -rf "$src"' EXIT
# A copy: setuptools writes build/ and greenboost.egg-info beside the sources it builds.
cp -r "$root/python/greenboost/." "$src"
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
  python3 -m pip wheel --no-build-isolation --no-deps --no-index -w "$out" "$src" >&2
wheels=("$out"/greenboost-*-py3-none-any.whl)
if [ ${#wheels[@]} -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
  echo "not one pure-Python wheel in $out" >&2; exit 1
fi
echo "${wheels[0]}"
