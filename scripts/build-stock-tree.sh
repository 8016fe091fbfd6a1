#!/usr/bin/env bash
# Prepares (once, cached) GreenBoost's private Rust-enabled build tree for a distro
# kernel built without Rust, so that scripts/build-kmod.sh can build a self-contained
# greenboost.ko that loads into that unmodified kernel. Prints the tree's directory;
# its build/ is the O= directory to build modules against and make-vars the make
# variables to use with it.
#
# Usage: build-stock-tree.sh --krel RELEASE --headers DIR [--headers-version VER] [--btf FILE]
#   --krel             the target kernel's release (uname -r there)
#   --headers          its headers/build directory: .config, Module.symvers, vmlinux
#   --headers-version  the distro package version of those headers, when known, to
#                      require the very same upload of the source package
#   --btf              the target kernel's BTF (default: DIR/vmlinux when it has .BTF,
#                      else /sys/kernel/btf/vmlinux when the target is running here)
#
# What it does, in the private tree only (never in a user's kernel tree):
#   1. unpacks the distro's kernel source (linux-source-X.Y) and applies
#      scripts/kernel-patches/*.patch;
#   2. takes the distro .config, sets CONFIG_RUST=y, runs olddefconfig, and fails
#      unless the difference is limited to Rust symbols (gate a);
#   3. `make modules_prepare` (scripts, objtool, modpost and all of rust/: ~80 s on
#      2 cores), then installs the distro's Module.symvers so modpost writes the
#      distro kernel's CRCs;
#   4. regenerates the kernel crate's bindings with layout tests and checks every
#      size and offset against the distro kernel's BTF (gate b).
# Gate c (the built module's imported CRCs equal the distro's) runs per module in
# build-kmod.sh. The cache key covers source version, distro config and symvers,
# toolchain, patches and this script.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

krel= headers= headers_version= btf=
while [ $# -gt 0 ]; do
  case $1 in
    --krel) krel=$2; shift 2 ;;
    --headers) headers=$2; shift 2 ;;
    --headers-version) headers_version=$2; shift 2 ;;
    --btf) btf=$2; shift 2 ;;
    *) die "build-stock-tree.sh: unknown argument '$1'" ;;
  esac
done
[ -n "$krel" ] && [ -n "$headers" ] || die "usage: build-stock-tree.sh --krel RELEASE --headers DIR"
for f in .config Module.symvers; do
  [ -f "$headers/$f" ] || die "$headers/$f missing: the headers of $krel are incomplete (reinstall linux-headers-$krel)"
done

# --- the source: the distro's own, same version as the running kernel ---------------
kver=${krel%%[-+]*}                        # 6.12.117
series=$(echo "$kver" | cut -d. -f1-2)     # 6.12
src_pkg=linux-source-$series
src_tar=${GB_KERNEL_SOURCE_TARBALL:-/usr/src/$src_pkg.tar.xz}
[ -f "$src_tar" ] || die "kernel source $src_tar missing: apt-get install $src_pkg (it must be the same upload as $krel)"
src_version=$(dpkg-query -W -f='${Version}' "$src_pkg" 2>/dev/null || true)
if [ -n "$src_version" ] && [ -n "$headers_version" ] && [ "$src_version" != "$headers_version" ]; then
  die "$src_pkg is version $src_version but the headers of $krel are $headers_version: the module must be built from the very same upload (apt-get install $src_pkg=$headers_version, or fetch it from snapshot.debian.org)"
fi
case $src_version in
  ""|"$kver"-*) ;;
  *) die "$src_pkg is version $src_version, which is not kernel $kver ($krel): install the $src_pkg that matches the running kernel, or upgrade the kernel to $src_version" ;;
esac

# --- the compiler the distro kernel was built with ------------------------------------
cc_text=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\(.*\)"$/\1/p' "$headers/.config")
grep -q '^CONFIG_CC_IS_GCC=y' "$headers/.config" \
  || die "$krel was not built with GCC ($cc_text): the self-contained build supports GCC-built distro kernels"
cc=${cc_text%% *}
command -v "$cc" >/dev/null || die "$krel was built with '$cc_text': install that compiler (Debian: apt-get install gcc-${cc##*-})"
[ "$("$cc" --version | head -1)" = "$cc_text" ] \
  || die "$krel was built with '$cc_text' but '$cc' is '$("$cc" --version | head -1)': install the distro's compiler version"
need_cmd flex flex; need_cmd bison bison; need_cmd pahole dwarves; need_cmd python3 python3
[ -x "$KRUSTC" ] || die "$KRUSTC missing: apt-get install rustc-web rust-web-src"
ensure_bindgen

