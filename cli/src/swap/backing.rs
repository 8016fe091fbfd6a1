//! Which disk a swap area (or the filesystem of a would-be swap file) lives on, and
//! whether it is NVMe: T3 pages the kernel writes out come back at that disk's speed.
//!
//! A partition is found by name in `/sys/class/block/<name>`; a file by its
//! filesystem's device number (`stat().st_dev`) in `/sys/dev/block/MAJ:MIN`, or, for
//! filesystems whose st_dev is not a block device (btrfs), through the mount's source
//! in `/proc/self/mountinfo`. Both links resolve to a directory under
//! `/sys/devices/...`, which lies under an `nvme` controller for an NVMe namespace.
//! Device-mapper and md devices (LUKS, LVM, RAID) are followed to the disks in their
//! `slaves/`. Everything is read through `SystemPaths`, so tests use a fake tree.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::proc_swaps::{AreaType, SwapArea};
use crate::paths::SystemPaths;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Medium {
    Nvme,
    /// Compressed RAM (`zram`): swap that is not a disk at all.
    Zram,
    /// Any other block device (SATA/SAS, virtio, loop, ...).
    OtherDisk,
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backing {
    pub medium: Medium,
    /// The whole disks underneath (`nvme0n1`), several for a mapping over more than one.
    pub disks: Vec<String>,
    pub rotational: Option<bool>,
}

impl Backing {
    const UNKNOWN: Backing = Backing { medium: Medium::Unknown, disks: Vec::new(), rotational: None };

    /// `NVMe (nvme0n1), not rotational`, `not NVMe (sda), rotational`, `unknown disk`.
    pub fn describe(&self) -> String {
        let disks = if self.disks.is_empty() { String::new() } else { format!(" ({})", self.disks.join(", ")) };
        let medium = match self.medium {
            Medium::Nvme => format!("NVMe{disks}"),
            Medium::Zram => format!("zram{disks}: compressed RAM, not a disk"),
            Medium::OtherDisk => format!("not NVMe{disks}"),
            Medium::Unknown => "unknown disk (cannot tell whether it is NVMe)".to_owned(),
        };
        match (self.medium, self.rotational) {
            (Medium::Zram, _) | (_, None) => medium,
            (_, Some(true)) => format!("{medium}, rotational"),
            (_, Some(false)) => format!("{medium}, not rotational"),
        }
    }
}

/// What the swap area `area` is stored on.
pub fn of_area(paths: &SystemPaths, area: &SwapArea) -> Backing {
    match area.area_type {
        AreaType::Partition => {
            // /proc/swaps names the node swapon was given (a /dev/mapper link, say).
            let node = fs::canonicalize(&area.path).unwrap_or_else(|_| PathBuf::from(&area.path));
            let by_name = node.file_name().and_then(|n| n.to_str()).map(|name| of_device_name(paths, name));
            match by_name {
                Some(backing) if backing.medium != Medium::Unknown => backing,
                _ => fs::metadata(&node).map_or(Backing::UNKNOWN, |meta| of_device_number(paths, meta.rdev())),
            }
        }
        AreaType::File => of_path(paths, Path::new(area.path.trim_end_matches(" (deleted)"))),
    }
}

/// What the filesystem holding `path` (a file or a directory) is stored on.
pub fn of_path(paths: &SystemPaths, path: &Path) -> Backing {
    fs::metadata(path).map_or(Backing::UNKNOWN, |meta| of_device_number(paths, meta.dev()))
}

/// glibc's `major()`/`minor()` of a `dev_t`.
fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major, minor)
}

fn of_device_number(paths: &SystemPaths, dev: u64) -> Backing {
    let (major, minor) = major_minor(dev);
    if let Ok(dir) = fs::canonicalize(paths.sys_path(&format!("dev/block/{major}:{minor}"))) {
        return of_sysfs_dir(&dir, 0);
    }
    // Not a block device (btrfs' anonymous st_dev): the mount's source names the disk.
    mount_source(paths, major, minor)
        .and_then(|source| {
            let node = fs::canonicalize(&source).unwrap_or(source);
            node.file_name().and_then(|n| n.to_str()).map(|name| of_device_name(paths, name))
        })
        .unwrap_or(Backing::UNKNOWN)
}

