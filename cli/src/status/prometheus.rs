//! `status --prometheus`: the figures of `status` in Prometheus's text exposition format
//! (version 0.0.4), for a scraper or node_exporter's textfile collector. DCGM's
//! framebuffer metrics never include T2, so this is where a dashboard finds it.
//!
//! A figure nobody gave (no module, no NVML) has no sample: an absent series, not a 0.
//! The `gpu` label is the GPU's NVML index where the figure is one GPU's, and `all`
//! where it is summed over them: T2 and T3 are host memory that every GPU reads, and
//! the module and the shim's records count them per process, not per GPU.

use std::fmt::Write;

use greenboost_policy::Published;

use super::shim::ShimProcess;
use super::Status;
use crate::module::ModuleState;

/// Every GPU (T2, T3, and T1 when only a total is known).
const ALL_GPUS: &str = "all";

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, u64)>,
}

impl Family {
    fn gauge(name: &'static str, help: &'static str) -> Family {
        Family { name, help, kind: "gauge", samples: Vec::new() }
    }

    fn counter(name: &'static str, help: &'static str) -> Family {
        Family { name, help, kind: "counter", samples: Vec::new() }
    }

    /// A sample, when there is a value.
    fn add(&mut self, labels: &[(&'static str, &str)], value: Option<u64>) {
        if let Some(value) = value {
            self.samples.push((labels.iter().map(|(name, v)| (*name, (*v).to_owned())).collect(), value));
        }
    }

    fn with(mut self, value: Option<u64>) -> Family {
        self.add(&[], value);
        self
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help.replace('\\', "\\\\").replace('\n', "\\n"));
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        for (labels, value) in &self.samples {
            let labels: Vec<String> =
                labels.iter().map(|(name, value)| format!("{name}=\"{}\"", escape_label(value))).collect();
            let braces = if labels.is_empty() { String::new() } else { format!("{{{}}}", labels.join(",")) };
            let _ = writeln!(out, "{}{braces} {value}", self.name);
        }
    }
}

/// A label value as the format wants it: backslash, double quote and newline escaped.
fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The exposition of `status`.
pub fn render(status: &Status) -> String {
    let t = &status.totals;
    let families = [
        tier_used(status),
        Family::gauge("greenboost_t2_cached_bytes", "Freed T2 memory the module keeps for reuse").with(t.t2_cached),
        Family::gauge("greenboost_t2_cap_bytes", "Most T2 (pinned RAM) the module gives out at once").with(t.t2_cap),
        Family::gauge("greenboost_t3_cap_bytes", "Most T3 (swappable RAM) the module gives out at once").with(t.t3.cap),
        Family::gauge(
            "greenboost_pressure_level",
            "1 while free RAM is below the module's reserve (new T2 allocations are refused), else 0",
        )
        .with(t.pressure.map(u64::from)),
        process_tiers(status),
        moves(&status.shim_processes),
        per_process(
            Family::counter(
                "greenboost_tiering_swaps_total",
                "Demotions live tiering made for a process under the shim to give its VRAM to an allocation of its own that it reads more (a swap of roles)",
            ),
            &status.shim_processes,
            |record| record.swaps,
        ),
        per_process(
            Family::counter(
                "greenboost_tiering_room_made_bytes_total",
                "Bytes live tiering demoted at once for a process under the shim to make room for what it allocated while computing (its working set)",
            ),
            &status.shim_processes,
            |record| record.room_made_bytes,
        ),
        per_process(
            Family::gauge(
                "greenboost_tiering_kept_vram_bytes",
                "VRAM the driver keeps for what live tiering moved out to T2 for a process under the shim: used as NVML counts it, holding nothing, given to any allocation that finds no free VRAM",
            ),
            &status.shim_processes,
            |record| record.kept_vram,
        ),
        backend(status),
    ];
    let mut out = String::new();
    families.iter().for_each(|family| family.write(&mut out));
    out
}

fn tier_used(status: &Status) -> Family {
    let mut family = Family::gauge(
        "greenboost_tier_used_bytes",
        "Memory in use per tier: t1 VRAM per GPU (NVML; without it, what processes under the shim report, gpu=\"all\"), t2 pinned RAM and t3 swappable RAM (the module's totals; without the module, t2 sums what processes under the shim publish)",
    );
    let gpus = status.nvml.as_ref().map(|report| report.gpus.as_slice()).unwrap_or_default();
    for gpu in gpus {
        family.add(&[("tier", "t1"), ("gpu", &gpu.index.to_string())], Some(gpu.memory_used));
    }
    let t = &status.totals;
    if gpus.is_empty() {
        family.add(&[("tier", "t1"), ("gpu", ALL_GPUS)], t.t1_reported);
    }
    let published_t2 = || status.shim_processes.iter().map(|p| p.record.t2_used).reduce(|a, b| a + b);
    family.add(&[("tier", "t2"), ("gpu", ALL_GPUS)], t.t2_used.or_else(published_t2));
    family.add(&[("tier", "t3"), ("gpu", ALL_GPUS)], t.t3.used);
    family
}

/// Each process's tiers, one sample per (pid, tier, gpu): T1 per GPU from NVML, else
/// the module's or the shim's report; T2 from the shim's record (either backend), else
/// the module's row; T3 from the module's row.
fn process_tiers(status: &Status) -> Family {
    let mut family = Family::gauge(
        "greenboost_process_tier_bytes",
        "Memory a process holds per tier: t1 per GPU (NVML), t2 and t3 over every GPU (gpu=\"all\")",
    );
    let published = |pid: u64| status.shim_processes.iter().find(|p| u64::from(p.record.pid) == pid);
    let comm_of = |pid: u64| {
        let row = status.processes.iter().find(|row| row.pid == pid).and_then(|row| row.comm.clone());
        row.or_else(|| published(pid).and_then(|p| p.comm.clone())).unwrap_or_default()
    };
    let mut pids: Vec<u64> = status.processes.iter().map(|row| row.pid).collect();
    pids.extend(status.shim_processes.iter().map(|p| u64::from(p.record.pid)));
    pids.sort_unstable();
    pids.dedup();
    let gpus = status.nvml.as_ref().map(|report| report.gpus.as_slice()).unwrap_or_default();
    for pid in pids {
        let (pid_text, comm) = (pid.to_string(), comm_of(pid));
        let row = status.processes.iter().find(|row| row.pid == pid);
        let record = published(pid).map(|p| &p.record);
        let mut on_gpus = false;
        for gpu in gpus {
            // Under MIG a process may be listed once per GPU instance: one sample of their sum.
            let mut entries = gpu.processes.iter().filter(|process| u64::from(process.pid) == pid).peekable();
            if entries.peek().is_some() {
                let used = entries.filter_map(|process| process.used).reduce(|a, b| a + b);
                family.add(&process_labels(&pid_text, &comm, "t1", &gpu.index.to_string()), used);
                on_gpus |= used.is_some();
            }
        }
        if !on_gpus {
            let reported = row.and_then(|row| row.t1_reported).or(record.map(|r| r.t1_used));
            family.add(&process_labels(&pid_text, &comm, "t1", ALL_GPUS), reported);
        }
        let t2 = record.map(|r| r.t2_used).or(row.and_then(|row| row.t2_used));
        family.add(&process_labels(&pid_text, &comm, "t2", ALL_GPUS), t2);
        family.add(&process_labels(&pid_text, &comm, "t3", ALL_GPUS), row.and_then(|row| row.t3_used));
    }
    family
}

fn process_labels<'a>(pid: &'a str, comm: &'a str, tier: &'static str, gpu: &'a str) -> [(&'static str, &'a str); 4] {
    [("pid", pid), ("comm", comm), ("tier", tier), ("gpu", gpu)]
}

