//! For the integration tests: a temporary directory standing in for /sys, /proc,
//! /dev, /dev/shm, /lib/modules, /etc/systemd/system and /var/lib/greenboost (removed
//! when dropped), and the `greenboost` command pointed there, NVML off.

#![allow(dead_code)] // each test binary uses its own part

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use greenboost_policy::{Published, PUBLISHED_MAGIC, PUBLISHED_PREFIX, PUBLISHED_VERSION};
use tempfile::TempDir;

pub struct FakeRoot(TempDir);

impl FakeRoot {
    pub fn new() -> FakeRoot {
        FakeRoot(TempDir::new().unwrap())
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.0.path().join(relative)
    }

    pub fn root(&self) -> &Path {
        self.0.path()
    }

    /// Writes `content` to `relative`, making its directories.
    pub fn write(&self, relative: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, content).unwrap();
        path
    }

    /// A live process `pid` (its /proc entries) that publishes `record` as the shim does.
    pub fn shim_process(&self, pid: u32, comm: &str, record: Published) {
        let start_time = 555;
        self.write(
            &format!("proc/{pid}/stat"),
            format!("{pid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start_time} 0 0\n"),
        );
        self.write(&format!("proc/{pid}/comm"), format!("{comm}\n"));
        let record = Published {
            magic: PUBLISHED_MAGIC,
            version: PUBLISHED_VERSION,
            size: Published::SIZE as u32,
            pid,
            start_time,
            ..record
        };
        // SAFETY: `Published` is a plain repr(C) struct of integers, read as its bytes.
        let bytes = unsafe { std::slice::from_raw_parts((&record as *const Published).cast::<u8>(), Published::SIZE) };
        self.write(&format!("shm/{PUBLISHED_PREFIX}{pid}"), bytes);
    }

    /// `greenboost ARGS` against this root.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_greenboost"));
        command
            .args(args)
            .env("GREENBOOST_SYSFS_ROOT", self.path("sys"))
            .env("GREENBOOST_PROC_ROOT", self.path("proc"))
            .env("GREENBOOST_DEVICE", self.path("dev/greenboost"))
            .env("GREENBOOST_SHM_DIR", self.path("shm"))
            .env("GREENBOOST_MODULES_DIR", self.path("lib/modules"))
            .env("GREENBOOST_STATE_DIR", self.path("state"))
            .env("GREENBOOST_SYSTEMD_DIR", self.path("etc/systemd/system"))
            .env("GREENBOOST_NVML_LIBRARY", "none")
            .env_remove("LD_PRELOAD");
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
