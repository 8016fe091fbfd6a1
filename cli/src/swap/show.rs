//! `greenboost swap status`: each active swap area with the disk it is on, and the
//! files `swap add` created, enabled or not.

use std::path::Path;
use std::process::ExitCode;

use super::{active_area, backing, describe_area, proc_swaps, record, ADD_HINT, NO_SWAP};
use crate::paths::SystemPaths;

/// The text of `swap status`.
pub fn render(paths: &SystemPaths) -> Result<String, String> {
    let areas =
        proc_swaps::read(paths).map_err(|e| format!("cannot read {}: {e}", paths.proc_path("swaps").display()))?;
    let recorded = record::read(paths).map_err(|e| e.to_string())?;
    let mut out = String::new();
    if areas.is_empty() {
        out.push_str(&format!("{NO_SWAP}\nto add a swap file: {ADD_HINT}\n"));
    } else {
        out.push_str("Swap areas (/proc/swaps):\n");
        for area in &areas {
            let ours = recorded.iter().any(|p| Path::new(&area.path) == p);
            let mark = if ours { " [greenboost swap add]" } else { "" };
            out.push_str(&format!("  {}{mark}\n", describe_area(area, &backing::of_area(paths, area))));
        }
    }
    if recorded.is_empty() {
        out.push_str(&format!("Swap files made by `greenboost swap add`: none ({})\n", paths.swap_record().display()));
    } else {
        out.push_str(&format!("Swap files made by `greenboost swap add` ({}):\n", paths.swap_record().display()));
        for path in &recorded {
            let state = if active_area(&areas, path).is_some() {
                "enabled".to_owned()
            } else if path.exists() {
                format!("not enabled: `sudo greenboost swap add --path {}` enables it", path.display())
            } else {
                format!(
                    "missing (an interrupted add?): `sudo greenboost swap remove --path {}` forgets it",
                    path.display()
                )
            };
            out.push_str(&format!("  {}: {state}\n", path.display()));
        }
    }
    Ok(out)
}

pub fn status(paths: &SystemPaths) -> Result<ExitCode, String> {
    print!("{}", render(paths)?);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn lists_areas_and_the_files_it_made() {
        let root = FakeRoot::new();
        root.write("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
        let text = render(&root.paths).unwrap();
        assert!(
            text.starts_with(
                "no swap: T3 buffers cannot be allocated (T3 needs swap)\nto add a swap file: sudo greenboost swap add"
            ),
            "{text}"
        );
        assert!(text.contains("Swap files made by `greenboost swap add`: none"), "{text}");

        let ours = root.write("t3.swap", "");
        let idle = root.write("idle.swap", "");
        record::add(&root.paths, &ours).unwrap();
        record::add(&root.paths, &idle).unwrap();
        record::add(&root.paths, &root.path("gone.swap")).unwrap();
        root.write(
            "proc/swaps",
            &format!(
                "Filename\tType\tSize\tUsed\tPriority\n/dev/sdz9 partition 1048576 1024 -2\n{} file 2048 0 5\n",
                ours.display()
            ),
        );
        let text = render(&root.paths).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Swap areas (/proc/swaps):");
        assert!(lines[1].starts_with("  /dev/sdz9: partition, 1.00 GiB, 1.00 MiB used, priority -2, "), "{text}");
        assert_eq!(lines[2], format!("  {}: file, 2.00 MiB, 0 B used, priority 5, unknown disk (cannot tell whether it is NVMe) [greenboost swap add]", ours.display()));
        assert_eq!(lines[4], format!("  {}: enabled", ours.display()));
        assert!(lines[5].contains("not enabled: `sudo greenboost swap add --path"), "{text}");
        assert!(
            lines[6].contains("gone.swap: missing (an interrupted add?): `sudo greenboost swap remove --path"),
            "{text}"
        );
    }
}
