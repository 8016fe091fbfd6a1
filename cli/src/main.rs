//! `greenboost`: see what GreenBoost is doing (`status`), run a program under it
//! (`run`), find out why it is not working (`doctor`), watch it work (`demo`) and give
//! T3 a swap file (`swap`).

mod cuda;
mod demo;
mod device;
mod docs;
mod doctor;
mod environment;
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

use clap::{CommandFactory, Parser, Subcommand};

/// `--version`: the crate's version and the commit it was built from (build.rs).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("GB_BUILD_COMMIT"), ")");

#[derive(Parser)]
#[command(
    name = "greenboost",
    version = VERSION,
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
    /// Shell completions: greenboost completions bash > /usr/share/bash-completion/completions/greenboost
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Manual pages (greenboost.1, one per subcommand, and greenboost.4 for the module), written into DIR.
    Man {
        #[arg(value_name = "DIR")]
        dir: std::path::PathBuf,
    },
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
        Command::Completions { shell } => docs::completions(Cli::command(), shell),
        Command::Man { dir } => docs::man(Cli::command(), &dir),
    };
    result.unwrap_or_else(|message| {
        eprintln!("greenboost: {message}");
        ExitCode::FAILURE
    })
}
