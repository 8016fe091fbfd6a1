//! `greenboost swap add|remove|status` as a user meets them: bad input refused with a
//! sentence and a nonzero exit, files it did not make never touched, root asked for
//! before anything changes. The whole add/remove cycle runs (as root only) against
//! stand-ins for mkswap, swapon and swapoff that edit a fake /proc/swaps, so no test
//! ever changes this machine's swap.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Sandbox(tempfile::TempDir);

impl Sandbox {
    /// Under target/ (not /tmp, which may be tmpfs, where `swap add` rightly refuses).
    fn new(name: &str) -> Sandbox {
        Sandbox::new_in(Path::new(env!("CARGO_TARGET_TMPDIR")), name)
    }

    /// One an unprivileged user can reach: under target/ when every directory above it
    /// lets others pass, else under /var/tmp (a checkout inside a `mktemp -d` folder,
    /// mode 0700, is out of nobody's reach).
    fn reachable_by_all(name: &str) -> Sandbox {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let passable =
            target.ancestors().all(|dir| fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
        Sandbox::new_in(if passable { target } else { Path::new("/var/tmp") }, name)
    }

    fn new_in(base: &Path, name: &str) -> Sandbox {
        let dir = tempfile::Builder::new().prefix(&format!("greenboost-swap-{name}-")).tempdir_in(base).unwrap();
        // Others may enter it, as a directory made by hand (tempfile makes it 0700).
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["proc", "sys", "bin"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        fs::write(dir.path().join("proc/swaps"), "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n").unwrap();
        Sandbox(dir)
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.0.path().join(relative)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_greenboost"));
        command
            .args(args)
            .env("GREENBOOST_PROC_ROOT", self.path("proc"))
            .env("GREENBOOST_SYSFS_ROOT", self.path("sys"))
            .env("GREENBOOST_STATE_DIR", self.path("state"))
            // The stand-ins, and no sbin: the real mkswap/swapon/swapoff live there.
            .env("PATH", format!("{}:/usr/bin:/bin", self.path("bin").display()));
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// A stand-in for a util-linux command: logs its arguments, then runs `body`.
    fn stand_in(&self, name: &str, body: &str) {
        let script = format!("#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}\n", self.path("calls").display());
        let path = self.path(&format!("bin/{name}"));
        fs::write(&path, script).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn calls(&self) -> String {
        fs::read_to_string(self.path("calls")).unwrap_or_default()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_refused(output: &Output, code: i32, message: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stdout: {} stderr: {stderr}", text(&output.stdout));
    assert!(stderr.contains(message), "{stderr}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn add_refuses_bad_sizes_and_missing_sizes() {
    let sandbox = Sandbox::new("sizes");
    let new = sandbox.path("t3.swap");
    let new = new.to_str().unwrap();
    assert_refused(&sandbox.run(&["swap", "add", "--size", "16X", "--path", new]), 2, "'16X' is not a size");
    assert_refused(&sandbox.run(&["swap", "add", "--size", "0", "--path", new]), 2, "above zero");
    assert_refused(&sandbox.run(&["swap", "add", "--path", new]), 1, "--size is needed to create");
    assert_refused(&sandbox.run(&["swap", "add", "--size", "4K", "--path", new]), 1, "too small for a swap file");
    assert_refused(&sandbox.run(&["swap", "add", "--size", "1000T", "--path", new]), 1, "cannot hold the swap file");
    assert_refused(&sandbox.run(&["swap", "add", "--size", "1G", "--priority", "-5"]), 2, "-5");
    assert!(!Path::new(new).exists() && !sandbox.path("state").exists(), "nothing was created");
}

#[test]
fn add_and_remove_never_touch_a_file_they_did_not_make() {
    let sandbox = Sandbox::new("foreign");
    let precious = sandbox.path("precious");
    fs::write(&precious, "keep me").unwrap();
    let path = precious.to_str().unwrap();
    assert_refused(&sandbox.run(&["swap", "add", "--size", "1G", "--path", path]), 1, "did not create it");
    assert_refused(
        &sandbox.run(&["swap", "remove", "--path", path]),
        1,
        "is not one of its files, so it is left alone",
    );
    assert_refused(
        &sandbox.run(&["swap", "add", "--size", "1G", "--path", "/nonexistent-dir/t3.swap"]),
        1,
        "make the directory first",
    );
    assert_eq!(fs::read_to_string(&precious).unwrap(), "keep me");
    assert!(sandbox.calls().is_empty());
}

#[test]
fn remove_with_nothing_added_says_so() {
    let sandbox = Sandbox::new("nothing-added");
    assert_refused(
        &sandbox.run(&["swap", "remove"]),
        1,
        "nothing to remove: `greenboost swap add` has not created a swap file",
    );
    assert!(sandbox.calls().is_empty());
}

#[test]
fn add_without_root_says_so_before_changing_anything() {
    let sandbox = Sandbox::reachable_by_all("unprivileged");
    let mut command = sandbox.command(&[]);
    if is_root() {
        // As nobody, in a directory nobody may read (the checks pass, root is missing).
        fs::set_permissions(&sandbox.0, fs::Permissions::from_mode(0o755)).unwrap();
        command = Command::new("setpriv");
        command.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_greenboost")]);
        command
            .env("GREENBOOST_PROC_ROOT", sandbox.path("proc"))
            .env("GREENBOOST_SYSFS_ROOT", sandbox.path("sys"))
            .env("GREENBOOST_STATE_DIR", sandbox.path("state"))
            .env("PATH", format!("{}:/usr/bin:/bin", sandbox.path("bin").display()));
    }
    let path = sandbox.path("t3.swap");
    let output = command.args(["swap", "add", "--size", "1M", "--path", path.to_str().unwrap()]).output();
    let Ok(output) = output else {
        eprintln!("skipped: setpriv is not installed");
        return;
    };
    assert_refused(&output, 1, "creating and enabling swap needs root (EPERM");
    assert!(
        text(&output.stderr).contains("run `sudo greenboost swap add --size 1M --path"),
        "{}",
        text(&output.stderr)
    );
    assert!(!path.exists() && !sandbox.path("state").exists());
}

#[test]
fn status_says_when_there_is_no_swap() {
    let sandbox = Sandbox::new("status");
    let output = sandbox.run(&["swap", "status"]);
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("no swap: T3 buffers cannot be allocated (T3 needs swap)\n"), "{stdout}");
}

/// The stand-ins: swapon adds the file to the fake /proc/swaps, swapoff takes it out.
fn stand_ins(sandbox: &Sandbox) {
    let swaps = sandbox.path("proc/swaps");
    let swaps = swaps.display();
    sandbox.stand_in("mkswap", "[ -f \"$1\" ] || exit 1");
    sandbox.stand_in("swapon", &format!("for f; do p=$f; done; echo \"$p file 1024 0 -2\" >> '{swaps}'"));
    sandbox.stand_in("swapoff", &format!("grep -v \"^$1 \" '{swaps}' > '{swaps}.new'; mv '{swaps}.new' '{swaps}'"));
}

#[test]
fn add_then_remove_as_root_with_stand_ins() {
    if !is_root() {
        eprintln!("skipped: needs root (the commands refuse otherwise)");
        return;
    }
    let sandbox = Sandbox::new("cycle");
    stand_ins(&sandbox);
    let default = sandbox.path("state/t3.swap");

    let output = sandbox.run(&["swap", "add", "--size", "2M", "--priority", "10"]);
    assert!(output.status.success(), "{output:?}");
    assert!(text(&output.stdout).starts_with(&format!("created {} (2.00 MiB", default.display())), "{output:?}");
    assert!(text(&output.stderr).contains("warning: cannot tell whether"), "{output:?}");
    let meta = fs::metadata(&default).unwrap();
    assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (2 << 20, 0o600));
    assert_eq!(sandbox.calls(), format!("mkswap {0}\nswapon --priority 10 {0}\n", default.display()));
    let record = fs::read_to_string(sandbox.path("state/swapfiles")).unwrap();
    assert_eq!(record.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>(), vec![default.to_str().unwrap()]);

    let again = sandbox.run(&["swap", "add"]);
    assert!(text(&again.stdout).contains("is already enabled as swap"), "{again:?}");
    let status = text(&sandbox.run(&["swap", "status"]).stdout);
    assert!(status.contains(&format!("  {}: enabled", default.display())), "{status}");

    let output = sandbox.run(&["swap", "remove"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(text(&output.stdout), format!("turned off and deleted {}\n", default.display()));
    assert!(sandbox.calls().ends_with(&format!("swapoff {}\n", default.display())));
    assert!(!sandbox.path("state").exists(), "file, record and the default directory are gone");
}

#[test]
fn a_failed_mkswap_leaves_nothing_behind() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let sandbox = Sandbox::new("mkswap-fails");
    stand_ins(&sandbox);
    sandbox.stand_in("mkswap", "echo 'mkswap: error: something' >&2; exit 1");
    let path = sandbox.path("t3.swap");
    let output = sandbox.run(&["swap", "add", "--size", "1M", "--path", path.to_str().unwrap()]);
    assert_refused(&output, 1, "mkswap: error: something");
    assert_refused(&output, 1, "failed (exit status: 1); removed");
    assert!(!path.exists());
    assert!(!sandbox.path("state/swapfiles").exists(), "no record of a file that is not there");
    assert!(!sandbox.calls().contains("swapon"));
}
