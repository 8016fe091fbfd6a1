//! What `status` shows, described once (see `view`): every figure with its JSON key and
//! its text column, and the sentences the text prints for the module and pressure.

use super::view::{both, json, shown, Body, Cell, Column, Empty, Field, Section, Table};
use super::{shim, t3, ProcessRow, Status};
use crate::module::ModuleState;
use crate::nvml::{Gpu, NvmlReport};
use crate::size::format_bytes;
use crate::stats::StatValue;
use serde_json::{json, Value};

/// The sections the text shows, in its order; "" is a blank line. The JSON has every
/// section, in the order of `Status::describe`.
pub const TEXT_ORDER: &[&str] = &[
    "module",
    "pressure",
    "",
    "tiers",
    "t3",
    "",
    "driver_version",
    "gpus",
    "gpu_error",
    "",
    "processes",
    "processes_note",
    "shim_processes",
    "note",
];

static TIER_COLUMNS: [Column; 6] = [
    Column::left("tier", 5, ""),
    Column::right("used", 12, " "),
    Column::right("cached", 12, " "),
    Column::right("cap", 12, " "),
    Column::right("peak", 12, " "),
    Column::left("note", 0, "  "),
];

static GPU_COLUMNS: [Column; 6] = [
    Column::left("gpu", 4, ""),
    Column::left("name", 28, " "),
    Column::right("T1 used", 12, " "),
    Column::right("VRAM", 12, " "),
    Column::left("PCIe now/max", 14, "  "),
    Column::left("bus", 0, " "),
];

static PROCESS_COLUMNS: [Column; 6] = [
    Column::right("pid", 8, ""),
    Column::left("command", 16, " ").missing("?"),
    Column::right("T1 reported", 12, " "),
    Column::right("T2 used", 12, " "),
    Column::right("GPU (NVML)", 12, " "),
    Column::right("buffers", 8, " "),
];

/// The process table of a module that gives T3 rows.
static PROCESS_COLUMNS_T3: [Column; 8] = [
    Column::right("pid", 8, ""),
    Column::left("command", 16, " ").missing("?"),
    Column::right("T1 reported", 12, " "),
    Column::right("T2 used", 12, " "),
    Column::right("T3 used", 12, " "),
    Column::right("T3 swapped", 12, " "),
    Column::right("GPU (NVML)", 12, " "),
    Column::right("buffers", 8, " "),
];

/// Where a user without the module sees T2 (the module's sysfs and dmesg lines stay
/// empty).
const USERSPACE_VIEW: &str = "T2 comes from the shim's userspace backend in each process: its figures are under \"Under the shim\" while one runs, and in its exit summary (GREENBOOST_LOG=info)";

fn bytes(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), format_bytes)
}

fn section(key: &'static str, body: Body, lines: Vec<String>) -> Section {
    Section { key, body, lines }
}

impl Status {
    /// Every section of `status`, in the order of the JSON.
    pub(super) fn describe(&self) -> Vec<Section> {
        let (driver, gpus, gpu_error) = self.gpu_sections();
        vec![
            self.module_section(),
            self.tiers_section(),
            t3::section(&self.totals.t3),
            self.pressure_section(),
            driver,
            gpus,
            gpu_error,
            self.processes_section(),
            section("processes_note", Body::None, self.processes_note.iter().cloned().collect()),
            shim::section(&self.shim_processes),
            section("sources", Body::Cell(Cell::Json(json!(self.sources))), vec![]),
            section("sysfs", Body::Cell(Cell::Json(self.sysfs_json())), vec![]),
            self.note_section(),
        ]
    }

    fn module_section(&self) -> Section {
        let parameters = self.parameters.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let fields = vec![
            json("loaded", Cell::Flag(Some(self.module == ModuleState::Loaded))),
            json("state", Cell::text(self.module.name())),
            json("device", Cell::text(self.device_path.as_str())),
            json("device_error", Cell::Text(self.device_error.clone())),
            json("abi_version", Cell::Count(self.abi_version.map(u64::from))),
            json("sysfs_error", Cell::Text(self.sysfs_error.clone())),
            json("parameters", Cell::Json(Value::Object(parameters))),
        ];
        let line = match (self.module.why_absent(), &self.device_error) {
            (None, None) => format!(
                "Module: loaded{}, {} ready",
                self.abi_version.map_or(String::new(), |v| format!(" (ABI {v})")),
                self.device_path
            ),
            (None, Some(e)) => format!("Module: loaded, but {e}"),
            (Some(why), _) => format!("Module: {why}. {USERSPACE_VIEW}"),
        };
        section("module", Body::Object(fields), vec![line])
    }

