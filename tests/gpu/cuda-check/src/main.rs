//! gb-gpu-check: the CUDA program of GreenBoost's GPU suite (tests/gpu/run.sh).
//!
//! It reaches CUDA the way an unmodified application does: the runtime (libcudart) and the
//! driver (libcuda) are dlopened by cudarc and every function is looked up with dlsym at first
//! use, so under `LD_PRELOAD=libgreenboost_cuda.so` each look-up goes through the shim's dlsym
//! routing. Kernels are hand-written PTX (pattern.ptx) loaded with cuModuleLoadData.
//!
//! Subcommands (each prints `PASS name: ...` / `FAIL name: ...` lines and `KV key=value`
//! figures that run.sh collects; the exit status is 1 when anything failed):
//!   report                      capacities as every API reports them, versions, device name
//!   alloc [options]             allocate past the budget, write and verify with kernels
//!   vmm                         which host locations cuMemCreate accepts; one is mapped and
//!                               checked with the kernels
//!   balloon --leave-gib L       hold plain cudaMalloc memory until killed, leaving L GiB free
//!
//! alloc options:
//!   --label NAME        prefix of the test names (default alloc)
//!   --total-gib T       bytes to hold at once through cudaMalloc (default 24)
//!   --chunk-mib C       size of each cudaMalloc (default 1024)
//!   --async-gib A       bytes to hold at once through cudaMallocAsync (default 0: skip)
//!   --budget-gib B      the VRAM budget the shim was given (0: none); VRAM-resident bytes of
//!                       this program's allocations must stay within it
//!   --t2-cap-gib C      the T2 cap the shim was given (0: none); T2 bytes must stay within it
//!   --expect vram|t2|oom
//!                       vram: every allocation is device memory (no shim);
//!                       t2: every allocation succeeds and some are host memory mapped for the
//!                       GPU (the shim's T2);
//!                       oom: cudaMalloc answers cudaErrorMemoryAllocation before the total
//!                       (no shim under a balloon, or the shim with its T2 capped)
//!   import                      asks the driver to import a DMA-BUF (udmabuf where the kernel
//!                               has it, else a memfd) as external memory, DMABUF_FD (9) and
//!                               OPAQUE_FD (1), and prints the answers

use std::ffi::{c_void, CStr, CString};
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use cudarc::driver::sys as cu;
use cudarc::runtime::sys as rt;

const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;
const THREADS_PER_BLOCK: u32 = 256;
/// Enough blocks to fill every multiprocessor of a large GPU; the kernels loop over the rest.
const MAX_BLOCKS: u64 = 132 * 32;
/// Bytes read back to the host from the start, middle and end of every buffer.
const READBACK_WINDOW: usize = MIB;
/// Bytes uploaded from the host into a buffer and checked on the GPU.
const UPLOAD_WINDOW: usize = 64 * MIB;

mod alloc;
mod check;
mod kernels;
mod placement;
mod probes;
mod report;

use alloc::*;
use check::*;
use kernels::*;
use placement::*;
use probes::*;
use report::*;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut tally = Tally { passed: 0, failed: 0 };
    let result = match args.first().map(String::as_str) {
        Some("report") => report(&mut tally),
        Some("alloc") => parse_alloc_options(&args[1..]).and_then(|o| alloc(&mut tally, &o)),
        Some("import") => import_probe(),
        Some("vmm") => vmm_host_probe(&mut tally),
        Some("balloon") => match args.get(1..3) {
            Some([flag, gib]) if flag == "--leave-gib" => gib.parse::<usize>().map_err(|e| e.to_string()).and_then(|g| balloon(g * GIB)),
            _ => Err("usage: gb-gpu-check balloon --leave-gib L".into()),
        },
        _ => Err("usage: gb-gpu-check report | alloc [options] | import | vmm | balloon --leave-gib L (see the source's header)".into()),
    };
    if let Err(e) = result {
        tally.record(&format!("{}.run", args.first().map(String::as_str).unwrap_or("gb-gpu-check")), false, e);
    }
    if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
