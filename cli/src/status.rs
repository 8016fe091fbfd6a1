//! `greenboost status`: tiers per GPU and per process, and the pressure state, from the
//! module (ioctls on /dev/greenboost, falling back to sysfs) and NVML.

use std::fs;

use crate::device::{explain_open_error, Device};
use crate::json::Json;
use crate::nvml::{self, NvmlReport};
use crate::paths::SystemPaths;
use crate::size::format_bytes;
use crate::stats::{parse_stats, StatGroup, StatValue};

/// Module-wide figures, whichever source gave them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub t1_reported: Option<u64>,
    pub t2_used: Option<u64>,
    pub t2_cached: Option<u64>,
    pub t2_cap: Option<u64>,
    pub t2_peak: Option<u64>,
    pub t3_used: Option<u64>,
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
    /// VRAM the driver says the process holds, summed over GPUs (NVML).
    pub gpu_memory: Option<u64>,
}

pub struct Status {
    pub module_loaded: bool,
    pub device_path: String,
    pub device_error: Option<String>,
    pub abi_version: Option<u32>,
    pub sysfs_error: Option<String>,
    pub sysfs_raw: StatGroup,
    pub parameters: Vec<(String, String)>,
    pub totals: Totals,
    pub processes: Vec<ProcessRow>,
    pub nvml: Result<NvmlReport, String>,
    pub sources: Vec<&'static str>,
}

fn read_trimmed(path: &std::path::Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn totals_from_sysfs(group: &StatGroup) -> Totals {
    Totals {
        t1_reported: group.number(&["t1_reported_bytes"]),
        t2_used: group.number(&["t2_used_bytes"]),
        t2_cached: group.number(&["t2_cached_bytes"]),
        t2_cap: group.number(&["t2_cap_bytes"]),
        t2_peak: group.number(&["t2_peak_bytes"]),
        t3_used: group.number(&["t3_used_bytes"]),
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
        gpu_memory: None,
    })
}

pub fn collect(paths: &SystemPaths) -> Status {
    let mut sources = Vec::new();
    let module_loaded = paths.module_dir().is_dir();
    let mut parameters = Vec::new();
    if let Ok(entries) = fs::read_dir(paths.module_dir().join("parameters")) {
        let mut names: Vec<String> = entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
        names.sort();
        for name in names {
            if let Some(value) = read_trimmed(&paths.module_parameter(&name)) {
                parameters.push((name, value));
            }
        }
    }

    let (mut totals, sysfs_raw, mut processes, sysfs_error) = match fs::read_to_string(paths.stats_file()) {
        Ok(text) => {
            sources.push("sysfs");
            let stats = parse_stats(&text);
            let processes = stats.processes.iter().filter_map(process_from_sysfs).collect();
            (totals_from_sysfs(&stats.totals), stats.totals, processes, None)
        }
        Err(e) => (
            Totals::default(),
            StatGroup::default(),
            Vec::new(),
            Some(format!("cannot read {}: {e}", paths.stats_file().display())),
        ),
    };

    // The ioctls give exact figures; they override what the text file said.
    let mut abi_version = None;
    let device_error = match Device::open(&paths.device) {
        Ok(device) => {
            if let Ok(info) = device.info() {
                abi_version = Some(info.abi_version);
                totals.reserve = Some(info.reserve);
            }
            match device.pool_stats() {
                Ok(pool) => {
                    sources.push("ioctl");
                    totals.t1_reported = Some(pool.t1_reported);
                    totals.t2_used = Some(pool.t2_used);
                    totals.t2_cached = Some(pool.t2_cached);
                    totals.t2_cap = Some(pool.t2_cap);
                    totals.t2_peak = Some(pool.t2_peak);
                    totals.t3_used = Some(pool.t3_used);
                    totals.buffers = Some(pool.buffers);
                    totals.allocs = Some(pool.allocs);
                    totals.alloc_failures = Some(pool.alloc_failures);
                    totals.free_ram = Some(pool.free_ram);
                    totals.pressure = Some(pool.pressure != 0);
                    None
                }
                Err(e) => Some(format!("GB_IOC_POOL_STATS on {} failed: {e}", paths.device.display())),
            }
        }
        Err(e) => Some(explain_open_error(&paths.device, &e)),
    };
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
        for gpu in &report.gpus {
            for gpu_process in &gpu.processes {
                let pid = u64::from(gpu_process.pid);
                let row = match processes.iter_mut().position(|p| p.pid == pid) {
                    Some(i) => &mut processes[i],
                    None => {
                        processes.push(ProcessRow { pid, ..ProcessRow::default() });
                        processes.last_mut().expect("just pushed")
                    }
                };
                if let Some(used) = gpu_process.used {
                    row.gpu_memory = Some(row.gpu_memory.unwrap_or(0) + used);
                }
            }
        }
    }
    for row in &mut processes {
        if row.comm.is_none() {
            row.comm = read_trimmed(&paths.proc_path(format!("{}/comm", row.pid)));
        }
    }
    processes.sort_by_key(|p| p.pid);

    Status {
        module_loaded,
        device_path: paths.device.display().to_string(),
        device_error,
        abi_version,
        sysfs_error,
        sysfs_raw,
        parameters,
        totals,
        processes,
        nvml,
        sources,
    }
}

