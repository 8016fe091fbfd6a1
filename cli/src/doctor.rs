//! `greenboost doctor`: everything GreenBoost needs on this machine, each finding with
//! the command that fixes it.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::device::{explain_open_error, Device};
use crate::json::Json;
use crate::nvml;
use crate::paths::SystemPaths;
use crate::run::{locate_shim, memlock_advice, MEMLOCK_ENOUGH};
use crate::size::format_bytes;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Ok,
    Info,
    Warn,
    Fail,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        }
    }
}

struct Finding {
    area: &'static str,
    level: Level,
    what: String,
    fix: Option<String>,
}

#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, area: &'static str, level: Level, what: impl Into<String>, fix: Option<String>) {
        self.0.push(Finding { area, level, what: what.into(), fix });
    }
}

fn read(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file()))
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn is_debian_like() -> bool {
    Path::new("/etc/debian_version").exists()
}

fn package_version(package: &str) -> Option<String> {
    command_output("dpkg-query", &["-W", "-f=${Status} ${Version}", package])
        .and_then(|s| s.strip_prefix("install ok installed ").map(str::to_owned))
}

/// How to install Debian packages (space-separated), or the generic wording elsewhere.
/// A package the package sources do not know (a custom or cloud kernel's headers) gets
/// the way around it instead of a command that would fail.
fn install_hint(debian_packages: &str, what: &str) -> String {
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

fn check_kernel(findings: &mut Findings, paths: &SystemPaths, release: &str) {
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
    if rust {
        if !headers.join("rust/libkernel.rmeta").is_file() {
            findings.add(
                "build",
                Level::Fail,
                format!("{release} has Rust support but its headers lack the Rust metadata (rust/libkernel.rmeta)"),
                Some(format!("install the package that ships it (Ubuntu: linux-lib-rust-{release}) or build against your kernel tree with `make kmod KDIR=...`")),
            );
        }
    } else {
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

    let rustc = std::env::var("KRUSTC").unwrap_or_else(|_| "/usr/bin/rustc".into());
    match command_output(&rustc, &["--version"]) {
        Some(version) => {
            let sysroot = command_output(&rustc, &["--print", "sysroot"]).unwrap_or_default();
            let core = Path::new(&sysroot).join("lib/rustlib/src/rust/library/core/src/lib.rs");
            if core.is_file() {
                findings.add("build", Level::Ok, format!("{rustc}: {version}, with the core library source"), None);
            } else {
                findings.add(
                    "build",
                    Level::Fail,
                    format!("{rustc} ({version}) has no core library source ({} missing): the kernel's Rust is built from it", core.display()),
                    Some(install_hint("rust-web-src", "the Rust standard library source")),
                );
            }
        }
        None => findings.add(
            "build",
            Level::Fail,
            format!("no Rust compiler at {rustc}: the module is Rust"),
            Some(install_hint("rustc-web rust-web-src", "rustc with its source")),
        ),
    }
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

fn check_module(findings: &mut Findings, paths: &SystemPaths, release: &str) {
    if paths.module_dir().is_dir() {
        let version = read(paths.module_dir().join("version")).map(|v| format!(" {v}")).unwrap_or_default();
        findings.add("module", Level::Ok, format!("greenboost{version} is loaded"), None);
    } else {
        let installed = ["updates/dkms", "updates", "extra"].iter().find_map(|dir| {
            ["greenboost.ko", "greenboost.ko.xz", "greenboost.ko.zst"]
                .iter()
                .map(|f| PathBuf::from(format!("/lib/modules/{release}/{dir}/{f}")))
                .find(|p| p.is_file())
        });
        match installed {
            Some(path) => findings.add(
                "module",
                Level::Fail,
                format!("greenboost is installed ({}) but not loaded", path.display()),
                Some("sudo modprobe greenboost; if it fails, `sudo dmesg | tail` says why (Secure Boot: sign the module)".into()),
            ),
            None => findings.add(
                "module",
                Level::Fail,
                format!("greenboost.ko is not installed for {release}; the shim uses its userspace backend meanwhile"),
                Some("fix the build problems above, then `sudo make install` (in the GreenBoost source tree) builds and installs it".into()),
            ),
        }
    }

    let secure_boot = fs::read(paths.sys_path("firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"))
        .ok()
        .and_then(|bytes| bytes.last().copied());
    if secure_boot == Some(1) {
        findings.add(
            "module",
            Level::Warn,
            "Secure Boot is on: the kernel loads only modules signed by a key it trusts",
            Some("sign greenboost.ko with a Machine Owner Key enrolled with `mokutil --import` (README, \"Secure Boot\"); DKMS signs with /var/lib/dkms/mok.key when that key is enrolled".into()),
        );
    }

    match fs::metadata(&paths.device) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o7777;
            let group = group_name(meta.gid()).unwrap_or_else(|| meta.gid().to_string());
            let what = format!("{} is mode {mode:04o}, group {group}", paths.device.display());
            if mode & 0o007 != 0 {
                findings.add(
                    "device",
                    Level::Warn,
                    format!("{what}: every user may allocate pinned memory"),
                    Some("install the udev rule (sudo make install) so the node is 0660, group greenboost".into()),
                );
            } else if group != "greenboost" {
                findings.add(
                    "device",
                    Level::Warn,
                    format!("{what}: only root can use it"),
                    Some("install the udev rule (sudo make install), then `sudo udevadm trigger`".into()),
                );
            } else {
                findings.add("device", Level::Ok, what, None);
            }
            match Device::open(&paths.device) {
                Ok(device) => match device.info() {
                    Ok(info) if info.abi_version == greenboost_abi::GB_ABI_VERSION => findings.add(
                        "device",
                        Level::Ok,
                        format!("you can open it; ABI {}, T2 cap {}, reserve {}", info.abi_version, format_bytes(info.pool_cap), format_bytes(info.reserve)),
                        None,
                    ),
                    Ok(info) => findings.add(
                        "device",
                        Level::Fail,
                        format!("the loaded module speaks ABI {}, this CLI ABI {}", info.abi_version, greenboost_abi::GB_ABI_VERSION),
                        Some("reinstall from one source tree (sudo make install), then `sudo rmmod greenboost && sudo modprobe greenboost`".into()),
                    ),
                    Err(e) => findings.add("device", Level::Fail, format!("GB_IOC_INFO failed: {e}"), None),
                },
                Err(e) => findings.add("device", Level::Fail, explain_open_error(&paths.device, &e), None),
            }
        }
        Err(_) => findings.add(
            "device",
            Level::Info,
            format!("{} does not exist (module not loaded)", paths.device.display()),
            None,
        ),
    }

    check_group(findings);
}

fn group_name(gid: u32) -> Option<String> {
    let text = fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 3 && fields[2].parse() == Ok(gid)).then(|| fields[0].to_owned())
    })
}

