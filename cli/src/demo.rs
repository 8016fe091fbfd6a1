//! `greenboost demo`: the README's main job. Allocates more than the VRAM budget under
//! the shim, runs a GPU kernel that writes every word and one that verifies every word,
//! and shows where the memory went (T1 VRAM, T2 pinned RAM) and how fast the GPU read
//! each tier. Without a GPU it says what it would do, and succeeds: nothing is wrong
//! with a machine that has no GPU.
//!
//! The GPU work runs in a child (`greenboost demo-worker`) started with LD_PRELOAD, so
//! the shim sees its allocations exactly as it sees an application's.

use std::ffi::{c_void, CStr};
use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::Args;
use greenboost_policy::{Id, PerDevice};

use crate::cuda::{Cuda, DevicePtr, CUDA_ERROR_OUT_OF_MEMORY, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST};
use crate::device::Device as GbDevice;
use crate::paths::SystemPaths;
use crate::policy::{Policy, Value};
use crate::run::{locate_shim, preflight, preload_with};
use crate::size::{format_bytes, parse_size};

#[derive(Args)]
pub struct DemoArgs {
    /// How much to allocate past the VRAM budget (default: half the budget, at most half
    /// of the available RAM).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub past_budget: Option<u64>,
    /// Size of each allocation.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "256M")]
    pub chunk: u64,
    #[command(flatten)]
    pub policy: Policy,
}

#[derive(Args)]
pub struct WorkerArgs {
    #[arg(long)]
    total: u64,
    #[arg(long)]
    chunk: u64,
}

/// Two kernels over 32-bit words, grid-stride loops: `gb_fill` writes
/// `(index * 0x9E3779B1) ^ seed`, `gb_verify` counts words that differ into `*errors`.
/// PTX ISA 6.0 for sm_52 and later: the driver JITs it for the GPU at hand.
const KERNELS_PTX: &CStr = c"
.version 6.0
.target sm_52
.address_size 64

.visible .entry gb_fill(.param .u64 p_data, .param .u64 p_words, .param .u32 p_seed)
{
    .reg .pred %p;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_data];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u64 %rd2, [p_words];
    ld.param.u32 %r1, [p_seed];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %nctaid.x;
    mul.wide.u32 %rd3, %r2, %r3;
    cvt.u64.u32 %rd4, %r4;
    add.u64 %rd3, %rd3, %rd4;
    mul.wide.u32 %rd5, %r5, %r3;
FILL_LOOP:
    setp.ge.u64 %p, %rd3, %rd2;
    @%p bra FILL_DONE;
    cvt.u32.u64 %r6, %rd3;
    mul.lo.u32 %r6, %r6, 0x9E3779B1;
    xor.b32 %r6, %r6, %r1;
    shl.b64 %rd6, %rd3, 2;
    add.u64 %rd7, %rd1, %rd6;
    st.global.u32 [%rd7], %r6;
    add.u64 %rd3, %rd3, %rd5;
    bra FILL_LOOP;
FILL_DONE:
    ret;
}

.visible .entry gb_verify(.param .u64 p_data, .param .u64 p_words, .param .u32 p_seed, .param .u64 p_errors)
{
    .reg .pred %p<3>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<11>;
    ld.param.u64 %rd1, [p_data];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u64 %rd2, [p_words];
    ld.param.u32 %r1, [p_seed];
    ld.param.u64 %rd8, [p_errors];
    cvta.to.global.u64 %rd8, %rd8;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %nctaid.x;
    mul.wide.u32 %rd3, %r2, %r3;
    cvt.u64.u32 %rd4, %r4;
    add.u64 %rd3, %rd3, %rd4;
    mul.wide.u32 %rd5, %r5, %r3;
    mov.u64 %rd9, 0;
VERIFY_LOOP:
    setp.ge.u64 %p1, %rd3, %rd2;
    @%p1 bra VERIFY_DONE;
    cvt.u32.u64 %r6, %rd3;
    mul.lo.u32 %r6, %r6, 0x9E3779B1;
    xor.b32 %r6, %r6, %r1;
    shl.b64 %rd6, %rd3, 2;
    add.u64 %rd7, %rd1, %rd6;
    ld.global.u32 %r7, [%rd7];
    setp.ne.u32 %p2, %r7, %r6;
    selp.u64 %rd10, 1, 0, %p2;
    add.u64 %rd9, %rd9, %rd10;
    add.u64 %rd3, %rd3, %rd5;
    bra VERIFY_LOOP;
VERIFY_DONE:
    setp.eq.u64 %p1, %rd9, 0;
    @%p1 bra VERIFY_RET;
    atom.global.add.u64 %rd10, [%rd8], %rd9;
VERIFY_RET:
    ret;
}
";

