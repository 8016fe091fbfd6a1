//! Parser for the module's sysfs statistics file (`/sys/kernel/greenboost/stats`),
//! whose format kmod/README.md ("Statistics") documents:
//!
//! ```text
//! t2_used_bytes 6291456          one `key value` pair per line, bytes or counts
//! pressure 0
//! proc pid=123 uid=0 t1=0 t1_budget=0 t2=6291456 t2_peak=71303168 buffers=2 files=1 comm=smoke
//! procs_omitted 3                only when the process lines did not fit in a page
//! ```
//!
//! `comm` is the last field of a `proc` line and may contain spaces. Unknown keys are
//! kept (and shown by `status --json`), so a newer module's additions are not lost.

#[derive(Clone, Debug, PartialEq)]
pub enum StatValue {
    Number(u64),
    Text(String),
}

impl StatValue {
    fn parse(raw: &str) -> StatValue {
        let raw = raw.trim();
        raw.parse().map_or_else(|_| StatValue::Text(raw.to_owned()), StatValue::Number)
    }

    pub fn number(&self) -> Option<u64> {
        match self {
            StatValue::Number(n) => Some(*n),
            StatValue::Text(_) => None,
        }
    }
}

/// One group of `key = value` pairs, in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatGroup(pub Vec<(String, StatValue)>);

impl StatGroup {
    /// The first value under any of `names` (the module may spell a figure two ways).
    pub fn get(&self, names: &[&str]) -> Option<&StatValue> {
        names.iter().find_map(|name| self.0.iter().find(|(key, _)| key == name).map(|(_, v)| v))
    }

    pub fn number(&self, names: &[&str]) -> Option<u64> {
        self.get(names).and_then(StatValue::number)
    }

    pub fn text(&self, names: &[&str]) -> Option<String> {
        self.get(names).map(|v| match v {
            StatValue::Number(n) => n.to_string(),
            StatValue::Text(t) => t.clone(),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SysfsStats {
    pub totals: StatGroup,
    pub processes: Vec<StatGroup>,
}

fn parse_process(fields: &str) -> StatGroup {
    let mut group = StatGroup::default();
    let (pairs, comm) = match fields.find("comm=") {
        Some(at) => (&fields[..at], Some(&fields[at + "comm=".len()..])),
        None => (fields, None),
    };
    for token in pairs.split_whitespace() {
        if let Some((key, value)) = token.split_once('=') {
            group.0.push((key.to_owned(), StatValue::parse(value)));
        }
    }
    if let Some(comm) = comm {
        group.0.push(("comm".into(), StatValue::Text(comm.trim_end().to_owned())));
    }
    group
}

pub fn parse_stats(text: &str) -> SysfsStats {
    let mut stats = SysfsStats::default();
    for line in text.lines() {
        let line = line.trim_start();
        let Some((key, rest)) = line.split_once(char::is_whitespace).or(Some((line, ""))) else {
            continue;
        };
        if key.is_empty() {
            continue;
        }
        if key == "proc" {
            stats.processes.push(parse_process(rest));
        } else {
            stats.totals.0.push((key.trim_end_matches(':').to_owned(), StatValue::parse(rest)));
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCUMENTED: &str = "abi_version 1\nt1_reported_bytes 0\nt2_used_bytes 6291456\nt2_cached_bytes 134217728\n\
        t2_cap_bytes 536870912\nt2_peak_bytes 71303168\nt3_used_bytes 0\nbuffers 2\npressure 1\nprocesses 2\n\
        proc pid=123 uid=1000 t1=8589934592 t1_budget=0 t2=6291456 t2_peak=71303168 buffers=2 files=1 comm=smoke\n\
        proc pid=7 uid=0 t1=0 t1_budget=0 t2=0 t2_peak=0 buffers=0 files=1 comm=python3 -m vllm \n\
        procs_omitted 3\n";

    #[test]
    fn totals_of_the_documented_format() {
        let stats = parse_stats(DOCUMENTED);
        assert_eq!(stats.totals.number(&["abi_version"]), Some(1));
        assert_eq!(stats.totals.number(&["t2_used_bytes"]), Some(6291456));
        assert_eq!(stats.totals.number(&["t2_cap_bytes"]), Some(536870912));
        assert_eq!(stats.totals.number(&["pressure"]), Some(1));
        assert_eq!(stats.totals.number(&["procs_omitted"]), Some(3));
        assert_eq!(stats.totals.number(&["t3_used_bytes"]), Some(0));
        assert_eq!(stats.totals.get(&["proc"]), None);
    }

    #[test]
    fn process_lines_keep_comm_with_spaces() {
        let stats = parse_stats(DOCUMENTED);
        assert_eq!(stats.processes.len(), 2);
        let first = &stats.processes[0];
        assert_eq!(first.number(&["pid"]), Some(123));
        assert_eq!(first.number(&["uid"]), Some(1000));
        assert_eq!(first.number(&["t1"]), Some(8 << 30));
        assert_eq!(first.number(&["t2_peak"]), Some(71303168));
        assert_eq!(first.text(&["comm"]).as_deref(), Some("smoke"));
        assert_eq!(stats.processes[1].text(&["comm"]).as_deref(), Some("python3 -m vllm"));
    }

    #[test]
    fn odd_lines_neither_crash_nor_invent_numbers() {
        let stats = parse_stats("\n   \nstate warming up\nt2_used_bytes 12kB\nlonely\nproc comm=1234\n");
        assert_eq!(stats.totals.text(&["state"]).as_deref(), Some("warming up"));
        assert_eq!(stats.totals.number(&["state"]), None);
        assert_eq!(stats.totals.number(&["t2_used_bytes"]), None, "a unit is not a byte count");
        assert_eq!(stats.totals.text(&["lonely"]).as_deref(), Some(""));
        assert_eq!(stats.processes[0].get(&["comm"]), Some(&StatValue::Text("1234".into())));
        assert_eq!(stats.processes[0].number(&["pid"]), None);
    }
}
