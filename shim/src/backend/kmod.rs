//! T2 from the kernel module: /dev/greenboost buffers (pinned 2 MiB pages, exported as
//! DMA-BUFs, tier stats in sysfs/dmesg), mapped shared; and the process's VRAM use
//! reported to the module (GB_IOC_REPORT_T1).

use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use greenboost_abi as abi;

use crate::backend::t2_buffer::{errno, Backend, BackendError, HostBuffer};
use crate::backend::userspace::UserspaceBackend;
use crate::cuda;
use crate::cuda::ffi::*;
use crate::sys::clock::monotonic_ns;

/// The kernel module.
pub struct KmodBackend {
    fd: c_int,
    info: abi::GbInfo,
    last_report_ns: AtomicU64,
    latest_t1: AtomicU64,
    latest_budget: AtomicU64,
    report_pending: AtomicBool,
}

/// Results of the one cuImportExternalMemory attempt per process (-1: not tried yet).
pub static IMPORT_DMABUF_RESULT: AtomicI32 = AtomicI32::new(-1);
pub static IMPORT_OPAQUE_RESULT: AtomicI32 = AtomicI32::new(-1);

impl KmodBackend {
    /// Opens /dev/greenboost and checks its ABI; `Err` says why not, for the log.
    pub fn open() -> Result<KmodBackend, String> {
        let path = c"/dev/greenboost";
        // SAFETY: NUL-terminated path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!("{}: {}", abi::GB_DEVICE_PATH, std::io::Error::last_os_error()));
        }
        let mut info = abi::GbInfo::default();
        // SAFETY: GB_IOC_INFO writes a GbInfo.
        if unsafe { libc::ioctl(fd, abi::GB_IOC_INFO as _, &mut info as *mut abi::GbInfo) } != 0 {
            let error = std::io::Error::last_os_error();
            // SAFETY: our fd.
            unsafe { libc::close(fd) };
            return Err(format!("{}: INFO failed: {error}", abi::GB_DEVICE_PATH));
        }
        if info.abi_version != abi::GB_ABI_VERSION {
            // SAFETY: our fd.
            unsafe { libc::close(fd) };
            return Err(format!(
                "{} speaks ABI {}, the shim ABI {}",
                abi::GB_DEVICE_PATH,
                info.abi_version,
                abi::GB_ABI_VERSION
            ));
        }
        Ok(KmodBackend {
            fd,
            info,
            last_report_ns: AtomicU64::new(0),
            latest_t1: AtomicU64::new(0),
            latest_budget: AtomicU64::new(0),
            report_pending: AtomicBool::new(false),
        })
    }

    /// Sends the process's VRAM use now (at exit), with the last budget reported.
    pub fn final_report(&self, vram_used: u64) {
        self.report_t1(vram_used, self.latest_budget.load(Ordering::Relaxed), true);
    }

    /// Tries to import the DMA-BUF as CUDA external memory, once per process. NVIDIA's
    /// drivers refuse (DMABUF_FD: CUDA_ERROR_NOT_SUPPORTED, OPAQUE_FD: CUDA_ERROR_UNKNOWN);
    /// the result is recorded and logged, and T2 always goes through host registration.
    fn try_import_once(&self, fd: c_int, len: usize) {
        for (handle_type, result) in [
            (CU_EXTERNAL_MEMORY_HANDLE_TYPE_DMABUF_FD, &IMPORT_DMABUF_RESULT),
            (CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD, &IMPORT_OPAQUE_RESULT),
        ] {
            if result.compare_exchange(-1, i32::MIN, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            // The driver takes ownership of the fd on success; give it a duplicate.
            // SAFETY: fd is a valid DMA-BUF fd.
            let duplicate = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            if duplicate < 0 {
                result.store(CuResult::INVALID_VALUE.0, Ordering::Release);
                continue;
            }
            let status = cuda::try_import_and_drop(duplicate, len as u64, handle_type);
            result.store(status.0, Ordering::Release);
            if status == CuResult::SUCCESS {
                info!(
                    "cuImportExternalMemory accepted a DMA-BUF as handle type {}; T2 still uses host registration",
                    handle_type
                );
            } else {
                info!(
                    "cuImportExternalMemory refused a DMA-BUF as handle type {} (CUDA error {})",
                    handle_type, status.0
                );
                // SAFETY: the driver did not take the fd.
                unsafe { libc::close(duplicate) };
            }
        }
    }
}

