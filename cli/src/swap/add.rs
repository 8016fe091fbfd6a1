//! `greenboost swap add`: every check that needs no privilege first (the size, the
//! path, the filesystem), so a mistake is reported before sudo is asked for; then
//! record, create, mkswap, swapon, and on any failure undo what was done.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::backing::{self, Medium};
use super::{proc_swaps, record, require_root, resolve_path, run_util, swapfile};
use crate::paths::SystemPaths;
use crate::size::format_bytes;

#[derive(Args)]
pub struct AddArgs {
    /// Size of the swap file, e.g. 16G (binary units; rounded up to whole pages). Needed
    /// to create one; not to enable again one created before.
    #[arg(long, value_name = "SIZE", value_parser = super::parse_swap_size)]
    pub size: Option<u64>,
    /// Where to create it: a file on an NVMe filesystem [default: /var/lib/greenboost/t3.swap].
    #[arg(long, value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// swapon's priority for it (-1 to 32767; higher is used first), so T3 pages go to it
    /// before a slower swap area.
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = clap::value_parser!(i32).range(-1..=32767))]
    pub priority: Option<i32>,
}

/// What `add` will do once it may.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// The file is already swap: nothing to do.
    AlreadyActive { size: u64 },
    /// A file this command made earlier, not enabled now (after a reboot).
    Enable { size: u64 },
    /// A new file of this many bytes, in a directory `add` makes when it is missing.
    Create { size: u64, make_dir: Option<PathBuf> },
}

/// The nearest directory of `path` that exists (the default directory may not yet).
fn existing_dir(path: &Path) -> Option<&Path> {
    path.ancestors().skip(1).find(|dir| dir.is_dir())
}

/// Checks `args` against the system without changing anything; `path` is resolved.
pub fn plan(paths: &SystemPaths, path: &Path, size: Option<u64>) -> Result<Plan, String> {
    let recorded = record::contains(paths, path).map_err(|e| e.to_string())?;
    if let Ok(meta) = fs::symlink_metadata(path) {
        if !recorded {
            return Err(format!(
                "{} exists and `greenboost swap add` did not create it (it is not in {}): choose another --path; this command never touches a file it did not make",
                path.display(),
                paths.swap_record().display()
            ));
        }
        if !meta.file_type().is_file() {
            return Err(format!("{} is not a regular file any more: remove it yourself", path.display()));
        }
        if size.is_some_and(|size| swapfile::page_rounded(size) != meta.len()) {
            return Err(format!(
                "{} exists with {}: `sudo greenboost swap remove --path {}` first to make it another size",
                path.display(),
                format_bytes(meta.len()),
                path.display()
            ));
        }
        let areas = proc_swaps::read(paths).map_err(|e| format!("cannot read /proc/swaps: {e}"))?;
        return Ok(if super::active_area(&areas, path).is_some() {
            Plan::AlreadyActive { size: meta.len() }
        } else {
            Plan::Enable { size: meta.len() }
        });
    }
    // Not there: a new file (a recorded path without a file is an interrupted add).
    let Some(size) = size else {
        return Err(format!("--size is needed to create {} (e.g. --size 16G)", path.display()));
    };
    let size = swapfile::page_rounded(size);
    if size < swapfile::MIN_SIZE {
        return Err(format!(
            "{} is too small for a swap file (at least {})",
            format_bytes(size),
            format_bytes(swapfile::MIN_SIZE)
        ));
    }
    let dir = existing_dir(path).ok_or_else(|| format!("no directory of {} exists", path.display()))?;
    let fs =
        swapfile::filesystem(dir).map_err(|e| format!("cannot inspect the filesystem of {}: {e}", dir.display()))?;
    let on = |why: String| format!("{} cannot hold the swap file: {why}", dir.display());
    if let Some(why) = swapfile::unsuitable(fs.magic) {
        return Err(on(why.to_owned()));
    }
    if let Some(why) = swapfile::lacks_room(&fs, size) {
        return Err(on(why));
    }
    let parent = path.parent().unwrap_or(dir);
    let make_dir = (!parent.is_dir()).then(|| parent.to_owned());
    Ok(Plan::Create { size, make_dir })
}

/// A warning unless the directory's filesystem is on NVMe.
fn medium_warning(paths: &SystemPaths, dir: &Path) -> Option<String> {
    let backing = backing::of_path(paths, dir);
    match backing.medium {
        Medium::Nvme => None,
        Medium::Unknown => Some(format!(
            "warning: cannot tell whether {} is on NVMe; T3 pages swapped to a slower disk come back slowly",
            dir.display()
        )),
        _ => {
            let rotational = if backing.rotational == Some(true) { ", rotational" } else { "" };
            Some(format!(
                "warning: {} is not on NVMe (disk {}{rotational}): T3 pages swapped there come back slower than from NVMe (--path on an NVMe filesystem avoids that)",
                dir.display(),
                backing.disks.join(", ")
            ))
        }
    }
}

