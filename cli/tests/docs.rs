//! What the shells and `man` get, from the one clap definition: completions that parse
//! and name every subcommand, a manual page per command and greenboost(4) with every
//! parameter the module has (packaging/modprobe.d lists them, and tests/install checks
//! that list against kmod/glue.c), and `--version` with the commit.

mod common;

use std::process::Command;

use common::text;

fn greenboost(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_greenboost")).args(args).output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
}

const SUBCOMMANDS: [&str; 8] = ["status", "run", "doctor", "demo", "swap", "service", "completions", "man"];

#[test]
fn completions_parse_and_name_every_subcommand() {
    let bash = greenboost(&["completions", "bash"]);
    let checked = Command::new("bash").args(["-n", "-c", &bash]).status().unwrap();
    assert!(checked.success());
    for shell in ["bash", "zsh", "fish"] {
        let script = greenboost(&["completions", shell]);
        for subcommand in SUBCOMMANDS {
            assert!(script.contains(subcommand), "{shell}: {subcommand}");
        }
    }
}

#[test]
fn manual_pages_cover_every_command_and_the_modules_parameters() {
    let dir = tempfile::tempdir().unwrap();
    greenboost(&["man", dir.path().to_str().unwrap()]);
    for page in ["greenboost.1", "greenboost-status.1", "greenboost-service-enable.1", "greenboost-swap-add.1"] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.contains(".TH greenboost"), "{page}");
    }
    let module = std::fs::read_to_string(dir.path().join("greenboost.4")).unwrap();
    let modprobe =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/modprobe.d/greenboost.conf"))
            .unwrap();
    let options = modprobe.lines().find_map(|line| line.strip_prefix("# options greenboost ")).unwrap();
    for parameter in options.split_whitespace().map(|option| option.split('=').next().unwrap()) {
        assert!(module.contains(&format!("\\fB{parameter}\\fR")), "greenboost.4 lacks {parameter}");
    }
}

#[test]
fn version_names_the_commit() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map_or_else(|| "unknown".to_owned(), |output| text(&output.stdout).trim().to_owned());
    assert_eq!(greenboost(&["--version"]), format!("greenboost {} (commit {commit})\n", env!("CARGO_PKG_VERSION")));
}
