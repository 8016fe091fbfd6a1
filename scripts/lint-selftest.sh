#!/usr/bin/env bash
# make lint's self-test: each check that guards the code's structure is shown to fail on
# the defect it exists for, planted in a temporary copy of the tree (the tree itself is
# never touched). One line per planted defect; exit status 1 if any check let its defect
# through.
#
#   upward-import   a `sys` file importing `hooks`: scripts/check-layers.py shim fails
#   lock-rank       two locks taken out of rank (the lock tests' increasing order
#                   reversed): the shim's unit tests with the lock-order feature fail
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo=${CARGO:-cargo}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
failed=0

# copy: the tree's sources (no target/, no .git) into $work/tree, afresh.
copy() {
  rm -rf "$work/tree" && mkdir -p "$work/tree" &&
    (cd "$root" && tar --exclude=./target --exclude=./.git --exclude=./build -cf - .) | tar -C "$work/tree" -xf -
}

# planted NAME PATTERN CMD...: CMD must fail on the planted tree, saying PATTERN (so
# that it failed for the defect, not for another reason).
planted() {
  local name=$1 pattern=$2; shift 2
  if (cd "$work/tree" && "$@") >"$work/$name.log" 2>&1; then
    echo "FAIL $name: the check passed with the defect planted"
    failed=$((failed + 1))
  elif ! grep -q -- "$pattern" "$work/$name.log"; then
    echo "FAIL $name: the check failed, but not with '$pattern':"
    tail -5 "$work/$name.log"
    failed=$((failed + 1))
  else
    echo "ok   $name: $(grep -m1 -- "$pattern" "$work/$name.log" | cut -c1-120)"
  fi
}

copy && echo 'use crate::hooks as _;' >>"$work/tree/shim/src/sys/clock.rs"
planted upward-import 'hooks (line' python3 scripts/check-layers.py shim

copy && python3 - "$work/tree/shim/src/sys/lock.rs" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
before = "        {\n            let _registry = registry.lock();\n            let _live = live.lock();\n        }"
assert before in text, "the lock test to reverse is not there"
open(path, "w").write(text.replace(before, "        {\n            let _live = live.lock();\n            let _registry = registry.lock();\n        }"))
PY
# A target directory of its own, kept between runs (dependencies build once): a planted
# build in the tree's own target/ left its test binary there, which cargo then took as
# fresh for the tree's next `make lint`, failing shim-unit with the planted defect.
planted lock-rank 'lock order: memory::registry::REGISTRY (rank 3' env CARGO_TARGET_DIR="$root/target/lint-selftest" "$cargo" test -q -p greenboost-shim --features lock-order \
  increasing_ranks_and_released_locks_pass

[ "$failed" -eq 0 ]
