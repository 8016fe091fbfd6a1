#!/usr/bin/env bash
# `make deb`: builds the Debian packages into build/deb/ (or OUTDIR):
#   greenboost          the shim, the CLI, the C header, udev rule, modprobe.d, limits.d,
#                       manual pages and completions; the group is made by postinst
#   greenboost-dkms     the module's source in /usr/src/greenboost-VERSION with dkms.conf
#                       (dh-dkms's maintainer scripts, written by hand: see them)
#   greenboost-dbgsym   the debug symbols of the two binaries, which the first package
#                       ships stripped (/usr/lib/debug/.build-id/NN/REST.debug)
# with dpkg-deb, no debhelper. The file tree is scripts/install.sh's own, staged with
# DESTDIR (PREFIX=/usr, no module build): `make install` and the packages place the
# same files from one list. The package adapts three things: no install manifest
# (dpkg's file list replaces it), the zsh completion in Debian's vendor-completions
# (zsh's fpath has no /usr/share/zsh/site-functions), manual pages gzipped (policy).
#
#   packaging/deb/build.sh [OUTDIR]       GREENBOOST_NO_BUILD=1: use target/release as is
# Prints the three .deb paths.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/packaging/deb
out=${1:-$root/build/deb}
mkdir -p "$out"; out=$(cd "$out" && pwd)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
arch=$(dpkg --print-architecture)
maintainer=${DEBFULLNAME:-GreenBoost maintainers} email=${DEBEMAIL:-greenboost@localhost}
target_dir=${CARGO_TARGET_DIR:-$root/target}/release

say() { echo "make deb: $*" >&2; }
die() { echo "make deb: $*" >&2; exit 1; }
for cmd in dpkg-deb objcopy readelf gzip; do
  command -v "$cmd" >/dev/null || die "$cmd is missing (apt-get install dpkg-dev binutils gzip)"
done

if [ "${GREENBOOST_NO_BUILD:-0}" != 1 ]; then
  say "building the shim and the CLI (release)"
  (cd "$root" && ${CARGO:-cargo} build --release -p greenboost-shim -p greenboost-cli) >&2
fi

work=$out/tree
rm -rf "$work"
mkdir -p "$work"
stage=$work/stage
# --- 1. install.sh's tree ----------------------------------------------------------------
DESTDIR=$stage PREFIX=/usr GREENBOOST_SKIP_KMOD=1 GREENBOOST_NO_BUILD=1 GREENBOOST_NO_APT=1 \
  CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-} "$root/scripts/install.sh" > "$work/install.log" 2>&1 \
  || { cat "$work/install.log" >&2; die "scripts/install.sh could not stage the tree"; }
rm -f "$stage/usr/share/greenboost/install-manifest"
rmdir "$stage/usr/share/greenboost"

# --- 2. split it: the module's source, the rest -----------------------------------------
main=$work/greenboost dkms=$work/greenboost-dkms dbg=$work/greenboost-dbgsym
mkdir -p "$dkms/usr" "$dbg"
mv "$stage/usr/src" "$dkms/usr/src"
mv "$stage" "$main"
mkdir -p "$main/usr/share/zsh/vendor-completions"
mv "$main/usr/share/zsh/site-functions/_greenboost" "$main/usr/share/zsh/vendor-completions/"
rmdir "$main/usr/share/zsh/site-functions"
find "$main/usr/share/man" -type f -exec gzip -9n {} +
mkdir -p "$dkms/usr/share/greenboost-dkms"
install -m 0644 "$root/packaging/modules-load.d/greenboost.conf" "$dkms/usr/share/greenboost-dkms/modules-load.conf"
for p in greenboost greenboost-dkms greenboost-dbgsym; do
  mkdir -p "$work/$p/usr/share/doc/$p"
  { echo "GreenBoost $version: GPL-2.0-only (the module links GPL-only kernel symbols)."
    echo
    cat "$root/LICENSE-GPL2"; } > "$work/$p/usr/share/doc/$p/copyright"
done

# --- 3. strip the binaries, their debug symbols to the dbgsym package --------------------
build_ids=()
for elf in "$main/usr/bin/greenboost" "$main/usr/lib/libgreenboost_cuda.so"; do
  id=$(readelf -n "$elf" | sed -n 's/^ *Build ID: \([0-9a-f]*\)$/\1/p')
  [ -n "$id" ] || die "$elf has no GNU build ID: the debug symbols could not be found by it"
  debug=$dbg/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug
  mkdir -p "${debug%/*}"
  objcopy --only-keep-debug --compress-debug-sections "$elf" "$debug"
  chmod 0644 "$debug"
  objcopy --strip-debug --strip-unneeded --remove-section=.comment --add-gnu-debuglink="$debug" "$elf"
  build_ids+=("$id")
done

