//! For unit tests: a temporary directory standing in for /sys, /proc, /dev/shm and
//! /var/lib/greenboost, with the `SystemPaths` that point there. Removed when dropped.

use std::fs;
use std::path::{Path, PathBuf};

use crate::paths::SystemPaths;

pub struct FakeRoot {
    pub dir: PathBuf,
    pub paths: SystemPaths,
}

impl FakeRoot {
    /// `name` keeps concurrently running tests apart.
    pub fn new(name: &str) -> FakeRoot {
        let dir = std::env::temp_dir().join(format!("greenboost-unit-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let paths = SystemPaths {
            sys: dir.join("sys"),
            proc: dir.join("proc"),
            device: dir.join("dev/greenboost"),
            state: dir.join("state"),
            shm: dir.join("shm"),
            modules: dir.join("lib/modules"),
            systemd: dir.join("etc/systemd/system"),
        };
        FakeRoot { dir, paths }
    }

    /// Writes `content` to `relative` (under the fake root), making its directories.
    pub fn write(&self, relative: &str, content: &str) -> PathBuf {
        let path = self.dir.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, content).unwrap();
        path
    }

    /// A symlink at `relative` pointing to `target` (relative links, as sysfs has).
    pub fn link(&self, relative: &str, target: &str) {
        let path = self.dir.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, &path).unwrap();
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }

    pub fn root(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FakeRoot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}
