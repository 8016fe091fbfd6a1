#!/usr/bin/env bash
# rustfmt gate for kmod/, which is outside the cargo workspace (`cargo fmt` never sees
# it): every kmod/*.rs must be unchanged by rustfmt with the workspace's rustfmt.toml.
#
# Usage: check-kmod-fmt.sh [--fix]
#   --fix   rewrite the files instead of checking them
# Each file is fed to rustfmt on stdin, so that rustfmt formats that file alone and
# does not follow `mod` items (greenboost.rs includes ../abi/src/greenboost_abi.rs,
# which the workspace's own `cargo fmt` covers). Prints the diff of each file that
# differs and `kmod-fmt: N passed, M failed`; exit status 1 on any failure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fix=0
[ "${1:-}" = --fix ] && fix=1
command -v rustfmt >/dev/null || { echo "kmod-fmt: rustfmt not found (rustup component add rustfmt)" >&2; exit 1; }
passed=0 failed=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for f in "$root"/kmod/*.rs; do
  if ! rustfmt --edition 2021 --config-path "$root/rustfmt.toml" --emit stdout <"$f" >"$tmp" 2>&1; then
    echo "FAIL ${f#"$root"/}: rustfmt could not parse it:"; sed 's/^/    /' "$tmp"
    failed=$((failed + 1)); continue
  fi
  if cmp -s "$f" "$tmp"; then
    passed=$((passed + 1))
  elif [ $fix = 1 ]; then
    cp "$tmp" "$f"; echo "formatted ${f#"$root"/}"; passed=$((passed + 1))
  else
    echo "FAIL ${f#"$root"/}: not rustfmt-clean:"
    diff -u "$f" "$tmp" | sed '1,2d; s/^/    /'
    failed=$((failed + 1))
  fi
done
echo "kmod-fmt: $passed passed, $failed failed"
[ $failed = 0 ]
