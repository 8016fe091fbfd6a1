//! `greenboost service enable|disable UNIT` against a stand-in systemctl (it answers
//! `show` from a file the test writes and logs every call) and a fake
//! /etc/systemd/system: the drop-in's content, an LD_PRELOAD the unit sets kept after
//! the shim, an EnvironmentFile= that sets one warned about, a unit that does not
//! exist refused, and `--root`, which asks systemd nothing.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;

use common::{text, FakeRoot};

/// A fake root with a stand-in systemctl on PATH and a shim to preload.
fn machine() -> FakeRoot {
    let root = FakeRoot::new();
    let log = root.path("systemctl.log");
    let show = root.path("show");
    let systemctl = format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\ncase $1 in show) cat '{}' 2>/dev/null || echo LoadState=not-found ;; esac\n",
        log.display(),
        show.display()
    );
    let path = root.write("bin/systemctl", systemctl);
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    root.write("lib/libgreenboost_cuda.so", "");
    root
}

fn greenboost(root: &FakeRoot, args: &[&str]) -> Output {
    let shim = root.path("lib/libgreenboost_cuda.so");
    let mut command = root.command(args);
    command.env("PATH", format!("{}:/usr/bin:/bin", root.path("bin").display())).env("GREENBOOST_SHIM", shim);
    if args.contains(&"--root") {
        // /etc/systemd/system under the root, as an install writes it.
        command.env_remove("GREENBOOST_SYSTEMD_DIR");
    }
    command.output().unwrap()
}

fn dropin(root: &FakeRoot, unit: &str) -> String {
    fs::read_to_string(root.path(&format!("etc/systemd/system/{unit}.d/greenboost.conf"))).unwrap_or_default()
}

/// The drop-in's settings (its comments left out).
fn settings(text: &str) -> Vec<&str> {
    text.lines().filter(|line| !line.starts_with('#')).collect()
}

#[test]
fn enable_keeps_the_units_preload_after_the_shim_and_disable_undoes_it() {
    let root = machine();
    root.write(
        "show",
        "LoadState=loaded\nEnvironment=OLLAMA_HOST=0.0.0.0 LD_PRELOAD=/opt/other/libhook.so\nEnvironmentFiles=\n",
    );
    let output = greenboost(&root, &["service", "enable", "ollama", "--report", "combined", "--log", "info"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shim = root.path("lib/libgreenboost_cuda.so");
    assert_eq!(
        settings(&dropin(&root, "ollama.service")),
        [
            "[Service]",
            &format!("Environment=\"LD_PRELOAD={}:/opt/other/libhook.so\"", shim.display()),
            "Environment=\"GREENBOOST_REPORT=combined\"",
            "Environment=\"GREENBOOST_LOG=info\"",
            "SupplementaryGroups=greenboost",
            "LimitMEMLOCK=infinity",
        ]
    );
    let stdout = text(&output.stdout);
    assert!(stdout.contains("sudo systemctl restart ollama.service"), "{stdout}");

    // Enabled again, the unit's environment holds our drop-in's preload: the shim once.
    root.write("show", format!("LoadState=loaded\nEnvironment=LD_PRELOAD={}:/opt/other/libhook.so\n", shim.display()));
    assert!(greenboost(&root, &["service", "enable", "ollama"]).status.success());
    assert!(dropin(&root, "ollama.service").contains(&format!("LD_PRELOAD={}:/opt/other/libhook.so\"", shim.display())));

    root.write("etc/systemd/system/ollama.service.d/override.conf", "[Service]\n");
    let output = greenboost(&root, &["service", "disable", "ollama"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(!root.path("etc/systemd/system/ollama.service.d/greenboost.conf").exists());
    assert!(root.path("etc/systemd/system/ollama.service.d/override.conf").exists(), "the unit's other drop-ins stay");
    let calls = fs::read_to_string(root.path("systemctl.log")).unwrap();
    assert_eq!(calls.matches("daemon-reload").count(), 3, "{calls}");

    let output = greenboost(&root, &["service", "disable", "ollama"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("ollama.service has no GreenBoost drop-in"), "{}", text(&output.stderr));
}

#[test]
fn an_environment_file_setting_the_preload_is_warned_about() {
    let root = machine();
    let env_file = root.write("etc/default/vllm", "export LD_PRELOAD=/opt/libtcmalloc.so\n");
    root.write(
        "show",
        format!("LoadState=loaded\nEnvironment=\nEnvironmentFiles={} (ignore_errors=no)\n", env_file.display()),
    );
    let output = greenboost(&root, &["service", "enable", "vllm.service"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "warning: {} (an EnvironmentFile= of vllm.service) sets LD_PRELOAD, which replaces the drop-in's",
            env_file.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_unit_that_does_not_exist_or_runs_nothing_is_refused() {
    let root = machine();
    let output = greenboost(&root, &["service", "enable", "olama"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("olama.service: no such unit (ENOENT)"), "{}", text(&output.stderr));
    let output = greenboost(&root, &["service", "enable", "ollama.socket"]);
    assert_eq!(output.status.code(), Some(2), "a usage error, as clap's");
    assert!(text(&output.stderr).contains("is a socket unit, which runs no program"));
    assert!(!root.path("etc/systemd").exists(), "nothing written");
}

#[test]
fn root_writes_under_it_and_asks_systemd_nothing() {
    let root = machine();
    let image = root.path("image");
    root.write("image/opt/gb/lib/libgreenboost_cuda.so", "");
    let image_arg = image.to_str().unwrap();
    let output = greenboost(&root, &["service", "enable", "ollama", "--root", image_arg]);
    assert!(text(&output.stderr).contains("--root needs --shim PATH"), "{}", text(&output.stderr));
    let args = ["service", "enable", "ollama", "--root", image_arg, "--shim", "/opt/gb/lib/libgreenboost_cuda.so"];
    let output = greenboost(&root, &args);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let written = fs::read_to_string(image.join("etc/systemd/system/ollama.service.d/greenboost.conf")).unwrap();
    assert!(written.contains("Environment=\"LD_PRELOAD=/opt/gb/lib/libgreenboost_cuda.so\""), "{written}");
    assert!(greenboost(&root, &["service", "disable", "ollama", "--root", image_arg]).status.success());
    assert!(!image.join("etc/systemd/system/ollama.service.d").exists());
    assert!(!root.path("systemctl.log").exists(), "no systemctl call");
}
