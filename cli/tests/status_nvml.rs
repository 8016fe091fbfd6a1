//! `greenboost status` with GPUs: NVML is a stand-in library (tests/fake_nvml.c, built
//! with the system's C compiler) with two GPUs and two processes, so the GPU table, the
//! per-process GPU memory and their JSON are exactly predictable. Skipped, with a note,
//! where there is no C compiler.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{text, FakeRoot};

const STATS: &str = "t1_reported_bytes 8589934592
t2_used_bytes 6291456
t2_cached_bytes 134217728
t2_cap_bytes 536870912
t2_peak_bytes 71303168
t3_used_bytes 0
buffers 2
free_ram_bytes 812646400
reserve_bytes 67108864
pressure 0
proc pid=123 uid=1000 t1=8589934592 t1_budget=0 t2=6291456 t2_peak=71303168 buffers=2 files=1 comm=ollama runner
";

/// The stand-in NVML, built once per test process; `None` without a C compiler.
fn fake_nvml(dir: &Path) -> Option<PathBuf> {
    let library = dir.join("libfake_nvml.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_nvml.c");
    let built = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status();
    match built {
        Ok(status) if status.success() => Some(library),
        _ => {
            eprintln!("note: no C compiler to build {}: test skipped", source.display());
            None
        }
    }
}

fn status(root: &FakeRoot, nvml: &Path, json: bool) -> String {
    let args = if json { &["status", "--json"][..] } else { &["status"] };
    let output = root.command(args).env("GREENBOOST_NVML_LIBRARY", nvml).output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
}

const TEXT: &str = "\
Pressure: none (free RAM 775.00 MiB, reserve 64.00 MiB)

tier          used       cached          cap         peak  note
T1        8.00 GiB                                         VRAM reported by processes under the shim
T2        6.00 MiB   128.00 MiB   512.00 MiB    68.00 MiB  pinned system RAM, 2 buffers
T3             0 B                         -            -  swappable RAM, written to swap under pressure
T3: not supported by this module

NVIDIA driver 550.54.15
gpu  name                              T1 used         VRAM  PCIe now/max   bus
0    NVIDIA H200                      1.50 GiB    80.00 GiB  Gen4x16/Gen5x16 00000000:19:00.0
1    NVIDIA RTX 4090 with a long name     3.00 GiB   160.00 GiB  -              -

     pid command           T1 reported      T2 used   GPU (NVML)  buffers
     123 ollama runner        8.00 GiB     6.00 MiB     5.00 GiB        2
     999 python3                     -            -            -        -
";

const JSON_GPUS: &str = r#"  "driver_version": "550.54.15",
  "gpus": [
    {
      "index": 0,
      "name": "NVIDIA H200",
      "pci_bus_id": "00000000:19:00.0",
      "t1_used": 1610612736,
      "vram_total": 85899345920,
      "vram_free": 84288733184,
      "pcie_generation": {
        "current": 4,
        "max": 5
      },
      "pcie_width": {
        "current": 16,
        "max": 16
      },
      "processes": [
        {
          "pid": 123,
          "used": 5368709120
        },
        {
          "pid": 999,
          "used": null
        }
      ]
    },
    {
      "index": 1,
      "name": "NVIDIA RTX 4090 with a long name",
      "pci_bus_id": null,
      "t1_used": 3221225472,
      "vram_total": 171798691840,
      "vram_free": 168577466368,
      "pcie_generation": {
        "current": 4,
        "max": 5
      },
      "pcie_width": null,
      "processes": []
    }
  ],
  "gpu_error": null,
"#;

const JSON_NVML_PROCESS: &str = r#"    {
      "pid": 999,
      "uid": null,
      "comm": "python3",
      "t1_reported": null,
      "t2_used": null,
      "t2_peak": null,
      "buffers": null,
      "t3_used": null,
      "t3_resident": null,
      "t3_swapped": null,
      "t3_buffers": null,
      "gpu_memory": null
    }
  ],
  "shim_processes": [],
  "sources": [
    "sysfs",
    "nvml"
  ],"#;

#[test]
fn status_shows_nvml_gpus_and_their_processes() {
    let root = FakeRoot::new();
    root.write("sys/kernel/greenboost/stats", STATS);
    root.write("sys/module/greenboost/parameters/reserve_mb", "64\n");
    root.write("proc/999/comm", "python3\n");
    let Some(nvml) = fake_nvml(root.root()) else {
        return;
    };
    let text = status(&root, &nvml, false);
    let (module, rest) = text.split_once('\n').unwrap();
    assert!(module.starts_with("Module: loaded, but "), "{text}");
    assert_eq!(rest, TEXT);
    let json = status(&root, &nvml, true);
    assert!(json.contains(JSON_GPUS), "{json}");
    assert!(json.contains(JSON_NVML_PROCESS), "{json}");
    assert!(json.contains("\"gpu_memory\": 5368709120"), "{json}");
}
