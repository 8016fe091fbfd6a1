//! Where the CLI looks for the system's state. Tests (and a chroot) point these at a
//! fake tree with environment variables, so `status --json` can be checked without the
//! module loaded.

use std::env;
use std::path::{Path, PathBuf};

use greenboost_policy::TOOL_VARIABLES;

/// Each field is redirected by its variable of `TOOL_VARIABLES`.
#[derive(Clone, Debug)]
pub struct SystemPaths {
    pub sys: PathBuf,
    pub proc: PathBuf,
    pub device: PathBuf,
    pub state: PathBuf,
    pub shm: PathBuf,
    /// `/lib/modules`: where an installed module is looked for.
    pub modules: PathBuf,
    /// `/etc/systemd/system`: where `service enable` writes its drop-ins.
    pub systemd: PathBuf,
}

/// `TOOL_VARIABLES` as `greenboost --help` shows them.
pub fn tool_variables_help() -> String {
    let lines: Vec<String> = TOOL_VARIABLES.iter().map(|(name, what)| format!("  {name}: {what}")).collect();
    format!("Variables of the tools (the shim's settings are in `greenboost run --help`):\n{}", lines.join("\n"))
}

/// The directory scripts/uninstall.sh reads the swap-file record from.
pub const STATE_DIR: &str = "/var/lib/greenboost";

impl SystemPaths {
    pub fn from_env() -> Self {
        let var = |name: &str, default: &str| PathBuf::from(env::var_os(name).unwrap_or_else(|| default.into()));
        SystemPaths {
            sys: var("GREENBOOST_SYSFS_ROOT", "/sys"),
            proc: var("GREENBOOST_PROC_ROOT", "/proc"),
            device: var("GREENBOOST_DEVICE", greenboost_abi::GB_DEVICE_PATH),
            state: var("GREENBOOST_STATE_DIR", STATE_DIR),
            shm: var("GREENBOOST_SHM_DIR", greenboost_policy::PUBLISHED_DIR),
            modules: var("GREENBOOST_MODULES_DIR", "/lib/modules"),
            systemd: var("GREENBOOST_SYSTEMD_DIR", "/etc/systemd/system"),
        }
    }

    /// The module's statistics file (`/sys/kernel/greenboost/stats`).
    pub fn stats_file(&self) -> PathBuf {
        let relative = greenboost_abi::GB_SYSFS_STATS.trim_start_matches("/sys/");
        self.sys.join(relative)
    }

    /// `/sys/module/greenboost`: present exactly while the module is loaded.
    pub fn module_dir(&self) -> PathBuf {
        self.sys.join("module/greenboost")
    }

    pub fn module_parameter(&self, name: &str) -> PathBuf {
        self.module_dir().join("parameters").join(name)
    }

    pub fn sys_path(&self, relative: &str) -> PathBuf {
        self.sys.join(relative)
    }

    /// The swap files `greenboost swap add` created, one path a line (scripts/uninstall.sh
    /// removes them).
    pub fn swap_record(&self) -> PathBuf {
        self.state.join("swapfiles")
    }

    pub fn proc_path(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.proc.join(relative)
    }

    /// The running kernel's release (`/proc/sys/kernel/osrelease`).
    pub fn kernel_release(&self) -> Option<String> {
        let release = std::fs::read_to_string(self.proc_path("sys/kernel/osrelease")).ok()?;
        Some(release.trim().to_owned()).filter(|release| !release.is_empty())
    }
}
