# Sourced by tests/qemu/run.sh and tests/deb/dkms-build.sh: the kernel log lines that
# fail a guest (complaint_re), less those that are only information (benign_re).
# Kernel complaints that fail a guest. Only kernel log lines ("[ seconds] ...") are
# scanned, so test output that names these words cannot trip it. The debug kernel's
# checkers: KASAN reports start "BUG: KASAN:", lockdep's "WARNING: possible ..." (or
# "INFO: lockdep is turned off" / "DEBUG_LOCKS_WARN_ON" once it gave up), DMA-API
# debugging prints "DMA-API: <device>: <what is wrong>", kmemleak "kmemleak: N new
# suspected memory leaks" (its suspects are judged one by one: kmemleak_failures).
complaint_re='Oops|BUG:|kernel BUG|WARNING:|Call Trace|possible circular|INFO: |disagrees about version'
complaint_re+='|Unknown symbol|Kernel panic|general protection fault|UBSAN:|KASAN|refcount_t:'
complaint_re+='|list_(add|del) corruption|Bad page|Out of memory|oom-kill|\(%pA\?\)'
complaint_re+='|DMA-API:|kmemleak|lockdep|possible recursive locking|inconsistent lock state'
complaint_re+='|DEBUG_LOCKS_WARN_ON|suspicious RCU usage|swiotlb buffer is full'
# What the checkers print when they start, and kmemleak's count line (its suspects are
# counted by kmemleak_failures, attributed): information, not complaints.
benign_re='kmemleak: Kernel memory leak detector initialized|kmemleak: [0-9]+ new suspected memory leaks'
benign_re+='|DMA-API: preallocated [0-9]+ debug entries|DMA-API: debugging enabled by kernel config'
benign_re+='|KernelAddressSanitizer initialized|Lock dependency validator|RCU lockdep checking is enabled'
