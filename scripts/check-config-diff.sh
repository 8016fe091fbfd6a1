#!/usr/bin/env bash
# Config gate of the self-contained build: reads `scripts/diffconfig DISTRO NEW` output
# on stdin (lines "-SYM old", "+SYM new", " SYM old -> new") and fails, printing the
# offending lines, unless every difference is Rust-only. Allowed: symbols named
# RUST*, *_RUST*, BINDGEN*, and symbols that merely became visible and are off
# ("+FOO n": they change nothing in the build).
set -uo pipefail
bad=$(grep -vE '^[-+ ]?(RUST[A-Z0-9_]*|[A-Z0-9_]*_RUST(_[A-Z0-9_]*)?|BINDGEN[A-Z0-9_]*) |^\+[A-Z0-9_]+ n$')
[ -z "$bad" ] && exit 0
echo "$bad"
exit 1
