//! What the session and the system add: the locked-memory limit, the installed shim,
//! and no GreenBoost in /etc/ld.so.preload.

use super::probe::read;
use super::{Findings, Level};
use crate::device::Device;
use crate::memlock::{self, Backend};
use crate::paths::SystemPaths;
use crate::run::locate_shim;
use crate::size::format_bytes;

pub(super) fn check(findings: &mut Findings, paths: &SystemPaths) {
    check_memlock(findings, paths);
    check_shim(findings);
}

/// The limit as it bears on the backend a program would get now (see `memlock`).
fn check_memlock(findings: &mut Findings, paths: &SystemPaths) {
    let Some(limit) = memlock::current() else { return };
    let backend = match Device::open(&paths.device) {
        Ok(device) => Backend::Module { t2_cap: device.info().ok().map(|info| info.pool_cap) },
        Err(_) => Backend::Userspace,
    };
    if let Some(warning) = memlock::warning(paths, backend, limit.soft) {
        return findings.add("memlock", Level::Warn, warning, None);
    }
    let show = |value: Option<u64>| value.map_or_else(|| "unlimited".to_owned(), format_bytes);
    let exempt = if memlock::exempt(paths) { "; CAP_IPC_LOCK exempts this session from it" } else { "" };
    findings.add(
        "memlock",
        Level::Ok,
        format!("locked-memory limit {} (hard {}){exempt}", show(limit.soft), show(limit.hard)),
        None,
    );
}

fn check_shim(findings: &mut Findings) {
    match locate_shim(None) {
        Ok(path) => findings.add("shim", Level::Ok, format!("shim: {}", path.display()), None),
        Err(e) => findings.add("shim", Level::Fail, e, None),
    }
    if read("/etc/ld.so.preload").is_some_and(|text| text.contains("greenboost")) {
        findings.add(
            "shim",
            Level::Fail,
            "/etc/ld.so.preload loads GreenBoost into every process on the system (an earlier implementation's installer did this; it can freeze boots)",
            Some("delete that line from /etc/ld.so.preload; use `greenboost run -- CMD` or the ollama drop-in instead".into()),
        );
    }
}