impl Status {
    pub fn to_json(&self) -> Json {
        let t = &self.totals;
        let tiers = Json::object()
            .with("t1", Json::object().with("reported", t.t1_reported))
            .with(
                "t2",
                Json::object()
                    .with("used", t.t2_used)
                    .with("cached", t.t2_cached)
                    .with("cap", t.t2_cap)
                    .with("peak", t.t2_peak)
                    .with("buffers", t.buffers),
            )
            .with("t3", Json::object().with("used", t.t3_used));
        let pressure = Json::object()
            .with("active", t.pressure)
            .with("free_ram", t.free_ram)
            .with("reserve", t.reserve)
            .with("alloc_failures", t.alloc_failures);
        let module = Json::object()
            .with("loaded", self.module_loaded)
            .with("device", self.device_path.as_str())
            .with("device_error", self.device_error.clone())
            .with("abi_version", self.abi_version)
            .with("sysfs_error", self.sysfs_error.clone())
            .with(
                "parameters",
                Json::Object(self.parameters.iter().map(|(k, v)| (k.clone(), Json::from(v.as_str()))).collect()),
            );
        let processes: Vec<Json> = self
            .processes
            .iter()
            .map(|p| {
                Json::object()
                    .with("pid", p.pid)
                    .with("uid", p.uid)
                    .with("comm", p.comm.clone())
                    .with("t1_reported", p.t1_reported)
                    .with("t2_used", p.t2_used)
                    .with("t2_peak", p.t2_peak)
                    .with("buffers", p.buffers)
                    .with("gpu_memory", p.gpu_memory)
            })
            .collect();
        let (driver, gpus, gpu_error) = match &self.nvml {
            Ok(report) => (
                report.driver_version.clone(),
                report
                    .gpus
                    .iter()
                    .map(|g| {
                        let link = |pair: Option<(u32, u32)>| {
                            pair.map_or(Json::Null, |(current, max)| {
                                Json::object().with("current", current).with("max", max)
                            })
                        };
                        Json::object()
                            .with("index", g.index)
                            .with("name", g.name.as_str())
                            .with("pci_bus_id", g.pci_bus_id.clone())
                            .with("t1_used", g.memory_used)
                            .with("vram_total", g.memory_total)
                            .with("vram_free", g.memory_free)
                            .with("pcie_generation", link(g.pcie_generation))
                            .with("pcie_width", link(g.pcie_width))
                            .with(
                                "processes",
                                g.processes
                                    .iter()
                                    .map(|p| Json::object().with("pid", p.pid).with("used", p.used))
                                    .collect::<Vec<_>>(),
                            )
                    })
                    .collect::<Vec<_>>(),
                None,
            ),
            Err(e) => (None, Vec::new(), Some(e.clone())),
        };
        let raw = Json::Object(
            self.sysfs_raw
                .0
                .iter()
                .map(|(k, v)| {
                    let value = match v {
                        StatValue::Number(n) => Json::UInt(*n),
                        StatValue::Text(s) => Json::Str(s.clone()),
                    };
                    (k.clone(), value)
                })
                .collect(),
        );
        Json::object()
            .with("module", module)
            .with("tiers", tiers)
            .with("pressure", pressure)
            .with("driver_version", driver)
            .with("gpus", gpus)
            .with("gpu_error", gpu_error)
            .with("processes", processes)
            .with("sources", self.sources.iter().map(|s| Json::from(*s)).collect::<Vec<_>>())
            .with("sysfs", raw)
    }

