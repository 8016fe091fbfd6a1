#!/usr/bin/env bash
# Builds greenboost.ko (or a test-only module) for a target kernel and prints the path
# of the built .ko. `make kmod` runs it; so do the QEMU suite and the installer.
#
# Usage: build-kmod.sh [--kernelrelease REL] [--kdir DIR] [--headers DIR]
#                      [--headers-version VER] [--extra-module DIR] [--out DIR]
#   (default)          the running kernel (uname -r), through /lib/modules/REL/build
#   --kernelrelease    another installed kernel, by name (or KERNELRELEASE=REL)
#   --kdir             an explicit kernel build directory (or KDIR=DIR), e.g. a
#                      Rust-enabled kernel you built yourself
#   --headers          the headers directory of a distro kernel that is not installed
#                      (the QEMU suite uses Debian's, unpacked into the cache)
#   --headers-version  that headers package's version (to match the source upload)
#   --extra-module     build the module in DIR instead of greenboost.ko (the QEMU
#                      suite's test-only importer); a C module needs no Rust runtime
#   --out              build directory (default: build/kmod/<release> in the repo)
#
# Two ways, chosen from the target kernel's .config:
#  * CONFIG_RUST=y with its Rust metadata (rust/*.rmeta): the ordinary out-of-tree
#    build. The kernel's rustc (CONFIG_RUSTC_VERSION_TEXT) must be ours: a Rust module
#    cannot be built by another compiler version. clang-built kernels get LLVM=1,
#    GCC-built ones the GCC named in CONFIG_CC_VERSION_TEXT.
#  * no Rust (distro kernels): the self-contained build. scripts/build-stock-tree.sh
#    prepares a private Rust-enabled tree from the distro's source and config (cached,
#    gated); the module links its own copy of the Rust runtime
#    (scripts/kbuild/rust_rt.kbuild, via GB_SELF_CONTAINED=1) and must import the
#    distro kernel's exports with the distro's CRCs, which is checked here.
#
# Sources are copied to the build directory first, so the repository stays clean and
# builds for several kernels can coexist.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

krel=${KERNELRELEASE:-} kdir=${KDIR:-} headers= headers_version= extra= out=
# Our own variables must not leak into the kernel's make as environment.
unset KERNELRELEASE KDIR
while [ $# -gt 0 ]; do
  case $1 in
    --kernelrelease) krel=$2; shift 2 ;;
    --kdir) kdir=$2; shift 2 ;;
    --headers) headers=$2; shift 2 ;;
    --headers-version) headers_version=$2; shift 2 ;;
    --extra-module) extra=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "build-kmod.sh: unknown argument '$1' (see --help)" ;;
  esac
done
need_cmd make make; need_cmd python3 python3

# --- which kernel ---------------------------------------------------------------------
if [ -n "$kdir" ]; then
  [ -f "$kdir/.config" ] || die "KDIR=$kdir is not a configured kernel build directory (no .config)"
  kdir=$(cd "$kdir" && pwd)
  [ -n "$krel" ] || krel=$(cat "$kdir/include/config/kernel.release" 2>/dev/null) \
    || die "$kdir has no include/config/kernel.release: build the kernel (or modules_prepare) first"
  config_dir=$kdir
else
  krel=${krel:-$(uname -r)}
  if [ -z "$headers" ]; then
    for d in "/lib/modules/$krel/build" "/usr/src/linux-headers-$krel"; do
      [ -f "$d/.config" ] && { headers=$(cd "$d" && pwd -P); break; }
    done
    [ -n "$headers" ] || die "no headers for kernel $krel: install them (Debian/Ubuntu: apt-get install linux-headers-$krel; Fedora: dnf install kernel-devel-$krel), or point KDIR= at its build directory"
    [ -n "$headers_version" ] || headers_version=$(dpkg-query -W -f='${Version}' "linux-headers-$krel" 2>/dev/null || true)
  fi
  [ -f "$headers/.config" ] || die "$headers has no .config: not a kernel headers directory"
  config_dir=$headers
fi
config=$config_dir/.config
kconf() { sed -n "s/^CONFIG_$1=\"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$config"; }

arch_vars=()
[ "$(uname -m)" = x86_64 ] && arch_vars=(ARCH=x86_64)
rust_vars=(RUSTC="$KRUSTC" HOSTRUSTC="$KRUSTC" RUSTDOC="$KRUSTDOC" BINDGEN="$BINDGEN")

