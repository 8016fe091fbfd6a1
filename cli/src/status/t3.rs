//! T3 in `status`: buffers of swappable RAM that the kernel may write to swap, and the
//! swap behind them. The figures come from `GB_IOC_T3_STATS` when the module has
//! `GB_INFO_T3`, else from the sysfs keys below; a module whose file lacks all of them
//! predates T3 (its `t3_used_bytes` was always 0), which is said, not an error. The
//! module cannot read the total swap size (the kernel does not export it to modules),
//! so that one figure is /proc/meminfo's `SwapTotal`.

use super::view::{both, json, shown, Cell, Field, Section};
use crate::size::format_bytes;
use crate::stats::StatGroup;
use crate::swap::{ADD_HINT, NO_SWAP};
use greenboost_abi::GbT3Stats;

/// Whether the module has T3.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Support {
    /// No module statistics at all.
    #[default]
    Unknown,
    /// The module predates T3.
    Absent,
    Present,
}

/// Module-wide T3 figures, bytes and counts as the module gives them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct T3Totals {
    pub support: Support,
    pub used: Option<u64>,
    pub resident: Option<u64>,
    pub swapped: Option<u64>,
    pub buffers: Option<u64>,
    pub cap: Option<u64>,
    pub peak: Option<u64>,
    /// /proc/meminfo's, not the module's.
    pub swap_total: Option<u64>,
    pub swap_free: Option<u64>,
    pub moves_to_t3: Option<u64>,
    pub moves_to_t2: Option<u64>,
    pub moved_bytes: Option<u64>,
    pub move_ns: Option<u64>,
    pub move_refusals: Option<u64>,
}

/// The sysfs keys a module with T3 writes (besides `t3_used_bytes`, which older
/// modules wrote as 0).
const T3_KEYS: [&str; 11] = [
    "t3_resident_bytes",
    "t3_swapped_bytes",
    "t3_buffers",
    "t3_cap_bytes",
    "t3_peak_bytes",
    "swap_free_bytes",
    "t3_moves_to_t3",
    "t3_moves_to_t2",
    "t3_moved_bytes",
    "t3_move_ns",
    "t3_move_refusals",
];

/// From the statistics file's totals (`group`), which were read.
pub fn from_sysfs(group: &StatGroup) -> T3Totals {
    let n = |key: &str| group.number(&[key]);
    let support =
        if T3_KEYS.iter().any(|key| group.get(&[key]).is_some()) { Support::Present } else { Support::Absent };
    T3Totals {
        support,
        used: n("t3_used_bytes"),
        resident: n(T3_KEYS[0]),
        swapped: n(T3_KEYS[1]),
        buffers: n(T3_KEYS[2]),
        cap: n(T3_KEYS[3]),
        peak: n(T3_KEYS[4]),
        swap_total: None,
        swap_free: n(T3_KEYS[5]),
        moves_to_t3: n(T3_KEYS[6]),
        moves_to_t2: n(T3_KEYS[7]),
        moved_bytes: n(T3_KEYS[8]),
        move_ns: n(T3_KEYS[9]),
        move_refusals: n(T3_KEYS[10]),
    }
}

pub fn from_ioctl(s: &GbT3Stats) -> T3Totals {
    T3Totals {
        support: Support::Present,
        used: Some(s.t3_used),
        resident: Some(s.t3_resident),
        swapped: Some(s.t3_swapped),
        buffers: Some(s.t3_buffers),
        cap: Some(s.t3_cap),
        peak: Some(s.t3_peak),
        swap_total: None,
        swap_free: Some(s.swap_free),
        moves_to_t3: Some(s.moves_to_t3),
        moves_to_t2: Some(s.moves_to_t2),
        moved_bytes: Some(s.moved_bytes),
        move_ns: Some(s.move_ns),
        move_refusals: Some(s.move_refusals),
    }
}

fn bytes(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), format_bytes)
}

