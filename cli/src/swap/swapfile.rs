//! Whether a filesystem can hold a swap file, and making one: room (statvfs), a type
//! the kernel swaps to safely (statfs), then the file itself, 0600, every block
//! allocated (the kernel refuses a swap file with holes).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::size::format_bytes;

/// mkswap's floor is ten pages; a swap file much smaller than this helps nobody.
pub const MIN_SIZE: u64 = 1 << 20;

/// What `statfs`/`statvfs` say about the filesystem holding a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filesystem {
    /// `statfs.f_type`, the filesystem's magic number.
    pub magic: u64,
    pub total: u64,
    /// Bytes an unprivileged writer may still use (`f_bavail`).
    pub available: u64,
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

pub fn filesystem(dir: &Path) -> io::Result<Filesystem> {
    let c = c_path(dir)?;
    // SAFETY: both structs are plain C data for which all-zero is a valid value.
    let (mut fs, mut vfs): (libc::statfs, libc::statvfs) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: `c` is a NUL-terminated path and `fs`/`vfs` are valid, writable structs
    // that live across the calls.
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 || unsafe { libc::statvfs(c.as_ptr(), &mut vfs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // fsblkcnt_t and f_frsize are 64-bit on the 64-bit targets GreenBoost runs on.
    let fragment = vfs.f_frsize;
    Ok(Filesystem {
        magic: fs.f_type as u64,
        total: vfs.f_blocks.saturating_mul(fragment),
        available: vfs.f_bavail.saturating_mul(fragment),
    })
}

/// Why the kernel cannot (or this command will not) put a swap file on a filesystem of
/// type `magic`; `None` for the ones it can (ext4, XFS, f2fs, ...).
pub fn unsuitable(magic: u64) -> Option<&'static str> {
    Some(match magic {
        // btrfs swaps to a file only with No_COW set before any data is written, no
        // compression and no snapshot of the subvolume: more than this command checks.
        0x9123_683e => "it is btrfs, where a swap file needs No_COW, no compression and no snapshots of its subvolume, which this command does not set up: make one with `btrfs filesystem mkswapfile --size SIZE PATH` (btrfs-progs 6.1 or later) and `swapon PATH`, or choose a --path on another filesystem",
        0x2fc1_2fc1 => "it is ZFS, which cannot hold a swap file: use a zvol or a --path on another filesystem",
        0x0102_1994 | 0x8584_58f6 => "it is tmpfs/ramfs: a swap file in RAM frees no RAM",
        0x794c_7630 => "it is overlayfs, which the kernel does not swap to",
        0x6969 | 0xff53_4d42 | 0xfe53_4d42 | 0x6573_5546 => "it is a network or FUSE filesystem, which the kernel does not swap to",
        0x7371_7368 | 0x9fa0 => "it is read-only (squashfs/proc)",
        _ => return None,
    })
}

/// What the filesystem must keep free beside the swap file: 1 GiB, or 5% of a smaller
/// filesystem, so the swap file never fills the disk it shares with the system.
pub fn headroom(fs: &Filesystem) -> u64 {
    (1u64 << 30).min(fs.total / 20)
}

/// Why `size` more bytes do not fit on `fs`, if they do not.
pub fn lacks_room(fs: &Filesystem, size: u64) -> Option<String> {
    let keep = headroom(fs);
    (size.saturating_add(keep) > fs.available).then(|| {
        format!(
            "it has {} free, and a {} swap file must leave {} of it free",
            format_bytes(fs.available),
            format_bytes(size),
            format_bytes(keep)
        )
    })
}

/// How the blocks were allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocation {
    Fallocate,
    /// The filesystem has no fallocate: every byte written.
    Zeros,
}

fn write_zeros(file: &mut File, size: u64) -> io::Result<()> {
    let chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// Creates `path` (which must not exist: never a file someone else made, never through
/// a symlink), mode 0600 whatever the umask, with `size` bytes allocated and synced.
/// On failure the partial file is removed.
pub fn create(path: &Path, size: u64) -> io::Result<Allocation> {
    let mut file =
        OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let result = (|| {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let length = libc::off_t::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: fallocate on a file descriptor we own, with plain integer arguments.
        let allocation = if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, length) } == 0 {
            Allocation::Fallocate
        } else {
            let error = io::Error::last_os_error();
            if !matches!(error.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)) {
                return Err(error);
            }
            write_zeros(&mut file, size)?;
            Allocation::Zeros
        };
        file.sync_all()?;
        Ok(allocation)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(path);
    }
    result
}

/// `size` rounded up to whole pages (swap is used a page at a time).
pub fn page_rounded(size: u64) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    size.div_ceil(page).saturating_mul(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn refuses_filesystems_the_kernel_does_not_swap_to() {
        assert!(unsuitable(0x9123_683e).unwrap().contains("btrfs filesystem mkswapfile"));
        assert!(unsuitable(0x0102_1994).unwrap().contains("tmpfs"));
        assert!(unsuitable(0x2fc1_2fc1).unwrap().contains("ZFS"));
        assert_eq!(unsuitable(0xef53), None, "ext4");
        assert_eq!(unsuitable(0x5846_5342), None, "XFS");
    }

    #[test]
    fn keeps_headroom_free() {
        let big = Filesystem { magic: 0xef53, total: 1 << 40, available: 20 << 30 };
        assert_eq!(headroom(&big), 1 << 30);
        assert_eq!(lacks_room(&big, 19 << 30), None);
        let refusal = lacks_room(&big, (19 << 30) + 1).unwrap();
        assert!(refusal.contains("it has 20.00 GiB free") && refusal.contains("leave 1.00 GiB"), "{refusal}");
        let small = Filesystem { magic: 0xef53, total: 2 << 30, available: 1 << 30 };
        assert_eq!(headroom(&small), (2 << 30) / 20);
        assert!(lacks_room(&small, u64::MAX).is_some());
    }

    #[test]
    fn creates_a_private_fully_allocated_file_once() {
        let root = FakeRoot::new();
        let path = root.path("t3.swap");
        create(&path, 3 << 20).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 3 << 20);
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert!(meta.blocks() * 512 >= 3 << 20, "every block allocated");
        assert_eq!(create(&path, 1 << 20).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        std::os::unix::fs::symlink(&path, root.path("link")).unwrap();
        assert!(create(&root.path("link"), 1 << 20).is_err(), "never through a symlink");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 << 20, "the existing file is untouched");
    }

    #[test]
    fn sizes_round_up_to_pages() {
        assert_eq!(page_rounded(1), page_rounded(4096));
        assert_eq!(page_rounded(1 << 20), 1 << 20);
        assert_eq!(page_rounded(0), 0);
    }
}
