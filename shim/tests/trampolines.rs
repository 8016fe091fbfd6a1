//! The `dlsym`/`dlopen` trampolines must be invisible to glibc's caller-based lookups:
//! real programs under LD_PRELOAD, built here with the C compiler.
//!
//! - another interposer preloaded after the shim resolves `RTLD_NEXT` relative to
//!   itself (a shim that called dlsym would make it find its own wrapper: endless
//!   recursion);
//! - a library that dlopens a bare name found through its own RUNPATH still finds it
//!   (a shim that called dlopen would make glibc search the shim's paths instead).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The release cdylib (what users preload), built now if needed: cargo does not build a
/// cdylib-only crate's library for its integration tests.
fn shim() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "-p", "greenboost-shim"])
        .current_dir(&root)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build --release -p greenboost-shim");
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/release/libgreenboost_cuda.so
    let target = exe.ancestors().nth(3).expect("target directory");
    let shim = target.join("release").join("libgreenboost_cuda.so");
    assert!(shim.exists(), "{} missing", shim.display());
    shim
}

fn cc(args: &[&str], dir: &Path) {
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(args)
        .current_dir(dir)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "cc {args:?}");
}

fn workdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    dir
}

/// Runs `program` in its own directory under LD_PRELOAD=`preload`: it must succeed and
/// print "ok" (the shim's debug log, on stderr, shows in a failure).
fn assert_runs_ok(program: &Path, preload: &str) {
    let output = Command::new(program)
        .current_dir(program.parent().expect("program directory"))
        .env("LD_PRELOAD", preload)
        .env("GREENBOOST_LOG", "debug")
        .output()
        .expect("run test program");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && stdout.contains("ok"), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn rtld_next_of_a_later_interposer_is_relative_to_it() {
    let dir = workdir("rtld-next");
    std::fs::write(
        dir.join("interposer.c"),
        r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>
int interposed_calls;
pid_t getppid(void) {
    pid_t (*next)(void) = (pid_t (*)(void))dlsym(RTLD_NEXT, "getppid");
    interposed_calls++;
    return next == getppid ? -1 : next();
}
"#,
    )
    .expect("write");
    std::fs::write(
        dir.join("main.c"),
        r#"
#include <stdio.h>
#include <unistd.h>
#include <dlfcn.h>
int main(void) {
    pid_t parent = getppid();
    int *calls = dlsym(RTLD_DEFAULT, "interposed_calls");
    if (parent <= 0 || !calls || *calls != 1) { printf("FAIL parent %d calls %d\n", parent, calls ? *calls : -1); return 1; }
    printf("ok\n");
    return 0;
}
"#,
    )
    .expect("write");
    cc(&["-shared", "-fPIC", "-o", "libinterposer.so", "interposer.c", "-ldl"], &dir);
    cc(&["-o", "main", "main.c", "-ldl"], &dir);
    let preload = format!("{}:{}", shim().display(), dir.join("libinterposer.so").display());
    assert_runs_ok(&dir.join("main"), &preload);
}

#[test]
fn dlopen_by_bare_name_uses_the_callers_runpath() {
    let dir = workdir("runpath");
    std::fs::create_dir_all(dir.join("private")).expect("dir");
    std::fs::write(dir.join("private/dep.c"), "int private_answer(void) { return 42; }\n").expect("write");
    std::fs::write(
        dir.join("loader.c"),
        r#"
#include <dlfcn.h>
int load_private(void) {
    void *h = dlopen("libprivatedep.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    int (*answer)(void) = (int (*)(void))dlsym(h, "private_answer");
    return answer ? answer() : -2;
}
"#,
    )
    .expect("write");
    std::fs::write(
        dir.join("main.c"),
        r#"
#include <stdio.h>
#include <dlfcn.h>
int main(void) {
    void *loader = dlopen("./libloader.so", RTLD_NOW);
    if (!loader) { printf("FAIL %s\n", dlerror()); return 1; }
    int (*load)(void) = (int (*)(void))dlsym(loader, "load_private");
    int got = load ? load() : -3;
    if (got != 42) { printf("FAIL got %d: %s\n", got, dlerror()); return 1; }
    printf("ok\n");
    return 0;
}
"#,
    )
    .expect("write");
    cc(&["-shared", "-fPIC", "-o", "private/libprivatedep.so", "private/dep.c"], &dir);
    cc(
        &[
            "-shared",
            "-fPIC",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/private",
            "-o",
            "libloader.so",
            "loader.c",
            "-ldl",
        ],
        &dir,
    );
    cc(&["-o", "main", "main.c", "-ldl"], &dir);
    assert_runs_ok(&dir.join("main"), &shim().display().to_string());
}
