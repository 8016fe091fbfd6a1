//! `greenboost status --json` against a fake /sys and /proc (the module's documented
//! stats format), with the device node and NVML absent, so every figure comes from the
//! text file and the output is exactly predictable.

mod common;

use common::{text, FakeRoot};

/// `greenboost status ARGS` against `root`: stdout, stderr and whether it succeeded.
fn status(root: &FakeRoot, args: &[&str]) -> (String, String, bool) {
    let mut full = vec!["status"];
    full.extend_from_slice(args);
    let output = root.run(&full);
    (text(&output.stdout), text(&output.stderr), output.status.success())
}

const STATS: &str = "abi_version 1
t1_reported_bytes 8589934592
t2_used_bytes 6291456
t2_cached_bytes 134217728
t2_zeroed_bytes 134217728
t2_cap_bytes 536870912
t2_peak_bytes 71303168
t3_used_bytes 0
buffers 2
allocs 40
alloc_failures 3
pinned_on_release 0
free_ram_bytes 812646400
reserve_bytes 67108864
uid_cap_bytes 0
cache_target_bytes 134217728
pressure 1
processes 2
proc pid=123 uid=1000 t1=8589934592 t1_budget=0 t2=6291456 t2_peak=71303168 buffers=2 files=1 comm=ollama runner
proc pid=45 uid=0 t1=0 t1_budget=0 t2=0 t2_peak=0 buffers=0 files=1 comm=
";

/// What `status --json` prints for `STATS` (DEVICE: the fake device node's path).
const EXPECTED_JSON: &str = r#"{
  "module": {
    "loaded": true,
    "state": "loaded",
    "device": "DEVICE",
    "device_error": "DEVICE does not exist although the module is loaded: `sudo udevadm trigger` makes it (the udev rule of `sudo make install` names it)",
    "abi_version": null,
    "sysfs_error": null,
    "parameters": {
      "pool_cap_mb": "512",
      "reserve_mb": "64"
    }
  },
  "tiers": {
    "t1": {
      "reported": 8589934592
    },
    "t2": {
      "used": 6291456,
      "cached": 134217728,
      "cap": 536870912,
      "peak": 71303168,
      "buffers": 2
    },
    "t3": {
      "supported": false,
      "used": 0,
      "resident": null,
      "swapped": null,
      "buffers": null,
      "cap": null,
      "peak": null,
      "swap_total": null,
      "swap_free": null,
      "moves_to_t3": null,
      "moves_to_t2": null,
      "moved_bytes": null,
      "move_ns": null,
      "move_refusals": null
    }
  },
  "pressure": {
    "active": true,
    "free_ram": 812646400,
    "reserve": 67108864,
    "alloc_failures": 3
  },
  "driver_version": null,
  "gpus": [],
  "gpu_error": "NVML disabled by GREENBOOST_NVML_LIBRARY=none",
  "processes": [
    {
      "pid": 45,
      "uid": 0,
      "comm": "",
      "t1_reported": 0,
      "t2_used": 0,
      "t2_peak": 0,
      "buffers": 0,
      "t3_used": null,
      "t3_resident": null,
      "t3_swapped": null,
      "t3_buffers": null,
      "gpu_memory": null
    },
    {
      "pid": 123,
      "uid": 1000,
      "comm": "ollama runner",
      "t1_reported": 8589934592,
      "t2_used": 6291456,
      "t2_peak": 71303168,
      "buffers": 2,
      "t3_used": null,
      "t3_resident": null,
      "t3_swapped": null,
      "t3_buffers": null,
      "gpu_memory": null
    }
  ],
  "shim_processes": [],
  "sources": [
    "sysfs"
  ],
  "sysfs": {
    "abi_version": 1,
    "t1_reported_bytes": 8589934592,
    "t2_used_bytes": 6291456,
    "t2_cached_bytes": 134217728,
    "t2_zeroed_bytes": 134217728,
    "t2_cap_bytes": 536870912,
    "t2_peak_bytes": 71303168,
    "t3_used_bytes": 0,
    "buffers": 2,
    "allocs": 40,
    "alloc_failures": 3,
    "pinned_on_release": 0,
    "free_ram_bytes": 812646400,
    "reserve_bytes": 67108864,
    "uid_cap_bytes": 0,
    "cache_target_bytes": 134217728,
    "pressure": 1,
    "processes": 2
  }
}
"#;