/// The `/dev/...` source of the mount whose device number is `major:minor`.
fn mount_source(paths: &SystemPaths, major: u64, minor: u64) -> Option<PathBuf> {
    let mountinfo = fs::read_to_string(paths.proc_path("self/mountinfo")).ok()?;
    let wanted = format!("{major}:{minor}");
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        if fields.nth(2)? != wanted {
            return None;
        }
        // After the optional fields: "- FSTYPE SOURCE OPTIONS".
        let source = fields.skip_while(|f| *f != "-").nth(2)?;
        source.starts_with("/dev/").then(|| PathBuf::from(source))
    })
}

fn of_device_name(paths: &SystemPaths, name: &str) -> Backing {
    fs::canonicalize(paths.sys_path(&format!("class/block/{name}")))
        .map_or(Backing::UNKNOWN, |dir| of_sysfs_dir(&dir, 0))
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// A block device's directory under `/sys/devices`: a partition's disk is its parent.
fn of_sysfs_dir(dir: &Path, depth: usize) -> Backing {
    let disk_dir = if dir.join("partition").exists() { dir.parent().unwrap_or(dir) } else { dir };
    let disk = disk_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let slaves: Vec<PathBuf> = fs::read_dir(disk_dir.join("slaves"))
        .map(|entries| entries.filter_map(|e| fs::canonicalize(e.ok()?.path()).ok()).collect())
        .unwrap_or_default();
    // A mapping (dm-crypt, LVM, md) is as fast as the disks under it; the depth bounds
    // a loop in a broken tree.
    if !slaves.is_empty() && depth < 4 {
        let under: Vec<Backing> = slaves.iter().map(|slave| of_sysfs_dir(slave, depth + 1)).collect();
        return combine(&under);
    }
    let medium = if disk.starts_with("zram") {
        Medium::Zram
    } else if disk.starts_with("nvme") || disk_dir.components().any(|c| c.as_os_str().to_string_lossy() == "nvme") {
        Medium::Nvme
    } else {
        Medium::OtherDisk
    };
    let rotational = read_trimmed(&disk_dir.join("queue/rotational")).and_then(|r| match r.as_str() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    });
    Backing { medium, disks: vec![disk], rotational }
}