if [ "$(kconf RUST)" = y ]; then
  mode=ordinary
  if [ -z "$kdir" ]; then kdir=$headers; fi
  [ -f "$kdir/rust/libkernel.rmeta" ] && [ -f "$kdir/rust/libmacros.so" ] \
    || die "kernel $krel has Rust support but $kdir lacks its Rust metadata (rust/libkernel.rmeta): install the package that ships it (Ubuntu: linux-lib-rust-$krel), or build against your own kernel build directory with KDIR="
  want_rustc=$(kconf RUSTC_VERSION_TEXT)
  have_rustc=$("$KRUSTC" --version 2>/dev/null || echo "no $KRUSTC")
  [ "$want_rustc" = "$have_rustc" ] \
    || die "kernel $krel was built with '$want_rustc' but $KRUSTC is '$have_rustc': a Rust module must be built by the kernel's own rustc; set KRUSTC (and KRUSTDOC) to that version"
  ensure_bindgen
  cc_text=$(kconf CC_VERSION_TEXT)
  if [ "$(kconf CC_IS_CLANG)" = y ]; then
    cc_vars=(LLVM=1)
    [ "$(clang --version | head -1)" = "$cc_text" ] \
      || log "warning: $krel was built with '$cc_text', clang here is '$(clang --version | head -1)'"
  else
    cc=${cc_text%% *}
    command -v "$cc" >/dev/null || die "$krel was built with '$cc_text': install that compiler"
    cc_vars=(CC="$cc")
  fi
  make_vars=("${arch_vars[@]}" "${cc_vars[@]}" "${rust_vars[@]}")
else
  mode=self-contained
  [ -n "$headers" ] || headers=$kdir
  tree=$("$GB_ROOT/scripts/build-stock-tree.sh" --krel "$krel" --headers "$headers" \
          ${headers_version:+--headers-version "$headers_version"})
  kdir=$tree/build
  mapfile -t make_vars < "$tree/make-vars"
fi

# --- what to build, where -------------------------------------------------------------
if [ -n "$extra" ]; then
  extra=$(cd "$extra" && pwd) || die "--extra-module: no such directory"
  case $extra in
    "$GB_ROOT"/*) rel=${extra#"$GB_ROOT"/} ;;   # keep its place, for relative includes
    *) rel=extra/$(basename "$extra") ;;
  esac
  sources=("$rel")
  [ -d "$GB_ROOT/abi" ] && sources+=(abi)        # the C ABI header test modules use
  module_vars=()
else
  [ -f "$GB_ROOT/Kbuild" ] || die "$GB_ROOT/Kbuild missing: not a GreenBoost source tree"
  rel=.
  sources=(Kbuild kmod abi scripts/kbuild)
  module_vars=()
  [ $mode = self-contained ] && module_vars=(GB_SELF_CONTAINED=1)
fi
[ -n "$out" ] || out=$GB_ROOT/build/kmod/$krel
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Which private tree a self-contained build used (the QEMU suite tests its gates).
[ $mode = ordinary ] || echo "$tree" > "$out/stock-tree"

# Copy the sources, touching only files whose content changed, so make rebuilds
# exactly what changed and never sees stale objects from the source tree.
sync_sources() {
  local path file
  for path in "$@"; do
    [ -e "$GB_ROOT/$path" ] || continue
    (cd "$GB_ROOT" && find "$path" -type f ! -name '*.o' ! -name '*.ko' ! -name '*.cmd' \
        ! -name '*.mod' ! -name '*.mod.c' ! -name '*.rmeta' ! -name modules.order \
        ! -name Module.symvers ! -path '*/target/*') |
    while IFS= read -r file; do
      if ! cmp -s "$GB_ROOT/$file" "$out/$file"; then
        mkdir -p "$out/$(dirname "$file")"
        cp "$GB_ROOT/$file" "$out/$file"
      fi
    done
  done
}
sync_sources "${sources[@]}"
moddir=$out/$rel
[ "$rel" = . ] && moddir=$out

log "building $( [ -n "$extra" ] && basename "$extra" || echo greenboost.ko ) for $krel ($mode build, $kdir)"
t0=$(date +%s)
make -C "$kdir" M="$moddir" "${make_vars[@]}" "${module_vars[@]}" -j"$(nproc)" modules >"$moddir/build.log" 2>&1 \
  || { tail -40 "$moddir/build.log" >&2; die "module build failed for $krel (log: $moddir/build.log)"; }
# modules.order names each module's object, absolute or relative to the module dir.
mapfile -t kos < <(awk -v dir="$moddir" '{ sub(/\.o$/, ".ko"); if ($0 !~ /^\//) $0 = dir "/" $0; print }' \
                     "$moddir/modules.order")
[ ${#kos[@]} -gt 0 ] || die "the build produced no module ($moddir/modules.order is empty)"

for ko in "${kos[@]}"; do
  [ -f "$ko" ] || die "$ko was not built"
  vermagic=$(modinfo -F vermagic "$ko" 2>/dev/null || true)
  [ "${vermagic%% *}" = "$krel" ] || die "$ko has vermagic '$vermagic', not for $krel"
  if [ $mode = self-contained ]; then
    # Gate c: every import binds to the distro kernel's export with the distro's CRC.
    python3 "$GB_ROOT/scripts/check-module-imports.py" "$ko" "$headers/Module.symvers" >&2 \
      || die "$ko does not match the exports of $krel (see above); it would not load"
  fi
done
echo "$(( $(date +%s) - t0 ))" > "$moddir/build-seconds"
log "built ${kos[*]##*/} for $krel in $(cat "$moddir/build-seconds") s"
printf '%s\n' "${kos[@]}"