#[test]
fn status_json_reads_the_fake_sysfs() {
    let root = FakeRoot::new();
    root.write("sys/kernel/greenboost/stats", STATS);
    root.write("sys/module/greenboost/parameters/reserve_mb", "64\n");
    root.write("sys/module/greenboost/parameters/pool_cap_mb", "512\n");
    // pid 45 has an empty comm in sysfs: the module's name wins over /proc, which may
    // belong to another pid namespace than the module's pids.
    root.write("proc/45/comm", "from-proc\n");
    let (stdout, stderr, ok) = status(&root, &["--json"]);
    assert!(ok, "status failed: {stderr}");
    let device = root.path("dev/greenboost");
    let expected = EXPECTED_JSON.replace("DEVICE", &device.display().to_string());
    assert_eq!(stdout, expected);
}

#[test]
fn status_without_the_module_says_so_and_succeeds() {
    let root = FakeRoot::new();
    root.write("proc/modules", "");
    root.write("proc/sys/kernel/osrelease", "6.1.0-test\n");
    let (stdout, stderr, ok) = status(&root, &["--json"]);
    assert!(ok, "status failed: {stderr}");
    assert!(stdout.contains("\"loaded\": false,\n    \"state\": \"not_installed\""), "{stdout}");
    assert!(stdout.contains("\"sources\": []"), "{stdout}");
    assert!(stdout.contains("\"active\": null"), "{stdout}");
    assert!(stdout.contains("cannot read"), "{stdout}");

    // No module to load: modprobe would fail, so status points at doctor instead.
    let (text, _, ok) = status(&root, &[]);
    assert!(ok);
    let module = text.lines().next().unwrap();
    assert!(module.starts_with("Module: the greenboost module is not installed for kernel 6.1.0-test: see `greenboost doctor`. T2 comes from the shim's userspace backend"), "{text}");
    assert!(!text.contains("modprobe"), "{text}");

    root.write("lib/modules/6.1.0-test/extra/greenboost.ko", "");
    let (text, _, _) = status(&root, &[]);
    assert!(text.contains("is installed") && text.contains("sudo modprobe greenboost"), "{text}");
}

#[test]
fn status_names_a_kernel_without_module_support() {
    let root = FakeRoot::new();
    root.write("proc/sys/kernel/osrelease", "6.1.0-tiny\n");
    let (text, _, ok) = status(&root, &[]);
    assert!(ok);
    assert!(text.starts_with("Module: this kernel cannot load modules (no /proc/modules"), "{text}");
    let (json, _, _) = status(&root, &["--json"]);
    assert!(json.contains("\"state\": \"no_module_support\""), "{json}");
}

#[test]
fn status_text_shows_pressure_and_processes() {
    let root = FakeRoot::new();
    root.write("sys/kernel/greenboost/stats", STATS);
    root.write("sys/module/greenboost/parameters/reserve_mb", "64\n");
    let (text, stderr, ok) = status(&root, &[]);
    assert!(ok, "{stderr}");
    assert!(text.contains("Pressure: ACTIVE: free RAM 775.00 MiB is below the reserve 64.00 MiB"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("T2")
            && l.contains("6.00 MiB")
            && l.contains("512.00 MiB")
            && l.contains("2 buffers")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.contains("123") && l.contains("ollama runner") && l.contains("8.00 GiB")), "{text}");
}

/// A module whose sysfs file shows totals only (the per-process rows come from
/// GB_IOC_LIST_PROCS): without the device, status lists no process and says why.
#[test]
fn status_says_when_process_rows_need_the_device() {
    let root = FakeRoot::new();
    let totals_only: String = STATS.lines().filter(|l| !l.starts_with("proc ")).map(|l| format!("{l}\n")).collect();
    root.write("sys/kernel/greenboost/stats", &totals_only);
    let (json, stderr, ok) = status(&root, &["--json"]);
    assert!(ok, "status failed: {stderr}");
    assert!(json.contains("\"processes\": []"), "{json}");
    let (text, stderr, ok) = status(&root, &[]);
    assert!(ok, "status failed: {stderr}");
    assert!(
        text.lines().any(|l| l
            .starts_with("Processes: 2 of the module's 2 not listed: per-process rows come only from the device: ")
            && l.contains("does not exist")),
        "{text}"
    );
}