fn moves(processes: &[ShimProcess]) -> Family {
    let mut family = Family::counter(
        "greenboost_tiering_moved_bytes_total",
        "Bytes live tiering moved for a process under the shim: to_vram (promoted from T2) or to_t2 (demoted)",
    );
    for p in processes {
        let pid = p.record.pid.to_string();
        family.add(&[("pid", &pid), ("direction", "to_vram")], Some(p.record.promoted_bytes));
        family.add(&[("pid", &pid), ("direction", "to_t2")], Some(p.record.demoted_bytes));
    }
    family
}

/// `family` with one sample per process under the shim, `value` of its record.
fn per_process(mut family: Family, processes: &[ShimProcess], value: fn(&Published) -> u64) -> Family {
    for p in processes {
        family.add(&[("pid", &p.record.pid.to_string())], Some(value(&p.record)));
    }
    family
}

/// The backend a program started now gets under `--backend auto`.
fn backend(status: &Status) -> Family {
    let usable = status.module == ModuleState::Loaded && status.device_error.is_none();
    let name = if usable { "kmod" } else { "userspace" };
    let mut family = Family::gauge(
        "greenboost_backend_info",
        "The T2 backend a program started now gets by default: kmod (the module, usable) or userspace (the shim's own pinned memory)",
    );
    family.add(&[("backend", name)], Some(1));
    family
}