    pub fn print(&self) {
        let bytes = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), format_bytes);
        let t = &self.totals;
        match (self.module_loaded, &self.device_error) {
            (true, None) => println!(
                "Module: loaded{}, {} ready",
                self.abi_version.map_or(String::new(), |v| format!(" (ABI {v})")),
                self.device_path
            ),
            (true, Some(e)) => println!("Module: loaded, but {e}"),
            (false, _) => println!(
                "Module: not loaded. T2 comes from the shim's userspace backend (per process, not shown here). Load it with `sudo modprobe greenboost`; `greenboost doctor` says what is missing."
            ),
        }
        match t.pressure {
            Some(true) => println!(
                "Pressure: ACTIVE: free RAM {} is below the reserve {}; new T2 allocations are refused until memory is freed",
                bytes(t.free_ram),
                bytes(t.reserve)
            ),
            Some(false) => println!("Pressure: none (free RAM {}, reserve {})", bytes(t.free_ram), bytes(t.reserve)),
            None => println!("Pressure: unknown (no module statistics)"),
        }
        println!();
        println!("{:<5} {:>12} {:>12} {:>12} {:>12}  note", "tier", "used", "cached", "cap", "peak");
        println!(
            "{:<5} {:>12} {:>12} {:>12} {:>12}  VRAM reported by processes under the shim",
            "T1",
            bytes(t.t1_reported),
            "",
            "",
            ""
        );
        println!(
            "{:<5} {:>12} {:>12} {:>12} {:>12}  pinned system RAM{}",
            "T2",
            bytes(t.t2_used),
            bytes(t.t2_cached),
            bytes(t.t2_cap),
            bytes(t.t2_peak),
            t.buffers.map_or(String::new(), |b| format!(", {b} buffers"))
        );
        println!("{:<5} {:>12} {:>12} {:>12} {:>12}  NVMe overflow", "T3", bytes(t.t3_used), "", "", "");
        println!();
        match &self.nvml {
            Ok(report) => {
                println!("NVIDIA driver {}", report.driver_version.as_deref().unwrap_or("(version unknown)"));
                println!("{:<4} {:<28} {:>12} {:>12}  {:<14} bus", "gpu", "name", "T1 used", "VRAM", "PCIe now/max");
                for g in &report.gpus {
                    let link = match (g.pcie_generation, g.pcie_width) {
                        (Some((cg, mg)), Some((cw, mw))) => format!("Gen{cg}x{cw}/Gen{mg}x{mw}"),
                        _ => "-".into(),
                    };
                    println!(
                        "{:<4} {:<28} {:>12} {:>12}  {:<14} {}",
                        g.index,
                        g.name,
                        format_bytes(g.memory_used),
                        format_bytes(g.memory_total),
                        link,
                        g.pci_bus_id.as_deref().unwrap_or("-")
                    );
                }
                if report.gpus.is_empty() {
                    println!("(NVML sees no GPU)");
                }
            }
            Err(e) => println!("GPUs: {e}"),
        }
        println!();
        if self.processes.is_empty() {
            println!("Processes: none using GreenBoost or the GPU");
        } else {
            println!(
                "{:>8} {:<16} {:>12} {:>12} {:>12} {:>8}",
                "pid", "command", "T1 reported", "T2 used", "GPU (NVML)", "buffers"
            );
            for p in &self.processes {
                println!(
                    "{:>8} {:<16} {:>12} {:>12} {:>12} {:>8}",
                    p.pid,
                    p.comm.as_deref().unwrap_or("?"),
                    bytes(p.t1_reported),
                    bytes(p.t2_used),
                    bytes(p.gpu_memory),
                    p.buffers.map_or("-".into(), |b| b.to_string())
                );
            }
        }
        if let (true, Some(e)) = (self.module_loaded, &self.sysfs_error) {
            println!("\nnote: {e}");
        }
    }
}
