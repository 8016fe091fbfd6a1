#!/usr/bin/env bash
# Host-side tests of the build's safety gates: each gate must accept the real thing
# and refuse a planted defect, or it proves nothing. tests/qemu/run.sh runs it once the
# modules are built; it prints `PASS name` / `FAIL name: reason` lines and ends with
# `HOST-GATES: N passed, M failed`.
#
# Usage: host-gates.sh stock KO DISTRO_SYMVERS BTF CONFIG_DIFF
#        host-gates.sh rust KDIR
set -uo pipefail
. "$(dirname "$0")/../../scripts/lib.sh"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
# expect NAME accept|refuse [PATTERN] -- CMD... : runs CMD, checks its verdict and,
# for a refusal, that its message matches PATTERN.
expect() {
  local name=$1 want=$2 pattern=$3 out rc; shift 4
  out=$("$@" 2>&1); rc=$?
  if [ "$want" = accept ] && [ $rc -eq 0 ]; then pass "$name"
  elif [ "$want" = accept ]; then fail "$name" "refused: $(echo "$out" | tail -2 | tr '\n' ' ')"
  elif [ $rc -eq 0 ]; then fail "$name" "accepted a planted defect"
  elif [ -n "$pattern" ] && ! grep -qE -- "$pattern" <<<"$out"; then
    fail "$name" "refused without saying why (expected /$pattern/): $(echo "$out" | tail -1)"
  else pass "$name"
  fi
}

# A bindgen layout test in the form check-layout.py reads, for struct list_head.
layout_rs() { # SIZE PREV_OFFSET
  cat <<RS
    assert_eq!(::core::mem::size_of::<list_head>(), $1usize, "Size of list_head");
    assert_eq!(
        unsafe { ::core::ptr::addr_of!((*ptr).prev) as usize - ptr as usize },
        $2usize,
        "Offset of field: list_head::prev"
    );
RS
}

case ${1:-} in
stock)
  ko=$2 symvers=$3 btf=$4 config_diff=$5
  layout_rs 16 8 > "$scratch/good.rs"; layout_rs 24 8 > "$scratch/size.rs"; layout_rs 16 0 > "$scratch/off.rs"
  expect layout_gate_accepts_kernel_layout accept '' -- python3 "$GB_ROOT/scripts/check-layout.py" "$btf" "$scratch/good.rs"
  expect layout_gate_catches_wrong_size refuse 'SIZE MISMATCH list_head' -- \
    python3 "$GB_ROOT/scripts/check-layout.py" "$btf" "$scratch/size.rs"
  expect layout_gate_catches_wrong_offset refuse 'OFFSET MISMATCH list_head::prev' -- \
    python3 "$GB_ROOT/scripts/check-layout.py" "$btf" "$scratch/off.rs"

  expect imports_gate_accepts_module accept '' -- python3 "$GB_ROOT/scripts/check-module-imports.py" "$ko" "$symvers"
  # Plant a wrong CRC for, and then drop, one symbol the module really imports.
  sym=$(modprobe --dump-modversions "$ko" | awk 'NR == 1 {print $2}')
  awk -F'\t' -v OFS='\t' -v s="$sym" '$2 == s {$1 = sprintf("0x%08x", 12345)} {print}' "$symvers" > "$scratch/crc.symvers"
  awk -F'\t' -v s="$sym" '$2 != s' "$symvers" > "$scratch/missing.symvers"
  expect imports_gate_catches_wrong_crc refuse "$sym: CRC" -- \
    python3 "$GB_ROOT/scripts/check-module-imports.py" "$ko" "$scratch/crc.symvers"
  expect imports_gate_catches_unexported refuse "$sym: not exported" -- \
    python3 "$GB_ROOT/scripts/check-module-imports.py" "$ko" "$scratch/missing.symvers"

  expect config_gate_accepts_rust_only_diff accept '' -- "$GB_ROOT/scripts/check-config-diff.sh" < "$config_diff"
  { cat "$config_diff"; echo " DEBUG_INFO_BTF y -> n"; } > "$scratch/config.diff"
  expect config_gate_catches_other_options refuse 'DEBUG_INFO_BTF' -- \
    "$GB_ROOT/scripts/check-config-diff.sh" < "$scratch/config.diff"

  expect refuses_missing_headers refuse 'apt-get install linux-headers-0.0.0-gbtest' -- \
    "$GB_ROOT/scripts/build-kmod.sh" --kernelrelease 0.0.0-gbtest --out "$scratch/out"
  expect refuses_other_source_upload refuse 'linux-source-6.12 is version .* but the headers' -- \
    "$GB_ROOT/scripts/build-stock-tree.sh" --krel "$GB_STOCK_KREL" --headers "$(dirname "$symvers")" \
      --headers-version 0.0-gbtest
  ;;
rust)
  kdir=$2
  printf '#!/bin/sh\necho "rustc 1.0.0 (gbtest)"\n' > "$scratch/rustc"; chmod +x "$scratch/rustc"
  expect refuses_other_rustc refuse "built with 'rustc .*' but .* is 'rustc 1.0.0 \(gbtest\)'" -- \
    env KRUSTC="$scratch/rustc" "$GB_ROOT/scripts/build-kmod.sh" --kdir "$kdir" --out "$scratch/out"
  mkdir -p "$scratch/kdir/include/config"
  cp "$kdir/.config" "$scratch/kdir/.config"; echo 6.12.0-gbtest > "$scratch/kdir/include/config/kernel.release"
  expect refuses_rust_kernel_without_metadata refuse 'lacks its Rust metadata' -- \
    "$GB_ROOT/scripts/build-kmod.sh" --kdir "$scratch/kdir" --out "$scratch/out"
  ;;
*) die "usage: host-gates.sh stock KO SYMVERS BTF CONFIG_DIFF | rust KDIR" ;;
esac
echo "HOST-GATES: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
