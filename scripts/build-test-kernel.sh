#!/usr/bin/env bash
# Builds (once, cached) the minimal Rust-enabled 6.12 kernel the QEMU suite boots, from
# Debian's linux-source-6.12 and kmod/test-kernel.config. Prints the build directory.
# Cache key: config fragment, source tarball version, toolchain, this script.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SRC_TAR=/usr/src/linux-source-6.12.tar.xz
[ -f "$SRC_TAR" ] || die "$SRC_TAR missing: apt-get install linux-source-6.12"
need_cmd clang clang; need_cmd ld.lld lld; need_cmd flex flex; need_cmd bison bison
[ -x "$KRUSTC" ] || die "$KRUSTC missing: apt-get install rustc-web rust-web-src"
ensure_bindgen

src_ver=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || stat -c %s "$SRC_TAR")
key=$( { echo "$src_ver"; toolchain_id; cat "$GB_ROOT/kmod/test-kernel.config" "$0"; } | sha256sum | cut -c1-16)
KSRC=$GB_CACHE/linux-src-$src_ver
KDIR=$GB_CACHE/test-kernel-$key
KVARS=(ARCH=x86_64 LLVM=1 RUSTC="$KRUSTC" HOSTRUSTC="$KRUSTC" RUSTDOC="$KRUSTDOC" BINDGEN="$BINDGEN")

if [ -f "$KDIR/.done" ]; then echo "$KDIR"; exit 0; fi
# One build at a time: a second caller waits for the first and reuses its result.
mkdir -p "$GB_CACHE"
exec 9>"$GB_CACHE/test-kernel.lock"
flock 9
if [ -f "$KDIR/.done" ]; then echo "$KDIR"; exit 0; fi

if [ ! -f "$KSRC/.extracted" ]; then
  log "extracting $SRC_TAR"
  rm -rf "$KSRC"; mkdir -p "$KSRC"
  tar -C "$KSRC" --strip-components=1 -xf "$SRC_TAR"
  touch "$KSRC/.extracted"
fi

rm -rf "$KDIR"; mkdir -p "$KDIR"
log "configuring test kernel in $KDIR"
make -C "$KSRC" O="$KDIR" "${KVARS[@]}" rustavailable >&2
make -C "$KSRC" O="$KDIR" "${KVARS[@]}" tinyconfig >&2
"$KSRC/scripts/kconfig/merge_config.sh" -m -O "$KDIR" "$KDIR/.config" "$GB_ROOT/kmod/test-kernel.config" >&2
make -C "$KSRC" O="$KDIR" "${KVARS[@]}" olddefconfig >&2
# The debug options are the point of this guest: a dependency that silently drops one
# (tinyconfig's SLUB_TINY drops KASAN) fails the build instead.
for sym in RUST DMA_SHARED_BUFFER IO_URING ADVISE_SYSCALLS EVENTFD BLK_DEV_RAM SWAP BLK_DEV_NVME VM_EVENT_COUNTERS NUMA PROVE_LOCKING DEBUG_FS \
           KASAN KASAN_GENERIC KASAN_INLINE KASAN_VMALLOC DEBUG_KMEMLEAK DEBUG_VM DMA_API_DEBUG \
           DMA_API_DEBUG_SG FAULT_INJECTION FAIL_PAGE_ALLOC FAILSLAB FAULT_INJECTION_DEBUG_FS \
           FAULT_INJECTION_STACKTRACE_FILTER; do
  grep -q "^CONFIG_$sym=y" "$KDIR/.config" || die "test kernel config lost CONFIG_$sym"
done
log "building test kernel (about 12 minutes on 2 cores)"
t0=$(date +%s)
make -C "$KSRC" O="$KDIR" "${KVARS[@]}" -j"$(( $(nproc) + 1 ))" all >"$KDIR/build.log" 2>&1 \
  || { tail -50 "$KDIR/build.log" >&2; die "test kernel build failed (log: $KDIR/build.log)"; }
echo "$(( $(date +%s) - t0 ))" > "$KDIR/build-seconds"
touch "$KDIR/.done"
log "test kernel built in $(cat "$KDIR/build-seconds") s"
echo "$KDIR"
