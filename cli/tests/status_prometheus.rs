//! `greenboost status --prometheus` and `--textfile`, read back by Prometheus's own
//! text-format parser (prometheus_client, through tests/prometheus_parse.py): every
//! family with its HELP and TYPE, every sample of a fake module and a process under
//! the shim. Skipped, with a note, where python3 or prometheus_client is missing.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{text, FakeRoot};
use greenboost_policy::Published;
use serde_json::{json, Value};

const STATS: &str = "t1_reported_bytes 8589934592
t2_used_bytes 6291456
t2_cached_bytes 134217728
t2_cap_bytes 536870912
t2_peak_bytes 71303168
t3_used_bytes 1073741824
t3_cap_bytes 3758096384
buffers 2
free_ram_bytes 812646400
reserve_bytes 67108864
pressure 1
proc pid=123 uid=1000 t1=8589934592 t1_budget=0 t2=6291456 t2_peak=71303168 buffers=2 files=1 comm=ollama \"runner\"
";

/// The families the parser read, as JSON; `None` (the test is skipped) without it.
fn parse(exposition: &str) -> Option<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/prometheus_parse.py");
    let Ok(mut child) =
        Command::new("python3").arg(script).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()
    else {
        eprintln!("note: no python3: the exposition-format check is skipped");
        return None;
    };
    child.stdin.take().unwrap().write_all(exposition.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    match output.status.code() {
        Some(0) => Some(serde_json::from_slice(&output.stdout).unwrap()),
        Some(3) => {
            eprintln!("note: {}: the exposition-format check is skipped", text(&output.stderr).trim());
            None
        }
        _ => panic!("the parser refused the exposition: {}\n{exposition}", text(&output.stderr)),
    }
}

fn machine() -> FakeRoot {
    let root = FakeRoot::new();
    root.write("sys/kernel/greenboost/stats", STATS);
    root.write("sys/module/greenboost/parameters/reserve_mb", "64\n");
    root.write("proc/modules", "greenboost 16384 0 - Live 0x0\n");
    let record = Published {
        t1_used: 1 << 30,
        t2_used: 3 << 30,
        promoted_bytes: 5 << 30,
        swaps: 2,
        room_made_bytes: 1 << 30,
        demoted_bytes: 3 << 30,
        kept_vram: 512 << 20,
        ..Published::default()
    };
    root.shim_process(100, "python3", record);
    root
}

#[test]
fn the_exposition_parses_with_every_family_and_sample() {
    let root = machine();
    let output = root.run(&["status", "--prometheus"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let exposition = text(&output.stdout);
    let Some(families) = parse(&exposition) else { return };
    let gauge = |name: &str, samples: Value| json!({"name": name, "type": "gauge", "samples": samples});
    let expected = json!([
        gauge(
            "greenboost_tier_used_bytes",
            json!([
                ["greenboost_tier_used_bytes", {"tier": "t1", "gpu": "all"}, 8589934592.0],
                ["greenboost_tier_used_bytes", {"tier": "t2", "gpu": "all"}, 6291456.0],
                ["greenboost_tier_used_bytes", {"tier": "t3", "gpu": "all"}, 1073741824.0],
            ])
        ),
        gauge("greenboost_t2_cached_bytes", json!([["greenboost_t2_cached_bytes", {}, 134217728.0]])),
        gauge("greenboost_t2_cap_bytes", json!([["greenboost_t2_cap_bytes", {}, 536870912.0]])),
        gauge("greenboost_t3_cap_bytes", json!([["greenboost_t3_cap_bytes", {}, 3758096384.0]])),
        gauge("greenboost_pressure_level", json!([["greenboost_pressure_level", {}, 1.0]])),
        gauge(
            "greenboost_process_tier_bytes",
            json!([
                ["greenboost_process_tier_bytes", {"pid": "100", "comm": "python3", "tier": "t1", "gpu": "all"}, 1073741824.0],
                ["greenboost_process_tier_bytes", {"pid": "100", "comm": "python3", "tier": "t2", "gpu": "all"}, 3221225472.0],
                ["greenboost_process_tier_bytes", {"pid": "123", "comm": "ollama \"runner\"", "tier": "t1", "gpu": "all"}, 8589934592.0],
                ["greenboost_process_tier_bytes", {"pid": "123", "comm": "ollama \"runner\"", "tier": "t2", "gpu": "all"}, 6291456.0],
            ])
        ),
        // The parser names a counter's family without its _total.
        json!({"name": "greenboost_tiering_moved_bytes", "type": "counter", "samples": [
            ["greenboost_tiering_moved_bytes_total", {"pid": "100", "direction": "to_vram"}, 5368709120.0],
            ["greenboost_tiering_moved_bytes_total", {"pid": "100", "direction": "to_t2"}, 3221225472.0],
        ]}),
        json!({"name": "greenboost_tiering_swaps", "type": "counter", "samples": [
            ["greenboost_tiering_swaps_total", {"pid": "100"}, 2.0],
        ]}),
        json!({"name": "greenboost_tiering_room_made_bytes", "type": "counter", "samples": [
            ["greenboost_tiering_room_made_bytes_total", {"pid": "100"}, 1073741824.0],
        ]}),
        gauge(
            "greenboost_tiering_kept_vram_bytes",
            json!([["greenboost_tiering_kept_vram_bytes", {"pid": "100"}, 536870912.0]])
        ),
        // The module is loaded, but its device cannot be opened: a program gets userspace.
        gauge("greenboost_backend_info", json!([["greenboost_backend_info", {"backend": "userspace"}, 1.0]])),
    ]);
    let Value::Array(mut families) = families else { panic!("{families}") };
    for family in &mut families {
        let help = family.as_object_mut().unwrap().remove("help").unwrap();
        assert!(help.as_str().is_some_and(|help| help.len() > 20), "{family}: HELP {help}");
        // The parser gives a value as an int or a float, by version: compare as floats.
        for sample in family["samples"].as_array_mut().unwrap() {
            sample[2] = json!(sample[2].as_f64().unwrap());
        }
    }
    assert_eq!(Value::Array(families), expected, "{exposition}");
}

#[test]
fn the_textfile_is_written_for_the_collector_and_parses() {
    let root = machine();
    let collector = tempfile::tempdir().unwrap();
    let output = root.run(&["status", "--textfile", collector.path().to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));
    let names: Vec<String> =
        std::fs::read_dir(collector.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, ["greenboost.prom"]);
    let file = std::fs::read_to_string(collector.path().join("greenboost.prom")).unwrap();
    assert_eq!(file, text(&root.run(&["status", "--prometheus"]).stdout));
    if let Some(families) = parse(&file) {
        assert_eq!(families.as_array().map(Vec::len), Some(11));
    }

    let missing = collector.path().join("absent");
    let output = root.run(&["status", "--textfile", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("greenboost.prom: No such file or directory (os error 2)"));
}

#[test]
fn watch_repeats_until_interrupted() {
    let root = machine();
    let mut child = root.command(&["status", "--json", "--watch", "1"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        lines.push(line);
    }
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(status.success(), "SIGINT ends the loop after its round: {status:?}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert_eq!(rest, "", "no round after the interrupt");
    for line in lines {
        let document: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(document["tiers"]["t2"]["used"], json!(6291456), "one line of JSON a round");
    }
}
