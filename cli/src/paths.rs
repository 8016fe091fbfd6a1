//! Where the CLI looks for the system's state. Tests (and a chroot) point these at a
//! fake tree with environment variables, so `status --json` can be checked without the
//! module loaded.

use std::env;
use std::path::{Path, PathBuf};

/// `GREENBOOST_SYSFS_ROOT` replaces `/sys`, `GREENBOOST_PROC_ROOT` replaces `/proc`,
/// `GREENBOOST_DEVICE` replaces `/dev/greenboost`, `GREENBOOST_STATE_DIR` replaces
/// `/var/lib/greenboost` (where `greenboost swap add` records its swap files),
/// `GREENBOOST_SHM_DIR` replaces `/dev/shm` (where processes under the shim publish
/// their figures).
#[derive(Clone, Debug)]
pub struct SystemPaths {
    pub sys: PathBuf,
    pub proc: PathBuf,
    pub device: PathBuf,
    pub state: PathBuf,
    pub shm: PathBuf,
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
}
