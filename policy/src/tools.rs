//! The `GREENBOOST_*` names that are not settings of the shim but are read by the tools
//! (the CLI, the install scripts, the test suites): the CLI lists them and warns about
//! any other name, and so does the shim at load.

/// The `GREENBOOST_*` variables the tools read that are not settings of the shim
/// (`SETTINGS`), each with what it does: `greenboost --help` lists
/// them, and `greenboost run` warns about any other `GREENBOOST_*` name.
pub const TOOL_VARIABLES: &[(&str, &str)] = &[
    ("GREENBOOST_SYSFS_ROOT", "replaces /sys"),
    ("GREENBOOST_PROC_ROOT", "replaces /proc"),
    ("GREENBOOST_DEVICE", "replaces /dev/greenboost"),
    ("GREENBOOST_STATE_DIR", "replaces /var/lib/greenboost, where `swap add` records its swap files"),
    ("GREENBOOST_SHM_DIR", "replaces /dev/shm, where processes under the shim publish their figures"),
    ("GREENBOOST_MODULES_DIR", "replaces /lib/modules, where an installed module is looked for"),
    ("GREENBOOST_SYSTEMD_DIR", "replaces /etc/systemd/system, where `service enable` writes its drop-ins"),
    ("GREENBOOST_NVML_LIBRARY", "replaces libnvidia-ml.so.1; `none`: no NVML"),
    ("GREENBOOST_CUDA_LIBRARY", "replaces libcuda.so.1 (demo)"),
    ("GREENBOOST_SHIM", "the shim to preload instead of the installed one"),
    // scripts/install.sh and the module build (see their headers).
    ("GREENBOOST_CACHE", "the module build's cache (~/.cache/greenboost)"),
    ("GREENBOOST_SKIP_KMOD", "install: 1 skips the module"),
    ("GREENBOOST_NO_BUILD", "install: 1 installs what target/release holds"),
    ("GREENBOOST_NO_APT", "install: 1 installs no distribution package"),
    ("GREENBOOST_TEST_KMOD", "make install-test: 1 or 0 builds the module or not"),
];
