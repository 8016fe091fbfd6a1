//! `greenboost status`: tiers per GPU and per process, and the pressure state, from the
//! module (ioctls on /dev/greenboost, falling back to sysfs) and NVML.
//!
//! Per-process rows: the module's sysfs file shows totals only (older modules also
//! listed every process there, which is still read); the rows come from
//! `GB_IOC_LIST_PROCS`, which shows a user their own processes and root every one.
//! When rows are missing, `processes_note` says how many and why. A module with T3
//! (`GB_INFO_T3`) gives its T3 totals through `GB_IOC_T3_STATS` and per-process T3
//! figures in `GB_PROC_LIST_T3` rows; `t3.rs` reads and describes them.
//!
//! Processes under the shim publish their own figures (T1, T2 whatever the backend,
//! live tiering's moves) in /dev/shm; `shim.rs` reads them.
//!
//! `collect` gathers the figures into a `Status`; `describe.rs` turns it into the one
//! description of what status shows (`view::Section`s), from which both the text and
//! `--json` (`to_json`) are rendered; `prometheus.rs` renders its figures as metrics.
//! `output.rs` is the command: its flags, where the rendering goes, `--watch`.

mod describe;
mod output;
mod prometheus;
mod shim;
mod t3;
mod view;

pub use output::{status, StatusArgs};

use std::fs;

use crate::device::Device;
use crate::module::{explain_open_error, ModuleState};
use crate::nvml::{self, NvmlReport};
use crate::paths::SystemPaths;
use crate::stats::{parse_stats, StatGroup};
use greenboost_abi::{GbProcRow, GbProcRowT3, GB_INFO_PROC_LIST, GB_INFO_T3};
use serde_json::Value;
use t3::T3Totals;

/// Module-wide figures, whichever source gave them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub t1_reported: Option<u64>,
    pub t2_used: Option<u64>,
    pub t2_cached: Option<u64>,
    pub t2_cap: Option<u64>,
    pub t2_peak: Option<u64>,
    pub t3: T3Totals,
    pub buffers: Option<u64>,
    pub allocs: Option<u64>,
    pub alloc_failures: Option<u64>,
    pub free_ram: Option<u64>,
    pub reserve: Option<u64>,
    pub pressure: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessRow {
    pub pid: u64,
    pub uid: Option<u64>,
    pub comm: Option<String>,
    pub t1_reported: Option<u64>,
    pub t2_used: Option<u64>,
    pub t2_peak: Option<u64>,
    pub buffers: Option<u64>,
    /// The process's T3 buffers (`GB_PROC_LIST_T3` rows; `None` from older modules).
    pub t3_used: Option<u64>,
    pub t3_resident: Option<u64>,
    pub t3_swapped: Option<u64>,
    pub t3_buffers: Option<u64>,
    /// VRAM the driver says the process holds, summed over GPUs (NVML).
    pub gpu_memory: Option<u64>,
}

pub struct Status {
    pub module: ModuleState,
    pub device_path: String,
    pub device_error: Option<String>,
    pub abi_version: Option<u32>,
    pub sysfs_error: Option<String>,
    pub sysfs_raw: StatGroup,
    pub parameters: Vec<(String, String)>,
    pub totals: Totals,
    pub processes: Vec<ProcessRow>,
    /// Why some or all of the module's processes are not listed (text only).
    pub processes_note: Option<String>,
    pub nvml: Result<NvmlReport, String>,
    /// Processes under the shim that publish their figures.
    pub shim_processes: Vec<shim::ShimProcess>,
    pub sources: Vec<&'static str>,
}

