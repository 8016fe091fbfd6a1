//! sysfs `stats` and the dmesg reports show the figures the ioctls give and the buffers
//! this test holds, and never a raw kernel address.

use crate::gb::*;
use crate::harness::*;
use greenboost_abi::*;
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const REPORT: &str = "/sys/kernel/greenboost/report";

/// The sysfs stats: numeric `key value` lines, `proc ...` lines (older modules listed
/// processes there; none must appear now), and the whole text.
struct Sysfs {
    kv: HashMap<String, u64>,
    procs: Vec<String>,
    text: String,
}

fn read_sysfs() -> Result<Sysfs, String> {
    let text = std::fs::read_to_string(GB_SYSFS_STATS).map_err(|e| format!("{GB_SYSFS_STATS}: {e}"))?;
    let mut kv = HashMap::new();
    let mut procs = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("proc ") {
            procs.push(rest.to_string());
        } else if let Some((k, v)) = line.split_once(' ') {
            if let Ok(v) = v.trim().parse::<u64>() {
                kv.insert(k.to_string(), v);
            }
        }
    }
    Ok(Sysfs { kv, procs, text })
}

/// A raw kernel pointer printed anywhere (`0xffff...`, or 16 hex digits starting ffff).
pub fn has_kernel_address(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    lower.as_bytes().windows(16).any(|w| w.starts_with(b"ffff") && w.iter().all(|c| c.is_ascii_hexdigit()))
        || lower.contains("0xffff")
}

pub fn sysfs_stats() -> TestResult {
    let dev = Dev::open()?;
    let info = dev.info()?;
    let a = dev.alloc(4 * MIB)?;
    let b = dev.alloc(2 * MIB + 1)?;
    let t1 = 777 * MIB + 5;
    let budget = 8 << 30;
    dev.report_t1(t1, budget).map_err(|e| format!("REPORT_T1: {}", errname(e)))?;
    let pool = dev.pool()?;
    let me = dev.proc_stats()?;
    let Sysfs { kv, procs, text } = read_sysfs()?;
    let get = |k: &str| kv.get(k).copied().ok_or_else(|| format!("sysfs stats has no '{k}' line:\n{text}"));
    for (key, want) in [
        ("abi_version", GB_ABI_VERSION as u64),
        ("t1_reported_bytes", pool.t1_reported),
        ("t2_used_bytes", pool.t2_used),
        ("t2_cap_bytes", pool.t2_cap),
        ("t2_peak_bytes", pool.t2_peak),
        ("t3_used_bytes", pool.t3_used),
        ("buffers", pool.buffers),
        ("allocs", pool.allocs),
        ("alloc_failures", pool.alloc_failures),
        ("reserve_bytes", info.reserve),
        ("uid_cap_bytes", info.uid_cap),
        ("cache_target_bytes", info.cache_target),
        ("pressure", pool.pressure as u64),
    ] {
        let got = get(key)?;
        ensure(got == want, || format!("sysfs {key} {got}, ioctl says {want}"))?;
    }
    get("t2_cached_bytes")?;
    get("free_ram_bytes")?;
    ensure(pool.t1_reported >= t1, || "POOL_STATS.t1_reported lacks our report".into())?;
    ensure(pool.t2_used >= a.size + b.size, || "POOL_STATS.t2_used lacks our buffers".into())?;
    // Totals only in sysfs; our own row comes from GB_IOC_LIST_PROCS (as root: all).
    ensure(procs.is_empty() && !text.contains("pid="), || format!("sysfs stats lists processes:\n{text}"))?;
    ensure(!has_kernel_address(&text), || format!("sysfs stats shows a kernel address:\n{text}"))?;
    let (rows, _) = crate::tests::access::list_procs(dev.raw(), 256).map_err(|e| format!("GB_IOC_LIST_PROCS: {}", errname(e)))?;
    let row = rows.iter().find(|r| r.pid == me.pid).ok_or_else(|| format!("no row of pid {} in GB_IOC_LIST_PROCS: {rows:?}", me.pid))?;
    for (key, got, want) in [
        ("uid", row.uid as u64, me.uid as u64),
        ("t1", row.t1_used, t1),
        ("t1_budget", row.t1_budget, budget),
        ("t2", row.t2_used, a.size + b.size),
        ("buffers", row.buffers, 2),
        ("files", row.files, 1),
        ("t2_peak", row.t2_peak, me.t2_peak),
    ] {
        ensure(got == want, || format!("own row field {key}={got}, expected {want}: {row:?}"))?;
    }
    let comm = crate::tests::access::comm(row);
    ensure(comm == "gb-guest-tests", || format!("own row comm {comm:?}"))?;
    // Per-process totals add up to the module totals (nobody else holds buffers now).
    let sum_t2: u64 = rows.iter().map(|r| r.t2_used).sum();
    ensure(sum_t2 == pool.t2_used, || format!("rows sum to T2 {sum_t2}, total says {}", pool.t2_used))?;
    let processes = get("processes")?;
    ensure(processes == rows.len() as u64, || format!("sysfs processes {processes} but {} rows", rows.len()))?;
    // The figures follow a release.
    drop(a);
    let kv = read_sysfs()?.kv;
    ensure(kv.get("t2_used_bytes") == Some(&(pool.t2_used - 4 * MIB)), || format!("t2_used_bytes after freeing 4 MiB: {:?}", kv.get("t2_used_bytes")))?;
    drop(b);
    Ok(Outcome::Pass)
}

