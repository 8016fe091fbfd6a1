//! `greenboost run -- CMD...`: runs a program under the shim with a policy, after
//! checking what would make it silently fall short (no module, no access, memlock).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use greenboost_policy::BackendChoice;

use crate::device::{explain_open_error, Device};
use crate::paths::SystemPaths;
use crate::policy::Policy;
use crate::size::format_bytes;

pub const SHIM_NAME: &str = "libgreenboost_cuda.so";

/// Where an installed or freshly built shim lives, relative to this executable first
/// (so a DESTDIR or /opt install finds its own copy), then the system prefixes.
fn shim_candidates() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)) {
        candidates.push(dir.join("../lib").join(SHIM_NAME)); // PREFIX/bin -> PREFIX/lib
        candidates.push(dir.join(SHIM_NAME)); // target/release
        candidates.push(dir.join("../release").join(SHIM_NAME)); // target/debug -> the release shim
    }
    for prefix in ["/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu"] {
        candidates.push(Path::new(prefix).join(SHIM_NAME));
    }
    candidates
}

/// The shim to preload: `explicit`, `GREENBOOST_SHIM`, or the first candidate that exists.
pub fn locate_shim(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let from_env = std::env::var_os("GREENBOOST_SHIM").map(PathBuf::from);
    if let Some(path) = explicit.map(Path::to_path_buf).or(from_env) {
        return if path.is_file() {
            Ok(path.canonicalize().unwrap_or(path))
        } else {
            Err(format!(
                "the shim {} does not exist: build it with `make shim` or install it with `sudo make install`",
                path.display()
            ))
        };
    }
    let candidates = shim_candidates();
    candidates
        .iter()
        .find(|p| p.is_file())
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .ok_or_else(|| {
            let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
            format!(
                "{SHIM_NAME} is not installed (looked in {}): run `sudo make install` in the GreenBoost source tree, or pass --shim PATH",
                looked.join(", ")
            )
        })
}

/// `LD_PRELOAD` with the shim first and anything already preloaded kept after it.
pub fn preload_with(shim: &Path, existing: Option<OsString>) -> OsString {
    let mut value = OsString::from(shim);
    if let Some(existing) = existing {
        // A second copy of the shim (an older install) would hook every call twice.
        for entry in existing.to_string_lossy().split([' ', ':']).filter(|e| !e.is_empty()) {
            if !entry.ends_with(SHIM_NAME) {
                value.push(":");
                value.push(entry);
            }
        }
    }
    value
}

/// Problems the program would run into, as warnings (or an error when the policy
/// cannot work at all). Raises the soft memlock limit to the hard one on the way.
pub fn preflight(policy: &Policy, paths: &SystemPaths) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    if let Err(e) = Device::open(&paths.device) {
        let why = explain_open_error(&paths.device, &e);
        if policy.backend() == Some(BackendChoice::Kmod) {
            return Err(format!("--backend kmod needs the module, but {why}"));
        }
        if policy.backend() != Some(BackendChoice::Userspace) {
            warnings.push(why);
        }
    }
    if let Some(warning) = raise_memlock() {
        warnings.push(warning);
    }
    Ok(warnings)
}

/// GreenBoost's T2 memory is pinned by the module or by the driver's registration,
/// which RLIMIT_MEMLOCK does not limit; but what serving stacks lock themselves (NCCL,
/// GPUDirect RDMA, io_uring buffers, mlock) does. Lift the soft limit to the hard one
/// and warn when even that is small.
fn raise_memlock() -> Option<String> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: `raised` is a valid rlimit; raising the soft limit up to the hard one
        // is always permitted.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) } == 0 {
            limit = raised;
        }
    }
    (limit.rlim_cur != libc::RLIM_INFINITY && limit.rlim_cur < MEMLOCK_ENOUGH).then(|| memlock_advice(limit.rlim_cur))
}

/// Below this, libraries that lock host memory next to GreenBoost fail.
pub const MEMLOCK_ENOUGH: u64 = 64 << 20;

pub fn memlock_advice(limit: u64) -> String {
    format!(
        "the locked-memory limit (ulimit -l) is {}. GreenBoost's T2 memory does not count against it, but what NCCL, GPUDirect RDMA or io_uring lock next to it does, and they fail at that limit. The installer lifts it for the greenboost group (/etc/security/limits.d/greenboost.conf): join the group and log in again; for a systemd service set LimitMEMLOCK=infinity",
        format_bytes(limit)
    )
}

pub fn run(policy: &Policy, command: &[OsString], quiet: bool) -> Result<(), String> {
    let paths = SystemPaths::from_env();
    let shim = locate_shim(policy.shim.as_deref())?;
    for warning in preflight(policy, &paths)? {
        if !quiet {
            eprintln!("greenboost: warning: {warning}");
        }
    }
    let (program, args) = command
        .split_first()
        .ok_or("nothing to run: write the command after `--`, e.g. `greenboost run -- ollama serve`")?;
    let mut child = Command::new(program);
    child.args(args);
    child.env("LD_PRELOAD", preload_with(&shim, std::env::var_os("LD_PRELOAD")));
    for (name, value) in policy.environment() {
        child.env(name, value);
    }
    let error = child.exec();
    Err(match error.kind() {
        std::io::ErrorKind::NotFound => {
            format!("cannot run '{}': no such program (check the name and PATH)", program.to_string_lossy())
        }
        std::io::ErrorKind::PermissionDenied => {
            format!("cannot run '{}': permission denied (is it executable?)", program.to_string_lossy())
        }
        _ => format!("cannot run '{}': {error}", program.to_string_lossy()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_puts_the_shim_first_once() {
        let shim = Path::new("/usr/local/lib/libgreenboost_cuda.so");
        assert_eq!(preload_with(shim, None), OsString::from("/usr/local/lib/libgreenboost_cuda.so"));
        assert_eq!(
            preload_with(shim, Some("libfoo.so /old/libgreenboost_cuda.so:libbar.so".into())),
            OsString::from("/usr/local/lib/libgreenboost_cuda.so:libfoo.so:libbar.so")
        );
    }
}
