//! The NVIDIA side: the driver, what NVML sees, the HMM mode, and each NVIDIA GPU's
//! PCIe link (T2 reads go over it).

use std::fs;
use std::path::{Path, PathBuf};

use super::probe::{command_output, read};
use super::{Findings, Level};
use crate::nvml;
use crate::paths::SystemPaths;
use crate::size::format_bytes;

pub(super) fn check(findings: &mut Findings, paths: &SystemPaths) {
    let driver = check_driver(findings, paths);
    check_nvml(findings, driver.is_some());
    check_hmm(findings, paths, driver.is_some());
    check_pcie(findings, paths);
}

/// The loaded driver's version line, if any.
fn check_driver(findings: &mut Findings, paths: &SystemPaths) -> Option<String> {
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
    driver
}

fn check_nvml(findings: &mut Findings, driver_loaded: bool) {
    match nvml::query() {
        Ok(report) => {
            let gpus: Vec<String> =
                report.gpus.iter().map(|g| format!("{} ({})", g.name, format_bytes(g.memory_total))).collect();
            findings.add(
                "gpu",
                Level::Ok,
                format!("NVML sees {} GPU(s): {}", report.gpus.len(), gpus.join(", ")),
                None,
            );
        }
        Err(e) if driver_loaded => findings.add("gpu", Level::Warn, e, None),
        Err(_) => {}
    }
}

fn check_hmm(findings: &mut Findings, paths: &SystemPaths, driver_loaded: bool) {
    if let Some(v) = read(paths.sys_path("module/nvidia_uvm/parameters/uvm_disable_hmm")) {
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
    } else if driver_loaded {
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
}

fn pcie_generation(speed: &str) -> Option<u32> {
    let gts: f64 = speed.split_whitespace().next()?.parse().ok()?;
    [(2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6), (128.0, 7)]
        .iter()
        .find(|(rate, _)| (gts - rate).abs() < 0.01)
        .map(|(_, generation)| *generation)
}

/// Every NVIDIA display-class PCI device, in bus order.
fn check_pcie(findings: &mut Findings, paths: &SystemPaths) {
    let Ok(devices) = fs::read_dir(paths.sys_path("bus/pci/devices")) else {
        return;
    };
    let mut entries: Vec<PathBuf> = devices.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for device in entries {
        let is_nvidia_gpu = read(device.join("vendor")).as_deref() == Some("0x10de")
            && read(device.join("class")).is_some_and(|c| c.starts_with("0x03"));
        if is_nvidia_gpu {
            check_link(findings, &device);
        }
    }
}

fn check_link(findings: &mut Findings, device: &Path) {
    let name = device.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let field = |f: &str| read(device.join(f));
    let (Some(speed), Some(width), Some(max_speed), Some(max_width)) =
        (field("current_link_speed"), field("current_link_width"), field("max_link_speed"), field("max_link_width"))
    else {
        findings.add("pcie", Level::Info, format!("{name}: link speed/width not readable"), None);
        return;
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
