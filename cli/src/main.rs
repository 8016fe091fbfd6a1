//! `greenboost`: see what GreenBoost is doing (`status`), run a program under it
//! (`run`), find out why it is not working (`doctor`), watch it work (`demo`) and give
//! T3 a swap file (`swap`).

mod cuda;
mod demo;
mod device;
mod doctor;
mod environment;
mod json;
mod memlock;
mod module;
mod nvml;
mod paths;
mod policy;
mod replace_file;
mod run;
mod service;
mod size;
mod stats;
mod status;
mod swap;

#[cfg(test)]
mod fake_root;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "greenboost",
    version,
    about = "GreenBoost: CUDA allocations that do not fit in VRAM, backed by pinned system RAM",
    after_help = paths::tool_variables_help()
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tiers (T1 VRAM, T2 pinned RAM, T3 swappable RAM and swap) per GPU and per process, and memory pressure.
    Status(status::StatusArgs),
    /// Run a program under the shim: greenboost run [POLICY] -- ollama serve
    Run {
        #[command(flatten)]
        policy: policy::Policy,
        /// Do not print warnings before starting the program.
        #[arg(short, long)]
        quiet: bool,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Check everything GreenBoost needs on this machine and say how to fix what is missing.
    Doctor {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Allocate past VRAM under the shim, run a GPU kernel over all of it, verify it and show the tier split.
    Demo(demo::DemoArgs),
    /// A swap file for T3 (T3 needs swap, ideally on NVMe): add, remove, status.
    Swap(swap::SwapArgs),
    /// A systemd service under GreenBoost (a drop-in for it alone): enable, disable.
    Service(service::ServiceArgs),
    /// The GPU side of `demo`, run as a child under LD_PRELOAD.
    #[command(hide = true)]
    DemoWorker(demo::WorkerArgs),
}

fn main() -> ExitCode {
    // `greenboost status | head` must end quietly, as other command-line tools do.
    // SAFETY: restoring the default SIGPIPE disposition before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Status(args) => status::status(&args),
        Command::Run { policy, quiet, command } => run::run(&policy, &command, quiet).map(|()| ExitCode::SUCCESS),
        Command::Doctor { json } => Ok(doctor::doctor(json)),
        Command::Demo(args) => demo::demo(&args),
        Command::Swap(args) => swap::swap(&args),
        Command::Service(args) => service::service(&args),
        Command::DemoWorker(args) => demo::worker(&args),
    };
    result.unwrap_or_else(|message| {
        eprintln!("greenboost: {message}");
        ExitCode::FAILURE
    })
}
