//! `greenboost swap add|remove|status`: a swap file for T3. T3 buffers are swappable
//! RAM, so without swap they cannot be allocated at all, and with swap on a slow disk
//! the pages the kernel writes out come back slowly: these commands make (and undo) a
//! swap file, ideally on an NVMe filesystem, and say what the swap areas are on.
//!
//! `add` records every file it creates (`record`) before creating it; `remove` deletes
//! only recorded files, and scripts/uninstall.sh removes whatever is still recorded.
//! The swap itself is util-linux's: `mkswap`, `swapon` and `swapoff` run as commands,
//! their messages passed through.

mod add;
pub mod backing;
pub mod proc_swaps;
pub mod record;
mod remove;
mod show;
mod swapfile;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Args, Subcommand};

use crate::paths::SystemPaths;
use crate::size::{format_bytes, parse_size};
use backing::Backing;
use proc_swaps::SwapArea;

#[derive(Args)]
pub struct SwapArgs {
    #[command(subcommand)]
    command: SwapCommand,
}

#[derive(Subcommand)]
enum SwapCommand {
    /// Create a swap file for T3 (fallocate, chmod 600, mkswap, swapon), or enable again
    /// one this command created before (after a reboot: it is not in /etc/fstab). Root.
    Add(add::AddArgs),
    /// swapoff and delete a swap file `swap add` created (never any other file). Root.
    Remove {
        /// The swap file [default: /var/lib/greenboost/t3.swap].
        #[arg(long, value_name = "PATH")]
        path: Option<PathBuf>,
    },
    /// The active swap areas, the disk each is on (NVMe or not), and the files `swap add` created.
    Status,
}

pub fn swap(args: &SwapArgs) -> Result<ExitCode, String> {
    let paths = SystemPaths::from_env();
    match &args.command {
        SwapCommand::Add(add) => add::add(&paths, add),
        SwapCommand::Remove { path } => remove::remove(&paths, path.as_deref()),
        SwapCommand::Status => show::status(&paths),
    }
}

/// Where a swap file goes by default: beside the record of it.
fn default_path(paths: &SystemPaths) -> PathBuf {
    paths.state.join("t3.swap")
}

/// The path as the kernel will show it in /proc/swaps (absolute, its directory
/// resolved), so it compares equal to the record and to /proc/swaps.
fn resolve_path(paths: &SystemPaths, path: Option<&Path>) -> Result<PathBuf, String> {
    let given = path.map_or_else(|| default_path(paths), Path::to_owned);
    let text = given.to_string_lossy();
    if text.contains('\n') || text.ends_with('/') || given.file_name().is_none() {
        return Err(format!("'{text}' is not a file path"));
    }
    let absolute = std::path::absolute(&given).map_err(|e| format!("'{text}': {e}"))?;
    let (Some(dir), Some(name)) = (absolute.parent(), absolute.file_name()) else {
        return Err(format!("'{text}' is not a file path"));
    };
    if std::path::absolute(&paths.state).is_ok_and(|state| dir == state) && !dir.exists() {
        // The default directory is made when the file is: nothing to resolve yet.
        return Ok(absolute);
    }
    let dir = dir.canonicalize().map_err(|e| format!("{}: {e}: make the directory first", dir.display()))?;
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    Ok(dir.join(name))
}

/// Swap is the kernel's to change: say so before trying, rather than pass on EPERM.
fn require_root(what: &str) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let command: Vec<String> = std::env::args().skip(1).collect();
    Err(format!("{what} needs root (EPERM, operation not permitted): run `sudo greenboost {}`", command.join(" ")))
}

/// Runs a util-linux command with its output passed through.
fn run_util(program: &str, args: &[&str]) -> Result<(), String> {
    let status = Command::new(program)
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {program}: {e} (it is part of util-linux)"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{program} {}` failed ({status})", args.join(" ")))
    }
}

/// The active area for `path`, if it is one.
fn active_area<'a>(areas: &'a [SwapArea], path: &Path) -> Option<&'a SwapArea> {
    areas.iter().find(|area| Path::new(&area.path) == path)
}

/// `/dev/nvme0n1p3: partition, 16.00 GiB, 0 B used, priority -2, NVMe (nvme0n1), not rotational`
pub fn describe_area(area: &SwapArea, backing: &Backing) -> String {
    format!(
        "{}: {}, {}, {} used, priority {}, {}",
        area.path,
        area.area_type.label(),
        format_bytes(area.size),
        format_bytes(area.used),
        area.priority,
        backing.describe()
    )
}

/// The sentence for a machine without swap (doctor, `swap status`).
pub const NO_SWAP: &str = "no swap: T3 buffers cannot be allocated (T3 needs swap)";

/// The command that fixes it.
pub const ADD_HINT: &str =
    "sudo greenboost swap add --size 16G --path /MOUNT/ON/NVME/t3.swap (a swap file on an NVMe filesystem)";

/// For `--size`: a size as `parse_size` reads it, not zero.
fn parse_swap_size(text: &str) -> Result<u64, String> {
    match parse_size(text)? {
        0 => Err(format!("'{text}': a swap file needs a size above zero")),
        size => Ok(size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn paths_resolve_to_what_proc_swaps_will_show() {
        let root = FakeRoot::new();
        let paths = &root.paths;
        assert_eq!(resolve_path(paths, None).unwrap(), paths.state.join("t3.swap"), "default, directory not made yet");
        std::fs::create_dir_all(root.path("nvme/dir")).unwrap();
        let through_dots = root.path("nvme/dir/../dir/t3.swap");
        assert_eq!(resolve_path(paths, Some(&through_dots)).unwrap(), root.path("nvme/dir/t3.swap"));
        assert!(resolve_path(paths, Some(&root.path("missing/t3.swap"))).unwrap_err().contains("make the directory"));
        assert!(resolve_path(paths, Some(Path::new("/tmp/a\nb"))).unwrap_err().contains("not a file path"));
        assert!(resolve_path(paths, Some(Path::new("/tmp/dir/"))).unwrap_err().contains("not a file path"));
        assert!(resolve_path(paths, Some(Path::new("/"))).unwrap_err().contains("not a file path"));
    }

    #[test]
    fn sizes_are_the_usual_sizes_and_not_zero() {
        assert_eq!(parse_swap_size("16G"), Ok(16 << 30));
        assert_eq!(parse_swap_size("1.5G"), Ok(3 << 29));
        assert!(parse_swap_size("0").unwrap_err().contains("above zero"));
        assert!(parse_swap_size("16X").unwrap_err().contains("is not a size"));
    }
}
