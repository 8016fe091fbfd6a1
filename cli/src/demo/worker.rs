//! `greenboost demo-worker`: the GPU side of `demo`, run as a child under LD_PRELOAD.
//! Allocates `--total` bytes in `--chunk` pieces, fills and verifies every word of each
//! on the GPU, spot-checks words from the host, and reports the tier split.

use std::ffi::c_void;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use super::kernels::{pattern, seed_of, KERNELS_PTX};
use crate::cuda::{Cuda, CudaError, DevicePtr, CUDA_ERROR_OUT_OF_MEMORY, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST};
use crate::device::Device as GbDevice;
use crate::paths::SystemPaths;
use crate::size::format_bytes;

#[derive(Args)]
pub struct WorkerArgs {
    #[arg(long)]
    total: u64,
    #[arg(long)]
    chunk: u64,
}

fn fail(error: CudaError) -> String {
    error.message
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

/// The figures of each tier, by where the driver says a piece lives.
#[derive(Default)]
struct Tiers {
    vram: TierFigures,
    pinned: TierFigures,
    unknown: TierFigures,
}

impl Tiers {
    fn of(&mut self, piece: &Piece) -> &mut TierFigures {
        match piece.in_vram {
            Some(true) => &mut self.vram,
            Some(false) => &mut self.pinned,
            None => &mut self.unknown,
        }
    }
}

/// The loaded kernels, the device word that `gb_verify` counts mismatches into, and
/// the launch shape.
struct Gpu {
    fill: *mut c_void,
    verify: *mut c_void,
    errors: DevicePtr,
    blocks: u32,
    threads: u32,
}

impl Gpu {
    fn open(cuda: &Cuda) -> Result<Gpu, String> {
        let device = cuda.first_device().map_err(fail)?;
        cuda.use_device(&device).map_err(fail)?;
        let [fill, verify] = cuda.load_kernels(KERNELS_PTX, [c"gb_fill", c"gb_verify"]).map_err(fail)?;
        let errors = cuda.alloc(8).map_err(fail)?;
        cuda.memset(errors, 0, 8).map_err(fail)?;
        Ok(Gpu { fill, verify, errors, blocks: device.multiprocessors * 8, threads: 256 })
    }

    /// Fills and verifies one piece, adding its size and times to `figures`.
    fn run(&self, cuda: &Cuda, index: usize, piece: &Piece, figures: &mut TierFigures) -> Result<(), String> {
        let (mut data, mut words, mut seed, mut errors) = (piece.pointer, piece.size / 4, seed_of(index), self.errors);
        let t0 = Instant::now();
        let mut params: [*mut c_void; 3] =
            [(&mut data as *mut u64).cast(), (&mut words as *mut u64).cast(), (&mut seed as *mut u32).cast()];
        cuda.launch_and_wait(self.fill, self.blocks, self.threads, &mut params).map_err(fail)?;
        let t1 = Instant::now();
        let mut params: [*mut c_void; 4] = [
            (&mut data as *mut u64).cast(),
            (&mut words as *mut u64).cast(),
            (&mut seed as *mut u32).cast(),
            (&mut errors as *mut u64).cast(),
        ];
        cuda.launch_and_wait(self.verify, self.blocks, self.threads, &mut params).map_err(fail)?;
        figures.pieces += 1;
        figures.bytes += piece.size;
        figures.write_seconds += (t1 - t0).as_secs_f64();
        figures.read_seconds += t1.elapsed().as_secs_f64();
        Ok(())
    }

    /// The words `gb_verify` found wrong, over every piece.
    fn mismatches(&self, cuda: &Cuda) -> Result<u64, String> {
        let mut count = [0u8; 8];
        cuda.copy_to_host(&mut count, self.errors).map_err(fail)?;
        Ok(u64::from_ne_bytes(count))
    }
}

/// Where the driver says an allocation lives: VRAM, mapped host memory (T2), or unknown.
fn in_vram(cuda: &Cuda, pointer: DevicePtr) -> Option<bool> {
    match cuda.memory_type(pointer) {
        Ok(CU_MEMORYTYPE_DEVICE) => Some(true),
        Ok(CU_MEMORYTYPE_HOST) => Some(false),
        _ => None,
    }
}

/// Allocates up to `total` bytes in `chunk` pieces, stopping early (with a note) at the
/// first out-of-memory answer.
fn allocate(cuda: &Cuda, total: u64, chunk: u64) -> Result<(Vec<Piece>, u64), String> {
    let mut pieces = Vec::new();
    let mut allocated = 0;
    let started = Instant::now();
    while allocated < total {
        let size = chunk.min(total - allocated);
        match cuda.alloc(size) {
            Ok(pointer) => {
                pieces.push(Piece { pointer, size, in_vram: in_vram(cuda, pointer) });
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
    Ok((pieces, allocated))
}

/// Independent of the kernels: the host reads sampled words back through the driver.
/// Returns (words checked, words wrong).
fn host_check(cuda: &Cuda, pieces: &[Piece]) -> Result<(u64, u64), String> {
    let (mut checked, mut wrong) = (0u64, 0u64);
    for (index, piece) in pieces.iter().enumerate() {
        let words = piece.size / 4;
        for sample in [0, words / 3, words / 2, words - 1] {
            let mut word = [0u8; 4];
            cuda.copy_to_host(&mut word, piece.pointer + sample * 4).map_err(fail)?;
            checked += 1;
            if u32::from_ne_bytes(word) != pattern(sample, seed_of(index)) {
                wrong += 1;
            }
        }
    }
    Ok((checked, wrong))
}

fn print_tiers(tiers: &Tiers) {
    println!("\nwhere the memory went:");
    println!("{}", tiers.vram.line("T1 (VRAM)"));
    println!("{}", tiers.pinned.line("T2 (pinned RAM)"));
    if tiers.unknown.pieces > 0 {
        println!("{}", tiers.unknown.line("unknown"));
    }
    if let Ok(stats) = GbDevice::open(&SystemPaths::from_env().device).and_then(|d| d.proc_stats()) {
        println!(
            "/dev/greenboost: this process holds {} of T2 in {} module buffers",
            format_bytes(stats.t2_used),
            stats.buffers
        );
    }
}

/// PASSED when every word read back intact and something lived in system RAM.
fn verdict(mismatches: u64, host_wrong: u64, tiers: &Tiers, allocated: u64) -> ExitCode {
    if mismatches != 0 || host_wrong != 0 {
        println!("FAILED: data written by the GPU did not read back intact; please report this with `greenboost doctor` output");
        return ExitCode::FAILURE;
    }
    if tiers.pinned.pieces == 0 {
        println!(
            "FAILED: nothing went past VRAM, so GreenBoost did not take part: is the shim loaded (GREENBOOST_LOG=info shows it), or was the budget larger than what was allocated?"
        );
        return ExitCode::FAILURE;
    }
    println!(
        "PASSED: the GPU wrote and read {} of which {} lived in system RAM.",
        format_bytes(allocated),
        format_bytes(tiers.pinned.bytes)
    );
    ExitCode::SUCCESS
}

pub fn worker(args: &WorkerArgs) -> Result<ExitCode, String> {
    let cuda = Cuda::load()?;
    let gpu = Gpu::open(&cuda)?;
    if let Ok((free, total)) = cuda.memory_info() {
        println!("cuMemGetInfo under the shim: {} free of {}", format_bytes(free), format_bytes(total));
    }
    let (pieces, allocated) = allocate(&cuda, args.total, args.chunk)?;
    let mut tiers = Tiers::default();
    for (index, piece) in pieces.iter().enumerate() {
        gpu.run(&cuda, index, piece, tiers.of(piece))?;
    }
    let mismatches = gpu.mismatches(&cuda)?;
    let (host_checked, host_wrong) = host_check(&cuda, &pieces)?;
    print_tiers(&tiers);
    let words_total: u64 = pieces.iter().map(|p| p.size / 4).sum();
    println!(
        "\nverification: {mismatches} wrong of {words_total} words (GPU), {host_wrong} wrong of {host_checked} sampled words (host)"
    );
    for piece in &pieces {
        cuda.free(piece.pointer).map_err(fail)?;
    }
    cuda.free(gpu.errors).map_err(fail)?;
    Ok(verdict(mismatches, host_wrong, &tiers, allocated))
}
