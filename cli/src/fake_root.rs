//! For unit tests: a temporary directory standing in for /sys, /proc, /dev/shm,
//! /lib/modules, /etc/systemd/system and /var/lib/greenboost, with the `SystemPaths`
//! that point there. Removed when dropped.

use std::fs;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::paths::SystemPaths;

pub struct FakeRoot {
    dir: TempDir,
    pub paths: SystemPaths,
}

impl FakeRoot {
    pub fn new() -> FakeRoot {
        let dir = TempDir::new().unwrap();
        let root = dir.path();
        let paths = SystemPaths {
            sys: root.join("sys"),
            proc: root.join("proc"),
            device: root.join("dev/greenboost"),
            state: root.join("state"),
            shm: root.join("shm"),
            modules: root.join("lib/modules"),
            systemd: root.join("etc/systemd/system"),
        };
        FakeRoot { dir, paths }
    }

    /// Writes `content` to `relative` (under the fake root), making its directories.
    pub fn write(&self, relative: &str, content: &str) -> PathBuf {
        let path = self.path(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, content).unwrap();
        path
    }

    /// A symlink at `relative` pointing to `target` (relative links, as sysfs has).
    pub fn link(&self, relative: &str, target: &str) {
        let path = self.path(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, &path).unwrap();
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}
