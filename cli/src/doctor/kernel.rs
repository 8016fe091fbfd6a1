//! Can the module be built for the running kernel: its configuration, headers, source
//! (for the self-contained build), rustc with its library source, bindgen, clang.

use std::fs;
use std::path::{Path, PathBuf};

use super::probe::{command_output, install_hint, on_path, package_version};
use super::{Findings, Level};
use crate::module::{ModuleState, NO_MODULE_SUPPORT, USERSPACE_MEANWHILE};
use crate::paths::SystemPaths;

/// `CONFIG_NAME` of the running kernel's configuration (`y`, `m`, a string, or None).
struct KernelConfig(String);

impl KernelConfig {
    fn load(release: &str, paths: &SystemPaths) -> Option<(KernelConfig, String)> {
        for candidate in [format!("/boot/config-{release}"), format!("/lib/modules/{release}/build/.config")] {
            if let Ok(text) = fs::read_to_string(&candidate) {
                return Some((KernelConfig(text), candidate));
            }
        }
        let gz = paths.proc_path("config.gz");
        let text = command_output("zcat", &[gz.to_str()?])?;
        Some((KernelConfig(text), gz.display().to_string()))
    }

    fn get(&self, name: &str) -> Option<&str> {
        let prefix = format!("CONFIG_{name}=");
        self.0.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(|v| v.trim_matches('"'))
    }

    fn enabled(&self, name: &str) -> bool {
        matches!(self.get(name), Some("y" | "m"))
    }
}

/// Whether the kernel loads modules at all, its configuration, then (when it was
/// found) the build prerequisites.
pub(super) fn check(findings: &mut Findings, paths: &SystemPaths, release: &str) {
    if ModuleState::of(paths) == ModuleState::NoModuleSupport {
        // Nothing below matters: no build of the module could be loaded.
        findings.add(
            "kernel",
            Level::Fail,
            format!("kernel {release}: {NO_MODULE_SUPPORT}; {USERSPACE_MEANWHILE}"),
            Some("boot a kernel built with CONFIG_MODULES=y (every distribution kernel is) to use the module".into()),
        );
        return;
    }
    let Some((config, source)) = KernelConfig::load(release, paths) else {
        findings.add(
            "kernel",
            Level::Fail,
            format!("kernel {release}: its configuration was not found (/boot/config-{release}, headers, /proc/config.gz), so the module cannot be built for it"),
            Some(install_hint(&format!("linux-headers-{release}"), "this kernel's headers")),
        );
        return;
    };
    let rust = config.get("RUST") == Some("y");
    check_config(findings, &config, &source, release, rust);
    let headers = check_headers(findings, release);
    if rust {
        check_rust_metadata(findings, &headers, release);
    } else {
        check_kernel_source(findings, release);
    }
    check_rustc(findings);
    check_tools(findings);
}

fn check_config(findings: &mut Findings, config: &KernelConfig, source: &str, release: &str, rust: bool) {
    findings.add(
        "kernel",
        Level::Info,
        if rust {
            format!("kernel {release} has Rust support ({source}): the ordinary module build, with the kernel's own rustc and Rust metadata")
        } else {
            format!("kernel {release} has no Rust support ({source}), like stock distribution kernels: `make kmod` builds a self-contained module from the kernel's source")
        },
        None,
    );
    for (option, why) in [("DMA_SHARED_BUFFER", "DMA-BUF export"), ("EVENTFD", "pressure events")] {
        if !config.enabled(option) {
            findings.add(
                "kernel",
                Level::Fail,
                format!("CONFIG_{option} is off in {release}: the module needs it for {why}"),
                Some("use a kernel with it enabled (every distribution kernel has it)".into()),
            );
        }
    }
    if config.get("MODULE_SIG_FORCE") == Some("y") {
        findings.add(
            "kernel",
            Level::Warn,
            "this kernel loads only signed modules (CONFIG_MODULE_SIG_FORCE)",
            Some("sign greenboost.ko with your key (README, \"Secure Boot\")".into()),
        );
    }
}

