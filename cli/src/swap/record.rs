//! The swap files `greenboost swap add` created, kept in `/var/lib/greenboost/swapfiles`
//! (one absolute path a line, `#` comments), so `swap remove` deletes only a file this
//! command made and scripts/uninstall.sh can undo every one of them.
//!
//! A path is recorded before its file is created, so a crash in between leaves a
//! recorded path and no file (which remove and uninstall accept), never an unrecorded
//! swap file.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::paths::SystemPaths;
use crate::replace_file;

const HEADER: &str =
    "# Swap files created by `greenboost swap add`; `greenboost swap remove` and scripts/uninstall.sh remove them.\n";

/// The recorded paths, in the order they were added (none when there is no record).
pub fn read(paths: &SystemPaths) -> io::Result<Vec<PathBuf>> {
    match fs::read_to_string(paths.swap_record()) {
        Ok(text) => Ok(text.lines().map(str::trim).filter(|line| line.starts_with('/')).map(PathBuf::from).collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io::Error::new(e.kind(), format!("cannot read {}: {e}", paths.swap_record().display()))),
    }
}

pub fn contains(paths: &SystemPaths, path: &Path) -> io::Result<bool> {
    Ok(read(paths)?.iter().any(|p| p == path))
}

/// Replaces the record with `entries` (whole, see `replace_file`). An empty list
/// removes the record.
fn write(paths: &SystemPaths, entries: &[PathBuf]) -> io::Result<()> {
    let record = paths.swap_record();
    if entries.is_empty() {
        return match fs::remove_file(&record) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    fs::create_dir_all(&paths.state)?;
    let lines: String = entries.iter().map(|entry| format!("{}\n", entry.display())).collect();
    replace_file::replace(&record, &format!("{HEADER}{lines}"), 0o644)
}

pub fn add(paths: &SystemPaths, path: &Path) -> io::Result<()> {
    let mut entries = read(paths)?;
    if !entries.iter().any(|p| p == path) {
        entries.push(path.to_owned());
    }
    write(paths, &entries)
}

pub fn remove(paths: &SystemPaths, path: &Path) -> io::Result<()> {
    let mut entries = read(paths)?;
    entries.retain(|p| p != path);
    write(paths, &entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn adds_once_removes_and_deletes_the_empty_record() {
        let root = FakeRoot::new();
        let paths = &root.paths;
        assert!(read(paths).unwrap().is_empty(), "no record: nothing created");
        add(paths, Path::new("/var/lib/greenboost/t3.swap")).unwrap();
        add(paths, Path::new("/mnt/nvme/t3.swap")).unwrap();
        add(paths, Path::new("/var/lib/greenboost/t3.swap")).unwrap();
        let text = fs::read_to_string(paths.swap_record()).unwrap();
        assert_eq!(text, format!("{HEADER}/var/lib/greenboost/t3.swap\n/mnt/nvme/t3.swap\n"));
        assert!(contains(paths, Path::new("/mnt/nvme/t3.swap")).unwrap());
        remove(paths, Path::new("/var/lib/greenboost/t3.swap")).unwrap();
        assert_eq!(read(paths).unwrap(), vec![PathBuf::from("/mnt/nvme/t3.swap")]);
        remove(paths, Path::new("/mnt/nvme/t3.swap")).unwrap();
        assert!(!paths.swap_record().exists());
        remove(paths, Path::new("/mnt/nvme/t3.swap")).unwrap();
    }
}