fn check_group(findings: &mut Findings) {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        return;
    }
    let Some(entry) = fs::read_to_string("/etc/group")
        .ok()
        .and_then(|t| t.lines().find(|l| l.starts_with("greenboost:")).map(str::to_owned))
    else {
        findings.add(
            "group",
            Level::Fail,
            "the greenboost group does not exist",
            Some("sudo make install (it creates the group)".into()),
        );
        return;
    };
    let gid: u32 = entry.split(':').nth(2).and_then(|g| g.parse().ok()).unwrap_or(u32::MAX);
    let mut groups = vec![0 as libc::gid_t; 256];
    // SAFETY: `groups` has room for the 256 entries we announce.
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    // SAFETY: getegid has no preconditions.
    let in_session = unsafe { libc::getegid() } == gid || groups.iter().take(n.max(0) as usize).any(|&g| g == gid);
    let user = std::env::var("USER").unwrap_or_default();
    let listed = entry.rsplit(':').next().unwrap_or("").split(',').any(|m| !user.is_empty() && m == user);
    match (in_session, listed) {
        (true, _) => findings.add("group", Level::Ok, "you are in the greenboost group", None),
        (false, true) => findings.add(
            "group",
            Level::Warn,
            "you were added to the greenboost group, but this session started before that",
            Some("log out and in again (or run `newgrp greenboost`)".into()),
        ),
        (false, false) => findings.add(
            "group",
            Level::Warn,
            "you are not in the greenboost group, so /dev/greenboost is closed to you",
            Some("sudo usermod -aG greenboost $USER, then log in again".into()),
        ),
    }
}