/// The running kernel's build tree (`/lib/modules/RELEASE/build`), present or not.
fn check_headers(findings: &mut Findings, release: &str) -> PathBuf {
    let headers = PathBuf::from(format!("/lib/modules/{release}/build"));
    if headers.join(".config").is_file() {
        findings.add("build", Level::Ok, format!("headers for {release} are installed ({})", headers.display()), None);
    } else {
        findings.add(
            "build",
            Level::Fail,
            format!("no headers for {release} ({} missing): the module cannot be built for the running kernel; the shim's userspace backend works meanwhile", headers.display()),
            Some(install_hint(&format!("linux-headers-{release}"), "the running kernel's headers")),
        );
    }
    headers
}

fn check_rust_metadata(findings: &mut Findings, headers: &Path, release: &str) {
    if !headers.join("rust/libkernel.rmeta").is_file() {
        findings.add(
            "build",
            Level::Fail,
            format!("{release} has Rust support but its headers lack the Rust metadata (rust/libkernel.rmeta)"),
            Some(format!("install the package that ships it (Ubuntu: linux-lib-rust-{release}) or build against your kernel tree with `make kmod KDIR=...`")),
        );
    }
}

/// The self-contained build compiles the kernel's Rust from the distribution's source.
fn check_kernel_source(findings: &mut Findings, release: &str) {
    let version = release.split(['-', '+']).next().unwrap_or(release);
    let series: String = version.split('.').take(2).collect::<Vec<_>>().join(".");
    let package = format!("linux-source-{series}");
    let tarball = format!("/usr/src/{package}.tar.xz");
    match (Path::new(&tarball).is_file(), package_version(&package)) {
        (true, Some(v)) if !v.starts_with(&format!("{version}-")) => findings.add(
            "build",
            Level::Fail,
            format!("{package} is version {v}, but the running kernel is {version}: the module must be built from the same source"),
            Some(format!("sudo apt-get install {package} and upgrade the kernel to match (then reboot), or install the {package} of {version}")),
        ),
        (true, _) => findings.add("build", Level::Ok, format!("kernel source {tarball} is present"), None),
        (false, _) => findings.add(
            "build",
            Level::Fail,
            format!("kernel source {tarball} is missing: the self-contained build needs the distribution's source of {version}"),
            Some(install_hint(&package, &format!("the {version} kernel source"))),
        ),
    }
}

fn check_rustc(findings: &mut Findings) {
    let rustc = std::env::var("KRUSTC").unwrap_or_else(|_| "/usr/bin/rustc".into());
    let Some(version) = command_output(&rustc, &["--version"]) else {
        findings.add(
            "build",
            Level::Fail,
            format!("no Rust compiler at {rustc}: the module is Rust"),
            Some(install_hint("rustc-web rust-web-src", "rustc with its source")),
        );
        return;
    };
    let sysroot = command_output(&rustc, &["--print", "sysroot"]).unwrap_or_default();
    let core = Path::new(&sysroot).join("lib/rustlib/src/rust/library/core/src/lib.rs");
    if core.is_file() {
        findings.add("build", Level::Ok, format!("{rustc}: {version}, with the core library source"), None);
    } else {
        findings.add(
            "build",
            Level::Fail,
            format!(
                "{rustc} ({version}) has no core library source ({} missing): the kernel's Rust is built from it",
                core.display()
            ),
            Some(install_hint("rust-web-src", "the Rust standard library source")),
        );
    }
}

/// bindgen (the build installs it into its cache when missing), clang, make, gcc.
fn check_tools(findings: &mut Findings) {
    let cache = std::env::var_os("GREENBOOST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".cache/greenboost"));
    let cached_bindgen = cache.join("bindgen-0.73.2/bin/bindgen");
    if cached_bindgen.is_file() || on_path("bindgen").is_some() {
        findings.add("build", Level::Ok, "bindgen is available", None);
    } else {
        findings.add(
            "build",
            Level::Info,
            "bindgen is not installed yet: the module build installs bindgen-cli 0.73.2 with cargo into its cache",
            Some("make sure cargo is on PATH when you build (https://rustup.rs)".into()),
        );
    }
    for (tool, package) in [("clang", "clang"), ("make", "make"), ("gcc", "gcc")] {
        if on_path(tool).is_none() {
            findings.add("build", Level::Fail, format!("'{tool}' is not installed"), Some(install_hint(package, tool)));
        }
    }
}