fn swapon(path: &Path, priority: Option<i32>) -> Result<(), String> {
    let path = path.to_string_lossy();
    match priority {
        Some(p) => run_util("swapon", &["--priority", &p.to_string(), &path]),
        None => run_util("swapon", &[&path]),
    }
}

/// Record, create, mkswap, swapon; whatever fails undoes the steps before it.
fn create(
    paths: &SystemPaths,
    path: &Path,
    size: u64,
    make_dir: Option<&Path>,
    priority: Option<i32>,
) -> Result<&'static str, String> {
    if let Some(dir) = make_dir {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    record::add(paths, path)
        .map_err(|e| format!("cannot record {} in {}: {e}", path.display(), paths.swap_record().display()))?;
    let undo = |why: String| {
        let _ = fs::remove_file(path);
        let _ = record::remove(paths, path);
        format!("{why}; removed {} again", path.display())
    };
    let allocation =
        swapfile::create(path, size).map_err(|e| undo(format!("cannot create {}: {e}", path.display())))?;
    run_util("mkswap", &[&path.to_string_lossy()]).map_err(undo)?;
    swapon(path, priority).map_err(undo)?;
    Ok(match allocation {
        swapfile::Allocation::Fallocate => "allocated with fallocate",
        swapfile::Allocation::Zeros => "written with zeros: the filesystem has no fallocate",
    })
}

pub fn add(paths: &SystemPaths, args: &AddArgs) -> Result<ExitCode, String> {
    let path = resolve_path(paths, args.path.as_deref())?;
    let plan = plan(paths, &path, args.size)?;
    let shown = path.display();
    let again = if args.path.is_some() { format!(" --path {shown}") } else { String::new() };
    match plan {
        Plan::AlreadyActive { size } => {
            println!("{shown} ({}) is already enabled as swap", format_bytes(size));
        }
        Plan::Enable { size } => {
            require_root("enabling swap")?;
            swapon(&path, args.priority)?;
            println!("enabled {shown} ({}) again with swapon", format_bytes(size));
        }
        Plan::Create { size, make_dir } => {
            require_root("creating and enabling swap")?;
            if let Some(warning) = existing_dir(&path).and_then(|dir| medium_warning(paths, dir)) {
                eprintln!("greenboost: {warning}");
            }
            let how = create(paths, &path, size, make_dir.as_deref(), args.priority)?;
            println!(
                "created {shown} ({}, {how}, mode 0600), ran mkswap and swapon: T3 can use it now",
                format_bytes(size)
            );
            println!("it is not enabled at boot: after a reboot run `sudo greenboost swap add{again}` (or add `{shown} none swap sw 0 0` to /etc/fstab)");
            println!("`sudo greenboost swap remove{again}` turns it off and deletes it");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn refuses_a_file_it_did_not_make() {
        let root = FakeRoot::new();
        let path = root.write("data/precious", "keep me");
        let refusal = plan(&root.paths, &path, Some(1 << 30)).unwrap_err();
        assert!(refusal.contains("exists and `greenboost swap add` did not create it"), "{refusal}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "keep me");
    }

    #[test]
    fn a_new_file_needs_a_size_that_fits() {
        let root = FakeRoot::new();
        let path = root.path("t3.swap");
        assert!(plan(&root.paths, &path, None).unwrap_err().contains("--size is needed"));
        assert!(plan(&root.paths, &path, Some(4096)).unwrap_err().contains("too small"));
        let refusal = plan(&root.paths, &path, Some(1 << 60)).unwrap_err();
        assert!(refusal.contains("cannot hold the swap file"), "{refusal}");
        if swapfile::unsuitable(swapfile::filesystem(root.root()).unwrap().magic).is_some() {
            return; // a temporary directory on tmpfs: the refusal is right, the rest untestable here
        }
        let default = root.paths.state.join("t3.swap");
        assert_eq!(
            plan(&root.paths, &default, Some(1 << 20)),
            Ok(Plan::Create { size: 1 << 20, make_dir: Some(root.paths.state.clone()) })
        );
    }

    #[test]
    fn a_recorded_file_is_enabled_again_or_left_as_it_is() {
        let root = FakeRoot::new();
        let path = root.path("t3.swap");
        fs::write(&path, vec![0u8; 8192]).unwrap();
        record::add(&root.paths, &path).unwrap();
        root.write("proc/swaps", "Filename Type Size Used Priority\n");
        assert_eq!(plan(&root.paths, &path, None), Ok(Plan::Enable { size: 8192 }));
        assert!(plan(&root.paths, &path, Some(1 << 30)).unwrap_err().contains("swap remove"), "another size");
        root.write("proc/swaps", &format!("Filename Type Size Used Priority\n{} file 8 0 -2\n", path.display()));
        assert_eq!(plan(&root.paths, &path, None), Ok(Plan::AlreadyActive { size: 8192 }));
    }
}
