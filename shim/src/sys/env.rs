//! Reading the environment without allocating: usable in the load-time constructor and
//! inside `dlopen`, before the program's `main`.

use std::ffi::CStr;

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
