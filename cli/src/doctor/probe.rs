//! Small probes of the machine the checks share: files, programs, packages.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A file's text, trimmed.
pub(super) fn read(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

pub(super) fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file()))
}

/// A program's standard output, trimmed, when it ran and succeeded.
pub(super) fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn is_debian_like() -> bool {
    Path::new("/etc/debian_version").exists()
}

pub(super) fn package_version(package: &str) -> Option<String> {
    command_output("dpkg-query", &["-W", "-f=${Status} ${Version}", package])
        .and_then(|s| s.strip_prefix("install ok installed ").map(str::to_owned))
}

/// How to install Debian packages (space-separated), or the generic wording elsewhere.
/// A package the package sources do not know (a custom or cloud kernel's headers) gets
/// the way around it instead of a command that would fail.
pub(super) fn install_hint(debian_packages: &str, what: &str) -> String {
    if !is_debian_like() {
        return format!("install your distribution's package for {what}");
    }
    let unknown: Vec<&str> = debian_packages
        .split_whitespace()
        .filter(|p| Command::new("apt-cache").args(["show", p]).output().is_ok_and(|o| !o.status.success()))
        .collect();
    if unknown.is_empty() {
        format!("sudo apt-get install {debian_packages}")
    } else {
        format!(
            "your package sources have no {} (a custom or cloud kernel?): build against that kernel's build tree with `make kmod KDIR=/path/to/build`, or boot a distribution kernel",
            unknown.join(", ")
        )
    }
}