#[cfg(test)]
mod tests {
    use super::super::ProcessRow;
    use super::*;
    use crate::nvml::{Gpu, GpuProcess, NvmlReport};

    /// Two GPUs: process 7 on both (listed twice on GPU 0, as under MIG), process 8 on
    /// GPU 1 without a figure (then its reported T1 stands, over every GPU).
    #[test]
    fn t1_is_per_gpu_where_nvml_says() {
        let on = |pid, used| GpuProcess { pid, used };
        let gpus = vec![
            Gpu { index: 0, memory_used: 100, processes: vec![on(7, Some(10)), on(7, Some(5))], ..Gpu::default() },
            Gpu { index: 1, memory_used: 200, processes: vec![on(7, Some(20)), on(8, None)], ..Gpu::default() },
        ];
        let row = |pid| ProcessRow { pid, comm: Some("llm".into()), t1_reported: Some(64), ..ProcessRow::default() };
        let status = Status {
            nvml: Ok(NvmlReport { driver_version: None, gpus }),
            processes: vec![row(7), row(8)],
            ..Status::loaded_for_tests()
        };
        let text = render(&status);
        let samples: Vec<&str> = text.lines().filter(|line| !line.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                r#"greenboost_tier_used_bytes{tier="t1",gpu="0"} 100"#,
                r#"greenboost_tier_used_bytes{tier="t1",gpu="1"} 200"#,
                r#"greenboost_process_tier_bytes{pid="7",comm="llm",tier="t1",gpu="0"} 15"#,
                r#"greenboost_process_tier_bytes{pid="7",comm="llm",tier="t1",gpu="1"} 20"#,
                r#"greenboost_process_tier_bytes{pid="8",comm="llm",tier="t1",gpu="all"} 64"#,
                r#"greenboost_backend_info{backend="kmod"} 1"#,
            ]
        );
    }

    #[test]
    fn labels_and_help_are_escaped() {
        assert_eq!(escape_label("a \"b\"\\c\nd"), "a \\\"b\\\"\\\\c\\nd");
        let mut family = Family::gauge("x_bytes", "one\\two\nthree");
        family.add(&[("comm", "py\"thon")], Some(3));
        family.add(&[("comm", "absent")], None);
        let mut out = String::new();
        family.write(&mut out);
        assert_eq!(out, "# HELP x_bytes one\\\\two\\nthree\n# TYPE x_bytes gauge\nx_bytes{comm=\"py\\\"thon\"} 3\n");
    }
}
