//! Reading the environment without allocating: usable in the load-time constructor and
//! inside `dlopen`, before the program's `main`.

use std::ffi::{c_char, CStr};

/// The value of `name`, read with getenv.
pub fn getenv(name: &str) -> Option<&'static [u8]> {
    let mut buffer = [0u8; 64];
    let bytes = name.as_bytes();
    buffer.get_mut(..bytes.len())?.copy_from_slice(bytes);
    // SAFETY: the buffer is NUL-terminated (it is longer than every variable name);
    // getenv's result stays valid until the environment is modified, and the shim reads
    // each variable once at load.
    let value = unsafe { libc::getenv(buffer.as_ptr().cast()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv returns a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(value) }.to_bytes())
}

extern "C" {
    /// The process's environment (POSIX `environ`): a null-terminated array of
    /// NUL-terminated `NAME=value` strings.
    static environ: *const *const c_char;
}

/// Calls `each(name, value)` for every variable of the environment whose name starts
/// with `prefix`, without allocating.
pub fn each_with_prefix(prefix: &[u8], mut each: impl FnMut(&[u8], &[u8])) {
    // SAFETY: `environ` is the C library's, read once here; it is null or an array that
    // ends with a null pointer, as POSIX defines it, and the shim reads it at load (the
    // constructor), before the program could be changing it from another thread.
    let mut entry = unsafe { environ };
    if entry.is_null() {
        return;
    }
    loop {
        // SAFETY: `entry` points into the array, at or before its terminating null.
        let pointer = unsafe { *entry };
        if pointer.is_null() {
            break;
        }
        // SAFETY: each entry is a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(pointer) }.to_bytes();
        if text.starts_with(prefix) {
            let (name, value) = match text.iter().position(|byte| *byte == b'=') {
                Some(at) => (&text[..at], &text[at + 1..]),
                None => (text, &text[text.len()..]),
            };
            each(name, value);
        }
        // SAFETY: the entry was not the terminating null, so the next one is in the array.
        entry = unsafe { entry.add(1) };
    }
}
