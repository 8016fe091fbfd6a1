//! `run`, `demo` and `doctor` as a user meets them on a machine without the module or a
//! GPU (this test machine): what they set, what they refuse, and their messages.

use std::path::PathBuf;
use std::process::{Command, Output};

fn greenboost(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_greenboost"));
    command
        .args(args)
        .env("GREENBOOST_DEVICE", "/nonexistent/greenboost")
        .env("GREENBOOST_NVML_LIBRARY", "none")
        .env_remove("LD_PRELOAD");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The command exited with `code` and its stderr says `message`.
fn assert_refused(output: &Output, code: i32, message: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(message), "{stderr}");
}

/// A stand-in shim file (`run` only needs it to exist; the dynamic loader of the child
/// ignores it, with a message on stderr, so the test programs run unhooked), in a
/// directory removed with the returned guard.
fn fake_shim() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libgreenboost_cuda.so");
    std::fs::write(&path, b"").unwrap();
    (dir, path)
}

#[test]
fn run_sets_the_preload_and_policy_then_execs() {
    let (_dir, shim) = fake_shim();
    let output = greenboost(
        &[
            "run",
            "--shim",
            shim.to_str().unwrap(),
            "--vram-budget",
            "1.5G",
            "--report",
            "combined",
            "--backend",
            "userspace",
            "--",
            "sh",
            "-c",
            "LD=$LD_PRELOAD; unset LD_PRELOAD; echo \"$LD|$GREENBOOST_VRAM_BUDGET|$GREENBOOST_REPORT|$GREENBOOST_BACKEND\"; exit 7",
        ],
        &[("LD_PRELOAD", "")],
    );
    assert_eq!(output.status.code(), Some(7), "the program's exit status is the command's: {output:?}");
    assert_eq!(text(&output.stdout).trim(), format!("{}|1610612736|combined|userspace", shim.display()));
    // --backend userspace does not need the module: no warning about it.
    assert!(!text(&output.stderr).contains("/nonexistent/greenboost"), "{}", text(&output.stderr));
}

#[test]
fn run_warns_without_the_module_and_refuses_kmod_only() {
    let (_dir, shim) = fake_shim();
    let shim = shim.to_str().unwrap();
    let output = greenboost(&["run", "--shim", shim, "--", "true"], &[]);
    assert!(output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("warning: /nonexistent/greenboost does not exist"), "{stderr}");

    let output = greenboost(&["run", "--shim", shim, "--backend", "kmod", "--", "true"], &[]);
    assert_refused(&output, 1, "--backend kmod needs the module");
}

#[test]
fn run_explains_bad_input() {
    let (_dir, shim) = fake_shim();
    let shim = shim.to_str().unwrap();
    let output = greenboost(&["run", "--shim", shim, "-q", "--", "/nonexistent/program"], &[]);
    assert_refused(&output, 1, "cannot run '/nonexistent/program': no such program");

    let output = greenboost(&["run", "--vram-budget", "8X", "--", "true"], &[]);
    assert_refused(&output, 2, "'8X' is not a size"); // clap's usage error

    let output = greenboost(&["run", "--shim", "/nonexistent/libgreenboost_cuda.so", "--", "true"], &[]);
    assert_refused(&output, 1, "build it with `make shim`");
}

#[test]
fn demo_without_a_driver_explains_and_succeeds() {
    let output = greenboost(&["demo"], &[("GREENBOOST_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")]);
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    assert!(stdout.contains("No NVIDIA GPU driver here"), "{stdout}");
    assert!(stdout.contains("Nothing was run"), "{stdout}");
    assert!(stdout.contains("greenboost doctor"), "{stdout}");
}

#[test]
fn doctor_json_lists_findings_with_fixes() {
    let output = greenboost(&["doctor", "--json"], &[]);
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("{\n  \"kernel\": "), "{stdout}");
    assert!(stdout.contains("\"findings\": ["), "{stdout}");
    assert!(stdout.contains("\"area\": \"device\""), "{stdout}");
    // Every level in lower case, as the JSON's other words.
    for line in stdout.lines().filter(|line| line.contains("\"level\": ")) {
        let level = line.trim().trim_start_matches("\"level\": ").trim_end_matches(',');
        assert!(["\"ok\"", "\"info\"", "\"warn\"", "\"fail\""].contains(&level), "{line}");
    }
    // The exit status says whether anything failed, and the JSON agrees.
    let failed = stdout.contains("\"level\": \"fail\"");
    assert_eq!(output.status.success(), !failed, "{stdout}");
    assert!(stdout.contains(&format!("\"ok\": {}", !failed)), "{stdout}");
}

#[test]
fn run_and_demo_offer_a_flag_for_every_setting() {
    for command in ["run", "demo"] {
        let output = greenboost(&[command, "--help"], &[]);
        let help = text(&output.stdout);
        for setting in greenboost_policy::SETTINGS {
            if let Some(flag) = setting.flag {
                assert!(help.contains(&format!("--{flag}")), "{command}: --{flag} missing:\n{help}");
                assert!(help.contains(setting.env), "{command}: {} missing:\n{help}", setting.env);
            }
        }
    }
}

#[test]
fn run_passes_per_device_sizes_and_refuses_what_the_shim_would() {
    let (_dir, shim) = fake_shim();
    let shim = shim.to_str().unwrap();
    let output = greenboost(
        &[
            "run",
            "--shim",
            shim,
            "-q",
            "--vram-budget",
            "0:20G,1:8G",
            "--vram-headroom",
            "2G",
            "--host-reserve",
            "256M",
            "--",
            "sh",
            "-c",
            "echo \"$GREENBOOST_VRAM_BUDGET|$GREENBOOST_VRAM_HEADROOM|$GREENBOOST_HOST_RESERVE\"",
        ],
        &[],
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(text(&output.stdout).trim(), "0:21474836480,1:8589934592|2147483648|268435456");
    for bad in ["1.5", ".5G", "0:1G,0:2G"] {
        let output = greenboost(&["run", "--vram-budget", bad, "--", "true"], &[]);
        assert_refused(&output, 2, &format!("'{bad}'"));
    }
}
