#!/usr/bin/env bash
# All static gates of kmod/ (no kernel needed): rustfmt, the file map and its layering,
# glue.h against its Rust mirrors, SAFETY comments. Runs each and prints their summary
# lines; exit status 1 if any failed. Clippy is not among them: see kmod/README.md
# ("Gates").
set -uo pipefail
here=$(dirname "$0")
status=0
for gate in "$here/check-kmod-fmt.sh" "python3 $here/check-layers.py kmod" \
            "python3 $here/check-kmod-glue.py" "python3 $here/check-kmod-safety.py"; do
  out=$($gate 2>&1) || status=1
  # Only failures and the summary, unless asked for everything.
  if [ "${GB_VERBOSE:-0}" = 1 ]; then echo "$out"; else echo "$out" | grep -v '^ok \|^note '; fi
done
exit $status
