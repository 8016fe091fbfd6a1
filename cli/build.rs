//! Build-time facts the CLI prints: the git commit it was built from (`--version`;
//! "unknown" outside a git tree, e.g. from a tarball), and the module's parameters as
//! kmod/glue.c declares them (`greenboost man` writes greenboost.4 from them), so
//! neither can drift from its source.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// The commit, with the files whose change means another one (HEAD, the branch's ref,
/// packed refs): cargo runs this again when one changes.
fn commit() -> String {
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else { return "unknown".to_owned() };
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.into_iter().flatten() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        // A path that does not exist would make cargo run this at every build.
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    commit
}

/// Each `module_param(NAME, TYPE, PERMISSIONS)`, with its `static ... NAME = DEFAULT;`
/// (`static ... NAME;`: 0) and the string of its `MODULE_PARM_DESC(NAME, "..." "...")`.
fn module_parameters(glue: &str) -> Vec<[String; 5]> {
    let mut parameters = Vec::new();
    for declaration in glue.split("module_param(").skip(1) {
        let Some((arguments, _)) = declaration.split_once(')') else { continue };
        let fields: Vec<&str> = arguments.split(',').map(str::trim).collect();
        let [name, kind, permissions] = fields[..] else { continue };
        // A static without an initializer is 0, as C makes it.
        let default = glue
            .lines()
            .filter_map(|line| line.trim().strip_prefix("static "))
            .find_map(|line| match line.split_once(&format!(" {name} = ")) {
                Some((_, value)) => value.strip_suffix(';'),
                None => line.ends_with(&format!(" {name};")).then_some("0"),
            })
            .unwrap_or_else(|| panic!("kmod/glue.c: no `static ... {name}` declaration"));
        let description = glue
            .split_once(&format!("MODULE_PARM_DESC({name},"))
            .and_then(|(_, rest)| rest.split_once(");"))
            .map(|(strings, _)| strings.split('"').skip(1).step_by(2).collect::<String>())
            .unwrap_or_else(|| panic!("kmod/glue.c: no MODULE_PARM_DESC for {name}"));
        parameters.push([name, kind, default, permissions, &description].map(str::to_owned));
    }
    parameters
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-env=GB_BUILD_COMMIT={}", commit());

    let glue_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kmod/glue.c");
    println!("cargo:rerun-if-changed={}", glue_path.display());
    let glue = fs::read_to_string(&glue_path).unwrap_or_else(|e| panic!("{}: {e}", glue_path.display()));
    let parameters = module_parameters(&glue);
    assert!(!parameters.is_empty(), "kmod/glue.c declares no module_param");
    let rows: String = parameters.iter().map(|row| format!("    {row:?},\n")).collect();
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("module_parameters.rs");
    fs::write(out, format!("/// kmod/glue.c's parameters: name, type, default, permissions, description.\npub const MODULE_PARAMETERS: &[[&str; 5]] = &[\n{rows}];\n"))
        .unwrap();
}
