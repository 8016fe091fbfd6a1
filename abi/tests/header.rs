//! Checks that the C mirror `abi/greenboost.h` agrees with the Rust definition: every
//! struct size, field offset, ioctl number and constant. The C side is compiled with
//! the system C compiler and prints what it sees; the Rust side computes the same keys.
use greenboost_abi::*;
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

/// (C struct, Rust type, fields): expands to the Rust layout table and the C probes.
macro_rules! layouts {
    ($( $cname:literal => $ty:ty { $($field:ident),* $(,)? } )*) => {
        fn rust_layouts(out: &mut BTreeMap<String, u64>) {
            $(
                out.insert(format!("sizeof {}", $cname), size_of::<$ty>() as u64);
                $( out.insert(format!("offsetof {}.{}", $cname, stringify!($field)),
                              offset_of!($ty, $field) as u64); )*
            )*
        }
        fn c_layout_probes() -> String {
            let mut s = String::new();
            $(
                s += &format!("P(\"sizeof {0}\", sizeof(struct {0}));\n", $cname);
                $( s += &format!("P(\"offsetof {0}.{1}\", offsetof(struct {0}, {1}));\n",
                                 $cname, stringify!($field)); )*
            )*
            s
        }
    };
}

layouts! {
    "gb_info" => GbInfo { abi_version, features, chunk_size, pool_cap, reserve, uid_cap, cache_target, max_alloc }
    "gb_alloc" => GbAlloc { size, flags, numa_node, fd, pad0, buffer_id, alloc_size }
    "gb_pool_stats" => GbPoolStats { t2_used, t2_cached, t2_cap, t2_peak, t1_reported, t3_used,
                                     buffers, allocs, alloc_failures, free_ram, pressure, pad0 }
    "gb_proc_stats" => GbProcStats { pid, uid, t2_used, t2_peak, buffers, t1_reported }
    "gb_t1_report" => GbT1Report { vram_used, vram_budget }
    "gb_eventfd" => GbEventfd { fd, flags }
    "gb_proc_row" => GbProcRow { pid, uid, t1_used, t1_budget, t2_used, t2_peak, buffers, files, comm }
    "gb_proc_list" => GbProcList { rows, capacity, count, total, flags }
    "gb_proc_row_t3" => GbProcRowT3 { row, t3_used, t3_resident, t3_swapped, t3_buffers }
    "gb_move" => GbMove { fd, tier, flags, pad0, buffer_id, moved }
    "gb_t3_stats" => GbT3Stats { t3_used, t3_resident, t3_swapped, t3_buffers, t3_cap, t3_peak, swap_free,
                                 moves_to_t3, moves_to_t2, moved_bytes, move_ns, move_refusals }
}

fn rust_constants(out: &mut BTreeMap<String, u64>) {
    let consts: [(&str, u64); 22] = [
        ("GB_ABI_VERSION", GB_ABI_VERSION as u64),
        ("GB_IOC_MAGIC", GB_IOC_MAGIC as u64),
        ("GB_CHUNK_SIZE", GB_CHUNK_SIZE),
        ("GB_INFO_MMAP", GB_INFO_MMAP as u64),
        ("GB_INFO_EVENTFD", GB_INFO_EVENTFD as u64),
        ("GB_INFO_PROC_LIST", GB_INFO_PROC_LIST as u64),
        ("GB_ALLOC_NODE_STRICT", GB_ALLOC_NODE_STRICT as u64),
        ("GB_ALLOC_FLAGS_ALL", GB_ALLOC_FLAGS_ALL as u64),
        ("GB_INFO_T3", GB_INFO_T3 as u64),
        ("GB_ALLOC_T3", GB_ALLOC_T3 as u64),
        ("GB_TIER_T2", GB_TIER_T2 as u64),
        ("GB_TIER_T3", GB_TIER_T3 as u64),
        ("GB_PROC_LIST_T3", GB_PROC_LIST_T3 as u64),
        ("GB_IOC_MOVE", GB_IOC_MOVE as u64),
        ("GB_IOC_T3_STATS", GB_IOC_T3_STATS as u64),
        ("GB_IOC_INFO", GB_IOC_INFO as u64),
        ("GB_IOC_ALLOC", GB_IOC_ALLOC as u64),
        ("GB_IOC_POOL_STATS", GB_IOC_POOL_STATS as u64),
        ("GB_IOC_PROC_STATS", GB_IOC_PROC_STATS as u64),
        ("GB_IOC_REPORT_T1", GB_IOC_REPORT_T1 as u64),
        ("GB_IOC_REGISTER_EVENTFD", GB_IOC_REGISTER_EVENTFD as u64),
        ("GB_IOC_LIST_PROCS", GB_IOC_LIST_PROCS as u64),
    ];
    for (name, value) in consts {
        out.insert(format!("const {name}"), value);
    }
}

fn c_values() -> BTreeMap<String, u64> {
    let mut rust_keys = BTreeMap::new();
    rust_constants(&mut rust_keys);
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"greenboost.h\"\n\
         #define P(k, v) printf(\"%s=%llu\\n\", k, (unsigned long long)(v))\n\
         int main(void) {\n",
    );
    src += &c_layout_probes();
    for key in rust_keys.keys() {
        let name = key.trim_start_matches("const ");
        src += &format!("P(\"{key}\", {name});\n");
    }
    src += "return 0;\n}\n";

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let c_file = dir.join("abi_probe.c");
    let exe = dir.join("abi_probe");
    std::fs::write(&c_file, src).expect("write probe source");
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(&include)
        .arg(&c_file)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "greenboost.h does not compile");
    let out = Command::new(&exe).output().expect("run probe");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('=').expect("key=value");
            (k.to_string(), v.parse().expect("number"))
        })
        .collect()
}

#[test]
fn c_header_matches_rust_abi() {
    let mut rust = BTreeMap::new();
    rust_layouts(&mut rust);
    rust_constants(&mut rust);
    let c = c_values();
    let mismatches: Vec<String> = rust
        .iter()
        .filter(|(k, v)| c.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: rust {v}, C {:?}", c.get(k)))
        .collect();
    assert!(mismatches.is_empty(), "ABI mismatch:\n{}", mismatches.join("\n"));
    assert_eq!(rust.len(), c.len(), "the probe and the Rust table cover the same keys");
}

#[test]
fn ioctl_numbers_are_distinct_and_encode_their_argument_size() {
    let sizes = [
        size_of::<GbInfo>(),
        size_of::<GbAlloc>(),
        size_of::<GbPoolStats>(),
        size_of::<GbProcStats>(),
        size_of::<GbT1Report>(),
        size_of::<GbEventfd>(),
        size_of::<GbProcList>(),
        size_of::<GbMove>(),
        size_of::<GbT3Stats>(),
    ];
    for (i, cmd) in GB_IOC_ALL.iter().enumerate() {
        assert_eq!(ioc_size(*cmd), sizes[i], "command {i:#x}");
        assert_eq!((cmd >> 8) & 0xff, GB_IOC_MAGIC);
        for other in &GB_IOC_ALL[i + 1..] {
            assert_ne!(cmd, other);
        }
    }
    assert_eq!(ioc_dir(GB_IOC_ALLOC), 3, "ALLOC is read-write");
    assert_eq!(ioc_dir(GB_IOC_INFO), 2, "INFO is read-only");
    assert_eq!(ioc_dir(GB_IOC_REPORT_T1), 1, "REPORT_T1 is write-only");
}
