#!/bin/sh
# The t3 guest's phases, sourced by guest-suite.sh (which defines pass/fail/check,
# run_tests, load and unload, and checks the kernel log afterwards). The guest has
# little RAM (so that a T3 buffer larger than it is cheap to write) and an emulated
# NVMe disk (QEMU -device nvme) to swap to:
#   1. load greenboost.ko and the importer
#   2. `gb-guest-tests t3-noswap`: without swap there is no T3, and T2 still stops at
#      the reserve without the OOM killer
#   3. mkswap + swapon the NVMe disk, `gb-guest-tests t3`, swapoff, unbind the disk
#   4. unload

t3_phases() {
  load insmod_t3 pool_cap_mb=4096 reserve_mb=48 cache_mb=16 watchdog_ms=200 || return
  if insmod $GB/gb_importer.ko 2>/tmp/insmod.err && [ -c /dev/gb_importer ]; then
    pass insmod_importer
  else
    fail insmod_importer "$(cat /tmp/insmod.err)"
  fi
  run_tests t3-noswap
  disk=$(ls /dev/nvme*n1 2>/dev/null | head -1)
  if [ -b "$disk" ] && mkswap "$disk" > /tmp/mkswap.out 2>&1 && swapon "$disk" 2> /tmp/swapon.err; then
    pass swapon_nvme
    echo "  # swap: $(tail -n +2 /proc/swaps | tr -s ' ')"
    # 32 pages per swap-in readahead (default 8): under TCG every I/O is dear.
    echo 5 > /proc/sys/vm/page-cluster
    # Swap-ins near the reserve map pages for the disk, and DMA-API debugging tracks each
    # such mapping in a radix tree whose nodes are GFP_ATOMIC: with the kernel's default
    # reserve (2230 KiB here) one failed once in CI, and the checker turned itself off
    # ("cacheline tracking ENOMEM"). At least 16 MiB keeps the atomic reserve from
    # running dry.
    min_free=$(cat /proc/sys/vm/min_free_kbytes)
    [ "$min_free" -ge 16384 ] || echo 16384 > /proc/sys/vm/min_free_kbytes
    echo "  # vm.min_free_kbytes: $min_free -> $(cat /proc/sys/vm/min_free_kbytes)"
    run_tests t3
    check swapoff_nvme "swapoff $disk failed" swapoff "$disk"
    # Unbound now, not at poweroff: 6.12's lockdep model of queue freezing reports a
    # cycle (swap writeback in reclaim, MSI setup, nvme_dev_disable at shutdown) in the
    # nvme driver's shutdown of a disk that was swapped to. Removing the driver first
    # disables the controller without freezing its queues.
    for dev in /sys/bus/pci/drivers/nvme/0000:*; do
      [ -e "$dev" ] && echo "${dev##*/}" > /sys/bus/pci/drivers/nvme/unbind
    done
  else
    fail swapon_nvme "no NVMe disk to swap to ($disk): $(cat /tmp/mkswap.out /tmp/swapon.err 2>/dev/null | tr '\n' ' ')"
  fi
  rmmod gb_importer 2>/dev/null || fail rmmod_importer "rmmod gb_importer failed"
  if unload; then pass rmmod_t3; else fail rmmod_t3 "rmmod failed"; fi
}