fn check_environment(findings: &mut Findings) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } == 0 {
        let show = |v: libc::rlim_t| {
            if v == libc::RLIM_INFINITY {
                "unlimited".to_owned()
            } else {
                format_bytes(v)
            }
        };
        if limit.rlim_cur == libc::RLIM_INFINITY || limit.rlim_cur >= MEMLOCK_ENOUGH {
            findings.add(
                "memlock",
                Level::Ok,
                format!("locked-memory limit {} (hard {})", show(limit.rlim_cur), show(limit.rlim_max)),
                None,
            );
        } else {
            findings.add("memlock", Level::Warn, memlock_advice(limit.rlim_cur), None);
        }
    }

    match locate_shim(None) {
        Ok(path) => findings.add("shim", Level::Ok, format!("shim: {}", path.display()), None),
        Err(e) => findings.add("shim", Level::Fail, e, None),
    }
    if let Some(text) = read("/etc/ld.so.preload") {
        if text.contains("greenboost") {
            findings.add(
                "shim",
                Level::Fail,
                "/etc/ld.so.preload loads GreenBoost into every process on the system (an earlier implementation's installer did this; it can freeze boots)",
                Some("delete that line from /etc/ld.so.preload; use `greenboost run -- CMD` or the ollama drop-in instead".into()),
            );
        }
    }
}

fn pcie_generation(speed: &str) -> Option<u32> {
    let gts: f64 = speed.split_whitespace().next()?.parse().ok()?;
    [(2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6), (128.0, 7)]
        .iter()
        .find(|(rate, _)| (gts - rate).abs() < 0.01)
        .map(|(_, generation)| *generation)
}