fn count(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

/// `0.52 s`, `12.3 ms`.
fn duration(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

/// The T3 row of the tier table: in JSON `tiers.t3`.
pub fn tier_row(t: &T3Totals) -> Vec<Field> {
    let supported = match t.support {
        Support::Unknown => None,
        Support::Absent => Some(false),
        Support::Present => Some(true),
    };
    let note = match t.support {
        Support::Present => format!(
            "swappable RAM: {} resident, {} in swap, {} buffers",
            bytes(t.resident),
            bytes(t.swapped),
            count(t.buffers)
        ),
        _ => "swappable RAM, written to swap under pressure".to_owned(),
    };
    vec![
        shown("tier", Cell::text("T3")),
        json("supported", Cell::Flag(supported)),
        both("used", "used", Cell::Bytes(t.used)),
        json("resident", Cell::Bytes(t.resident)),
        json("swapped", Cell::Bytes(t.swapped)),
        json("buffers", Cell::Count(t.buffers)),
        both("cap", "cap", Cell::Bytes(t.cap)),
        both("peak", "peak", Cell::Bytes(t.peak)),
        json("swap_total", Cell::Bytes(t.swap_total)),
        json("swap_free", Cell::Bytes(t.swap_free)),
        json("moves_to_t3", Cell::Count(t.moves_to_t3)),
        json("moves_to_t2", Cell::Count(t.moves_to_t2)),
        json("moved_bytes", Cell::Bytes(t.moved_bytes)),
        json("move_ns", Cell::Count(t.move_ns)),
        json("move_refusals", Cell::Count(t.move_refusals)),
        shown("note", Cell::text(note)),
    ]
}

/// The text under the tier table: the swap behind T3 and the moves, or why there is no T3.
pub fn section(t: &T3Totals) -> Section {
    let lines = match t.support {
        Support::Unknown => vec![],
        Support::Absent => vec!["T3: not supported by this module".to_owned()],
        Support::Present => {
            let moves = match (t.moves_to_t3, t.moves_to_t2) {
                (Some(0), Some(0)) => "moves: none yet".to_owned(),
                _ => format!(
                    "moves: {} to T3, {} to T2, {} copied in {}, {} refused",
                    count(t.moves_to_t3),
                    count(t.moves_to_t2),
                    bytes(t.moved_bytes),
                    t.move_ns.map_or_else(|| "-".to_owned(), duration),
                    count(t.move_refusals)
                ),
            };
            let mut lines = vec![format!(
                "T3: cap {}; swap {} free of {}; {moves}",
                bytes(t.cap),
                bytes(t.swap_free),
                bytes(t.swap_total)
            )];
            if t.swap_total == Some(0) {
                lines.push(format!("T3: {NO_SWAP}: {ADD_HINT}"));
            }
            lines
        }
    };
    Section { key: "t3", body: super::view::Body::None, lines }
}

/// The JSON members a process row gains (null when the module gives no T3 rows).
pub fn process_fields(
    used: Option<u64>,
    resident: Option<u64>,
    swapped: Option<u64>,
    buffers: Option<u64>,
) -> Vec<Field> {
    vec![
        both("t3_used", "T3 used", Cell::Bytes(used)),
        json("t3_resident", Cell::Bytes(resident)),
        both("t3_swapped", "T3 swapped", Cell::Bytes(swapped)),
        json("t3_buffers", Cell::Count(buffers)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::parse_stats;
    use serde_json::Value;

    fn tier_json(t: &T3Totals) -> Value {
        super::super::view::object(&tier_row(t))
    }

    const WITH_T3: &str = "t3_used_bytes 1073741824\nt3_resident_bytes 805306368\nt3_swapped_bytes 268435456\n\
        t3_buffers 3\nt3_cap_bytes 3758096384\nt3_peak_bytes 1342177280\nswap_free_bytes 4026531840\n\
        t3_moves_to_t3 2\nt3_moves_to_t2 1\nt3_moved_bytes 1073741824\nt3_move_ns 523400000\nt3_move_refusals 0\n";

    #[test]
    fn sysfs_with_the_t3_keys() {
        let mut t = from_sysfs(&parse_stats(WITH_T3).totals);
        assert_eq!(t.support, Support::Present);
        assert_eq!(t.swap_total, None, "not a module figure");
        t.swap_total = Some(4 << 30);
        assert_eq!(
            (t.used, t.resident, t.swapped, t.buffers),
            (Some(1 << 30), Some(768 << 20), Some(256 << 20), Some(3))
        );
        assert_eq!((t.cap, t.swap_total, t.swap_free), (Some(3584 << 20), Some(4 << 30), Some(3840 << 20)));
        assert_eq!(t.move_ns, Some(523_400_000));
        assert_eq!(
            tier_json(&t).to_string(),
            r#"{"supported":true,"used":1073741824,"resident":805306368,"swapped":268435456,"buffers":3,"cap":3758096384,"peak":1342177280,"swap_total":4294967296,"swap_free":4026531840,"moves_to_t3":2,"moves_to_t2":1,"moved_bytes":1073741824,"move_ns":523400000,"move_refusals":0}"#
        );
        assert_eq!(
            section(&t).lines,
            vec!["T3: cap 3.50 GiB; swap 3.75 GiB free of 4.00 GiB; moves: 2 to T3, 1 to T2, 1.00 GiB copied in 523.4 ms, 0 refused"]
        );
    }

    #[test]
    fn sysfs_without_them_is_a_module_without_t3() {
        let t = from_sysfs(&parse_stats("t2_used_bytes 0\nt3_used_bytes 0\n").totals);
        assert_eq!(t, T3Totals { support: Support::Absent, used: Some(0), ..T3Totals::default() });
        assert!(tier_json(&t).to_string().starts_with(r#"{"supported":false,"used":0,"resident":null,"#));
        assert_eq!(section(&t).lines, vec!["T3: not supported by this module"]);
        assert!(section(&T3Totals::default()).lines.is_empty(), "no statistics: nothing to say about T3");
    }

    #[test]
    fn the_ioctl_gives_every_figure_and_no_swap_is_said() {
        let stats =
            GbT3Stats { t3_used: 4096, t3_peak: 8192, move_ns: 2_500_000_000, moves_to_t3: 1, ..GbT3Stats::default() };
        let mut t = from_ioctl(&stats);
        assert_eq!(t.peak, Some(8192));
        t.swap_total = Some(0);
        assert_eq!((t.support, t.used, t.cap, t.move_refusals), (Support::Present, Some(4096), Some(0), Some(0)));
        let lines = section(&t).lines;
        assert!(lines[0].ends_with("moves: 1 to T3, 0 to T2, 0 B copied in 2.50 s, 0 refused"), "{lines:?}");
        assert!(
            lines[1]
                .starts_with("T3: no swap: T3 buffers cannot be allocated (T3 needs swap): sudo greenboost swap add"),
            "{lines:?}"
        );
    }
}