impl Drop for KmodBackend {
    fn drop(&mut self) {
        // SAFETY: our fd.
        unsafe { libc::close(self.fd) };
    }
}

impl Backend for KmodBackend {
    fn name(&self) -> &'static str {
        "kmod"
    }

    fn alloc(&self, len: usize, numa_node: Option<c_int>) -> Result<HostBuffer, BackendError> {
        let mut request =
            abi::GbAlloc { size: len as u64, numa_node: numa_node.unwrap_or(-1), ..abi::GbAlloc::default() };
        // SAFETY: GB_IOC_ALLOC reads and writes a GbAlloc.
        if unsafe { libc::ioctl(self.fd, abi::GB_IOC_ALLOC as _, &mut request as *mut abi::GbAlloc) } != 0 {
            let error = errno();
            return Err(if error == libc::ENOMEM {
                BackendError::OutOfMemory(error)
            } else {
                BackendError::Failed(error)
            });
        }
        let mapped_len = usize::try_from(request.alloc_size).unwrap_or(len).max(len);
        self.try_import_once(request.fd, mapped_len);
        // SAFETY: mapping the module's DMA-BUF fd, which supports shared mmap.
        let address = unsafe {
            libc::mmap(ptr::null_mut(), mapped_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, request.fd, 0)
        };
        let error = errno();
        // The mapping keeps the buffer alive; the fd is no longer needed.
        // SAFETY: the fd the module returned to us.
        unsafe { libc::close(request.fd) };
        if address == libc::MAP_FAILED {
            return Err(if error == libc::ENOMEM {
                BackendError::OutOfMemory(error)
            } else {
                BackendError::Failed(error)
            });
        }
        Ok(HostBuffer { address: address as usize, len: mapped_len, id: request.buffer_id })
    }

    fn release(&self, buffer: HostBuffer) {
        // SAFETY: a mapping this backend made; nothing uses it any more.
        unsafe { libc::munmap(buffer.ptr(), buffer.len) };
    }

    fn default_cap(&self) -> u64 {
        // The module resolves its cap at load; 0 would mean it reported none.
        if self.info.pool_cap != 0 {
            self.info.pool_cap
        } else {
            UserspaceBackend.default_cap()
        }
    }

    fn report_t1(&self, vram_used: u64, vram_budget: u64, now: bool) {
        const MIN_INTERVAL_NS: u64 = 100_000_000;
        self.latest_t1.store(vram_used, Ordering::Relaxed);
        self.latest_budget.store(vram_budget, Ordering::Relaxed);
        let time = monotonic_ns();
        let last = self.last_report_ns.load(Ordering::Relaxed);
        if !now && last != 0 && time.saturating_sub(last) < MIN_INTERVAL_NS {
            self.report_pending.store(true, Ordering::Relaxed);
            return;
        }
        if self.last_report_ns.compare_exchange(last, time, Ordering::AcqRel, Ordering::Relaxed).is_err() && !now {
            self.report_pending.store(true, Ordering::Relaxed);
            return;
        }
        self.report_pending.store(false, Ordering::Relaxed);
        let report = abi::GbT1Report {
            vram_used: self.latest_t1.load(Ordering::Relaxed),
            vram_budget: self.latest_budget.load(Ordering::Relaxed),
        };
        // SAFETY: GB_IOC_REPORT_T1 reads a GbT1Report.
        unsafe { libc::ioctl(self.fd, abi::GB_IOC_REPORT_T1 as _, &report as *const abi::GbT1Report) };
    }

    fn flush_t1_report(&self) {
        if self.report_pending.load(Ordering::Relaxed) {
            self.report_t1(self.latest_t1.load(Ordering::Relaxed), self.latest_budget.load(Ordering::Relaxed), false);
        }
    }

    fn memory_pressure(&self) -> bool {
        // The module's own flag (one ioctl, a microsecond beside a T2 allocation or
        // free): an eventfd would say the same a moment later, after the module has
        // emptied its cache.
        let mut stats = abi::GbPoolStats::default();
        // SAFETY: GB_IOC_POOL_STATS writes a GbPoolStats.
        let ok = unsafe { libc::ioctl(self.fd, abi::GB_IOC_POOL_STATS as _, &mut stats as *mut abi::GbPoolStats) } == 0;
        ok && stats.pressure != 0
    }
}