pub(super) fn read_trimmed(path: &std::path::Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn totals_from_sysfs(group: &StatGroup) -> Totals {
    Totals {
        t1_reported: group.number(&["t1_reported_bytes"]),
        t2_used: group.number(&["t2_used_bytes"]),
        t2_cached: group.number(&["t2_cached_bytes"]),
        t2_cap: group.number(&["t2_cap_bytes"]),
        t2_peak: group.number(&["t2_peak_bytes"]),
        t3: t3::from_sysfs(group),
        buffers: group.number(&["buffers"]),
        allocs: group.number(&["allocs"]),
        alloc_failures: group.number(&["alloc_failures"]),
        free_ram: group.number(&["free_ram_bytes"]),
        reserve: group.number(&["reserve_bytes"]),
        pressure: group.number(&["pressure"]).map(|p| p != 0),
    }
}

fn process_from_sysfs(group: &StatGroup) -> Option<ProcessRow> {
    Some(ProcessRow {
        pid: group.number(&["pid"])?,
        uid: group.number(&["uid"]),
        comm: group.text(&["comm"]),
        t1_reported: group.number(&["t1"]),
        t2_used: group.number(&["t2"]),
        t2_peak: group.number(&["t2_peak"]),
        buffers: group.number(&["buffers"]),
        // Only modules older than T3 list their processes in sysfs.
        ..ProcessRow::default()
    })
}

/// The module's parameters (`/sys/module/greenboost/parameters`), by name.
fn module_parameters(paths: &SystemPaths) -> Vec<(String, String)> {
    let Ok(entries) = fs::read_dir(paths.module_dir().join("parameters")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| read_trimmed(&paths.module_parameter(&name)).map(|value| (name, value)))
        .collect()
}

/// What the module's statistics file says.
struct Sysfs {
    totals: Totals,
    raw: StatGroup,
    processes: Vec<ProcessRow>,
    /// Its `processes` total: how many processes the module knows.
    process_count: Option<u64>,
    error: Option<String>,
}

/// /proc/meminfo's `SwapTotal`, bytes (the module cannot read it).
fn swap_total(paths: &SystemPaths) -> Option<u64> {
    let meminfo = fs::read_to_string(paths.proc_path("meminfo")).ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("SwapTotal:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok()?.checked_mul(1024)
}

fn read_sysfs(paths: &SystemPaths) -> Sysfs {
    match fs::read_to_string(paths.stats_file()) {
        Ok(text) => {
            let stats = parse_stats(&text);
            Sysfs {
                totals: totals_from_sysfs(&stats.totals),
                processes: stats.processes.iter().filter_map(process_from_sysfs).collect(),
                process_count: stats.totals.number(&["processes"]),
                raw: stats.totals,
                error: None,
            }
        }
        Err(e) => Sysfs {
            totals: Totals::default(),
            raw: StatGroup::default(),
            processes: Vec::new(),
            process_count: None,
            error: Some(format!("cannot read {}: {e}", paths.stats_file().display())),
        },
    }
}

fn process_from_row(row: &GbProcRow) -> ProcessRow {
    let comm = row.comm.split(|&b| b == 0).next().unwrap_or(&[]);
    ProcessRow {
        pid: u64::try_from(row.pid).unwrap_or(0),
        uid: Some(u64::from(row.uid)),
        comm: Some(String::from_utf8_lossy(comm).into_owned()),
        t1_reported: Some(row.t1_used),
        t2_used: Some(row.t2_used),
        t2_peak: Some(row.t2_peak),
        buffers: Some(row.buffers),
        gpu_memory: None,
        ..ProcessRow::default()
    }
}

fn process_from_row_t3(row: &GbProcRowT3) -> ProcessRow {
    ProcessRow {
        t3_used: Some(row.t3_used),
        t3_resident: Some(row.t3_resident),
        t3_swapped: Some(row.t3_swapped),
        t3_buffers: Some(row.t3_buffers),
        ..process_from_row(&row.row)
    }
}

/// The rows of `GB_IOC_LIST_PROCS`: `None` when the module predates it (its sysfs
/// file lists the processes), else the rows or why they could not be read.
fn read_process_rows(device: &Device, features: u32) -> Option<Result<Vec<ProcessRow>, String>> {
    if features & GB_INFO_PROC_LIST == 0 {
        return None;
    }
    let failed = |e: std::io::Error| format!("GB_IOC_LIST_PROCS failed: {e}");
    if features & GB_INFO_T3 != 0 {
        match device.list_procs_t3() {
            Ok(rows) => return Some(Ok(rows.iter().map(process_from_row_t3).collect())),
            // A module that does not take GB_PROC_LIST_T3 after all: its plain rows.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Some(Err(failed(e))),
        }
    }
    Some(device.list_procs().map(|rows| rows.iter().map(process_from_row).collect()).map_err(failed))
}

/// `GB_IOC_T3_STATS` when the module has T3: the figures replace sysfs's. A module
/// without `GB_INFO_T3` has no T3, whatever its file says; a failed call keeps the
/// file's figures.
fn read_t3(device: &Device, features: u32, totals: &mut Totals) {
    if features & GB_INFO_T3 == 0 {
        totals.t3 = T3Totals { support: t3::Support::Absent, used: totals.t3.used, ..T3Totals::default() };
    } else if let Ok(stats) = device.t3_stats() {
        totals.t3 = t3::from_ioctl(&stats);
    }
}

/// The ioctls give exact figures; they override what the text file said. Returns the
/// ABI version, whether the pool statistics came through, and why not; `rows` gets
/// the per-process rows when the module lists them through the device.
fn read_ioctls(
    paths: &SystemPaths,
    totals: &mut Totals,
    rows: &mut Option<Result<Vec<ProcessRow>, String>>,
) -> (Option<u32>, bool, Option<String>) {
    let device = match Device::open(&paths.device) {
        Ok(device) => device,
        Err(e) => return (None, false, Some(explain_open_error(paths, &e))),
    };
    let info = device.info().ok();
    if let Some(info) = &info {
        totals.reserve = Some(info.reserve);
        *rows = read_process_rows(&device, info.features);
    }
    let abi_version = info.map(|info| info.abi_version);
    let pool = device.pool_stats();
    // After the pool's figures, so T3's used agrees with its resident and swapped.
    let set_t3 = |totals: &mut Totals| {
        if let Some(info) = &info {
            read_t3(&device, info.features, totals);
        }
    };
    let pool = match pool {
        Ok(pool) => pool,
        Err(e) => {
            set_t3(totals);
            return (abi_version, false, Some(format!("GB_IOC_POOL_STATS on {} failed: {e}", paths.device.display())));
        }
    };
    totals.t1_reported = Some(pool.t1_reported);
    totals.t2_used = Some(pool.t2_used);
    totals.t2_cached = Some(pool.t2_cached);
    totals.t2_cap = Some(pool.t2_cap);
    totals.t2_peak = Some(pool.t2_peak);
    totals.t3.used = Some(pool.t3_used);
    totals.buffers = Some(pool.buffers);
    totals.allocs = Some(pool.allocs);
    totals.alloc_failures = Some(pool.alloc_failures);
    totals.free_ram = Some(pool.free_ram);
    totals.pressure = Some(pool.pressure != 0);
    set_t3(totals);
    (abi_version, true, None)
}

/// Adds NVML's per-GPU processes: their VRAM summed into the process's row, which is
/// made when the module does not know the process.
fn add_gpu_processes(report: &NvmlReport, processes: &mut Vec<ProcessRow>) {
    for gpu_process in report.gpus.iter().flat_map(|gpu| &gpu.processes) {
        let pid = u64::from(gpu_process.pid);
        let index = processes.iter().position(|p| p.pid == pid).unwrap_or_else(|| {
            processes.push(ProcessRow { pid, ..ProcessRow::default() });
            processes.len() - 1
        });
        if let Some(used) = gpu_process.used {
            let row = &mut processes[index];
            row.gpu_memory = Some(row.gpu_memory.unwrap_or(0) + used);
        }
    }
}

/// Why the module's processes are not all listed, from how many it has (sysfs
/// `processes`) and what was listed.
fn processes_note(
    count: Option<u64>,
    listed: usize,
    rows: &Option<Result<Vec<ProcessRow>, String>>,
    device_error: &Option<String>,
) -> Option<String> {
    let count = count?;
    let hidden = count.saturating_sub(listed as u64);
    if hidden == 0 {
        return None;
    }
    let why = match (rows, device_error) {
        (Some(Ok(_)), _) => "they belong to other users (only root sees every process)".to_owned(),
        (Some(Err(e)), _) => e.clone(),
        (None, Some(e)) => format!("per-process rows come only from the device: {e}"),
        // An old module lists its processes in sysfs; none were parsed.
        (None, None) => return None,
    };
    Some(format!("Processes: {hidden} of the module's {count} not listed: {why}"))
}

pub fn collect(paths: &SystemPaths) -> Status {
    let mut sources = Vec::new();
    let parameters = module_parameters(paths);
    let Sysfs { mut totals, raw, mut processes, process_count, error: sysfs_error } = read_sysfs(paths);
    if sysfs_error.is_none() {
        sources.push("sysfs");
    }
    let mut rows = None;
    let (abi_version, ioctl, device_error) = read_ioctls(paths, &mut totals, &mut rows);
    if ioctl {
        sources.push("ioctl");
    }
    if let Some(Ok(listed)) = &rows {
        processes = listed.clone();
    }
    let processes_note = processes_note(process_count, processes.len(), &rows, &device_error);
    if totals.t3.support == t3::Support::Present {
        totals.t3.swap_total = swap_total(paths);
    }
    if totals.reserve.is_none() {
        totals.reserve = parameters
            .iter()
            .find(|(name, _)| name == "reserve_mb")
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .map(|mb| mb << 20);
    }
    let nvml = nvml::query();
    if let Ok(report) = &nvml {
        sources.push("nvml");
        add_gpu_processes(report, &mut processes);
    }
    for row in processes.iter_mut().filter(|row| row.comm.is_none()) {
        row.comm = read_trimmed(&paths.proc_path(format!("{}/comm", row.pid)));
    }
    processes.sort_by_key(|p| p.pid);
    let shim_processes = shim::collect(paths);
    if !shim_processes.is_empty() {
        sources.push("shim");
    }
    Status {
        module: ModuleState::of(paths),
        device_path: paths.device.display().to_string(),
        device_error,
        abi_version,
        sysfs_error,
        sysfs_raw: raw,
        parameters,
        totals,
        processes,
        processes_note,
        nvml,
        shim_processes,
        sources,
    }
}

impl Status {
    /// `status --json`.
    pub fn to_json(&self) -> Value {
        view::to_json(&self.describe())
    }

    /// A loaded module whose device opened, with no figures, no process and no NVML.
    #[cfg(test)]
    fn loaded_for_tests() -> Status {
        Status {
            module: ModuleState::Loaded,
            device_path: "/dev/greenboost".into(),
            device_error: None,
            abi_version: Some(1),
            sysfs_error: None,
            sysfs_raw: StatGroup::default(),
            parameters: vec![],
            totals: Totals::default(),
            processes: vec![],
            processes_note: None,
            nvml: Err("NVML disabled".into()),
            shim_processes: vec![],
            sources: vec!["ioctl"],
        }
    }
}
