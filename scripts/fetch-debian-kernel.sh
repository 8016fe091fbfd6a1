#!/usr/bin/env bash
# Fetches a Debian kernel's packages (image, headers, kbuild) with `apt-get download`
# and unpacks them with `dpkg -x` into the cache, never installing them system-wide.
# The QEMU suite boots this image and builds the self-contained module against these
# headers; a user's own kernel uses its installed headers instead.
# Usage: fetch-debian-kernel.sh [KERNELRELEASE]   (default $GB_STOCK_KREL: scripts/lib.sh)
# Prints the unpacked root (it holds boot/vmlinuz-REL, lib/modules/REL,
# usr/src/linux-headers-REL).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

krel=${1:-$GB_STOCK_KREL}
flavour=${krel##*-}                 # amd64
abiname=${krel%-"$flavour"}         # 6.12.117+deb12
pkgs=("linux-image-$krel-unsigned" "linux-headers-$krel"
      "linux-headers-$abiname-common" "linux-kbuild-$abiname")
dest=$GB_CACHE/debian-kernel/$krel
root=$dest/root

if [ -f "$dest/.done" ]; then echo "$root"; exit 0; fi
mkdir -p "$dest"
exec 8>"$dest.lock"
flock 8
if [ -f "$dest/.done" ]; then echo "$root"; exit 0; fi

need_cmd apt-get apt; need_cmd dpkg dpkg
rm -rf "$dest/debs" "$root"; mkdir -p "$dest/debs" "$root"
log "downloading ${pkgs[*]}"
# apt-get download writes into the current directory; _apt must be able to write it.
(cd "$dest/debs" && apt-get download -q "${pkgs[@]}" >&2) || {
  log "apt-get download failed; refreshing the package lists once"
  apt-get update -q >&2 || true
  (cd "$dest/debs" && apt-get download -q "${pkgs[@]}" >&2) \
    || die "cannot download ${pkgs[*]} from the Debian archive (is $krel still published?)"
}
for deb in "$dest"/debs/*.deb; do dpkg -x "$deb" "$root"; done
# The headers package version names the upload the source must come from.
dpkg-deb -f "$dest"/debs/linux-headers-"$krel"_*.deb Version > "$dest/version"
[ -f "$root/boot/vmlinuz-$krel" ] || die "linux-image-$krel-unsigned has no boot/vmlinuz-$krel"
touch "$dest/.done"
echo "$root"
