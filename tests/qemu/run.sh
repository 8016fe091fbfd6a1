#!/usr/bin/env bash
# The module suite (`make kmod-test`): boots two QEMU guests and runs the guest test
# suite in each against greenboost.ko, then prints `N passed, M failed` over both.
#
#   stock  Debian's unmodified vmlinuz-$GB_STOCK_KREL (scripts/lib.sh; linux-image-...-unsigned,
#          fetched into the cache, never installed) with the self-contained module
#   rust   the minimal Rust-enabled 6.12 test kernel (scripts/build-test-kernel.sh)
#          with the ordinary out-of-tree module
#   t3     the same debug kernel in a small guest (448 MiB, one node, 2 vCPUs) with an
#          emulated NVMe disk (QEMU -device nvme) as swap: T3 and the pressure rule
#          (tests/qemu/t3-suite.sh)
#
# For each guest: build greenboost.ko and the test-only importer module
# (tests/qemu/importer) for that kernel, pack an initramfs with busybox, tests/qemu/init,
# the static guest test binary (tests/qemu/guest) and tests/qemu/guest-suite.sh, boot it
# under multi-threaded TCG (4 vCPUs, each its own socket: CPUs that share a cache across
# nodes make the scheduler WARN at boot; NUMA nodes 0 and 1 of 1 GiB, node 2 a CPU
# without memory) and
# parse the serial log. The rust guest's kernel is the debug one (KASAN, kmemleak,
# lockdep, DEBUG_VM, DMA-API debugging, fault injection; kmod/test-kernel.config): init
# clears kmemleak before the suite and scans after it. A guest's result:
# the passed/failed counts of its `GUEST-SUMMARY: N passed, M failed` line(s), plus one
# failure per distinct kernel complaint in its log (Oops, BUG, WARNING, Call Trace,
# lockdep, KASAN, DMA-API, kmemleak, INFO:, version/symbol errors, un-rendered %pA), one
# per kmemleak suspect allocated by greenboost or the importer, plus one failure when
# the summary is missing or the guest timed out. Before each boot, tests/qemu/host-gates.sh
# checks that the build's gates (config, BTF layout, CRCs, rustc, missing packages)
# refuse planted defects; its counts join the total. On the rust guest's test kernel,
# scripts/check-kmod-clippy.sh lints the module build (the kernel's clippy lint set, the
# clippy of the kernel's rustc): one more check, failed on any finding.
#
# Environment:
#   GB_QEMU_GUESTS   which guests, in order (default "stock rust t3")
#   GB_QEMU_TIMEOUT  seconds per guest (default 1200)
#   GB_QEMU_SMP      vCPUs per guest (default 4): the first half on NUMA node 0, the rest on
#                    node 1 except the last, which forms node 2 without memory
#   GB_QEMU_TCG      TCG threading, multi or single (default multi: one host thread
#                    per vCPU, so the race tests really interleave)
#   GB_QEMU_APPEND   more kernel command-line parameters for every guest (e.g.
#                    swiotlb=force: every streaming DMA mapping bounces)
#   GB_RUST_APPEND   the same for the rust guest only (default swiotlb=force)
#   GB_GUEST_EXTRA   a directory copied to /greenboost/extra in the guests; guest-suite.sh
#                    runs its run.sh. Default: the shim suite against fake CUDA libraries
#                    (tests/fakecuda/run.sh --build-only), so the shim is proven against
#                    the real /dev/greenboost; "none" leaves it out. The
#                    guest then also gets the host's glibc runtime and the shared
#                    libraries its ELF files need, so dynamically linked programs run.
#                    The shim suite runs only its kmod-tagged tests (tests/fakecuda/
#                    kmod-tests.list); GB_SHIM_ALL=1 runs every kmod-capable one.
#   GB_GUEST_FILES   more host files to copy into the guests at the same path
# Logs: build/qemu/<guest>.log (serial console), build/qemu/summary.txt.
set -uo pipefail
. "$(dirname "$0")/../../scripts/lib.sh"

