//! What `run` and `doctor` tell a user before anything starts, against a fake /proc: the
//! module's state (not installed, or a kernel that loads no modules), the memlock
//! limit as the backend in use meets it, flags clap does not know, and the environment
//! the shim would read otherwise than written.

mod common;

use std::fs;
use std::ops::Deref;
use std::os::unix::process::CommandExt;
use std::process::Output;

use common::FakeRoot;

/// A fake /proc (a kernel that loads modules, release 6.1.0-test, a session with
/// CAP_IPC_LOCK, so that no memlock warning shows unless a test asks for one), an empty
/// /lib/modules and a stand-in shim.
struct Machine(FakeRoot);

impl Deref for Machine {
    type Target = FakeRoot;

    fn deref(&self) -> &FakeRoot {
        &self.0
    }
}

impl Machine {
    fn new() -> Machine {
        let machine = Machine(FakeRoot::new());
        machine.write("proc/modules", "");
        machine.write("proc/sys/kernel/osrelease", "6.1.0-test\n");
        machine.write("proc/self/status", WITH_IPC_LOCK);
        machine.write("lib/libgreenboost_cuda.so", "");
        fs::create_dir_all(machine.path("lib/modules")).unwrap();
        machine
    }

    /// `greenboost ARGS` with `env` added.
    fn greenboost(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = self.command(args);
        command.env("GREENBOOST_SHIM", self.path("lib/libgreenboost_cuda.so")).envs(env.iter().copied());
        command.output().unwrap()
    }

    /// As `greenboost`, with the locked-memory limit lowered to `kib` (soft and hard, as
    /// `ulimit -l` sets them; lowering needs no privilege).
    fn greenboost_with_memlock(&self, kib: u64, args: &[&str]) -> Output {
        let mut command = self.command(args);
        command.env("GREENBOOST_SHIM", self.path("lib/libgreenboost_cuda.so"));
        let limit = libc::rlimit { rlim_cur: kib << 10, rlim_max: kib << 10 };
        // SAFETY: between fork and exec the closure only calls setrlimit, which is
        // async-signal-safe, on a limit it owns.
        unsafe {
            command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            })
        };
        command.output().unwrap()
    }

    /// `greenboost run ARGS`'s stderr, less the dynamic loader's complaint about the
    /// stand-in shim.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let mut full = vec!["run"];
        full.extend_from_slice(args);
        let output = self.greenboost(&full, env);
        assert!(output.status.success(), "{output:?}");
        ours(&output)
    }
}

fn ours(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    stderr.lines().filter(|line| !line.starts_with("ERROR: ld.so:")).map(|line| format!("{line}\n")).collect()
}

const WITH_IPC_LOCK: &str = "Name:\tgreenboost\nCapEff:\t000001ffffffffff\n";
const WITHOUT_IPC_LOCK: &str = "Name:\tgreenboost\nCapEff:\t0000000000000000\n";

#[test]
fn unknown_flags_before_the_separator_are_refused_as_clap_refuses_them() {
    let machine = Machine::new();
    let output = machine.greenboost(&["run", "--unknown-flag", "--", "python3", "-V"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unexpected argument '--unknown-flag' found"), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing ran");
    // After `--`, and after the program's name, anything goes to the program.
    let stderr = machine.run(&["-q", "--", "sh", "-c", "exit 0", "--unknown-flag"], &[]);
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn a_missing_module_is_not_sent_to_modprobe() {
    let machine = Machine::new();
    let stderr = machine.run(&["--", "true"], &[]);
    assert!(
        stderr.contains("the greenboost module is not installed for kernel 6.1.0-test: see `greenboost doctor`"),
        "{stderr}"
    );
    assert!(!stderr.contains("modprobe"), "{stderr}");

    machine.write("lib/modules/6.1.0-test/extra/greenboost.ko", "");
    let stderr = machine.run(&["--", "true"], &[]);
    assert!(stderr.contains("is installed") && stderr.contains("sudo modprobe greenboost"), "{stderr}");

    fs::remove_file(machine.path("proc/modules")).unwrap();
    let stderr = machine.run(&["--", "true"], &[]);
    assert!(stderr.contains("this kernel cannot load modules (no /proc/modules"), "{stderr}");
}

#[test]
fn the_memlock_warning_names_the_backend_charged_and_spares_cap_ipc_lock() {
    let machine = Machine::new();
    machine.write("proc/self/status", WITHOUT_IPC_LOCK);
    let warned = |output: Output| {
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        stderr.lines().find(|line| line.contains("locked-memory limit")).map(str::to_owned)
    };
    // No module: the driver's registration is not charged; what others lock is.
    let userspace = warned(machine.greenboost_with_memlock(1024, &["run", "--", "true"])).expect("a warning");
    assert!(userspace.contains("is 1.00 MiB. The shim's userspace backend pins T2 through the driver's registration, which the limit does not count"), "{userspace}");

    // The module (its device opens): T2 itself is charged.
    machine.write("dev/greenboost", "");
    let module = warned(machine.greenboost_with_memlock(1024, &["run", "--", "true"])).expect("a warning");
    assert!(module.contains("the greenboost module charges T2 to it: T2 allocations past 1.00 MiB fail"), "{module}");
    let userspace = warned(machine.greenboost_with_memlock(1024, &["run", "--backend", "userspace", "--", "true"]));
    assert!(userspace.is_some_and(|line| line.contains("does not count")));

    // CAP_IPC_LOCK (root's) exempts the program from the limit: nothing to say.
    machine.write("proc/self/status", WITH_IPC_LOCK);
    assert_eq!(warned(machine.greenboost_with_memlock(1024, &["run", "--", "true"])), None);
    let doctor = machine.greenboost_with_memlock(1024, &["doctor", "--json"]);
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.contains("CAP_IPC_LOCK exempts this session from it"), "{doctor}");
}

#[test]
fn clamped_values_and_unknown_variables_are_warned_before_the_program_starts() {
    let machine = Machine::new();
    let output = machine.greenboost(
        &["run", "--stage-slices", "99", "--", "sh", "-c", "echo started >&2"],
        &[("GREENBOOST_STAGE_SLICE", "4")],
    );
    let stderr = ours(&output);
    let lines: Vec<&str> = stderr.lines().filter(|line| !line.contains("greenboost module")).collect();
    assert_eq!(
        lines,
        [
            "greenboost: warning: GREENBOOST_STAGE_SLICE is not a GreenBoost variable, so nothing reads it (did you mean GREENBOOST_STAGE_SLICES?); `greenboost run --help` lists the settings",
            "greenboost: warning: --stage-slices 99 is more than the shim uses (at most 8): it runs with 8",
            "started",
        ]
    );
}

#[test]
fn doctor_names_a_kernel_without_module_support_and_nothing_to_build() {
    let machine = Machine::new();
    fs::remove_file(machine.path("proc/modules")).unwrap();
    let output = machine.greenboost(&["doctor", "--json"], &[]);
    let json = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success());
    assert!(json.contains("\"finding\": \"kernel 6.1.0-test: this kernel cannot load modules (no /proc/modules: it was built without CONFIG_MODULES), so greenboost.ko cannot run on it; the shim uses its userspace backend meanwhile\""), "{json}");
    for advice in ["make kmod", "headers", "make.log", "not installed"] {
        assert!(!json.contains(advice), "{advice}: {json}");
    }
}
