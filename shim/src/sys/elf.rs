//! Reading a shared library's DT_NEEDED list from its file, with stack buffers only
//! (it runs inside `dlopen`, possibly before the shim is initialised), to tell whether
//! a library loaded RTLD_DEEPBIND links CUDA directly (a framework like libtorch_cuda).

use std::ffi::{c_int, CStr};

/// Whether the library `name` (as passed to dlopen) has a DT_NEEDED entry accepted by
/// `is_interesting`. A bare name is searched in LD_LIBRARY_PATH and the default
/// directories (not in the caller's RUNPATH: such a library is then not recognised).
pub fn needs(name: &CStr, is_interesting: impl Fn(&[u8]) -> bool) -> bool {
    let bytes = name.to_bytes();
    if bytes.contains(&b'/') {
        return file_needs(name, &is_interesting);
    }
    let mut path = [0u8; 4096];
    let library_path = crate::sys::env::getenv("LD_LIBRARY_PATH").unwrap_or(b"");
    let defaults: [&[u8]; 4] = [b"/lib/x86_64-linux-gnu", b"/usr/lib/x86_64-linux-gnu", b"/lib64", b"/usr/lib"];
    for directory in library_path.split(|b| *b == b':').filter(|d| !d.is_empty()).chain(defaults) {
        let Some(candidate) = join(&mut path, directory, bytes) else { continue };
        // SAFETY: NUL-terminated path.
        if unsafe { libc::access(candidate.as_ptr(), libc::R_OK) } == 0 {
            return file_needs(candidate, &is_interesting);
        }
    }
    false
}

fn join<'a>(buffer: &'a mut [u8; 4096], directory: &[u8], file: &[u8]) -> Option<&'a CStr> {
    let total = directory.len() + 1 + file.len();
    let slot = buffer.get_mut(..total + 1)?;
    let (head, rest) = slot.split_at_mut(directory.len());
    head.copy_from_slice(directory);
    let (slash, rest) = rest.split_first_mut()?;
    *slash = b'/';
    let (tail, nul) = rest.split_at_mut(file.len());
    tail.copy_from_slice(file);
    *nul.first_mut()? = 0;
    CStr::from_bytes_with_nul(slot).ok()
}

struct File(c_int);

impl Drop for File {
    fn drop(&mut self) {
        // SAFETY: our fd.
        unsafe { libc::close(self.0) };
    }
}

impl File {
    fn read_at(&self, buffer: &mut [u8], offset: u64) -> Option<usize> {
        // SAFETY: writing into our buffer.
        let got = unsafe { libc::pread(self.0, buffer.as_mut_ptr().cast(), buffer.len(), offset as libc::off_t) };
        usize::try_from(got).ok()
    }

    fn read_exact_at(&self, buffer: &mut [u8], offset: u64) -> Option<()> {
        (self.read_at(buffer, offset)? == buffer.len()).then_some(())
    }
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const MAX_PHDRS: usize = 64;
const PHDR_SIZE: usize = 56;
const MAX_NEEDED: usize = 128;

fn file_needs(path: &CStr, is_interesting: &impl Fn(&[u8]) -> bool) -> bool {
    file_needed(path, is_interesting).unwrap_or(false)
}

/// ELF64 little-endian only (x86_64, aarch64); anything else reads as "no".
fn file_needed(path: &CStr, is_interesting: &impl Fn(&[u8]) -> bool) -> Option<bool> {
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let file = File(fd);
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0)?;
    if header.get(..4)? != b"\x7fELF" || *header.get(4)? != 2 || *header.get(5)? != 1 {
        return None;
    }
    let phoff = u64_at(&header, 32)?;
    let phentsize = usize::from(u16_at(&header, 54)?);
    let phnum = usize::from(u16_at(&header, 56)?).min(MAX_PHDRS);
    if phentsize != PHDR_SIZE {
        return None;
    }
    let mut phdrs = [0u8; MAX_PHDRS * PHDR_SIZE];
    let phdrs = phdrs.get_mut(..phnum * PHDR_SIZE)?;
    file.read_exact_at(phdrs, phoff)?;
    let segment = |index: usize| -> Option<(u32, u64, u64, u64)> {
        let at = index * PHDR_SIZE;
        Some((u32_at(phdrs, at)?, u64_at(phdrs, at + 8)?, u64_at(phdrs, at + 16)?, u64_at(phdrs, at + 32)?))
    };
    let (dynamic_offset, dynamic_size) = (0..phnum)
        .filter_map(segment)
        .find(|(kind, ..)| *kind == PT_DYNAMIC)
        .map(|(_, offset, _, size)| (offset, size))?;
    let mut needed = [0u64; MAX_NEEDED];
    let mut needed_count = 0;
    let mut strtab_address = None;
    let mut entry = [0u8; 16];
    let mut offset = dynamic_offset;
    let dynamic_end = dynamic_offset.saturating_add(dynamic_size);
    while offset.saturating_add(16) <= dynamic_end {
        file.read_exact_at(&mut entry, offset)?;
        let (tag, value) = (u64_at(&entry, 0)?, u64_at(&entry, 8)?);
        match tag {
            DT_NULL => break,
            DT_NEEDED => {
                if let Some(slot) = needed.get_mut(needed_count) {
                    *slot = value;
                    needed_count += 1;
                }
            }
            DT_STRTAB => strtab_address = Some(value),
            _ => {}
        }
        offset = offset.saturating_add(16);
    }
    let strtab_address = strtab_address?;
    let strtab_offset = (0..phnum)
        .filter_map(segment)
        .find(|(kind, _, address, size)| {
            *kind == PT_LOAD && (*address..address.saturating_add(*size)).contains(&strtab_address)
        })
        .and_then(|(_, offset, address, _)| (strtab_address - address).checked_add(offset))?;
    let mut name = [0u8; 256];
    for index in needed.get(..needed_count)? {
        let got = file.read_at(&mut name, strtab_offset.checked_add(*index)?)?;
        let text = name.get(..got)?;
        let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
        if is_interesting(text.get(..end)?) {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_needed_list_of_a_real_library() {
        // Every glibc program links libc; libc itself needs ld-linux.
        let exe = std::env::current_exe().expect("test binary");
        let exe = std::ffi::CString::new(exe.into_os_string().into_encoded_bytes()).expect("path");
        assert!(needs(&exe, |name| name.starts_with(b"libc.so")));
        assert!(!needs(&exe, |name| name.starts_with(b"libcudart")));
    }

    #[test]
    fn bare_names_are_searched_and_missing_files_are_no() {
        assert!(needs(c"libm.so.6", |name| name.starts_with(b"libc.so")));
        assert!(!needs(c"libdoesnotexist.so", |_| true));
        assert!(!needs(c"/etc/hostname", |_| true), "not an ELF file");
    }
}