guests=${GB_QEMU_GUESTS:-stock rust t3}
qemu_timeout=${GB_QEMU_TIMEOUT:-1200}
qemu_smp=${GB_QEMU_SMP:-4}
qemu_tcg=${GB_QEMU_TCG:-multi}
rust_append=${GB_RUST_APPEND-swiotlb=force}
case $qemu_smp in 2 | 4 | 6 | 8) ;; *) die "GB_QEMU_SMP=$qemu_smp: an even count of vCPUs, 2 to 8 (NR_CPUS of the test kernel is 4)" ;; esac
case $qemu_tcg in multi | single) ;; *) die "GB_QEMU_TCG=$qemu_tcg: multi or single" ;; esac
work=$GB_ROOT/build/qemu
mkdir -p "$work"
need_cmd qemu-system-x86_64 qemu-system-x86; need_cmd cpio cpio; need_cmd xz xz-utils
# A program runs in the bare guest only without a program interpreter (ld.so).
is_static() { ! readelf -lW "$1" 2>/dev/null | grep -q INTERP; }
[ -x /bin/busybox ] && is_static /bin/busybox \
  || die "/bin/busybox is not a static busybox: apt-get install busybox-static"

timings=()
elapsed() { echo $(( $(date +%s) - $1 )); }

# --- the greenboost command, static, for the t3 guest ---------------------------------
build_cli_static() {
  local t0; t0=$(date +%s)
  CARGO_TARGET_DIR=$work/cli-target RUSTFLAGS='-C target-feature=+crt-static' \
    cargo build --release -p greenboost-cli --manifest-path "$GB_ROOT/Cargo.toml" \
    --target x86_64-unknown-linux-gnu >&2 || return 1
  cli_bin=$work/cli-target/x86_64-unknown-linux-gnu/release/greenboost
  is_static "$cli_bin" || { log "$cli_bin is not statically linked"; return 1; }
  timings+=("greenboost command (static): $(elapsed "$t0") s")
}

# --- the guest test program: one static binary, the same for both kernels ------------
build_guest_program() {
  local t0; t0=$(date +%s)
  CARGO_TARGET_DIR=$work/guest-target RUSTFLAGS='-C target-feature=+crt-static' \
    cargo build --release --manifest-path "$GB_ROOT/tests/qemu/guest/Cargo.toml" \
    --target x86_64-unknown-linux-gnu >&2 || return 1
  guest_bin=$work/guest-target/x86_64-unknown-linux-gnu/release/gb-guest-tests
  is_static "$guest_bin" || { log "$guest_bin is not statically linked"; return 1; }
  timings+=("guest test program: $(elapsed "$t0") s")
}

# copy_into ROOT FILE... : copies host files to the same path under ROOT
copy_into() {
  local root=$1 f; shift
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
  done
}

