//! `greenboost run -- CMD...`: runs a program under the shim with a policy, after
//! checking what would make it silently fall short (no module, no access, memlock).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use greenboost_policy::BackendChoice;

use crate::device::Device;
use crate::environment;
use crate::memlock::{self, Backend};
use crate::module::explain_open_error;
use crate::paths::SystemPaths;
use crate::policy::Policy;

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
    let backend = match Device::open(&paths.device) {
        Ok(_) if policy.backend() == Some(BackendChoice::Userspace) => Backend::Userspace,
        Ok(device) => Backend::Module { t2_cap: device.info().ok().map(|info| info.pool_cap) },
        Err(e) => {
            let why = explain_open_error(paths, &e);
            if policy.backend() == Some(BackendChoice::Kmod) {
                return Err(format!("--backend kmod needs the module, but {why}"));
            }
            if policy.backend() != Some(BackendChoice::Userspace) {
                warnings.push(why);
            }
            Backend::Userspace
        }
    };
    let limit = memlock::raise_soft_to_hard();
    warnings.extend(limit.and_then(|limit| memlock::warning(paths, backend, limit.soft)));
    warnings.extend(environment::warnings(policy, std::env::vars_os()));
    Ok(warnings)
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
