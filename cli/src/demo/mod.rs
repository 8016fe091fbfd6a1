//! `greenboost demo`: the README's main job. Allocates more than the VRAM budget under
//! the shim, runs a GPU kernel that writes every word and one that verifies every word,
//! and shows where the memory went (T1 VRAM, T2 pinned RAM) and how fast the GPU read
//! each tier. Without a GPU it says what it would do, and succeeds: nothing is wrong
//! with a machine that has no GPU.
//!
//! The GPU work runs in a child (`greenboost demo-worker`, `worker.rs`) started with
//! LD_PRELOAD, so the shim sees its allocations exactly as it sees an application's.

mod kernels;
mod worker;

use std::path::Path;
use std::process::{Command, ExitCode, ExitStatus};

use clap::Args;
use greenboost_policy::{Id, PerDevice};

use crate::cuda::{Cuda, Device};
use crate::paths::SystemPaths;
use crate::policy::{Policy, Value};
use crate::run::{locate_shim, preflight, preload_with};
use crate::size::{format_bytes, parse_size};

pub use worker::{worker, WorkerArgs};

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

/// The first GPU as the driver describes it, or `None` after saying why there is none.
fn first_gpu() -> Option<Device> {
    let cuda = match Cuda::load() {
        Ok(cuda) => cuda,
        Err(why) => {
            println!("No NVIDIA GPU driver here: {why}.\nNothing was run.\n\n{NO_GPU_EXPLANATION}");
            return None;
        }
    };
    match cuda.first_device() {
        Ok(device) => Some(device),
        Err(e) => {
            println!(
                "The NVIDIA driver is installed but no GPU is usable: {}.\nNothing was run.\n\n{NO_GPU_EXPLANATION}",
                e.message
            );
            None
        }
    }
}

/// How much the demo allocates: the budget, and how far past it.
struct Plan {
    budget: u64,
    past_budget: u64,
}

impl Plan {
    fn new(args: &DemoArgs, device: &Device) -> Result<Plan, String> {
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
        Ok(Plan { budget, past_budget })
    }

    fn total(&self) -> u64 {
        self.budget + self.past_budget
    }
}

/// `greenboost demo-worker` under the shim, with the policy and the budget of the plan.
fn worker_command(args: &DemoArgs, plan: &Plan, shim: &Path) -> Result<Command, String> {
    let mut policy = args.policy.clone();
    policy.set(Id::VramBudget, Value::PerDevice(PerDevice::every(plan.budget)));
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let mut worker = Command::new(exe);
    worker
        .arg("demo-worker")
        .arg(format!("--total={}", plan.total()))
        .arg(format!("--chunk={}", args.chunk))
        .env("LD_PRELOAD", preload_with(shim, std::env::var_os("LD_PRELOAD")));
    for (name, value) in policy.environment() {
        worker.env(name, value);
    }
    if std::env::var_os("GREENBOOST_LOG").is_none() && policy.get(Id::Log).is_none() {
        worker.env("GREENBOOST_LOG", "info");
    }
    Ok(worker)
}

/// The worker's exit status is the demo's.
fn exit_code(status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(code.clamp(1, 255) as u8),
        None => {
            eprintln!("greenboost: the demo worker was killed by a signal ({status}); `dmesg` and GREENBOOST_LOG=debug show more");
            ExitCode::FAILURE
        }
    }
}

pub fn demo(args: &DemoArgs) -> Result<ExitCode, String> {
    let Some(device) = first_gpu() else {
        return Ok(ExitCode::SUCCESS);
    };
    let shim = locate_shim(args.policy.shim.as_deref())?;
    let plan = Plan::new(args, &device)?;
    println!(
        "GPU 0: {}, {} VRAM. VRAM budget {}; allocating {} in {} pieces, {} past the budget.",
        device.name,
        format_bytes(device.total_memory),
        format_bytes(plan.budget),
        format_bytes(plan.total()),
        format_bytes(args.chunk),
        format_bytes(plan.past_budget)
    );
    for warning in preflight(&args.policy, &SystemPaths::from_env())? {
        println!("note: {warning}");
    }
    let mut worker = worker_command(args, &plan, &shim)?;
    println!("running the GPU part under {}\n", shim.display());
    let status = worker.status().map_err(|e| format!("cannot start the demo worker: {e}"))?;
    Ok(exit_code(status))
}
