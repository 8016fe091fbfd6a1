//! The ioctl type byte 0xB7 is also used by nsfs (`linux/nsfs.h`, `NS_GET_*` on
//! namespace fds) and remoteproc (`linux/remoteproc_cdev.h`, `RPROC_*` on
//! /dev/remoteprocN), as Documentation/userspace-api/ioctl/ioctl-number.rst lists.
//! An ioctl only reaches the driver of the fd it is issued on, so a shared type byte
//! is harmless as long as the full 32-bit commands (direction, size, type, number)
//! differ: then one of our commands sent to a namespace or remoteproc fd by mistake
//! (or theirs to /dev/greenboost) gets ENOTTY, never a meaningful answer, and tools
//! such as strace cannot confuse them. This test checks that they differ, against the
//! numbers of Linux 6.12's uapi headers (listed below) and, where the build host's
//! headers define them, against those headers too.
use greenboost_abi::*;
use std::path::PathBuf;
use std::process::Command;

/// `_IOC(dir, 0xB7, nr, size)` in the asm-generic encoding.
const fn ioc(dir: u32, nr: u32, size: u32) -> u32 {
    (dir << 30) | (size << 16) | (0xB7 << 8) | nr
}
const NONE: u32 = 0;
const W: u32 = 1;
const R: u32 = 2;

/// Every other 0xB7 command of Linux 6.12.
const OTHERS: [(&str, u32); 14] = [
    ("NS_GET_USERNS", ioc(NONE, 0x1, 0)),
    ("NS_GET_PARENT", ioc(NONE, 0x2, 0)),
    ("NS_GET_NSTYPE", ioc(NONE, 0x3, 0)),
    ("NS_GET_OWNER_UID", ioc(NONE, 0x4, 0)),
    ("NS_GET_MNTNS_ID", ioc(R, 0x5, 8)),
    ("NS_GET_PID_FROM_PIDNS", ioc(R, 0x6, 4)),
    ("NS_GET_TGID_FROM_PIDNS", ioc(R, 0x7, 4)),
    ("NS_GET_PID_IN_PIDNS", ioc(R, 0x8, 4)),
    ("NS_GET_TGID_IN_PIDNS", ioc(R, 0x9, 4)),
    // struct mnt_ns_info: 16 bytes
    ("NS_MNT_GET_INFO", ioc(R, 10, 16)),
    ("NS_MNT_GET_NEXT", ioc(R, 11, 16)),
    ("NS_MNT_GET_PREV", ioc(R, 12, 16)),
    ("RPROC_SET_SHUTDOWN_ON_RELEASE", ioc(W, 1, 4)),
    ("RPROC_GET_SHUTDOWN_ON_RELEASE", ioc(R, 2, 4)),
];

#[test]
fn no_command_equals_an_nsfs_or_remoteproc_one() {
    assert_eq!(GB_IOC_MAGIC, 0xB7);
    for (name, theirs) in OTHERS {
        assert!(!GB_IOC_ALL.contains(&theirs), "{name} ({theirs:#x}) is also a GreenBoost command");
    }
}

/// The host's uapi headers, where they define the names, give the same numbers as the
/// table above (so the table is not a wrong transcription); names an older header
/// lacks are skipped.
#[test]
fn table_agrees_with_the_hosts_uapi_headers() {
    let mut src = String::from(
        "#include <stdio.h>\n#include <linux/ioctl.h>\n#include <linux/types.h>\n\
         #if __has_include(<linux/nsfs.h>)\n#include <linux/nsfs.h>\n#endif\n\
         #if __has_include(<linux/remoteproc_cdev.h>)\n#include <linux/remoteproc_cdev.h>\n#endif\n\
         int main(void) {\n",
    );
    for (name, _) in OTHERS {
        src += &format!("#ifdef {name}\nprintf(\"{name}=%u\\n\", (unsigned)({name}));\n#endif\n");
    }
    src += "return 0;\n}\n";
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (c_file, exe) = (dir.join("magic_probe.c"), dir.join("magic_probe"));
    std::fs::write(&c_file, src).expect("write probe source");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc).args(["-std=gnu11", "-Wall", "-Werror"]).arg(&c_file).arg("-o").arg(&exe).status();
    assert!(status.expect("run the C compiler").success(), "probe does not compile");
    let out = Command::new(&exe).output().expect("run probe");
    let text = String::from_utf8(out.stdout).expect("utf8");
    let mut seen = 0;
    for line in text.lines() {
        let (name, value) = line.split_once('=').expect("name=value");
        let value: u32 = value.parse().expect("number");
        let want = OTHERS.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(Some(value), want, "{name}: host header {value:#x}, table {want:x?}");
        assert!(!GB_IOC_ALL.contains(&value), "{name} ({value:#x}) is also a GreenBoost command");
        seen += 1;
    }
    // Debian 12's linux-libc-dev has at least NS_GET_USERNS..NS_GET_OWNER_UID.
    assert!(seen >= 4, "the host headers define too few 0xB7 commands:\n{text}");
}