key=$( { echo "$krel ${src_version:-$(stat -c '%s %Y' "$src_tar")}"; toolchain_id; "$cc" --version | head -1
         sha256sum "$headers/.config" "$headers/Module.symvers" | cut -d' ' -f1
         cat "$GB_ROOT"/scripts/kernel-patches/*.patch "$0" "$GB_ROOT/scripts/check-layout.py" \
             "$GB_ROOT/scripts/check-config-diff.sh"; } \
       | sha256sum | cut -c1-16)
tree=$GB_CACHE/stock-tree-$krel-$key
src=$tree/src
out=$tree/build
make_vars=(ARCH=x86_64 CC="$cc" HOSTCC=gcc RUSTC="$KRUSTC" HOSTRUSTC="$KRUSTC" RUSTDOC="$KRUSTDOC"
           BINDGEN="$BINDGEN" KERNELRELEASE="$krel")
kmake() { make -C "$src" O="$out" "${make_vars[@]}" "$@"; }

if [ -f "$tree/.done" ]; then echo "$tree"; exit 0; fi
mkdir -p "$GB_CACHE"
exec 9>"$tree.lock"
flock 9
if [ -f "$tree/.done" ]; then echo "$tree"; exit 0; fi
rm -rf "$tree"; mkdir -p "$src" "$out"
t_start=$(date +%s)
step() { log "stock tree $krel: $*"; }

step "unpacking $src_tar"
tar -C "$src" --strip-components=1 -xf "$src_tar"
src_kver=$(make -s -C "$src" kernelversion 2>/dev/null)
[ "$src_kver" = "$kver" ] || die "$src_tar is Linux $src_kver, but the target kernel $krel is $kver: install the $src_pkg that matches it"
for p in "$GB_ROOT"/scripts/kernel-patches/*.patch; do
  patch -s -d "$src" -p1 --no-backup-if-mismatch < "$p" || die "patch $(basename "$p") does not apply to $src_pkg $src_kver"
done

step "configuring (distro config + CONFIG_RUST=y)"
kmake rustavailable >&2 || die "the Rust toolchain ($KRUSTC, $BINDGEN) cannot build Linux $kver's Rust support"
cp "$headers/.config" "$out/.config"
echo CONFIG_RUST=y >> "$out/.config"
kmake olddefconfig >&2
grep -q '^CONFIG_RUST=y' "$out/.config" \
  || die "CONFIG_RUST did not survive olddefconfig for $krel (needs pahole >= 1.24 with --lang_exclude when DEBUG_INFO_BTF=y; RANDSTRUCT must be off)"
# Gate a: only Rust symbols may change (scripts/check-config-diff.sh says which).
"$src/scripts/diffconfig" "$headers/.config" "$out/.config" > "$tree/config.diff"
"$GB_ROOT/scripts/check-config-diff.sh" < "$tree/config.diff" >&2 \
  || die "config gate: enabling Rust for $krel changes non-Rust options (above; $tree/config.diff); refusing to build a module that may not match the kernel"
log "config gate passed: $(wc -l < "$tree/config.diff") Rust-only differences"

step "make modules_prepare (builds rust/, ~80 s on 2 cores)"
t0=$(date +%s)
kmake -j"$(nproc)" modules_prepare > "$tree/prepare.log" 2>&1 \
  || { tail -40 "$tree/prepare.log" >&2; die "modules_prepare failed (log: $tree/prepare.log)"; }
echo "$(( $(date +%s) - t0 ))" > "$tree/prepare-seconds"
for o in core compiler_builtins ffi bindings uapi kernel helpers/helpers; do
  [ -f "$out/rust/$o.o" ] || die "modules_prepare did not build rust/$o.o (log: $tree/prepare.log)"
done
# modpost writes the CRCs of the distro kernel's exports into the module.
cp "$headers/Module.symvers" "$out/Module.symvers"

step "checking bindgen layouts against the kernel's BTF"
if [ -z "$btf" ]; then
  if [ -f "$headers/vmlinux" ] && python3 - "$headers/vmlinux" <<'PY'
import sys; sys.exit(0 if b'.BTF\0' in open(sys.argv[1], 'rb').read() else 1)
PY
  then btf=$headers/vmlinux
  elif [ "$krel" = "$(uname -r)" ] && [ -r /sys/kernel/btf/vmlinux ]; then btf=/sys/kernel/btf/vmlinux
  else die "no BTF for $krel ($headers/vmlinux has none and $krel is not running here): cannot check layouts; pass --btf"
  fi
fi
# Re-run the kernel's own bindgen command for rust/bindings with layout tests on.
bindgen_cmd=$(sed -n 's/^savedcmd_rust\/bindings\/bindings_generated.rs := //p' \
                "$out/rust/bindings/.bindings_generated.rs.cmd")
[ -n "$bindgen_cmd" ] || die "cannot find the kernel's bindgen command in $out/rust/bindings"
bindgen_cmd=$(echo "$bindgen_cmd" | sed -e 's/ --no-layout-tests / /' \
  -e "s# -o rust/bindings/bindings_generated.rs # -o $tree/bindings_layout.rs #" \
  -e 's# -Wp,-MMD,[^ ]* # #')
(cd "$out" && eval "$bindgen_cmd") > "$tree/layout.log" 2>&1 \
  || { cat "$tree/layout.log" >&2; die "bindgen with layout tests failed"; }
python3 "$GB_ROOT/scripts/check-layout.py" "$btf" "$tree/bindings_layout.rs" >> "$tree/layout.log" 2>&1 \
  || { tail -20 "$tree/layout.log" >&2; die "layout gate: bindgen's view of kernel structs differs from $krel's BTF ($tree/layout.log)"; }
grep '^layout:' "$tree/layout.log" >&2

printf '%s\n' "${make_vars[@]}" > "$tree/make-vars"
echo "$(( $(date +%s) - t_start ))" > "$tree/build-seconds"
# The unpacked source is needed by module builds (headers, Makefiles); the rest is not.
rm -f "$tree/bindings_layout.rs"
touch "$tree/.done"
# Trees for earlier inputs (older scripts, patches, toolchains) are 1.8 GB each and
# never valid again: drop those nobody is using.
for old in "$GB_CACHE/stock-tree-$krel"-*/; do
  old=${old%/}
  [ "$old" = "$tree" ] && continue
  ( flock -n 7 && rm -rf "$old" "$old.lock" ) 7>"$old.lock" || true
done
log "stock tree for $krel ready in $(cat "$tree/build-seconds") s (modules_prepare $(cat "$tree/prepare-seconds") s)"
echo "$tree"
