//! `/dev/greenboost` ioctls the CLI uses (read-only queries).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use greenboost_abi::{
    GbInfo, GbPoolStats, GbProcList, GbProcRow, GbProcRowT3, GbProcStats, GbT3Stats, GB_IOC_INFO, GB_IOC_LIST_PROCS,
    GB_IOC_POOL_STATS, GB_IOC_PROC_STATS, GB_IOC_T3_STATS, GB_PROC_LIST_T3,
};

/// A row type `GB_IOC_LIST_PROCS` can fill, with the `GbProcList::flags` that asks for it.
trait ListRow: Copy + Default {
    const FLAGS: u32;
}

impl ListRow for GbProcRow {
    const FLAGS: u32 = 0;
}

impl ListRow for GbProcRowT3 {
    const FLAGS: u32 = GB_PROC_LIST_T3;
}

/// An open `/dev/greenboost`.
pub struct Device {
    file: File,
}

impl Device {
    pub fn open(path: &Path) -> io::Result<Device> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Device { file })
    }

    /// Issues a read-direction ioctl whose argument is a plain `#[repr(C)]` struct.
    fn read<T: Copy + Default>(&self, command: u32) -> io::Result<T> {
        debug_assert_eq!(greenboost_abi::ioc_size(command), std::mem::size_of::<T>());
        let mut value = T::default();
        // SAFETY: `command` encodes a read of exactly `size_of::<T>()` bytes (checked
        // above and by the ABI crate's layout asserts), and `value` is a valid, writable
        // `T` that lives across the call.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), command as _, &mut value as *mut T) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(value)
        }
    }

    pub fn info(&self) -> io::Result<GbInfo> {
        self.read(GB_IOC_INFO)
    }

    pub fn pool_stats(&self) -> io::Result<GbPoolStats> {
        self.read(GB_IOC_POOL_STATS)
    }

    pub fn proc_stats(&self) -> io::Result<GbProcStats> {
        self.read(GB_IOC_PROC_STATS)
    }

    /// `GB_IOC_T3_STATS` (modules with `GB_INFO_T3`; others answer ENOTTY).
    pub fn t3_stats(&self) -> io::Result<GbT3Stats> {
        self.read(GB_IOC_T3_STATS)
    }

    /// `GB_IOC_LIST_PROCS`: the per-process rows the module lets this caller see (its
    /// own user's processes, or every one for root). Modules without
    /// `GB_INFO_PROC_LIST` answer ENOTTY.
    pub fn list_procs(&self) -> io::Result<Vec<GbProcRow>> {
        self.list()
    }

    /// The rows with their T3 figures (`GB_PROC_LIST_T3`); modules without
    /// `GB_INFO_T3` answer EINVAL.
    pub fn list_procs_t3(&self) -> io::Result<Vec<GbProcRowT3>> {
        self.list()
    }

    fn list<R: ListRow>(&self) -> io::Result<Vec<R>> {
        let mut rows: Vec<R> = Vec::new();
        // The list may grow between two calls: ask again until it fits.
        for _ in 0..8 {
            let mut list = GbProcList {
                rows: rows.as_mut_ptr() as u64,
                capacity: u32::try_from(rows.len()).unwrap_or(u32::MAX),
                flags: R::FLAGS,
                ..GbProcList::default()
            };
            // SAFETY: the command reads and writes one `GbProcList`, which lives across
            // the call, and writes at most `capacity` rows to `rows`, a live array of
            // exactly that many `R`s, the row type `flags` asks for.
            let rc =
                unsafe { libc::ioctl(self.file.as_raw_fd(), GB_IOC_LIST_PROCS as _, &mut list as *mut GbProcList) };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            if list.total <= list.capacity {
                rows.truncate(list.count as usize);
                return Ok(rows);
            }
            rows = vec![R::default(); list.total as usize + 8];
        }
        Err(io::Error::other("the process list kept growing"))
    }
}
