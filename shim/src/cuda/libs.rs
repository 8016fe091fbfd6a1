//! Finding the real libraries and functions behind the hooks.
//!
//! The shim exports `dlsym` and `dlopen` itself, so it never calls them through the
//! ordinary symbols: the real ones come from `dlvsym(RTLD_NEXT, ...)` over the glibc
//! symbol versions (GLIBC_2.34 first, where libdl moved into libc; GLIBC_2.2.5 on
//! x86_64 before that). Python loads libcudart RTLD_LOCAL, so a global lookup does not
//! see it; already-loaded CUDA libraries are reached by soname with RTLD_NOLOAD, or by
//! walking the loaded objects with dl_iterate_phdr.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
pub type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;

const GLIBC_VERSIONS: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.2.5"];

static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
static REAL_DLOPEN: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());

/// The next definition of a libc function after the shim, by glibc symbol version.
pub(super) fn libc_next(name: &CStr) -> *mut c_void {
    for version in GLIBC_VERSIONS {
        // SAFETY: both strings are NUL-terminated; dlvsym is not interposed by the shim.
        let found = unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), version.as_ptr()) };
        if !found.is_null() {
            return found;
        }
    }
    ptr::null_mut()
}

fn cached(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let found = libc_next(name);
    slot.store(found, Ordering::Release);
    found
}

/// glibc's dlsym. With `real_dlopen`, the one place outside `real` where an address
/// becomes a function: everything else, `real` included, is found through these two.
pub fn real_dlsym() -> Option<DlsymFn> {
    let found = cached(&REAL_DLSYM, c"dlsym");
    // SAFETY: a non-null result of dlvsym for "dlsym" is glibc's dlsym.
    (!found.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(found) })
}

pub fn real_dlopen() -> Option<DlopenFn> {
    let found = cached(&REAL_DLOPEN, c"dlopen");
    // SAFETY: a non-null result of dlvsym for "dlopen" is glibc's dlopen.
    (!found.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlopenFn>(found) })
}

/// `dlsym(handle, name)` through the real dlsym.
pub fn symbol(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    match real_dlsym() {
        // SAFETY: the caller passes a valid handle (or pseudo-handle) and C string.
        Some(dlsym) => unsafe { dlsym(handle, name) },
        None => ptr::null_mut(),
    }
}

fn open(name: &CStr, flags: c_int) -> *mut c_void {
    match real_dlopen() {
        // SAFETY: NUL-terminated name; dlopen has no other precondition.
        Some(dlopen) => unsafe { dlopen(name.as_ptr(), flags) },
        None => ptr::null_mut(),
    }
}

static DRIVER: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
static NVML: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
/// The program's libcuda: the loaded one, else loaded now (the driver is one per system
/// and loading it has no side effect on the program).
pub fn driver() -> *mut c_void {
    loaded_or_load(&DRIVER, c"libcuda.so.1")
}

/// The program's NVML, as for the driver.
pub fn nvml() -> *mut c_void {
    loaded_or_load(&NVML, c"libnvidia-ml.so.1")
}

fn loaded_or_load(slot: &AtomicPtr<c_void>, soname: &CStr) -> *mut c_void {
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let mut handle = open(soname, libc::RTLD_NOLOAD | libc::RTLD_LAZY);
    if handle.is_null() {
        handle = open(soname, libc::RTLD_LAZY | libc::RTLD_LOCAL);
    }
    if !handle.is_null() {
        slot.store(handle, Ordering::Release);
    }
    handle
}

/// The CUDA runtime the program loaded. Never loads one: a runtime hook only runs when
/// the program linked or loaded a runtime, and the shim must use that very one.
pub fn runtime() -> *mut c_void {
    static RUNTIME: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
    already_loaded(&RUNTIME, &[c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so"], b"libcudart")
}

/// The cuBLAS the program loaded (never loads one, as for the runtime).
pub fn cublas() -> *mut c_void {
    static CUBLAS: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
    // "libcublas.so" and not "libcublas": that prefix would also match libcublasLt.
    already_loaded(&CUBLAS, &[c"libcublas.so.13", c"libcublas.so.12", c"libcublas.so"], b"libcublas.so")
}

/// The cuBLASLt the program loaded.
pub fn cublas_lt() -> *mut c_void {
    static CUBLAS_LT: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
    already_loaded(&CUBLAS_LT, &[c"libcublasLt.so.13", c"libcublasLt.so.12", c"libcublasLt.so"], b"libcublasLt.so")
}

/// A loaded library, by one of its sonames or else by the file name of a loaded object
/// (a library loaded RTLD_LOCAL under another name is still found).
fn already_loaded(slot: &AtomicPtr<c_void>, sonames: &[&CStr], file_prefix: &[u8]) -> *mut c_void {
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let mut handle = sonames
        .iter()
        .map(|soname| open(soname, libc::RTLD_NOLOAD | libc::RTLD_LAZY))
        .find(|handle| !handle.is_null())
        .unwrap_or(ptr::null_mut());
    if handle.is_null() {
        handle = loaded_object_named(file_prefix);
    }
    if !handle.is_null() {
        slot.store(handle, Ordering::Release);
    }
    handle
}

/// A handle for the first loaded object whose file name starts with `prefix`.
fn loaded_object_named(prefix: &[u8]) -> *mut c_void {
    struct Search<'a> {
        prefix: &'a [u8],
        path: [u8; 4096],
        found: bool,
    }
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes the `Search` given below and a valid info whose
        // name is a C string (possibly empty or null for the main program).
        let (search, name) = unsafe { (&mut *data.cast::<Search<'_>>(), (*info).dlpi_name) };
        if name.is_null() {
            return 0;
        }
        // SAFETY: `name` is non-null (checked just above) and dl_iterate_phdr's `dlpi_name` is
        // a NUL-terminated string that stays valid while this callback runs.
        let path = unsafe { CStr::from_ptr(name) }.to_bytes();
        let file = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
        if !file.starts_with(search.prefix) || path.len() >= search.path.len() {
            return 0;
        }
        if let Some(dst) = search.path.get_mut(..path.len()) {
            dst.copy_from_slice(path);
            search.found = true;
            return 1;
        }
        0
    }
    let mut search = Search { prefix, path: [0; 4096], found: false };
    // SAFETY: the callback only reads the info it is given and writes into `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search<'_>).cast()) };
    if !search.found {
        return ptr::null_mut();
    }
    match CStr::from_bytes_until_nul(&search.path) {
        Ok(path) => open(path, libc::RTLD_NOLOAD | libc::RTLD_LAZY),
        Err(_) => ptr::null_mut(),
    }
}