/// A module with T3 (kmod/stats.rs's keys): status shows exactly its figures, and the
/// swap total from /proc/meminfo (the module cannot read that one).
const T3_KEYS: &str = "t3_used_bytes 1073741824
t3_resident_bytes 805306368
t3_swapped_bytes 268435456
t3_buffers 3
t3_cap_bytes 3758096384
t3_peak_bytes 1342177280
swap_free_bytes 4026531840
t3_moves_to_t3 2
t3_moves_to_t2 1
t3_moved_bytes 1073741824
t3_move_ns 523400000
t3_move_refusals 0
";

#[test]
fn status_shows_the_modules_t3_figures() {
    let root = FakeRoot::new();
    let with_t3 = STATS.replace("t3_used_bytes 0\n", T3_KEYS);
    root.write("sys/kernel/greenboost/stats", &with_t3);
    root.write(
        "proc/meminfo",
        "MemTotal:       16384000 kB\nSwapTotal:       4194304 kB\nSwapFree:        3932160 kB\n",
    );
    let (json, stderr, ok) = status(&root, &["--json"]);
    assert!(ok, "status failed: {stderr}");
    let t3 = r#"    "t3": {
      "supported": true,
      "used": 1073741824,
      "resident": 805306368,
      "swapped": 268435456,
      "buffers": 3,
      "cap": 3758096384,
      "peak": 1342177280,
      "swap_total": 4294967296,
      "swap_free": 4026531840,
      "moves_to_t3": 2,
      "moves_to_t2": 1,
      "moved_bytes": 1073741824,
      "move_ns": 523400000,
      "move_refusals": 0
    }
  },"#;
    assert!(json.contains(t3), "{json}");
    assert!(json.contains("\"t3_move_refusals\": 0"), "the raw sysfs keys are kept: {json}");

    let (text, stderr, ok) = status(&root, &[]);
    assert!(ok, "status failed: {stderr}");
    let row = text.lines().find(|l| l.starts_with("T3 ")).unwrap_or_else(|| panic!("no T3 row: {text}"));
    assert!(
        row.contains("1.00 GiB")
            && row.contains("3.50 GiB")
            && row.contains("1.25 GiB")
            && row.ends_with("swappable RAM: 768.00 MiB resident, 256.00 MiB in swap, 3 buffers"),
        "{row}"
    );
    assert!(
        text.lines().any(|l| l
            == "T3: cap 3.50 GiB; swap 3.75 GiB free of 4.00 GiB; moves: 2 to T3, 1 to T2, 1.00 GiB copied in 523.4 ms, 0 refused"),
        "{text}"
    );
}

#[test]
fn status_says_when_the_module_has_no_t3() {
    let root = FakeRoot::new();
    root.write("sys/kernel/greenboost/stats", STATS);
    let (text, stderr, ok) = status(&root, &[]);
    assert!(ok, "status failed: {stderr}");
    assert!(text.lines().any(|l| l == "T3: not supported by this module"), "{text}");
    assert!(!text.contains("T3 used"), "no per-process T3 columns without T3 rows: {text}");

    // No statistics at all: nothing is claimed about T3.
    let absent = FakeRoot::new();
    absent.write("proc/modules", "");
    let (text, _, ok) = status(&absent, &[]);
    assert!(ok);
    assert!(!text.contains("T3:"), "{text}");
    let (json, _, _) = status(&absent, &["--json"]);
    assert!(json.contains("\"supported\": null"), "{json}");
}

#[test]
fn status_says_when_t3_has_no_swap() {
    let root = FakeRoot::new();
    let no_swap = STATS.replace("t3_used_bytes 0\n", &T3_KEYS.replace("4026531840", "0"));
    root.write("sys/kernel/greenboost/stats", &no_swap);
    root.write("proc/meminfo", "SwapTotal:             0 kB\n");
    let (text, stderr, ok) = status(&root, &[]);
    assert!(ok, "status failed: {stderr}");
    assert!(
        text.lines()
            .any(|l| l
                .starts_with("T3: no swap: T3 buffers cannot be allocated (T3 needs swap): sudo greenboost swap add")),
        "{text}"
    );
}
