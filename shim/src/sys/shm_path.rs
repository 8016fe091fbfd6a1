//! A file's path in /dev/shm (`greenboost_policy::PUBLISHED_DIR`), NUL-terminated in a
//! fixed buffer for open(2) and unlink(2): the records `greenboost status` reads
//! (`publish`) and live tiering's locks (`tier_lock`) live there.

use std::io::Write;

use greenboost_policy::PUBLISHED_DIR;

/// `PUBLISHED_DIR/<name>`.
///
/// # Invariants
/// `bytes[len]` is 0 (the last byte is never written); `len` is 0 when the name did not
/// fit, and then the path is empty.
pub struct ShmPath {
    bytes: [u8; 64],
    len: usize,
}

impl ShmPath {
    /// The path of `name` (format arguments, so that nothing is allocated).
    pub fn new(name: std::fmt::Arguments<'_>) -> ShmPath {
        let mut bytes = [0u8; 64];
        let mut cursor = std::io::Cursor::new(&mut bytes[..63]);
        let written = write!(cursor, "{PUBLISHED_DIR}/{name}");
        let len = if written.is_ok() { cursor.position() as usize } else { 0 };
        if len == 0 {
            bytes = [0u8; 64];
        }
        ShmPath { bytes, len }
    }

    /// Whether the name did not fit (nothing may be opened then).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The path for messages.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or(PUBLISHED_DIR)
    }

    /// The path for the C calls: NUL-terminated (invariant).
    pub fn as_ptr(&self) -> *const libc::c_char {
        self.bytes.as_ptr().cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_in_the_shared_memory_directory_nul_terminated_or_nothing() {
        let path = ShmPath::new(format_args!("greenboost-shim.{}", 42));
        assert_eq!(path.as_str(), "/dev/shm/greenboost-shim.42");
        assert_eq!(path.bytes[path.len], 0);
        let long = ShmPath::new(format_args!("{}", "x".repeat(80)));
        assert!(long.is_empty() && long.bytes[0] == 0, "a name that does not fit gives an empty path");
    }
}
