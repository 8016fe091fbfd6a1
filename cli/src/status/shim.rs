//! The processes under the shim, from the records they publish
//! (`/dev/shm/greenboost-shim.<pid>`, `greenboost_policy::Published`): their own T1 and
//! T2 figures (with or without the module, whichever T2 backend) and live tiering's
//! moves. A record whose process is gone (killed before it could remove it, or its pid
//! reused since) is skipped.

use std::fs;

use greenboost_policy::{start_time_from_stat, Published, PUBLISHED_PREFIX};

use super::read_trimmed;
use super::view::{both, json, Body, Cell, Column, Empty, Field, Section, Table};
use crate::paths::SystemPaths;

/// One process's record, checked live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShimProcess {
    pub comm: Option<String>,
    pub record: Published,
}

/// The records of live processes, by pid.
pub fn collect(paths: &SystemPaths) -> Vec<ShimProcess> {
    let Ok(entries) = fs::read_dir(&paths.shm) else { return Vec::new() };
    let mut processes: Vec<ShimProcess> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let pid: u32 = name.strip_prefix(PUBLISHED_PREFIX)?.parse().ok()?;
            let record = read_record(&entry.path())?;
            (record.pid == pid && start_time(paths, pid) == Some(record.start_time))
                .then(|| ShimProcess { comm: read_trimmed(&paths.proc_path(format!("{pid}/comm"))), record })
        })
        .collect();
    processes.sort_by_key(|p| p.record.pid);
    processes
}

/// A record read whole twice with the same even `seq` (the writer does not lock).
fn read_record(path: &std::path::Path) -> Option<Published> {
    for _ in 0..4 {
        let first = Published::from_bytes(&fs::read(path).ok()?);
        let second = Published::from_bytes(&fs::read(path).ok()?);
        if let (Some(first), Some(second)) = (first, second) {
            if first.seq == second.seq {
                return Some(second);
            }
        }
    }
    None
}

/// The start time of process `pid` (see `Published::start_time`).
fn start_time(paths: &SystemPaths, pid: u32) -> Option<u64> {
    start_time_from_stat(&fs::read(paths.proc_path(format!("{pid}/stat"))).ok()?)
}

static COLUMNS: [Column; 10] = [
    Column::right("pid", 8, ""),
    Column::left("command", 16, " ").missing("?"),
    Column::right("T1", 12, " "),
    Column::right("T2", 12, " "),
    Column::right("movable in VRAM", 16, " "),
    Column::right("promoted", 12, " "),
    Column::right("demoted", 12, " "),
    Column::right("swaps", 7, " "),
    Column::right("room made", 12, " "),
    Column::right("kept", 12, " "),
];

fn row(p: &ShimProcess) -> Vec<Field> {
    let r = &p.record;
    vec![
        both("pid", "pid", Cell::Count(Some(r.pid.into()))),
        both("comm", "command", Cell::Text(p.comm.clone())),
        both("t1_used", "T1", Cell::Bytes(Some(r.t1_used))),
        both("t2_used", "T2", Cell::Bytes(Some(r.t2_used))),
        json("t2_peak", Cell::Bytes(Some(r.t2_peak))),
        json("movable_allocs", Cell::Count(Some(r.movable_allocs))),
        both("tier_vram", "movable in VRAM", Cell::Bytes(Some(r.tier_vram))),
        both("promoted_bytes", "promoted", Cell::Bytes(Some(r.promoted_bytes))),
        both("demoted_bytes", "demoted", Cell::Bytes(Some(r.demoted_bytes))),
        json("promotions", Cell::Count(Some(r.promotions))),
        json("demotions", Cell::Count(Some(r.demotions))),
        both("swaps", "swaps", Cell::Count(Some(r.swaps))),
        both("room_made_bytes", "room made", Cell::Bytes(Some(r.room_made_bytes))),
        both("kept_vram", "kept", Cell::Bytes(Some(r.kept_vram))),
    ]
}

/// The section: a table, none in the text when no process publishes.
pub fn section(processes: &[ShimProcess]) -> Section {
    let rows = processes.iter().map(|p| (None, row(p))).collect();
    let table = Table { columns: &COLUMNS, rows, empty: Empty::Instead(""), hidden: processes.is_empty() };
    let lines = if processes.is_empty() {
        vec![]
    } else {
        vec![
            String::new(),
            "Under the shim (its own figures; live tiering's moves; swaps: demotions that made room for what the process reads more; room made: demoted at once for what it allocated while computing; kept: VRAM the driver keeps for what moved to T2, which free VRAM does not show and any allocation gets):"
                .to_owned(),
        ]
    };
    Section { key: "shim_processes", body: Body::Table(table), lines }
}

#[cfg(test)]
mod tests {
    use super::super::view;
    use super::*;
    use crate::fake_root::FakeRoot;
    use greenboost_policy::{PUBLISHED_MAGIC, PUBLISHED_VERSION};

    fn bytes_of(record: &Published) -> Vec<u8> {
        // SAFETY: a plain repr(C) struct of integers, read as its bytes.
        unsafe { std::slice::from_raw_parts((record as *const Published).cast::<u8>(), Published::SIZE) }.to_vec()
    }

    #[test]
    fn live_records_are_listed_and_stale_ones_skipped() {
        let root = FakeRoot::new();
        // pid 100 is live with start time 555; pid 200 now has another start time (its
        // pid reused); pid 300 is gone.
        root.write("proc/100/stat", "100 (python3 (x)) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0\n");
        root.write("proc/100/comm", "python3\n");
        root.write("proc/200/stat", "200 (ollama) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 999 0 0\n");
        let record = |pid: u32, start_time: u64| Published {
            magic: PUBLISHED_MAGIC,
            version: PUBLISHED_VERSION,
            size: Published::SIZE as u32,
            pid,
            start_time,
            seq: 6,
            t2_used: 3 << 30,
            tier_vram: 2 << 30,
            promoted_bytes: 5 << 30,
            demoted_bytes: 3 << 30,
            promotions: 4,
            swaps: 3,
            room_made_bytes: 7 << 30,
            kept_vram: 6 << 30,
            ..Published::default()
        };
        root.write("shm/unrelated", "x");
        for (pid, start) in [(100, 555), (200, 554), (300, 1)] {
            fs::write(root.paths.shm.join(format!("{PUBLISHED_PREFIX}{pid}")), bytes_of(&record(pid, start))).unwrap();
        }
        let listed = collect(&root.paths);
        assert_eq!(listed, vec![ShimProcess { comm: Some("python3".into()), record: record(100, 555) }]);
        let json = view::to_json(&[section(&listed)]).to_string();
        assert!(json.contains("\"promoted_bytes\":5368709120") && json.contains("\"tier_vram\":2147483648"), "{json}");
        assert!(json.contains("\"swaps\":3") && json.contains("\"room_made_bytes\":7516192768"), "{json}");
        let text = view::text(&[section(&listed)], &["shim_processes"]);
        assert!(text.contains("python3") && text.contains("movable in VRAM") && text.contains("5.00 GiB"), "{text}");
        assert!(text.contains("room made") && text.contains("7.00 GiB"), "{text}");
        assert!(json.contains("\"kept_vram\":6442450944") && text.contains("6.00 GiB"), "{json} {text}");
        assert_eq!(view::text(&[section(&[])], &["shim_processes"]), "");
    }
}
