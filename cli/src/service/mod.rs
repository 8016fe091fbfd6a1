//! `greenboost service enable|disable UNIT`: any systemd service under GreenBoost
//! through a drop-in, `/etc/systemd/system/UNIT.d/greenboost.conf` (`dropin.rs`), so a
//! service installed after GreenBoost needs no reinstall, and nothing but that service
//! loads the shim. An LD_PRELOAD the unit sets is kept after the shim (read with
//! `systemctl show`, `unit.rs`); one an EnvironmentFile= sets would override the
//! drop-in's, which only a warning can tell.
//!
//! `--root DIR` writes under DIR and asks systemd nothing, as `systemctl --root` does:
//! for staged installs and images (scripts/install.sh with DESTDIR).

mod dropin;
mod unit;

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Args, Subcommand};

use crate::environment;
use crate::paths::SystemPaths;
use crate::policy::Policy;
use crate::replace_file;
use crate::run::{locate_shim, preload_with};

#[derive(Args)]
pub struct ServiceArgs {
    #[command(subcommand)]
    command: ServiceCommand,
}

#[derive(Subcommand)]
enum ServiceCommand {
    /// Run a systemd service under GreenBoost: write /etc/systemd/system/UNIT.d/greenboost.conf
    /// (the shim preloaded before what the unit preloads, POLICY as environment, the
    /// greenboost group, no memlock limit), then reload systemd. Root.
    Enable {
        /// The service (`ollama` is `ollama.service`).
        #[arg(value_parser = unit::parse_name)]
        unit: String,
        #[command(flatten)]
        policy: Policy,
        #[command(flatten)]
        target: Target,
    },
    /// Remove the drop-in `enable` wrote, then reload systemd. Root.
    Disable {
        /// The service (`ollama` is `ollama.service`).
        #[arg(value_parser = unit::parse_name)]
        unit: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Args)]
struct Target {
    /// Write under DIR (a staged install or an image) and ask systemd nothing, as
    /// `systemctl --root`: the unit's own LD_PRELOAD is not read and nothing is reloaded.
    /// enable needs --shim, the shim's path on the system under DIR.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

/// The drop-in's file name; systemd reads the `*.conf` files of `UNIT.d`.
const FILE_NAME: &str = "greenboost.conf";

pub fn service(args: &ServiceArgs) -> Result<ExitCode, String> {
    let paths = SystemPaths::from_env();
    match &args.command {
        ServiceCommand::Enable { unit, policy, target } => enable(&paths, unit, policy, target.root.as_deref()),
        ServiceCommand::Disable { unit, target } => disable(&paths, unit, target.root.as_deref()),
    }
}

/// `/etc/systemd/system/UNIT.d`, under `root` when given.
fn dropin_dir(paths: &SystemPaths, unit: &str, root: Option<&Path>) -> PathBuf {
    let dir = paths.systemd.join(format!("{unit}.d"));
    match root {
        Some(root) => root.join(dir.strip_prefix("/").unwrap_or(&dir)),
        None => dir,
    }
}

/// The shim's path as the service will see it, and what systemd says about the unit
/// (nothing under `--root`).
fn shim_and_unit(policy: &Policy, unit: &str, root: Option<&Path>) -> Result<(PathBuf, unit::Shown), String> {
    let Some(root) = root else {
        let shown = unit::show(unit)?;
        if !shown.found {
            return Err(format!(
                "{unit}: no such unit (ENOENT): `systemctl list-unit-files '*.service'` lists the services"
            ));
        }
        return Ok((locate_shim(policy.shim.as_deref())?, shown));
    };
    let shim = policy.shim.clone().ok_or("--root needs --shim PATH: the shim's path on the system under DIR")?;
    let under_root = shim.strip_prefix("/").map(|relative| root.join(relative));
    if !under_root.as_ref().is_ok_and(|path| path.is_file()) {
        return Err(format!(
            "the shim {} is not installed under {} (--shim takes an absolute path)",
            shim.display(),
            root.display()
        ));
    }
    Ok((shim, unit::Shown { found: true, ..unit::Shown::default() }))
}

fn enable(paths: &SystemPaths, unit: &str, policy: &Policy, root: Option<&Path>) -> Result<ExitCode, String> {
    let (shim, shown) = shim_and_unit(policy, unit, root)?;
    let mut warnings = environment::warnings(policy, std::iter::empty());
    for file in &shown.environment_files {
        warnings.extend(environment_file_warning(unit, file, &shim));
    }
    let preload = preload_with(&shim, shown.preload.map(OsString::from));
    let text = dropin::render(unit, &preload.to_string_lossy(), &policy.environment());
    let dir = dropin_dir(paths, unit, root);
    let path = dir.join(FILE_NAME);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&dir)
        .and_then(|()| replace_file::replace(&path, &text, 0o644))
        .map_err(|e| cannot("write", &path, &e))?;
    warnings.iter().for_each(|warning| eprintln!("greenboost: warning: {warning}"));
    println!("wrote {}", path.display());
    if root.is_none() {
        reload(unit);
    }
    Ok(ExitCode::SUCCESS)
}

fn disable(paths: &SystemPaths, unit: &str, root: Option<&Path>) -> Result<ExitCode, String> {
    let dir = dropin_dir(paths, unit, root);
    let path = dir.join(FILE_NAME);
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("{unit} has no GreenBoost drop-in ({}: no such file, ENOENT)", path.display()))
        }
        Err(e) => return Err(cannot("remove", &path, &e)),
    }
    // Only when empty: other drop-ins of the unit stay.
    let _ = fs::remove_dir(&dir);
    println!("removed {}", path.display());
    if root.is_none() {
        reload(unit);
    }
    Ok(ExitCode::SUCCESS)
}

fn cannot(what: &str, path: &Path, error: &io::Error) -> String {
    let root = if error.kind() == io::ErrorKind::PermissionDenied { ": run it as root (sudo)" } else { "" };
    format!("cannot {what} {}: {error}{root}", path.display())
}

/// Systemd reads drop-ins at a reload; the service, at its next start.
fn reload(unit: &str) {
    match Command::new("systemctl").arg("daemon-reload").status() {
        Ok(status) if status.success() => println!("restart it for the change to apply: sudo systemctl restart {unit}"),
        _ => eprintln!(
            "greenboost: warning: `systemctl daemon-reload` failed: run it, then `sudo systemctl restart {unit}`"
        ),
    }
}

/// An EnvironmentFile= is read after Environment= lines, so an LD_PRELOAD it sets
/// replaces the drop-in's.
fn environment_file_warning(unit: &str, file: &Path, shim: &Path) -> Option<String> {
    let shown = file.display();
    match fs::read_to_string(file) {
        Ok(text) if unit::sets_preload(&text) => Some(format!(
            "{shown} (an EnvironmentFile= of {unit}) sets LD_PRELOAD, which replaces the drop-in's: put {} first in it yourself, or the service runs without GreenBoost",
            shim.display()
        )),
        Ok(_) => None,
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => Some(format!(
            "cannot read {shown} (an EnvironmentFile= of {unit}): {e}; an LD_PRELOAD set there would replace the drop-in's"
        )),
    }
}