/// A mapping over several disks: NVMe only when every one is.
fn combine(under: &[Backing]) -> Backing {
    let medium = if under.iter().all(|b| b.medium == Medium::Nvme) {
        Medium::Nvme
    } else if under.iter().any(|b| b.medium == Medium::Unknown) {
        Medium::Unknown
    } else if under.iter().all(|b| b.medium == Medium::Zram) {
        Medium::Zram
    } else {
        Medium::OtherDisk
    };
    let mut disks: Vec<String> = under.iter().flat_map(|b| b.disks.iter().cloned()).collect();
    disks.sort();
    disks.dedup();
    let rotational = if under.iter().any(|b| b.rotational == Some(true)) {
        Some(true)
    } else if under.iter().all(|b| b.rotational == Some(false)) {
        Some(false)
    } else {
        None
    };
    Backing { medium, disks, rotational }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    const NVME: &str = "sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1";
    const SATA: &str = "sys/devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sdz";

    /// nvme0n1p3 and sdz9 (rotational) as sysfs shows them, dm-7 over nvme0n1p3, zram0.
    fn machine() -> FakeRoot {
        let root = FakeRoot::new();
        root.write(&format!("{NVME}/queue/rotational"), "0\n");
        root.write(&format!("{NVME}/nvme0n1p3/partition"), "3\n");
        root.link("sys/class/block/nvme0n1p3", &format!("../../{}/nvme0n1p3", &NVME[4..]));
        root.write(&format!("{SATA}/queue/rotational"), "1\n");
        root.write(&format!("{SATA}/sdz9/partition"), "9\n");
        root.link("sys/class/block/sdz9", &format!("../../{}/sdz9", &SATA[4..]));
        root.link(
            "sys/devices/virtual/block/dm-7/slaves/nvme0n1p3",
            &format!("../../../../../{}/nvme0n1p3", &NVME[4..]),
        );
        root.link("sys/class/block/dm-7", "../../devices/virtual/block/dm-7");
        root.write("sys/devices/virtual/block/zram0/queue/rotational", "0\n");
        root.link("sys/class/block/zram0", "../../devices/virtual/block/zram0");
        root
    }

    fn partition(path: &str) -> SwapArea {
        SwapArea { path: path.into(), area_type: AreaType::Partition, size: 1 << 30, used: 0, priority: -2 }
    }

    #[test]
    fn partitions_are_classified_by_their_sysfs_device() {
        let root = machine();
        let nvme = of_area(&root.paths, &partition("/dev/nvme0n1p3"));
        assert_eq!(nvme, Backing { medium: Medium::Nvme, disks: vec!["nvme0n1".into()], rotational: Some(false) });
        let sata = of_area(&root.paths, &partition("/dev/sdz9"));
        assert_eq!(sata, Backing { medium: Medium::OtherDisk, disks: vec!["sdz".into()], rotational: Some(true) });
        let mapped = of_area(&root.paths, &partition("/dev/dm-7"));
        assert_eq!(mapped.medium, Medium::Nvme, "dm-7 lies on nvme0n1p3");
        assert_eq!(mapped.disks, vec!["nvme0n1".to_owned()]);
        assert_eq!(of_area(&root.paths, &partition("/dev/zram0")).medium, Medium::Zram);
        assert_eq!(of_area(&root.paths, &partition("/dev/greenboost-no-such-disk")), Backing::UNKNOWN);
    }

    #[test]
    fn files_are_classified_by_their_filesystems_device_number() {
        let root = machine();
        let file = root.write("swapfile", "");
        let (major, minor) = major_minor(fs::metadata(&file).unwrap().dev());
        let area =
            SwapArea { path: file.display().to_string(), area_type: AreaType::File, size: 0, used: 0, priority: -3 };
        assert_eq!(of_area(&root.paths, &area), Backing::UNKNOWN, "no /sys/dev/block entry, no mountinfo");

        // A filesystem whose st_dev is not a block device: the mount's source names it.
        root.write(
            "proc/self/mountinfo",
            &format!(
                "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n30 1 {major}:{minor} / /data rw shared:1 - btrfs /dev/sdz9 rw\n"
            ),
        );
        assert_eq!(of_area(&root.paths, &area).disks, vec!["sdz".to_owned()]);

        root.link(&format!("sys/dev/block/{major}:{minor}"), &format!("../../{}/nvme0n1p3", &NVME[4..]));
        let deleted = SwapArea { path: format!("{} (deleted)", area.path), ..area.clone() };
        for area in [area, deleted] {
            let backing = of_area(&root.paths, &area);
            assert_eq!(
                backing,
                Backing { medium: Medium::Nvme, disks: vec!["nvme0n1".into()], rotational: Some(false) }
            );
        }
    }

    #[test]
    fn device_numbers_split_as_glibc_does() {
        assert_eq!(major_minor(0x10301), (259, 1)); // nvme0n1p1: 259:1
        assert_eq!(major_minor(0x0802), (8, 2));
        // Large numbers: glibc keeps the high bits of the major above bit 32, of the minor above bit 20.
        assert_eq!(major_minor((0x1000 << 32) | (5 << 8) | (0x300 << 12) | 7), (0x1005, 0x307));
    }

    #[test]
    fn descriptions_say_nvme_plainly() {
        let nvme = Backing { medium: Medium::Nvme, disks: vec!["nvme0n1".into()], rotational: Some(false) };
        assert_eq!(nvme.describe(), "NVMe (nvme0n1), not rotational");
        let hdd = Backing { medium: Medium::OtherDisk, disks: vec!["sda".into()], rotational: Some(true) };
        assert_eq!(hdd.describe(), "not NVMe (sda), rotational");
        assert_eq!(Backing::UNKNOWN.describe(), "unknown disk (cannot tell whether it is NVMe)");
    }

    #[test]
    fn a_mapping_is_nvme_only_over_nvme_alone() {
        let nvme = Backing { medium: Medium::Nvme, disks: vec!["nvme1n1".into()], rotational: Some(false) };
        let sata = Backing { medium: Medium::OtherDisk, disks: vec!["sdb".into()], rotational: Some(false) };
        assert_eq!(combine(&[nvme.clone(), nvme.clone()]).medium, Medium::Nvme);
        let mixed = combine(&[nvme, sata]);
        assert_eq!(mixed.medium, Medium::OtherDisk);
        assert_eq!(mixed.disks, vec!["nvme1n1".to_owned(), "sdb".to_owned()]);
        assert_eq!(mixed.rotational, Some(false));
    }
}
