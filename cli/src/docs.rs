//! What shells and `man` read, generated from the one clap definition of the command
//! line, so that none can drift from it: completions (clap_complete), the manual pages
//! of `greenboost` and each subcommand (clap_mangen), and greenboost(4), the module's
//! parameters as kmod/glue.c declares them (read by build.rs).

use std::fs;
use std::path::Path;
use std::process::ExitCode;

use clap_complete::Shell;
use roff::{bold, roman, Roff};

include!(concat!(env!("OUT_DIR"), "/module_parameters.rs"));

pub fn completions(mut command: clap::Command, shell: Shell) -> Result<ExitCode, String> {
    clap_complete::generate(shell, &mut command, "greenboost", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// greenboost.1, greenboost-SUBCOMMAND.1 for each subcommand, and greenboost.4, in `dir`.
pub fn man(command: clap::Command, dir: &Path) -> Result<ExitCode, String> {
    let failed = |e: std::io::Error| format!("cannot write the manual pages into {}: {e}", dir.display());
    fs::create_dir_all(dir).map_err(failed)?;
    clap_mangen::generate_to(command, dir).map_err(failed)?;
    fs::write(dir.join("greenboost.4"), module_page()).map_err(failed)?;
    println!("wrote the manual pages into {} (section 1: the command; greenboost.4: the module)", dir.display());
    Ok(ExitCode::SUCCESS)
}

/// The module's page: what it is, its parameters, its files.
fn module_page() -> String {
    let version = concat!("greenboost ", env!("CARGO_PKG_VERSION"));
    let mut page = Roff::new();
    page.control("TH", ["GREENBOOST", "4", "", version, "GreenBoost"])
        .control("SH", ["NAME"])
        .text([roman("greenboost - the GreenBoost kernel module: pinned system RAM (T2) and swappable RAM (T3) for CUDA allocations past VRAM")])
        .control("SH", ["DESCRIPTION"])
        .text([roman("The module serves /dev/greenboost to the shim (libgreenboost_cuda.so, which "), bold("greenboost run"), roman(" preloads): pinned 2 MiB pages the GPU reads over PCIe, charged to the allocating user's RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK, and swappable memory that the kernel may write to swap under pressure.")])
        .text([roman("Without the module the shim uses its userspace backend: dmesg and /sys/kernel/greenboost then say nothing of GreenBoost, and "), bold("greenboost status"), roman(" and the shim's exit summary (GREENBOOST_LOG=info) are the view.")])
        .control("SH", ["PARAMETERS"])
        .text([roman("Set at load with an options line in /etc/modprobe.d/greenboost.conf (options greenboost NAME=VALUE), then reload the module.")]);
    for [name, kind, default, permissions, description] in MODULE_PARAMETERS {
        let writable = u32::from_str_radix(permissions, 8).is_ok_and(|mode| mode & 0o200 != 0);
        let at_run_time = if writable {
            format!(" Root may change it at run time in /sys/module/greenboost/parameters/{name}.")
        } else {
            String::new()
        };
        page.control("TP", [])
            .text([bold(*name), roman(format!(" ({kind}, default {default})"))])
            .text([roman(format!("{description}.{at_run_time}"))]);
    }
    page.control("SH", ["FILES"]);
    for (file, what) in [
        ("/dev/greenboost", "the device the shim allocates through (group greenboost, mode 0660)"),
        ("/sys/kernel/greenboost/stats", "the module's figures, which greenboost status reads"),
        ("/sys/module/greenboost/parameters/", "the parameters' values now"),
        ("/etc/modprobe.d/greenboost.conf", "the parameters at load (all commented: the defaults apply)"),
    ] {
        page.control("TP", []).text([bold(file)]).text([roman(what)]);
    }
    page.control("SH", ["SEE ALSO"]).text([bold("greenboost"), roman("(1), "), bold("modprobe"), roman("(8)")]);
    page.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parameter_of_the_module_is_on_its_page() {
        let page = module_page();
        assert!(MODULE_PARAMETERS.len() >= 6, "{MODULE_PARAMETERS:?}");
        for [name, _, default, _, _] in MODULE_PARAMETERS {
            assert!(page.contains(&format!("\\fB{name}\\fR (")), "{name}:\n{page}");
            assert!(!default.is_empty());
        }
        assert!(page.contains("pool_cap_mb\\fR (ulong, default 0)"), "{page}");
    }
}