# The host's glibc runtime plus every library the ELF files under DIR need.
pack_shared_libraries() {
  local root=$1 dir=$2 libdir=/lib/x86_64-linux-gnu f
  local libs=(/lib64/ld-linux-x86-64.so.2 "$libdir"/libc.so.6 "$libdir"/libm.so.6
              "$libdir"/libgcc_s.so.1 "$libdir"/libdl.so.2 "$libdir"/libpthread.so.0
              "$libdir"/librt.so.1)
  while IFS= read -r f; do
    readelf -dW "$f" 2>/dev/null | grep -q '(NEEDED)' || continue
    # ldd lists resolved dependencies as "name => /path (addr)"; libraries shipped in
    # DIR itself (fake CUDA libraries) are found there at run time and stay "not found".
    libs+=($(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'))
  done < <(find "$dir" -type f)
  copy_into "$root" $(printf '%s\n' "${libs[@]}" | sort -u)
}

# make_initramfs GUEST KREL OUT.cpio.gz GREENBOOST_KO IMPORTER_KO [KERNEL_MODULE_ROOT]
make_initramfs() {
  local guest=$1 krel=$2 out=$3 gb_ko=$4 importer_ko=$5 image_root=${6:-} mode=$7
  local root=$work/$guest-initramfs
  rm -rf "$root"
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,root,etc,greenboost,lib/modules/"$krel"}
  cp /bin/busybox "$root/bin/busybox"
  cp "$GB_ROOT/tests/qemu/init" "$root/init"
  cp "$gb_ko" "$importer_ko" "$guest_bin" "$GB_ROOT/tests/qemu/guest-suite.sh" "$GB_ROOT/tests/qemu/t3-suite.sh" "$root/greenboost/"
  # The t3 guest checks `greenboost status` against the module.
  [ "$guest" != t3 ] || cp "$cli_bin" "$root/greenboost/greenboost"
  printf 'export GB_GUEST=%s\nexport GB_BUILD_MODE=%s\n' "$guest" "$mode" > "$root/etc/greenboost-guest.env"
  [ -z "${GB_SHIM_ALL:-}" ] || echo "export GB_SHIM_ALL=1" >> "$root/etc/greenboost-guest.env"
  : > "$root/etc/greenboost-guest-modules"
  if [ -n "$image_root" ]; then
    # brd is a module in Debian's image and built in the test kernel; load it with the
    # test kernel's geometry so both guests get the same /dev/ram0 (64 MiB).
    local brd=$image_root/lib/modules/$krel/kernel/drivers/block/brd.ko.xz
    [ -f "$brd" ] || die "$brd missing from the image package"
    xz -dc "$brd" > "$root/lib/modules/$krel/brd.ko"
    echo "/lib/modules/$krel/brd.ko rd_nr=1 rd_size=65536" >> "$root/etc/greenboost-guest-modules"
  fi
  # (not for the t3 guest: it runs no extra suite, and its RAM is small)
  if [ -n "${GB_GUEST_EXTRA:-}" ] && [ "$guest" != t3 ]; then
    [ -d "$GB_GUEST_EXTRA" ] || die "GB_GUEST_EXTRA=$GB_GUEST_EXTRA is not a directory"
    cp -a "$GB_GUEST_EXTRA" "$root/greenboost/extra"
    pack_shared_libraries "$root" "$GB_GUEST_EXTRA"
  fi
  # shellcheck disable=SC2086
  [ -z "${GB_GUEST_FILES:-}" ] || copy_into "$root" $GB_GUEST_FILES
  (cd "$root" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 > "$out"
}

# Kernel complaints that fail a guest, and what is only information: one list, shared with
# make deb-test's stock guest (tests/qemu/kernel-complaints.sh).
. "$(dirname "$0")/kernel-complaints.sh"
# A checker that could not allocate its own bookkeeping and stopped: no complaint about a
# driver, but the checks after it did not run. In the t3 guest, whose suite drives memory
# to the reserve on purpose, it is a note saying so (the rust guest keeps the full
# DMA-API coverage, without that pressure); in the others it still fails the guest.
checker_stopped_re='DMA-API: cacheline tracking ENOMEM'

# kmemleak_failures LOG : one line per kmemleak suspect (between the GUEST-KMEMLEAK
# markers init prints) whose allocation backtrace has a frame in greenboost or
# gb_importer: named ("[greenboost]"), or a bare module-space address (the modules are
# unloaded by the time init scans, and nothing else in the guest is a module). Other
# suspects are printed as notes (core-kernel objects kmemleak cannot follow), not failed.
kmemleak_failures() {
  sed -n '/^GUEST-KMEMLEAK-BEGIN/,/^GUEST-KMEMLEAK-END/p' "$1" | awk '
    function flush() {
      if (obj == "") return
      if (ours) print "FAIL kmemleak: " obj " (" frames ")"
      else print "NOTE kmemleak (not attributed to greenboost): " obj " (" frames ")"
      obj = ""; ours = 0; frames = ""
    }
    /^GUEST-KMEMLEAK/ { next }
    /^unreferenced object/ { flush(); obj = $0; bt = 0; next }
    /comm "/ { sub(/:$/, "", obj); obj = obj ", " $1 " " $2 " " $3 " " $4; sub(/,$/, "", obj); next }
    /^ *backtrace/ { bt = 1; next }
    bt && obj != "" {
      # one frame per line, "sym+off/len [module]" (older kernels: "[<addr>] " first)
      f = $0; sub(/^ */, "", f); sub(/^\[<[0-9a-f]+>\] /, "", f)
      # (no {n} intervals: mawk has none)
      if (f ~ /\[(greenboost|gb_importer)\]/ || (f ~ /^0xffffffff[a-f][0-9a-f]*$/ && length(f) == 18)) ours = 1
      if (split(frames, _, " <- ") < 6) frames = frames (frames == "" ? "" : " <- ") f
    }
    END { flush() }'
}

# guest_uptime LOG MARKER : the guest's uptime (s) on the first MARKER line, or empty.
# Under TCG the guest's clock follows the host's, so differences are wall seconds.
guest_uptime() { sed -n "s/^$2.* uptime=\([0-9]*\).*/\1/p" "$1" | head -1; }

# boot_guest GUEST KERNEL INITRD [APPEND] : boots, parses, appends to results
boot_guest() {
  local guest=$1 kernel=$2 initrd=$3 append=${4:-} log=$work/$guest.log t0 rc
  local smp=$qemu_smp per_node=$(( qemu_smp / 2 )) want_nodes=$(( qemu_smp > 2 ? 3 : 2 )) machine=()
  if [ "$guest" = t3 ]; then
    # Little RAM, one node, two vCPUs, and an emulated NVMe disk to swap to: a T3
    # buffer larger than RAM is cheap to write, and swap really is an NVMe device.
    smp=2 want_nodes=1
    rm -f "$work/t3-swap.img"
    truncate -s "${GB_T3_SWAP_MIB:-1536}M" "$work/t3-swap.img"
    machine=(-m "${GB_T3_MIB:-448}M"
             -drive "file=$work/t3-swap.img,format=raw,if=none,id=t3swap,cache=unsafe"
             -device nvme,serial=gbt3swap,drive=t3swap)
  else
    # MiB per NUMA node. The debug kernel gets more: KASAN's shadow takes an eighth of
    # RAM and its quarantine and kmemleak more, and the 1 GiB ALLOC test must still fit
    # (with 2x1 GiB its ALLOC met the reserve after 886 MiB; the stock guest's did not).
    local node_mib=1024
    [ "$guest" = rust ] && node_mib=${GB_RUST_NODE_MIB:-1536}
    # Node 1 gets the second socket's CPUs; with more than 2 vCPUs its last one forms
    # node 2, which has no memory (numa_memoryless_node: such a node cannot be asked for).
    local numa_rest=(-numa "node,nodeid=1,cpus=$per_node-$(( qemu_smp - 1 )),memdev=mem1")
    if (( qemu_smp > 2 )); then
      numa_rest=(-numa "node,nodeid=1,cpus=$per_node-$(( qemu_smp - 2 )),memdev=mem1"
                 -numa "node,nodeid=2,cpus=$(( qemu_smp - 1 ))")
    fi
    machine=(-m $(( 2 * node_mib ))M
             -object memory-backend-ram,id=mem0,size=${node_mib}M -object memory-backend-ram,id=mem1,size=${node_mib}M
             -numa node,nodeid=0,cpus=0-$(( per_node - 1 )),memdev=mem0
             "${numa_rest[@]}")
  fi
  t0=$(date +%s)
  log "booting the $guest guest (TCG $qemu_tcg-threaded, $smp vCPUs; log: $log)"
  # shellcheck disable=SC2086
  timeout -k 10 "$qemu_timeout" qemu-system-x86_64 \
    -accel tcg,thread="$qemu_tcg" -cpu max -smp "$smp",sockets="$smp",cores=1,threads=1 \
    "${machine[@]}" \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 oops=panic loglevel=6 ${GB_QEMU_APPEND:-} $append" \
    -nodefaults -no-reboot -display none -serial stdio -monitor none \
    </dev/null 2>&1 | stdbuf -oL tr -d '\r' > "$log"
  rc=${PIPESTATUS[0]}
  local secs; secs=$(elapsed "$t0")
  # Stage times from the guest's own markers (init, guest-run.sh): boot to init, the
  # module suite, the shim suite inside it, kmemleak's scan.
  local boot suite_begin suite_end shim_begin shim_end scan_begin scan_end stages
  boot=$(guest_uptime "$log" GUEST-BOOT:); suite_begin=$(guest_uptime "$log" GUEST-SUITE-BEGIN)
  suite_end=$(guest_uptime "$log" GUEST-SUITE-END); shim_begin=$(guest_uptime "$log" GUEST-SHIM-BEGIN)
  shim_end=$(guest_uptime "$log" GUEST-SHIM-END); scan_begin=$(guest_uptime "$log" GUEST-KMEMLEAK-SCAN)
  scan_end=$(guest_uptime "$log" GUEST-KMEMLEAK-BEGIN)
  stages="boot to init ${boot:-?} s"
  [ -n "$suite_begin" ] && [ -n "$suite_end" ] && stages+=", module suite $(( suite_end - suite_begin )) s"
  [ -n "$shim_begin" ] && [ -n "$shim_end" ] && stages+=" (of which shim suite $(( shim_end - shim_begin )) s)"
  [ -n "$scan_begin" ] && [ -n "$scan_end" ] && stages+=", kmemleak scan $(( scan_end - scan_begin )) s"
  [ -n "$suite_end" ] && stages+=", boot to summary $suite_end s"
  timings+=("$guest guest: $secs s in all ($smp vCPUs, TCG $qemu_tcg): $stages")

  local passed=0 failed=0 problems=() notes=()
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    problems+=("timed out after $qemu_timeout s")
  fi
  local summaries; summaries=$(sed -n 's/^GUEST-SUMMARY: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$log")
  if [ -z "$summaries" ]; then
    problems+=("no GUEST-SUMMARY line (suite did not finish)")
  else
    passed=$(echo "$summaries" | awk '{s += $1} END {print s}')
    failed=$(echo "$summaries" | awk '{s += $2} END {print s}')
  fi
  grep -q "^GUEST-BOOT: .* numa_nodes=$want_nodes " "$log" || problems+=("guest does not see $want_nodes NUMA nodes")
  grep -q "^GUEST-BOOT: .* cpus=$smp " "$log" || problems+=("guest does not see $smp CPUs")
  [ "$guest" != t3 ] || rm -f "$work/t3-swap.img"
  grep '^T3-MOVE-RATE:' "$log" | head -1 | sed "s/^/    /"
  while IFS= read -r l; do problems+=("$l"); done < <(grep '^GUEST-SETUP-ERROR' "$log")
  # The console and the final dmesg dump both carry each kernel line: count it once.
  while IFS= read -r l; do
    if [ "$guest" = t3 ] && [[ $l =~ $checker_stopped_re ]]; then
      notes+=("NOTE $guest: a checker stopped under the suite's memory pressure; its checks after this did not run: $l")
    else
      problems+=("kernel: $l")
    fi
  done < <(grep -E '^\[ *[0-9]+\.[0-9]+\]' "$log" | grep -E "$complaint_re" | grep -vE "$benign_re" | sort -u)
  while IFS= read -r l; do
    case $l in FAIL*) problems+=("${l#FAIL }") ;; *) notes+=("$l") ;; esac
  done < <(kmemleak_failures "$log")

  echo "--- $guest guest ($(basename "$kernel")): $passed passed, $failed failed in the suite" \
       "(qemu exit $rc, $secs s)"
  grep -E '^(FAIL|not ok)' "$log" | sed 's/^/    /' | head -50
  local p
  for p in "${problems[@]}"; do echo "    FAIL $guest: $p"; done
  for p in "${notes[@]}"; do echo "    $p"; done
  total_passed=$(( total_passed + passed ))
  total_failed=$(( total_failed + failed + ${#problems[@]} ))
}

# build_modules GUEST ARGS... : greenboost.ko + importer for one kernel
build_modules() {
  local guest=$1; shift
  local t0; t0=$(date +%s)
  gb_ko=$("$GB_ROOT/scripts/build-kmod.sh" "$@" --out "$work/kmod-$guest") || return 1
  timings+=("greenboost.ko for $guest: $(cat "$work/kmod-$guest/build-seconds") s")
  importer_ko=$("$GB_ROOT/scripts/build-kmod.sh" "$@" --out "$work/kmod-$guest" \
                  --extra-module "$GB_ROOT/tests/qemu/importer") || return 1
  timings+=("$guest modules total (incl. private tree when not cached): $(elapsed "$t0") s")
}

# run_host_gates ARGS... : tests/qemu/host-gates.sh, counted into the totals
run_host_gates() {
  local out counts t0; t0=$(date +%s)
  out=$("$GB_ROOT/tests/qemu/host-gates.sh" "$@" 2>&1)
  timings+=("host build gates ($1): $(elapsed "$t0") s")
  echo "--- host-side build gates ($1): $(echo "$out" | tail -1)"
  echo "$out" | grep '^FAIL' | sed 's/^/    /'
  counts=$(echo "$out" | sed -n 's/^HOST-GATES: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
  if [ -z "$counts" ]; then
    echo "    FAIL host gates ($1) did not finish"; total_failed=$((total_failed + 1)); return
  fi
  total_passed=$((total_passed + ${counts% *}))
  total_failed=$((total_failed + ${counts#* }))
}

# run_kmod_clippy KDIR : scripts/check-kmod-clippy.sh against that kernel, one check
run_kmod_clippy() {
  local out counts t0; t0=$(date +%s)
  out=$("$GB_ROOT/scripts/check-kmod-clippy.sh" --kdir "$1" 2>&1)
  timings+=("kmod clippy on the test kernel: $(elapsed "$t0") s")
  counts=$(echo "$out" | sed -n 's/^kmod-clippy: \([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p' | tail -1)
  echo "--- kmod clippy: $(echo "$out" | tail -1)"
  if [ -z "$counts" ]; then
    echo "$out" | tail -20 | sed 's/^/    /'
    echo "    FAIL kmod clippy did not finish"; total_failed=$((total_failed + 1)); return
  fi
  [ "${counts#* }" = 0 ] || echo "$out" | sed '$d' | head -50 | sed 's/^/    /'
  total_passed=$((total_passed + ${counts% *}))
  total_failed=$((total_failed + ${counts#* }))
}

total_passed=0 total_failed=0 run_t0=$(date +%s)
if ! build_guest_program; then
  echo "    FAIL: the guest test program (tests/qemu/guest) did not build; no guest can run"
  total_failed=1 guests=
fi
case ${GB_GUEST_EXTRA:-} in
  none) GB_GUEST_EXTRA= ;;
  "")
    t0=$(date +%s)
    rm -rf "$work/fakecuda-guest"
    if "$GB_ROOT/tests/fakecuda/run.sh" --build-only "$work/fakecuda-guest" >&2; then
      GB_GUEST_EXTRA=$work/fakecuda-guest
      timings+=("shim suite for the guests: $(elapsed "$t0") s")
    else
      echo "    FAIL: the shim suite (tests/fakecuda) did not build for the guests"
      total_failed=$((total_failed + 1))
    fi ;;
esac
for guest in $guests; do
  case $guest in
    stock)
      image_root=$("$GB_ROOT/scripts/fetch-debian-kernel.sh" "$GB_STOCK_KREL") || { total_failed=$((total_failed + 1)); continue; }
      headers=$image_root/usr/src/linux-headers-$GB_STOCK_KREL
      version=$(cat "$(dirname "$image_root")/version")
      if ! build_modules stock --kernelrelease "$GB_STOCK_KREL" --headers "$headers" --headers-version "$version"; then
        echo "    FAIL stock: module build failed"; total_failed=$((total_failed + 1)); continue
      fi
      tree=$(cat "$work/kmod-stock/stock-tree")
      run_host_gates stock "$gb_ko" "$headers/Module.symvers" "$headers/vmlinux" "$tree/config.diff"
      make_initramfs stock "$GB_STOCK_KREL" "$work/stock.cpio.gz" "$gb_ko" "$importer_ko" "$image_root" self-contained
      boot_guest stock "$image_root/boot/vmlinuz-$GB_STOCK_KREL" "$work/stock.cpio.gz"
      ;;
    rust | t3)
      t0=$(date +%s)
      if ! kdir=$("$GB_ROOT/scripts/build-test-kernel.sh"); then
        echo "    FAIL $guest: test kernel build failed"; total_failed=$((total_failed + 1)); continue
      fi
      timings+=("test kernel: $(cat "$kdir/build-seconds" 2>/dev/null || echo '?') s to build ($(elapsed "$t0") s now)")
      if ! build_modules "$guest" --kdir "$kdir"; then
        echo "    FAIL $guest: module build failed"; total_failed=$((total_failed + 1)); continue
      fi
      krel=$(cat "$kdir/include/config/kernel.release")
      if [ "$guest" = rust ]; then
        run_host_gates rust "$kdir"
        run_kmod_clippy "$kdir"
        make_initramfs rust "$krel" "$work/rust.cpio.gz" "$gb_ko" "$importer_ko" "" ordinary
        boot_guest rust "$kdir/arch/x86/boot/bzImage" "$work/rust.cpio.gz" "$rust_append"
      elif ! build_cli_static; then
        echo "    FAIL t3: the greenboost command did not build statically"; total_failed=$((total_failed + 1))
      else
        # The debug kernel again (KASAN, lockdep, kmemleak), without swiotlb=force: the
        # NVMe disk's swap I/O would bounce through it.
        make_initramfs t3 "$krel" "$work/t3.cpio.gz" "$gb_ko" "$importer_ko" "" ordinary
        # pci=noacpi: the NVMe disk's INTx routing from the PIR table; the ACPI _PRT
        # method outruns its 30 s loop limit under TCG with KASAN (the disk uses MSI-X).
        boot_guest t3 "$kdir/arch/x86/boot/bzImage" "$work/t3.cpio.gz" pci=noacpi
      fi
      ;;
    *) die "unknown guest '$guest' (GB_QEMU_GUESTS: stock, rust, t3)" ;;
  esac
done

# Build times from the caches, for the record (also when this run reused them).
[ -f "${tree:-}/build-seconds" ] && timings+=("stock private tree: $(cat "$tree/build-seconds") s to build, of which modules_prepare $(cat "$tree/prepare-seconds") s")
{
  echo "timings:"; printf '  %s\n' "${timings[@]}" "kmod-test in all: $(elapsed "$run_t0") s"
  echo "$total_passed passed, $total_failed failed"
} | tee "$work/summary.txt"
[ "$total_failed" = 0 ]