# --- 4. dependencies --------------------------------------------------------------------
# The binaries' libraries, by the package that owns each (as dpkg-shlibdeps would), with
# libc6 at least the newest GLIBC_ symbol version they use (the shim needs 2.34).
glibc=$(objdump -T "$main/usr/bin/greenboost" "$main/usr/lib/libgreenboost_cuda.so" \
        | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
lib_packages=$(for elf in "$main/usr/bin/greenboost" "$main/usr/lib/libgreenboost_cuda.so"; do
                 ldd "$elf" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
               done | sort -u | xargs dpkg -S | cut -d: -f1 | sort -u)
depends=
for p in $lib_packages; do
  [ "$p" = libc6 ] && p="libc6 (>= $glibc)"
  depends+="${depends:+, }$p"
done
depends+=", passwd"   # groupadd, usermod, gpasswd, groupdel in postinst and postrm
# The module build's packages: install.sh's own list (kmod_packages), with dkms, the
# kernel patches' `patch` and Debian's cargo (the build installs bindgen with it once).
kmod_packages=$(sed -n '/^kmod_packages=(/,/)/p' "$root/scripts/install.sh" | sed 's/.*(//; s/).*//' | xargs)
[ -n "$kmod_packages" ] || die "cannot read kmod_packages from scripts/install.sh"
dkms_depends="dkms (>= 2.1.0.0), $(echo "$kmod_packages patch cargo-web" | sed 's/ /, /g')"

# --- 5. control files and maintainer scripts --------------------------------------------
# control_file PACKAGE ARCH FIELDS...: DEBIAN/control with the common fields
control_file() {
  local p=$1 a=$2; shift 2
  mkdir -p "$work/$p/DEBIAN"
  { echo "Package: $p"
    echo "Version: $version"
    echo "Architecture: $a"
    echo "Maintainer: $maintainer <$email>"
    echo "Installed-Size: $(du -sk --exclude=DEBIAN "$work/$p" | cut -f1)"
    printf '%s\n' "$@"; } > "$work/$p/DEBIAN/control"
}
control_file greenboost "$arch" "Depends: $depends" "Recommends: greenboost-dkms (= $version)" \
  "Suggests: prometheus-node-exporter" "Section: utils" "Priority: optional" \
  "Description: CUDA allocations past VRAM, backed by pinned system RAM" \
  " libgreenboost_cuda.so, an LD_PRELOAD library, places each CUDA allocation in VRAM" \
  " or in pinned RAM the GPU reads over PCIe; \`greenboost run -- CMD\` runs a program" \
  " under it. The greenboost command shows every tier (status, Prometheus), checks the" \
  " system (doctor) and adds the shim to a systemd service (service enable)." \
  " Without the greenboost.ko module (greenboost-dkms) the shim uses its own pinned memory."
control_file greenboost-dkms all "Depends: $dkms_depends" "Recommends: greenboost (= $version)" \
  "Section: kernel" "Priority: optional" \
  "Description: GreenBoost's kernel module greenboost.ko, built by DKMS" \
  " /dev/greenboost: pinned 2 MiB-page buffers for the shim (tier T2) and swappable" \
  " ones (T3), each a DMA-BUF. DKMS builds it for each kernel with the project's own" \
  " build. On a stock kernel without Rust support (Debian 12's) the build also needs" \
  " linux-source-X.Y of the very upload of the kernel's linux-headers, which no" \
  " dependency can name: postinst says which to install when it is missing, and" \
  " leaves the module unbuilt until then. The first build installs bindgen with cargo" \
  " (from crates.io) into /var/cache/greenboost."
control_file greenboost-dbgsym "$arch" "Depends: greenboost (= $version)" "Section: debug" \
  "Priority: optional" "Auto-Built-Package: debug-symbols" "Build-Ids: ${build_ids[*]}" \
  "Description: debug symbols for greenboost"
(cd "$main" && find etc -type f | sed 's#^#/#' | sort) > "$main/DEBIAN/conffiles"

# script PACKAGE NAME: packaging/deb/PACKAGE.NAME with its placeholders filled
refuse=$(sed '/^#/d' "$here/refuse-make-install.sh")
runtime=$(sed '/^# shellcheck/d' "$root/scripts/uninstall-runtime.sh")
# (bash 5.2 would read `&` in a ${x//pattern/replacement} as the match: the scripts' >&2)
shopt -u patsub_replacement 2>/dev/null || true
script() {
  local text
  text=$(cat "$here/$1.$2")
  text=${text//@VERSION@/$version}
  text=${text//@REFUSE_MAKE_INSTALL@/$refuse}
  text=${text//@UNINSTALL_RUNTIME@/$runtime}
  printf '%s\n' "$text" > "$work/$1/DEBIAN/$2"
  chmod 0755 "$work/$1/DEBIAN/$2"
}
script greenboost preinst; script greenboost postinst; script greenboost postrm
for s in preinst postinst prerm postrm; do script greenboost-dkms $s; done

# --- 6. build ---------------------------------------------------------------------------
rm -f "$out"/greenboost*_"$version"_*.deb
for p in greenboost greenboost-dkms greenboost-dbgsym; do
  (cd "$work/$p" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
    > "$work/$p/DEBIAN/md5sums"
  a=$(sed -n 's/^Architecture: //p' "$work/$p/DEBIAN/control")
  find "$work/$p" -type d -exec chmod 0755 {} +
  dpkg-deb --root-owner-group -Zxz --build "$work/$p" "$out/${p}_${version}_$a.deb" >/dev/null
  echo "$out/${p}_${version}_$a.deb"
done