/// The value `gb_fill` writes at word `index` (checked on the host for sampled words).
fn pattern(index: u64, seed: u32) -> u32 {
    (index as u32).wrapping_mul(0x9E37_79B1) ^ seed
}

fn seed_of(buffer: usize) -> u32 {
    (buffer as u32).wrapping_mul(0x0100_0193).wrapping_add(0x5EED)
}

fn mem_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string(SystemPaths::from_env().proc_path("meminfo")).ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib << 10)
}

const NO_GPU_EXPLANATION: &str = "\
On a machine with an NVIDIA GPU, `greenboost demo` runs a small CUDA program under the
shim (libgreenboost_cuda.so) with a VRAM budget (default: the GPU's memory) and:
  1. allocates the budget plus up to half of it again, in 256 MiB pieces: the pieces
     that fit stay in VRAM (tier T1), the rest are backed by pinned system RAM (T2),
     which the GPU reads over PCIe;
  2. runs a kernel that writes every 32-bit word of every piece and one that reads
     them all back and counts mismatches, and spot-checks words from the host;
  3. prints the tier split and the read bandwidth of each tier.
Try `greenboost doctor` for what this machine can do, and `greenboost status`.";

pub fn demo(args: &DemoArgs) -> Result<ExitCode, String> {
    let cuda = match Cuda::load() {
        Ok(cuda) => cuda,
        Err(why) => {
            println!("No NVIDIA GPU driver here: {why}.\nNothing was run.\n\n{NO_GPU_EXPLANATION}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let device = match cuda.first_device() {
        Ok(device) => device,
        Err(e) => {
            println!(
                "The NVIDIA driver is installed but no GPU is usable: {}.\nNothing was run.\n\n{NO_GPU_EXPLANATION}",
                e.message
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    drop(cuda);
    let shim = locate_shim(args.policy.shim.as_deref())?;

    let budget = args
        .policy
        .vram_budget()
        .and_then(|budget| budget.get(device.ordinal))
        .unwrap_or(device.total_memory)
        .min(device.total_memory);
    let available = mem_available().ok_or("cannot read MemAvailable from /proc/meminfo")?;
    let past_budget = args.past_budget.unwrap_or_else(|| (budget / 2).min(available / 2));
    if args.chunk < 4096 {
        return Err("--chunk must be at least 4K".into());
    }
    if past_budget < args.chunk || past_budget > available.saturating_sub(1 << 30) {
        return Err(format!(
            "not enough free RAM for the demo: {} available, {} wanted past the VRAM budget (at least one {} piece, and 1 GiB left over); free some memory, or pass a smaller --past-budget or --vram-budget",
            format_bytes(available),
            format_bytes(past_budget),
            format_bytes(args.chunk)
        ));
    }
    let total = budget + past_budget;
    println!(
        "GPU 0: {}, {} VRAM. VRAM budget {}; allocating {} in {} pieces, {} past the budget.",
        device.name,
        format_bytes(device.total_memory),
        format_bytes(budget),
        format_bytes(total),
        format_bytes(args.chunk),
        format_bytes(past_budget)
    );

    let paths = SystemPaths::from_env();
    for warning in preflight(&args.policy, &paths)? {
        println!("note: {warning}");
    }
    let mut policy = args.policy.clone();
    policy.set(Id::VramBudget, Value::PerDevice(PerDevice::every(budget)));
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let mut worker = Command::new(exe);
    worker
        .arg("demo-worker")
        .arg(format!("--total={total}"))
        .arg(format!("--chunk={}", args.chunk))
        .env("LD_PRELOAD", preload_with(&shim, std::env::var_os("LD_PRELOAD")));
    for (name, value) in policy.environment() {
        worker.env(name, value);
    }
    if std::env::var_os("GREENBOOST_LOG").is_none() && policy.get(Id::Log).is_none() {
        worker.env("GREENBOOST_LOG", "info");
    }
    println!("running the GPU part under {}\n", shim.display());
    let status = worker.status().map_err(|e| format!("cannot start the demo worker: {e}"))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(code.clamp(1, 255) as u8),
        None => {
            eprintln!("greenboost: the demo worker was killed by a signal ({status}); `dmesg` and GREENBOOST_LOG=debug show more");
            ExitCode::FAILURE
        }
    })
}

struct Piece {
    pointer: DevicePtr,
    size: u64,
    in_vram: Option<bool>,
}

#[derive(Default)]
struct TierFigures {
    pieces: usize,
    bytes: u64,
    write_seconds: f64,
    read_seconds: f64,
}

impl TierFigures {
    fn line(&self, tier: &str) -> String {
        let rate = |seconds: f64| {
            if seconds > 0.0 {
                format!("{:8.1} GB/s", self.bytes as f64 / seconds / 1e9)
            } else {
                format!("{:>13}", "-")
            }
        };
        format!(
            "{tier:<16} {:>4} pieces {:>12}   GPU write {}   GPU read {}",
            self.pieces,
            format_bytes(self.bytes),
            rate(self.write_seconds),
            rate(self.read_seconds)
        )
    }
}

pub fn worker(args: &WorkerArgs) -> Result<ExitCode, String> {
    let fail = |e: crate::cuda::CudaError| e.message;
    let cuda = Cuda::load()?;
    let device = cuda.first_device().map_err(fail)?;
    cuda.use_device(&device).map_err(fail)?;
    let [fill, verify] = cuda.load_kernels(KERNELS_PTX, [c"gb_fill", c"gb_verify"]).map_err(fail)?;
    let errors = cuda.alloc(8).map_err(fail)?;
    cuda.memset(errors, 0, 8).map_err(fail)?;
    if let Ok((free, total)) = cuda.memory_info() {
        println!("cuMemGetInfo under the shim: {} free of {}", format_bytes(free), format_bytes(total));
    }

    let mut pieces = Vec::new();
    let mut allocated = 0;
    let started = Instant::now();
    while allocated < args.total {
        let size = args.chunk.min(args.total - allocated);
        match cuda.alloc(size) {
            Ok(pointer) => {
                let in_vram = match cuda.memory_type(pointer) {
                    Ok(CU_MEMORYTYPE_DEVICE) => Some(true),
                    Ok(CU_MEMORYTYPE_HOST) => Some(false),
                    _ => None,
                };
                pieces.push(Piece { pointer, size, in_vram });
                allocated += size;
            }
            Err(e) if e.code == CUDA_ERROR_OUT_OF_MEMORY => {
                println!(
                    "allocation {} ({}) was refused with CUDA_ERROR_OUT_OF_MEMORY after {}: T2 is capped or the module is under memory pressure; continuing with what was allocated",
                    pieces.len() + 1,
                    format_bytes(size),
                    format_bytes(allocated)
                );
                break;
            }
            Err(e) => return Err(e.message),
        }
    }
    println!(
        "allocated {} in {} pieces in {:.2} s",
        format_bytes(allocated),
        pieces.len(),
        started.elapsed().as_secs_f64()
    );

    let blocks = device.multiprocessors * 8;
    let threads = 256u32;
    let (mut vram, mut pinned, mut unknown) = (TierFigures::default(), TierFigures::default(), TierFigures::default());
    for (index, piece) in pieces.iter().enumerate() {
        let figures = match piece.in_vram {
            Some(true) => &mut vram,
            Some(false) => &mut pinned,
            None => &mut unknown,
        };
        let (mut data, mut words, mut seed, mut errors_ptr) = (piece.pointer, piece.size / 4, seed_of(index), errors);
        let t0 = Instant::now();
        let mut params: [*mut c_void; 3] =
            [(&mut data as *mut u64).cast(), (&mut words as *mut u64).cast(), (&mut seed as *mut u32).cast()];
        cuda.launch_and_wait(fill, blocks, threads, &mut params).map_err(fail)?;
        let t1 = Instant::now();
        let mut params: [*mut c_void; 4] = [
            (&mut data as *mut u64).cast(),
            (&mut words as *mut u64).cast(),
            (&mut seed as *mut u32).cast(),
            (&mut errors_ptr as *mut u64).cast(),
        ];
        cuda.launch_and_wait(verify, blocks, threads, &mut params).map_err(fail)?;
        figures.pieces += 1;
        figures.bytes += piece.size;
        figures.write_seconds += (t1 - t0).as_secs_f64();
        figures.read_seconds += t1.elapsed().as_secs_f64();
    }

    let mut mismatches = [0u8; 8];
    cuda.copy_to_host(&mut mismatches, errors).map_err(fail)?;
    let mismatches = u64::from_ne_bytes(mismatches);
    // Independent of the kernels: the host reads words back through the driver.
    let mut host_checked = 0u64;
    let mut host_wrong = 0u64;
    for (index, piece) in pieces.iter().enumerate() {
        let words = piece.size / 4;
        for sample in [0, words / 3, words / 2, words - 1] {
            let mut word = [0u8; 4];
            cuda.copy_to_host(&mut word, piece.pointer + sample * 4).map_err(fail)?;
            host_checked += 1;
            if u32::from_ne_bytes(word) != pattern(sample, seed_of(index)) {
                host_wrong += 1;
            }
        }
    }

    println!("\nwhere the memory went:");
    println!("{}", vram.line("T1 (VRAM)"));
    println!("{}", pinned.line("T2 (pinned RAM)"));
    if unknown.pieces > 0 {
        println!("{}", unknown.line("unknown"));
    }
    if let Ok(stats) = GbDevice::open(&SystemPaths::from_env().device).and_then(|d| d.proc_stats()) {
        println!(
            "/dev/greenboost: this process holds {} of T2 in {} module buffers",
            format_bytes(stats.t2_used),
            stats.buffers
        );
    }
    let words_total: u64 = pieces.iter().map(|p| p.size / 4).sum();
    println!(
        "\nverification: {mismatches} wrong of {words_total} words (GPU), {host_wrong} wrong of {host_checked} sampled words (host)"
    );
    for piece in &pieces {
        cuda.free(piece.pointer).map_err(fail)?;
    }
    cuda.free(errors).map_err(fail)?;

    if mismatches != 0 || host_wrong != 0 {
        println!("FAILED: data written by the GPU did not read back intact; please report this with `greenboost doctor` output");
        return Ok(ExitCode::FAILURE);
    }
    if pinned.pieces == 0 {
        println!(
            "FAILED: nothing went past VRAM, so GreenBoost did not take part: is the shim loaded (GREENBOOST_LOG=info shows it), or was the budget larger than what was allocated?"
        );
        return Ok(ExitCode::FAILURE);
    }
    println!(
        "PASSED: the GPU wrote and read {} of which {} lived in system RAM.",
        format_bytes(allocated),
        format_bytes(pinned.bytes)
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_pattern_matches_the_kernel_formula() {
        assert_eq!(pattern(0, 7), 7);
        assert_eq!(pattern(1, 0), 0x9E37_79B1);
        // The kernel truncates the index to 32 bits before multiplying.
        assert_eq!(pattern(1 << 32, 5), 5);
        assert_ne!(seed_of(0), seed_of(1));
    }

    #[test]
    fn ptx_declares_both_kernels() {
        let ptx = KERNELS_PTX.to_str().unwrap();
        assert!(ptx.contains(".entry gb_fill("));
        assert!(ptx.contains(".entry gb_verify("));
    }
}
