#!/usr/bin/env bash
# make-root.sh DIR: unpacks a fresh Debian 12 (bookworm) minbase root into DIR, for
# make deb-test to install the packages into, with Debian's python3-venv, pytest, numpy
# and a C compiler for the Python package's wheel and its tests (the ABI test compiles
# abi/greenboost.h). The root is made once with debootstrap
# (from deb.debian.org, ~1-2 min) and kept as a tarball in the cache
# ($GB_CACHE/debootstrap/), so a warm run only unpacks it (a few seconds). The cache key
# covers the suite, the variant, the mirror and this script.
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib.sh"

dest=${1:?usage: make-root.sh DIR}
suite=bookworm variant=minbase
mirror=${GB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
key=$( { echo "$suite $variant $mirror"; cat "$0"; } | sha256sum | cut -c1-12)
cache=$GB_CACHE/debootstrap
tarball=$cache/$suite-$variant-$key.tar

need_cmd debootstrap debootstrap
mkdir -p "$cache"
exec 8>"$cache/lock"
flock 8
if [ ! -f "$tarball" ]; then
  work=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  log "debootstrap $suite ($variant) from $mirror into the cache, once"
  debootstrap --variant="$variant" --include=python3-venv,python3-pytest,python3-numpy,gcc,libc6-dev "$suite" "$work/root" \
    "$mirror" > "$work/log" 2>&1 \
    || { tail -20 "$work/log" >&2; die "debootstrap failed (log above)"; }
  # apt-get clean: apt's downloaded .debs are not part of an installed system (a
  # container image drops them too), and apt's first run settles its own directories
  # (partial/ and auxfiles/ owned by _apt, its lock files), which would otherwise show
  # up as changes in the test's first apt run.
  chroot "$work/root" apt-get clean >> "$work/log" 2>&1 || die "apt-get clean failed in the new root"
  # And dpkg's first write of its status takes each package's Priority from the package
  # index (debootstrap recorded "optional" for binutils-x86-64-linux-gnu and
  # readline-common, which the index calls "extra" and "important"): a no-op selection
  # has it written here, before the test's first dpkg run would.
  chroot "$work/root" sh -c 'dpkg --get-selections | dpkg --set-selections' >> "$work/log" 2>&1 \
    || die "dpkg --set-selections failed in the new root"
  tar -C "$work/root" --numeric-owner -cf "$work/root.tar" .
  mv "$work/root.tar" "$tarball"
  # Older roots of this cache (another key) are of no more use.
  find "$cache" -maxdepth 1 -name "$suite-$variant-*.tar" ! -name "${tarball##*/}" -delete
fi
mkdir -p "$dest"
tar -C "$dest" --numeric-owner -xf "$tarball"
