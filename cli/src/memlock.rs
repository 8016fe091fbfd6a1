//! The locked-memory limit (RLIMIT_MEMLOCK) as it bears on GreenBoost, which depends on
//! the backend: the module charges each T2 buffer's pinned pages to it (as io_uring and
//! RDMA charge theirs), so T2 stops at the limit; the userspace backend's pages are
//! pinned by the driver's registration, which the limit does not count, but what
//! serving stacks lock next to T2 (NCCL, GPUDirect RDMA, io_uring buffers) is, and
//! fails at it. CAP_IPC_LOCK (which root has) exempts a process from the limit.

use crate::paths::SystemPaths;
use crate::size::format_bytes;

/// The T2 backend a program started now would get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The module, with its T2 cap when known (`GB_IOC_INFO`).
    Module {
        t2_cap: Option<u64>,
    },
    Userspace,
}

/// Below this, libraries that lock host memory next to GreenBoost fail.
const ENOUGH_BESIDE_T2: u64 = 64 << 20;

/// `CAP_IPC_LOCK`'s bit in the capability sets of /proc/PID/status.
const CAP_IPC_LOCK: u32 = 14;

/// The soft and hard limits, `None` for unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

fn finite(value: libc::rlim_t) -> Option<u64> {
    (value != libc::RLIM_INFINITY).then_some(value)
}

pub fn current() -> Option<Limit> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return None;
    }
    Some(Limit { soft: finite(limit.rlim_cur), hard: finite(limit.rlim_max) })
}

/// Lifts the soft limit to the hard one (always permitted), for the program `run`
/// starts; returns the limit it runs with.
pub fn raise_soft_to_hard() -> Option<Limit> {
    let limit = current()?;
    if limit.soft == limit.hard {
        return Some(limit);
    }
    let hard = limit.hard.unwrap_or(libc::RLIM_INFINITY);
    let raised = libc::rlimit { rlim_cur: hard, rlim_max: hard };
    // SAFETY: `raised` is a valid rlimit whose soft value is the current hard one.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) } == 0 {
        return Some(Limit { soft: limit.hard, ..limit });
    }
    Some(limit)
}

/// Whether this process has CAP_IPC_LOCK (its effective set in /proc/self/status).
pub fn exempt(paths: &SystemPaths) -> bool {
    let Ok(status) = std::fs::read_to_string(paths.proc_path("self/status")) else { return false };
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << CAP_IPC_LOCK) != 0)
}

/// What the limit means for `backend`, when it is low enough to matter and the process
/// is not exempt.
pub fn warning(paths: &SystemPaths, backend: Backend, soft: Option<u64>) -> Option<String> {
    let soft = soft?;
    let fix = "The installer lifts it for the greenboost group (/etc/security/limits.d/greenboost.conf): join the group (`sudo usermod -aG greenboost $USER`) and log in again; for a systemd service set LimitMEMLOCK=infinity (`greenboost service enable UNIT` does)";
    let low = match backend {
        // Any finite limit below the cap cuts T2 short of it.
        Backend::Module { t2_cap } => soft < t2_cap.unwrap_or(u64::MAX),
        Backend::Userspace => soft < ENOUGH_BESIDE_T2,
    };
    if !low || exempt(paths) {
        return None;
    }
    let limit = format_bytes(soft);
    Some(match backend {
        Backend::Module { t2_cap } => format!(
            "the locked-memory limit (ulimit -l) is {limit}, and the greenboost module charges T2 to it: T2 allocations past {limit}{} fail. {fix}",
            t2_cap.map_or(String::new(), |cap| format!(" (of the module's {} cap)", format_bytes(cap)))
        ),
        Backend::Userspace => format!(
            "the locked-memory limit (ulimit -l) is {limit}. The shim's userspace backend pins T2 through the driver's registration, which the limit does not count, but what NCCL, GPUDirect RDMA or io_uring lock next to it does, and they fail at {limit}. {fix}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    const WITHOUT_IPC_LOCK: &str = "Name:\tpython3\nCapEff:\t0000000000000000\n";
    const ROOTS_CAPABILITIES: &str = "Name:\tpython3\nCapEff:\t000001ffffffffff\n";

    #[test]
    fn the_warning_names_the_backend_charged() {
        let root = FakeRoot::new();
        root.write("proc/self/status", WITHOUT_IPC_LOCK);
        let paths = &root.paths;
        let module = Backend::Module { t2_cap: Some(16 << 30) };
        let charged = warning(paths, module, Some(8 << 20)).unwrap();
        assert!(charged.contains("the greenboost module charges T2 to it: T2 allocations past 8.00 MiB (of the module's 16.00 GiB cap) fail"), "{charged}");
        let beside = warning(paths, Backend::Userspace, Some(8 << 20)).unwrap();
        assert!(beside.contains("which the limit does not count, but what NCCL"), "{beside}");
        assert!(!beside.contains("charges"), "{beside}");

        // Enough for each backend, or unlimited: nothing to say.
        assert_eq!(warning(paths, module, Some(32 << 30)), None);
        assert!(warning(paths, module, Some(1 << 30)).is_some(), "1 GiB is short of the module's cap");
        assert_eq!(warning(paths, Backend::Userspace, Some(1 << 30)), None);
        assert_eq!(warning(paths, module, None), None);
    }

    #[test]
    fn a_process_with_cap_ipc_lock_is_not_warned() {
        let root = FakeRoot::new();
        root.write("proc/self/status", ROOTS_CAPABILITIES);
        assert!(exempt(&root.paths));
        assert_eq!(warning(&root.paths, Backend::Module { t2_cap: None }, Some(64 << 10)), None);
        assert_eq!(warning(&root.paths, Backend::Userspace, Some(64 << 10)), None);
        root.write("proc/self/status", "CapEff:\t0000000000004000\n");
        assert!(exempt(&root.paths), "bit 14 alone");
    }
}