pub fn dmesg_report() -> TestResult {
    let dev = Dev::open()?;
    let buf = dev.alloc(6 * MIB)?;
    dev.report_t1(300 * MIB, 0).map_err(|e| format!("REPORT_T1: {}", errname(e)))?;
    let me = dev.proc_stats()?;
    let mut watch = KmsgWatch::start();
    ensure(watch.available(), || "/dev/kmsg unreadable".into())?;
    let mut f = std::fs::OpenOptions::new().write(true).open(REPORT).map_err(|e| format!("{REPORT}: {e}"))?;
    f.write_all(b"1\n").map_err(|e| format!("write {REPORT}: {e}"))?;
    std::thread::sleep(Duration::from_millis(100));
    let lines = watch.module_lines();
    for l in &lines {
        note(l);
    }
    let total = lines.iter().find(|l| l.contains("stats:")).ok_or("writing sysfs report logged no stats line")?;
    for want in ["T1 300 MiB reported", "T2 ", "cap ", "T3 "] {
        ensure(total.contains(want), || format!("report line lacks '{want}': {total}"))?;
    }
    let mine = format!("pid {} (gb-guest-tests)", me.pid);
    let pl = lines.iter().find(|l| l.contains(&mine)).ok_or_else(|| format!("report has no line for {mine}"))?;
    ensure(pl.contains("T1 300 MiB") && pl.contains("T2 6 MiB") && pl.contains("in 1 buffers"), || format!("our report line: {pl}"))?;
    ensure(!lines.iter().any(|l| has_kernel_address(l)), || "a report line shows a kernel address".into())?;
    drop(buf);
    Ok(Outcome::Pass)
}

/// The whole kernel log since boot (for the load banner and the unload line).
pub fn whole_log() -> Vec<String> {
    let Ok(fd) = open_path("/dev/kmsg", libc::O_RDONLY | libc::O_NONBLOCK) else { return Vec::new() };
    let mut f = std::fs::File::from(fd);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8192];
    use std::io::Read;
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let rec = String::from_utf8_lossy(&buf[..n]);
                out.push(rec.split_once(';').map(|x| x.1).unwrap_or(&rec).lines().next().unwrap_or("").to_string());
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    out
}

pub fn dmesg_banner() -> TestResult {
    let info = Dev::open()?.info()?;
    let log = whole_log();
    let banner = log.iter().rev().find(|l| l.starts_with("greenboost: loaded")).ok_or("no 'greenboost: loaded' banner in the kernel log")?;
    note(banner);
    for want in [format!("ABI {GB_ABI_VERSION}"), format!("T2 cap {} MiB", info.pool_cap / MIB), format!("reserve {} MiB", info.reserve / MIB)] {
        ensure(banner.contains(&want), || format!("banner lacks '{want}': {banner}"))?;
    }
    let module_lines: Vec<&String> = log.iter().filter(|l| l.starts_with("greenboost")).collect();
    if let Some(bad) = module_lines.iter().find(|l| has_kernel_address(l)) {
        return Err(format!("module log line shows a kernel address: {bad}"));
    }
    Ok(Outcome::Pass)
}

/// `gb-guest-tests check-unload-log`: after rmmod, the final stats line is in dmesg.
pub fn unload_logged() -> TestResult {
    let log = whole_log();
    let line = log.iter().rev().find(|l| l.starts_with("greenboost") && l.contains("unloading: final")).ok_or("no 'unloading: final' stats line after rmmod")?;
    note(line);
    ensure(line.contains("T2 0 B used"), || format!("final stats with T2 still in use: {line}"))?;
    ensure(line.contains("0 buffers"), || format!("final stats with live buffers: {line}"))?;
    ensure(!has_kernel_address(line), || "final line shows a kernel address".into())?;
    Ok(Outcome::Pass)
}