    fn tiers_section(&self) -> Section {
        let t = &self.totals;
        let buffers = t.buffers.map_or(String::new(), |b| format!(", {b} buffers"));
        let rows = vec![
            (
                Some("t1"),
                vec![
                    shown("tier", Cell::text("T1")),
                    both("reported", "used", Cell::Bytes(t.t1_reported)),
                    shown("note", Cell::text("VRAM reported by processes under the shim")),
                ],
            ),
            (
                Some("t2"),
                vec![
                    shown("tier", Cell::text("T2")),
                    both("used", "used", Cell::Bytes(t.t2_used)),
                    both("cached", "cached", Cell::Bytes(t.t2_cached)),
                    both("cap", "cap", Cell::Bytes(t.t2_cap)),
                    both("peak", "peak", Cell::Bytes(t.t2_peak)),
                    json("buffers", Cell::Count(t.buffers)),
                    shown("note", Cell::text(format!("pinned system RAM{buffers}"))),
                ],
            ),
            (Some("t3"), t3::tier_row(&t.t3)),
        ];
        let table = Table { columns: &TIER_COLUMNS, rows, empty: Empty::Header(""), hidden: false };
        section("tiers", Body::Table(table), vec![])
    }

    fn pressure_section(&self) -> Section {
        let t = &self.totals;
        let fields = vec![
            json("active", Cell::Flag(t.pressure)),
            json("free_ram", Cell::Bytes(t.free_ram)),
            json("reserve", Cell::Bytes(t.reserve)),
            json("alloc_failures", Cell::Count(t.alloc_failures)),
        ];
        let line = match t.pressure {
            Some(true) => format!(
                "Pressure: ACTIVE: free RAM {} is below the reserve {}; new T2 allocations are refused until memory is freed",
                bytes(t.free_ram),
                bytes(t.reserve)
            ),
            Some(false) => format!("Pressure: none (free RAM {}, reserve {})", bytes(t.free_ram), bytes(t.reserve)),
            None => "Pressure: unknown (no module statistics)".to_owned(),
        };
        section("pressure", Body::Object(fields), vec![line])
    }

    /// The driver version, the GPU table and why there is none.
    fn gpu_sections(&self) -> (Section, Section, Section) {
        let (report, error) = match &self.nvml {
            Ok(report) => (Some(report), None),
            Err(e) => (None, Some(e.clone())),
        };
        let driver = report.and_then(|r| r.driver_version.clone());
        let driver_lines =
            report.map(|_| format!("NVIDIA driver {}", driver.as_deref().unwrap_or("(version unknown)"))).into_iter();
        let rows = report.map_or_else(Vec::new, |r: &NvmlReport| r.gpus.iter().map(|g| (None, gpu_row(g))).collect());
        let table =
            Table { columns: &GPU_COLUMNS, rows, empty: Empty::Header("(NVML sees no GPU)"), hidden: report.is_none() };
        let error_lines = error.iter().map(|e| format!("GPUs: {e}")).collect();
        (
            section("driver_version", Body::Cell(Cell::Text(driver)), driver_lines.collect()),
            section("gpus", Body::Table(table), vec![]),
            section("gpu_error", Body::Cell(Cell::Text(error)), error_lines),
        )
    }

    fn processes_section(&self) -> Section {
        let rows = self.processes.iter().map(|p| (None, process_row(p))).collect();
        // With a note, some processes exist that this caller may not see.
        let empty = Empty::Instead(if self.processes_note.is_some() {
            "Processes: none listed"
        } else {
            "Processes: none using GreenBoost or the GPU"
        });
        let columns: &'static [Column] =
            if self.processes.iter().any(|p| p.t3_used.is_some()) { &PROCESS_COLUMNS_T3 } else { &PROCESS_COLUMNS };
        let table = Table { columns, rows, empty, hidden: false };
        section("processes", Body::Table(table), vec![])
    }

