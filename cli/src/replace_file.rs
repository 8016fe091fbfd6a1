//! Files other programs read while we rewrite them (node_exporter's textfile, systemd's
//! drop-ins, uninstall's record of swap files): written and synced beside the target
//! under a hidden temporary name, then renamed over it, so a reader sees the old file
//! or the new one, never half of one.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Replaces `path` with `text`, mode `mode` whatever the umask. The temporary name,
/// `.NAME.PID`, ends in neither `.prom` nor `.conf`, so the collector and systemd skip
/// it; it is removed when anything fails.
pub fn replace(path: &Path, text: &str, mode: u32) -> io::Result<()> {
    let name = path.file_name().ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let staging = path.with_file_name(format!(".{}.{}", name.to_string_lossy(), std::process::id()));
    let written = (|| {
        let mut file = fs::File::create(&staging)?;
        file.write_all(text.as_bytes())?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        fs::rename(&staging, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&staging);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_file_is_replaced_whole_with_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("greenboost.prom");
        replace(&path, "a 1\n", 0o644).unwrap();
        replace(&path, "a 2\n", 0o600).unwrap();
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["greenboost.prom"], "no temporary file left");
        assert_eq!(fs::read_to_string(&path).unwrap(), "a 2\n");
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let error = replace(&dir.path().join("absent/greenboost.prom"), "a\n", 0o644).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }
}
