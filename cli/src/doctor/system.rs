//! What the session and the system add: the locked-memory limit, the installed shim,
//! and no GreenBoost in /etc/ld.so.preload.

use super::probe::read;
use super::{Findings, Level};
use crate::run::{locate_shim, memlock_advice, MEMLOCK_ENOUGH};
use crate::size::format_bytes;

pub(super) fn check(findings: &mut Findings) {
    check_memlock(findings);
    check_shim(findings);
}

fn check_memlock(findings: &mut Findings) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return;
    }
    let show = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_owned()
        } else {
            format_bytes(v)
        }
    };
    if limit.rlim_cur == libc::RLIM_INFINITY || limit.rlim_cur >= MEMLOCK_ENOUGH {
        findings.add(
            "memlock",
            Level::Ok,
            format!("locked-memory limit {} (hard {})", show(limit.rlim_cur), show(limit.rlim_max)),
            None,
        );
    } else {
        findings.add("memlock", Level::Warn, memlock_advice(limit.rlim_cur), None);
    }
}

fn check_shim(findings: &mut Findings) {
    match locate_shim(None) {
        Ok(path) => findings.add("shim", Level::Ok, format!("shim: {}", path.display()), None),
        Err(e) => findings.add("shim", Level::Fail, e, None),
    }
    if read("/etc/ld.so.preload").is_some_and(|text| text.contains("greenboost")) {
        findings.add(
            "shim",
            Level::Fail,
            "/etc/ld.so.preload loads GreenBoost into every process on the system (an earlier implementation's installer did this; it can freeze boots)",
            Some("delete that line from /etc/ld.so.preload; use `greenboost run -- CMD` or the ollama drop-in instead".into()),
        );
    }
}
