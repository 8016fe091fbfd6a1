//! Unprivileged users for the per-user limit tests: the device node's group (as the
//! udev rule grants it) and a forked child that drops to a uid in that group.

use crate::gb::*;

/// The group the tests give the device node, as the udev rule gives `greenboost`.
pub const GROUP: u32 = 4242;

/// The device node in group [`GROUP`] (mode 0660) until dropped, then root:root again.
pub struct DeviceGroup(std::ffi::CString);

impl DeviceGroup {
    pub fn grant() -> Result<DeviceGroup, String> {
        let node = std::ffi::CString::new(greenboost_abi::GB_DEVICE_PATH).expect("path without NUL");
        // SAFETY: chown of the device node by path; restored in drop.
        if unsafe { libc::chown(node.as_ptr(), 0, GROUP) } != 0 {
            return Err(format!("chgrp {}: {}", greenboost_abi::GB_DEVICE_PATH, errname(errno())));
        }
        Ok(DeviceGroup(node))
    }
}

impl Drop for DeviceGroup {
    fn drop(&mut self) {
        // SAFETY: chown by path.
        unsafe { libc::chown(self.0.as_ptr(), 0, 0) };
    }
}

/// In a forked child: becomes `uid` (group `uid`, member of [`GROUP`]) with
/// `RLIMIT_MEMLOCK` at `memlock` bytes (`None`: unlimited, as the install's limits.d
/// rule gives the group). Returns the errno of the step that failed.
pub fn become_user(uid: u32, memlock: Option<u64>) -> Result<(), i32> {
    let limit = memlock.unwrap_or(libc::RLIM_INFINITY);
    let rlim = libc::rlimit { rlim_cur: limit, rlim_max: limit };
    let groups = [GROUP];
    // SAFETY: setting our own limit and dropping privileges, in a forked child.
    let failed = unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) != 0
            || libc::setgroups(1, groups.as_ptr()) != 0
            || libc::setgid(uid) != 0
            || libc::setuid(uid) != 0
    };
    if failed {
        Err(errno())
    } else {
        Ok(())
    }
}
