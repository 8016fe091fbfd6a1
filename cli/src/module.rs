//! The module as a user meets it: loaded, installed but not loaded, not installed, or a
//! kernel that cannot load modules at all. `status`, `run` and `doctor` each say what to
//! do from this one answer, so none of them advises `modprobe` for a module that does
//! not exist.

use std::io;
use std::path::PathBuf;

use crate::paths::SystemPaths;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleState {
    /// `/sys/module/greenboost` exists.
    Loaded,
    /// A `greenboost.ko` for the running kernel, at this path.
    Installed(PathBuf),
    /// None for the running kernel (its release, when known).
    NotInstalled(Option<String>),
    /// No `/proc/modules`: a kernel built without CONFIG_MODULES loads no module.
    NoModuleSupport,
}

/// Where scripts/install.sh and DKMS put the module, under `/lib/modules/RELEASE`.
const INSTALL_DIRS: [&str; 3] = ["updates/dkms", "updates", "extra"];
const FILE_NAMES: [&str; 3] = ["greenboost.ko", "greenboost.ko.xz", "greenboost.ko.zst"];

impl ModuleState {
    pub fn of(paths: &SystemPaths) -> ModuleState {
        if paths.module_dir().is_dir() {
            return ModuleState::Loaded;
        }
        if !paths.proc_path("modules").exists() {
            return ModuleState::NoModuleSupport;
        }
        let release = paths.kernel_release();
        let installed = release.as_deref().and_then(|release| {
            let dir = paths.modules.join(release);
            INSTALL_DIRS
                .iter()
                .flat_map(|sub| FILE_NAMES.iter().map(|name| dir.join(sub).join(name)).collect::<Vec<_>>())
                .find(|path| path.is_file())
        });
        installed.map_or(ModuleState::NotInstalled(release), ModuleState::Installed)
    }

    /// The JSON word for the state.
    pub fn name(&self) -> &'static str {
        match self {
            ModuleState::Loaded => "loaded",
            ModuleState::Installed(_) => "not_loaded",
            ModuleState::NotInstalled(_) => "not_installed",
            ModuleState::NoModuleSupport => "no_module_support",
        }
    }

    /// Why the module is not there and what to do, as a clause (None when loaded).
    pub fn why_absent(&self) -> Option<String> {
        match self {
            ModuleState::Loaded => None,
            ModuleState::Installed(path) => Some(format!(
                "the greenboost module is installed ({}) but not loaded: `sudo modprobe greenboost` (as root: `modprobe greenboost`); `greenboost doctor` says why it may not load",
                path.display()
            )),
            ModuleState::NotInstalled(release) => Some(format!(
                "the greenboost module is not installed{}: see `greenboost doctor`",
                release.as_ref().map_or(String::new(), |release| format!(" for kernel {release}"))
            )),
            ModuleState::NoModuleSupport => Some(NO_MODULE_SUPPORT.to_owned()),
        }
    }
}

/// The sentence for a kernel without loadable modules (status, run, doctor).
pub const NO_MODULE_SUPPORT: &str =
    "this kernel cannot load modules (no /proc/modules: it was built without CONFIG_MODULES), so greenboost.ko cannot run on it";

/// What the shim does meanwhile, and where its figures are.
pub const USERSPACE_MEANWHILE: &str = "the shim uses its userspace backend meanwhile";

/// Why `paths.device` could not be opened, as a sentence with the fix.
pub fn explain_open_error(paths: &SystemPaths, error: &io::Error) -> String {
    let path = &paths.device;
    match error.raw_os_error() {
        Some(libc::ENOENT) => match ModuleState::of(paths).why_absent() {
            Some(why) => format!("{} does not exist: {why}; {USERSPACE_MEANWHILE}", path.display()),
            None => format!(
                "{} does not exist although the module is loaded: `sudo udevadm trigger` makes it (the udev rule of `sudo make install` names it)",
                path.display()
            ),
        },
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "{} exists but you may not open it: add yourself to the greenboost group (`sudo usermod -aG greenboost $USER`) and log in again",
            path.display()
        ),
        _ => format!("cannot open {}: {error}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn each_state_says_what_to_do() {
        let root = FakeRoot::new();
        let paths = &root.paths;
        assert_eq!(ModuleState::of(paths), ModuleState::NoModuleSupport);
        assert!(ModuleState::of(paths).why_absent().unwrap().contains("cannot load modules"));

        root.write("proc/modules", "");
        root.write("proc/sys/kernel/osrelease", "6.1.0-test\n");
        let state = ModuleState::of(paths);
        assert_eq!(state, ModuleState::NotInstalled(Some("6.1.0-test".into())));
        let why = state.why_absent().unwrap();
        assert!(why.contains("not installed for kernel 6.1.0-test: see `greenboost doctor`"), "{why}");
        assert!(!why.contains("modprobe"), "no module to load: {why}");

        let ko = root.write("lib/modules/6.1.0-test/updates/dkms/greenboost.ko.xz", "");
        assert_eq!(ModuleState::of(paths), ModuleState::Installed(ko));
        assert!(ModuleState::of(paths).why_absent().unwrap().contains("sudo modprobe greenboost"));

        root.write("sys/module/greenboost/version", "0.1.0");
        assert_eq!((ModuleState::of(paths), ModuleState::Loaded.why_absent()), (ModuleState::Loaded, None));
    }
}