    fn sysfs_json(&self) -> Value {
        let value = |v: &StatValue| match v {
            StatValue::Number(n) => json!(n),
            StatValue::Text(s) => json!(s),
        };
        Value::Object(self.sysfs_raw.0.iter().map(|(k, v)| (k.clone(), value(v))).collect())
    }

    /// The text only: why the statistics file was unreadable while the module is loaded.
    fn note_section(&self) -> Section {
        let lines = match (&self.module, &self.sysfs_error) {
            (ModuleState::Loaded, Some(e)) => vec![String::new(), format!("note: {e}")],
            _ => vec![],
        };
        section("note", Body::None, lines)
    }
}

fn gpu_row(g: &Gpu) -> Vec<Field> {
    let link = match (g.pcie_generation, g.pcie_width) {
        (Some((cg, mg)), Some((cw, mw))) => format!("Gen{cg}x{cw}/Gen{mg}x{mw}"),
        _ => "-".into(),
    };
    let processes = g.processes.iter().map(|p| json!({"pid": p.pid, "used": p.used})).collect();
    vec![
        both("index", "gpu", Cell::Count(Some(g.index.into()))),
        both("name", "name", Cell::text(g.name.as_str())),
        both("pci_bus_id", "bus", Cell::Text(g.pci_bus_id.clone())),
        both("t1_used", "T1 used", Cell::Bytes(Some(g.memory_used))),
        both("vram_total", "VRAM", Cell::Bytes(Some(g.memory_total))),
        json("vram_free", Cell::Bytes(Some(g.memory_free))),
        json("pcie_generation", Cell::Link(g.pcie_generation)),
        json("pcie_width", Cell::Link(g.pcie_width)),
        shown("PCIe now/max", Cell::text(link)),
        json("processes", Cell::Json(Value::Array(processes))),
    ]
}

fn process_row(p: &ProcessRow) -> Vec<Field> {
    let mut fields = vec![
        both("pid", "pid", Cell::Count(Some(p.pid))),
        json("uid", Cell::Count(p.uid)),
        both("comm", "command", Cell::Text(p.comm.clone())),
        both("t1_reported", "T1 reported", Cell::Bytes(p.t1_reported)),
        both("t2_used", "T2 used", Cell::Bytes(p.t2_used)),
        json("t2_peak", Cell::Bytes(p.t2_peak)),
        both("buffers", "buffers", Cell::Count(p.buffers)),
    ];
    fields.extend(t3::process_fields(p.t3_used, p.t3_resident, p.t3_swapped, p.t3_buffers));
    fields.push(both("gpu_memory", "GPU (NVML)", Cell::Bytes(p.gpu_memory)));
    fields
}

#[cfg(test)]
mod tests {
    use super::super::view;
    use super::*;

    fn status_with(processes: Vec<ProcessRow>) -> Status {
        Status { processes, ..Status::loaded_for_tests() }
    }

    #[test]
    fn process_rows_gain_t3_columns_when_the_module_gives_them() {
        let row = ProcessRow { pid: 42, comm: Some("llm".into()), t2_used: Some(1 << 20), ..ProcessRow::default() };
        let plain = view::text(&status_with(vec![row.clone()]).describe(), &["processes"]);
        assert!(
            plain.starts_with("     pid command           T1 reported      T2 used   GPU (NVML)  buffers\n"),
            "{plain}"
        );

        let t3 = ProcessRow {
            t3_used: Some(3 << 30),
            t3_resident: Some(1 << 30),
            t3_swapped: Some(2 << 30),
            t3_buffers: Some(2),
            ..row
        };
        let status = status_with(vec![t3]);
        let text = view::text(&status.describe(), &["processes"]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "     pid command           T1 reported      T2 used      T3 used   T3 swapped   GPU (NVML)  buffers"
        );
        assert_eq!(
            lines[1],
            "      42 llm                         -     1.00 MiB     3.00 GiB     2.00 GiB            -        -"
        );
        let json = status.to_json().to_string();
        assert!(
            json.contains(r#""t3_used":3221225472,"t3_resident":1073741824,"t3_swapped":2147483648,"t3_buffers":2"#),
            "{json}"
        );
    }
}
