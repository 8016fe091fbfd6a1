"""GreenBoost's GPU-side Python helpers, one copy for every program folder that needs
them (bench/, bench/probes/, tests/gpu/):

  shim_exports  the shim's counters and T2 lookup, read through its exports (ctypes)
  foreign       a foreign process holding VRAM (the balloon), and what keeps such
                processes from outliving the run
  managed       the driver's managed-memory calls (advise, prefetch, eviction) through
                libcuda and CuPy
  verdicts      the PASS/FAIL and KV lines of tests/gpu's programs, counted
  free_vram     free VRAM sampled during the GPU suite's shared-GPU tests, and the series
                file of it that the suite writes and bench/plots.py draws

The prepare scripts (tests/gpu/prepare.sh, bench/prepare.sh) copy this package into their
carry folder beside the shim they build, so that the layout in shim_exports.py that runs
on the GPU machine is the one of the shim it runs with; the run scripts put
`<carry>/python` on PYTHONPATH."""