fn check_nvidia(findings: &mut Findings, paths: &SystemPaths) {
    let driver = read(paths.proc_path("driver/nvidia/version"))
        .and_then(|t| t.lines().next().map(str::to_owned))
        .or_else(|| read(paths.sys_path("module/nvidia/version")).map(|v| format!("NVIDIA driver {v}")));
    match &driver {
        Some(version) => findings.add("gpu", Level::Ok, version.clone(), None),
        None => findings.add(
            "gpu",
            Level::Info,
            "no NVIDIA driver is loaded: there is nothing for the shim to extend (status and the module still work)",
            Some("install the NVIDIA driver for your GPU".into()),
        ),
    }
    match nvml::query() {
        Ok(report) => findings.add(
            "gpu",
            Level::Ok,
            format!(
                "NVML sees {} GPU(s): {}",
                report.gpus.len(),
                report
                    .gpus
                    .iter()
                    .map(|g| format!("{} ({})", g.name, format_bytes(g.memory_total)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None,
        ),
        Err(e) if driver.is_some() => findings.add("gpu", Level::Warn, e, None),
        Err(_) => {}
    }

    match read(paths.sys_path("module/nvidia_uvm/parameters/uvm_disable_hmm")) {
        Some(v) => {
            let hmm_off = matches!(v.as_str(), "Y" | "1");
            findings.add(
                "gpu",
                Level::Info,
                format!(
                    "HMM is {} (nvidia_uvm uvm_disable_hmm={v}); GreenBoost does not need HMM: T2 is pinned and mapped",
                    if hmm_off { "disabled" } else { "enabled" }
                ),
                None,
            );
        }
        None if driver.is_some() => {
            let mode = command_output("nvidia-smi", &["-q"]).and_then(|q| {
                q.lines()
                    .find(|l| l.contains("Addressing Mode"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
            });
            findings.add(
                "gpu",
                Level::Info,
                match mode {
                    Some(m) => format!("addressing mode (nvidia-smi -q): {m}"),
                    None => "HMM mode unknown (nvidia_uvm not loaded; it loads with the first CUDA program)".into(),
                },
                None,
            );
        }
        None => {}
    }

    let Ok(devices) = fs::read_dir(paths.sys_path("bus/pci/devices")) else {
        return;
    };
    let mut entries: Vec<PathBuf> = devices.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for device in entries {
        let is_nvidia_gpu = read(device.join("vendor")).as_deref() == Some("0x10de")
            && read(device.join("class")).is_some_and(|c| c.starts_with("0x03"));
        if !is_nvidia_gpu {
            continue;
        }
        let name = device.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let field = |f: &str| read(device.join(f));
        let (Some(speed), Some(width), Some(max_speed), Some(max_width)) = (
            field("current_link_speed"),
            field("current_link_width"),
            field("max_link_speed"),
            field("max_link_width"),
        ) else {
            findings.add("pcie", Level::Info, format!("{name}: link speed/width not readable"), None);
            continue;
        };
        let generation = |s: &str| pcie_generation(s).map_or_else(|| s.to_owned(), |g| format!("Gen{g}"));
        let what = format!(
            "{name}: PCIe {} x{width} now, {} x{max_width} max; T2 reads go over this link",
            generation(&speed),
            generation(&max_speed)
        );
        if width.parse::<u32>().ok() < max_width.parse::<u32>().ok() {
            findings.add(
                "pcie",
                Level::Warn,
                format!("{what}: the link runs narrower than it can, which caps T2 bandwidth"),
                Some("seat the card in a full-width slot (check the BIOS lane split and riser)".into()),
            );
        } else if pcie_generation(&speed) < pcie_generation(&max_speed) {
            findings.add(
                "pcie",
                Level::Info,
                format!("{what} (an idle GPU lowers its link speed; check again under load)"),
                None,
            );
        } else {
            findings.add("pcie", Level::Ok, what, None);
        }
    }
}

fn kernel_release(paths: &SystemPaths) -> String {
    read(paths.proc_path("sys/kernel/osrelease")).unwrap_or_else(|| "unknown".into())
}

pub fn doctor(json: bool) -> ExitCode {
    let paths = SystemPaths::from_env();
    let release = kernel_release(&paths);
    let mut findings = Findings::default();
    check_kernel(&mut findings, &paths, &release);
    check_module(&mut findings, &paths, &release);
    check_environment(&mut findings);
    check_nvidia(&mut findings, &paths);

    let worst = findings.0.iter().map(|f| f.level).max().unwrap_or(Level::Ok);
    if json {
        let items: Vec<Json> = findings
            .0
            .iter()
            .map(|f| {
                Json::object()
                    .with("area", f.area)
                    .with("level", f.level.label())
                    .with("finding", f.what.as_str())
                    .with("fix", f.fix.clone())
            })
            .collect();
        println!(
            "{:#}",
            Json::object().with("kernel", release.as_str()).with("ok", worst != Level::Fail).with("findings", items)
        );
    } else {
        println!("GreenBoost doctor, kernel {release}\n");
        for f in &findings.0 {
            println!("[{:>4}] {:<7} {}", f.level.label(), f.area, f.what);
            if let Some(fix) = &f.fix {
                println!("{:15}fix: {fix}", "");
            }
        }
        let failures = findings.0.iter().filter(|f| f.level == Level::Fail).count();
        let warnings = findings.0.iter().filter(|f| f.level == Level::Warn).count();
        println!("\n{failures} problem(s), {warnings} warning(s).");
    }
    if worst == Level::Fail {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcie_speeds_map_to_generations() {
        assert_eq!(pcie_generation("2.5 GT/s PCIe"), Some(1));
        assert_eq!(pcie_generation("8.0 GT/s PCIe"), Some(3));
        assert_eq!(pcie_generation("16.0 GT/s PCIe"), Some(4));
        assert_eq!(pcie_generation("32.0 GT/s PCIe"), Some(5));
        assert_eq!(pcie_generation("Unknown"), None);
    }
}
