//! T3's swap: T3 buffers are swappable RAM, so without swap they cannot be allocated,
//! and what the kernel writes out comes back at the speed of the disk under the swap
//! area. Each area of /proc/swaps with its disk (NVMe or not), the swap files
//! `greenboost swap add` made that are not enabled, and whether the module has T3.

use super::{Findings, Level};
use crate::paths::SystemPaths;
use crate::swap::backing::{self, Medium};
use crate::swap::{describe_area, proc_swaps, record, ADD_HINT, NO_SWAP};

pub(super) fn check(findings: &mut Findings, paths: &SystemPaths) {
    check_module_t3(findings, paths);
    let areas = match proc_swaps::read(paths) {
        Ok(areas) => areas,
        Err(e) => {
            findings.add("swap", Level::Info, format!("cannot read {}: {e}", paths.proc_path("swaps").display()), None);
            return;
        }
    };
    if areas.is_empty() {
        findings.add("swap", Level::Warn, NO_SWAP, Some(ADD_HINT.into()));
    }
    let mut on_nvme = 0;
    for area in &areas {
        let backing = backing::of_area(paths, area);
        let what = describe_area(area, &backing);
        match backing.medium {
            Medium::Nvme => {
                on_nvme += 1;
                findings.add("swap", Level::Ok, what, None);
            }
            Medium::Zram => findings.add(
                "swap",
                Level::Info,
                format!("{what}: T3 pages written there stay in RAM, compressed"),
                None,
            ),
            Medium::OtherDisk | Medium::Unknown => findings.add(
                "swap",
                Level::Info,
                format!("{what}: T3 pages swapped there come back slower than from NVMe"),
                None,
            ),
        }
    }
    if !areas.is_empty() && on_nvme == 0 {
        findings.add(
            "swap",
            Level::Info,
            "no swap area is on NVMe: T3 pages the kernel writes out come back slowly",
            Some(ADD_HINT.into()),
        );
    }
    check_recorded(findings, paths, &areas);
}

/// Swap files `swap add` made that are not enabled (they are not in /etc/fstab, so a
/// reboot turns them off).
fn check_recorded(findings: &mut Findings, paths: &SystemPaths, areas: &[proc_swaps::SwapArea]) {
    let Ok(recorded) = record::read(paths) else {
        return;
    };
    for path in recorded.iter().filter(|p| p.exists() && !areas.iter().any(|a| std::path::Path::new(&a.path) == *p)) {
        findings.add(
            "swap",
            Level::Info,
            format!("{} (made by `greenboost swap add`) is not enabled", path.display()),
            Some(format!("sudo greenboost swap add --path {}", path.display())),
        );
    }
}

/// The loaded module's T3: absent (it predates T3) or turned off (`t3_cap_mb=0`).
fn check_module_t3(findings: &mut Findings, paths: &SystemPaths) {
    if !paths.module_dir().is_dir() {
        return;
    }
    match super::probe::read(paths.module_parameter("t3_cap_mb")).as_deref() {
        None => findings.add("swap", Level::Info, "the loaded greenboost module has no T3 (it predates it): swap is not used by GreenBoost", None),
        Some("0") => findings.add(
            "swap",
            Level::Info,
            "T3 is turned off (module parameter t3_cap_mb=0)",
            Some("t3_cap_mb=-1 (the default: the swap not used by others) in /etc/modprobe.d/greenboost.conf, then reload the module".into()),
        ),
        Some(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    fn swap_findings(root: &FakeRoot) -> Vec<(Level, String, Option<String>)> {
        let mut findings = Findings::default();
        check(&mut findings, &root.paths);
        findings.0.into_iter().map(|f| (f.level, f.what, f.fix)).collect()
    }

    #[test]
    fn no_swap_is_said_plainly_with_the_fix() {
        let root = FakeRoot::new();
        root.write("proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n");
        let findings = swap_findings(&root);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].0, Level::Warn);
        assert_eq!(findings[0].1, "no swap: T3 buffers cannot be allocated (T3 needs swap)");
        assert!(findings[0].2.as_deref().unwrap().starts_with("sudo greenboost swap add --size"));
    }

    #[test]
    fn each_area_with_its_disk() {
        let root = FakeRoot::new();
        let nvme = "sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1";
        root.write(&format!("{nvme}/queue/rotational"), "0\n");
        root.write(&format!("{nvme}/nvme0n1p3/partition"), "3\n");
        root.link("sys/class/block/nvme0n1p3", &format!("../../{}/nvme0n1p3", &nvme[4..]));
        root.write("proc/swaps", "Filename Type Size Used Priority\n/dev/nvme0n1p3 partition 16777212 0 -2\n");
        let findings = swap_findings(&root);
        assert_eq!(
            findings,
            vec![(
                Level::Ok,
                "/dev/nvme0n1p3: partition, 16.00 GiB, 0 B used, priority -2, NVMe (nvme0n1), not rotational".into(),
                None
            )]
        );

        let idle = root.write("t3.swap", "");
        record::add(&root.paths, &idle).unwrap();
        root.write("proc/swaps", "Filename Type Size Used Priority\n/dev/greenboost-test-disk partition 1024 0 -2\n");
        root.write("sys/module/greenboost/parameters/t3_cap_mb", "0\n");
        let findings = swap_findings(&root);
        let whats: Vec<&str> = findings.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(whats[0], "T3 is turned off (module parameter t3_cap_mb=0)");
        assert!(
            whats[1].ends_with(
                "unknown disk (cannot tell whether it is NVMe): T3 pages swapped there come back slower than from NVMe"
            ),
            "{whats:?}"
        );
        assert!(whats[2].starts_with("no swap area is on NVMe"), "{whats:?}");
        assert_eq!(whats[3], format!("{} (made by `greenboost swap add`) is not enabled", idle.display()));
        assert_eq!(findings[3].2, Some(format!("sudo greenboost swap add --path {}", idle.display())));
    }
}
