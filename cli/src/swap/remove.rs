//! `greenboost swap remove`: swapoff and delete a swap file `swap add` created. A file
//! it did not create is refused before anything happens; a failed swapoff (the pages in
//! it need RAM to come back) keeps the file and its record.

use std::fs;
use std::io;
use std::path::Path;
use std::process::ExitCode;

use super::{active_area, proc_swaps, record, require_root, resolve_path, run_util};
use crate::paths::SystemPaths;

/// Checks that `path` is ours; `Ok(true)` when it is active swap now.
pub fn check(paths: &SystemPaths, path: &Path) -> Result<bool, String> {
    let recorded = record::read(paths).map_err(|e| e.to_string())?;
    if !recorded.iter().any(|p| p == path) {
        return Err(not_recorded(paths, path, &recorded));
    }
    if fs::symlink_metadata(path).is_ok_and(|meta| !meta.file_type().is_file()) {
        return Err(format!("{} is not a regular file any more: remove it yourself", path.display()));
    }
    let areas = proc_swaps::read(paths).map_err(|e| format!("cannot read /proc/swaps: {e}"))?;
    Ok(active_area(&areas, path).is_some())
}

/// Why `path` is not removed: nothing was ever added, no such file, or a file `swap add`
/// did not create (with the ones it did).
fn not_recorded(paths: &SystemPaths, path: &Path, recorded: &[std::path::PathBuf]) -> String {
    let shown = path.display();
    if recorded.is_empty() {
        return format!(
            "nothing to remove: `greenboost swap add` has not created a swap file ({} records none){}",
            paths.swap_record().display(),
            if path.exists() {
                format!("; {shown} is not one of its files, so it is left alone")
            } else {
                String::new()
            }
        );
    }
    let ours: Vec<String> = recorded.iter().map(|p| p.display().to_string()).collect();
    let what = if fs::symlink_metadata(path).is_ok() {
        format!("{shown} was not created by `greenboost swap add`: not touching it")
    } else {
        format!("{shown}: no such file (ENOENT)")
    };
    format!("{what}. The swap files it created: {} (remove one with --path)", ours.join(", "))
}

pub fn remove(paths: &SystemPaths, path: Option<&Path>) -> Result<ExitCode, String> {
    let path = resolve_path(paths, path)?;
    let active = check(paths, &path)?;
    require_root("turning swap off and deleting it")?;
    let shown = path.display();
    if active {
        run_util("swapoff", &[&path.to_string_lossy()]).map_err(|e| {
            format!("{e}: kept {shown}. swapoff needs free RAM for the pages in it: free memory (or end the programs using T3) and try again")
        })?;
    }
    let deleted = match fs::remove_file(&path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(format!("cannot delete {shown}: {e}")),
    };
    record::remove(paths, &path).map_err(|e| format!("cannot update {}: {e}", paths.swap_record().display()))?;
    // The default directory holds nothing else of ours once its record is gone.
    let _ = fs::remove_dir(&paths.state);
    let off = if active { "turned off and " } else { "" };
    if deleted {
        println!("{off}deleted {shown}");
    } else {
        println!("{shown} was already gone; removed it from {}", paths.swap_record().display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn only_recorded_files_are_removed() {
        let root = FakeRoot::new();
        root.write("proc/swaps", "Filename Type Size Used Priority\n");
        let foreign = root.write("precious.swap", "x");
        let refusal = check(&root.paths, &foreign).unwrap_err();
        assert!(
            refusal.starts_with("nothing to remove: `greenboost swap add` has not created a swap file"),
            "{refusal}"
        );
        assert!(refusal.ends_with("precious.swap is not one of its files, so it is left alone"), "{refusal}");
        let ours = root.write("t3.swap", "x");
        record::add(&root.paths, &ours).unwrap();
        let refusal = check(&root.paths, &foreign).unwrap_err();
        assert!(
            refusal.contains(
                "precious.swap was not created by `greenboost swap add`: not touching it. The swap files it created: "
            ),
            "{refusal}"
        );
        let refusal = check(&root.paths, &root.path("typo.swap")).unwrap_err();
        assert!(refusal.contains("typo.swap: no such file (ENOENT). The swap files it created: "), "{refusal}");
        assert_eq!(check(&root.paths, &ours), Ok(false));
        root.write("proc/swaps", &format!("Filename Type Size Used Priority\n{} file 4 0 -2\n", ours.display()));
        assert_eq!(check(&root.paths, &ours), Ok(true));
        fs::remove_file(&ours).unwrap();
        fs::create_dir(&ours).unwrap();
        assert!(check(&root.paths, &ours).unwrap_err().contains("not a regular file"));
    }
}
