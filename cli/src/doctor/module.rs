//! Is the module installed and loaded, will the kernel load it (Secure Boot), and may
//! you open /dev/greenboost (its mode and group, the ABI it speaks, your groups).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::probe::read;
use super::{Findings, Level};
use crate::device::Device;
use crate::module::{explain_open_error, ModuleState, USERSPACE_MEANWHILE};
use crate::paths::SystemPaths;
use crate::size::format_bytes;

pub(super) fn check(findings: &mut Findings, paths: &SystemPaths, release: &str) {
    check_loaded(findings, paths, release);
    check_secure_boot(findings, paths);
    check_device(findings, paths);
    check_group(findings);
}

fn check_loaded(findings: &mut Findings, paths: &SystemPaths, release: &str) {
    match ModuleState::of(paths) {
        ModuleState::Loaded => {
            let version = read(paths.module_dir().join("version")).map(|v| format!(" {v}")).unwrap_or_default();
            findings.add("module", Level::Ok, format!("greenboost{version} is loaded"), None);
        }
        ModuleState::Installed(path) => findings.add(
            "module",
            Level::Fail,
            format!("greenboost is installed ({}) but not loaded", path.display()),
            Some("sudo modprobe greenboost; if it fails, `sudo dmesg | tail` says why (Secure Boot: sign the module)".into()),
        ),
        ModuleState::NotInstalled(_) => findings.add(
            "module",
            Level::Fail,
            format!("greenboost.ko is not installed for {release}; {USERSPACE_MEANWHILE}"),
            Some("fix the build problems above, then `sudo make install` (in the GreenBoost source tree) builds and installs it".into()),
        ),
        // The kernel check has said it: no module can be loaded, built or not.
        ModuleState::NoModuleSupport => {}
    }
}

fn check_secure_boot(findings: &mut Findings, paths: &SystemPaths) {
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
}

/// The node's mode and group, then whether you can open it and which ABI it speaks.
fn check_device(findings: &mut Findings, paths: &SystemPaths) {
    let Ok(meta) = fs::metadata(&paths.device) else {
        findings.add(
            "device",
            Level::Info,
            format!("{} does not exist (module not loaded)", paths.device.display()),
            None,
        );
        return;
    };
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
    check_device_abi(findings, paths);
}

fn check_device_abi(findings: &mut Findings, paths: &SystemPaths) {
    let device = match Device::open(&paths.device) {
        Ok(device) => device,
        Err(e) => return findings.add("device", Level::Fail, explain_open_error(paths, &e), None),
    };
    match device.info() {
        Ok(info) if info.abi_version == greenboost_abi::GB_ABI_VERSION => findings.add(
            "device",
            Level::Ok,
            format!(
                "you can open it; ABI {}, T2 cap {}, reserve {}",
                info.abi_version,
                format_bytes(info.pool_cap),
                format_bytes(info.reserve)
            ),
            None,
        ),
        Ok(info) => findings.add(
            "device",
            Level::Fail,
            format!("the loaded module speaks ABI {}, this CLI ABI {}", info.abi_version, greenboost_abi::GB_ABI_VERSION),
            Some("reinstall from one source tree (sudo make install), then `sudo rmmod greenboost && sudo modprobe greenboost`".into()),
        ),
        Err(e) => findings.add("device", Level::Fail, format!("GB_IOC_INFO failed: {e}"), None),
    }
}

fn group_name(gid: u32) -> Option<String> {
    let text = fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 3 && fields[2].parse() == Ok(gid)).then(|| fields[0].to_owned())
    })
}

/// Whether this session has the group `gid` (effective or supplementary).
fn in_group(gid: u32) -> bool {
    let mut groups = vec![0 as libc::gid_t; 256];
    // SAFETY: `groups` has room for the 256 entries we announce.
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    // SAFETY: getegid has no preconditions.
    let egid = unsafe { libc::getegid() };
    egid == gid || groups.iter().take(n.max(0) as usize).any(|&g| g == gid)
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
    let user = std::env::var("USER").unwrap_or_default();
    let listed = entry.rsplit(':').next().unwrap_or("").split(',').any(|m| !user.is_empty() && m == user);
    match (in_group(gid), listed) {
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
