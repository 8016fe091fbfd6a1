//! What a process under the shim publishes for `greenboost status`: one small record in
//! a shared-memory file, `/dev/shm/greenboost-shim.<pid>`, that the shim creates at its
//! first T2 allocation, rewrites as its tiers change and removes at exit. It is how
//! status sees a process's T2 and live tiering without the module (which never sees
//! the userspace backend's memory nor managed memory).
//!
//! The writer is lock-free: `seq` is odd while it writes the figures; a reader takes a
//! copy whose `seq` is even and the same before and after.

/// The directory of the records.
pub const PUBLISHED_DIR: &str = "/dev/shm";
/// A record's file name: this, then the pid in decimal.
pub const PUBLISHED_PREFIX: &str = "greenboost-shim.";
pub const PUBLISHED_MAGIC: u64 = u64::from_le_bytes(*b"GBSHIM01");
pub const PUBLISHED_VERSION: u32 = 1;

/// One process's record (little-endian, as the machine writes it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub magic: u64,
    pub version: u32,
    /// `size_of::<Published>()` of the writer: a longer record may follow.
    pub size: u32,
    pub pid: u32,
    pub reserved: u32,
    /// The writer's start time (field 22 of `/proc/PID/stat`, clock ticks after boot):
    /// with the pid, a record left by a killed process is told from a live one.
    pub start_time: u64,
    /// Odd while the figures below are being written.
    pub seq: u64,
    /// VRAM the process holds through the shim.
    pub t1_used: u64,
    /// T2 the process holds: pinned T2 and movable T2 while in T2.
    pub t2_used: u64,
    pub t2_peak: u64,
    /// Live tiering: movable allocations made, bytes of them in VRAM now, bytes and
    /// allocations moved each way.
    pub movable_allocs: u64,
    pub tier_vram: u64,
    pub promoted_bytes: u64,
    pub demoted_bytes: u64,
    pub promotions: u64,
    pub demotions: u64,
    /// Of the demotions, those that made room for a hotter allocation of the same
    /// process (a swap of roles). After the fields above: a record of a writer without
    /// it (`size` 112) reads as 0.
    pub swaps: u64,
    /// Bytes demoted at once to make room for what the process allocated while computing
    /// (its working set). After `swaps`: a record of a writer without it (`size` 120)
    /// reads as 0.
    pub room_made_bytes: u64,
    /// VRAM the driver keeps for the process's parts moved out to T2: used as nvidia-smi
    /// counts it, holding nothing, given to any allocation that finds no free VRAM. After
    /// `room_made_bytes`: a record of a writer without it (`size` 128) reads as 0.
    pub kept_vram: u64,
}

/// A process's start time from the text of its `/proc/PID/stat` (field 22, clock ticks
/// after boot): what `Published::start_time` holds.
pub fn start_time_from_stat(stat: &[u8]) -> Option<u64> {
    // The command may hold spaces and parentheses: fields count from the last ')'.
    let close = stat.iter().rposition(|b| *b == b')')?;
    let field = stat[close + 1..].split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty()).nth(19)?;
    core::str::from_utf8(field).ok()?.parse().ok()
}

impl Published {
    pub const SIZE: usize = core::mem::size_of::<Published>();
    /// The size of the record before `swaps` was appended: still read.
    const SIZE_BEFORE_SWAPS: usize = 112;
    /// The size of the record before `room_made_bytes` was appended: still read.
    const SIZE_BEFORE_ROOM_MADE: usize = 120;
    /// The size of the record before `kept_vram` was appended: still read.
    const SIZE_BEFORE_KEPT: usize = 128;

    /// The record in `bytes` (a copy of the file), if it is one this reader knows and
    /// was not being written.
    pub fn from_bytes(bytes: &[u8]) -> Option<Published> {
        if bytes.len() < Self::SIZE_BEFORE_SWAPS {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let half = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let record = Published {
            magic: word(0),
            version: half(8),
            size: half(12),
            pid: half(16),
            reserved: half(20),
            start_time: word(24),
            seq: word(32),
            t1_used: word(40),
            t2_used: word(48),
            t2_peak: word(56),
            movable_allocs: word(64),
            tier_vram: word(72),
            promoted_bytes: word(80),
            demoted_bytes: word(88),
            promotions: word(96),
            demotions: word(104),
            swaps: 0,
            room_made_bytes: 0,
            kept_vram: 0,
        };
        let size = record.size as usize;
        // A field appended since is read where the writer's record has it.
        let appended = |at: usize| if size >= at + 8 && bytes.len() >= at + 8 { word(at) } else { 0 };
        let record = Published {
            swaps: appended(Self::SIZE_BEFORE_SWAPS),
            room_made_bytes: appended(Self::SIZE_BEFORE_ROOM_MADE),
            kept_vram: appended(Self::SIZE_BEFORE_KEPT),
            ..record
        };
        let known = record.magic == PUBLISHED_MAGIC
            && record.version == PUBLISHED_VERSION
            && size >= Self::SIZE_BEFORE_SWAPS
            && record.seq.is_multiple_of(2);
        known.then_some(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22() {
        assert_eq!(
            start_time_from_stat(b"100 (python3 (x) y) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0\n"),
            Some(555)
        );
        assert_eq!(start_time_from_stat(b"100 (short) S 1"), None);
        assert_eq!(start_time_from_stat(b"no parenthesis"), None);
    }

    /// Every field's offset, by the name the other readers give it.
    fn offsets() -> [(&'static str, usize); 20] {
        use core::mem::offset_of;
        [
            ("magic", offset_of!(Published, magic)),
            ("version", offset_of!(Published, version)),
            ("size", offset_of!(Published, size)),
            ("pid", offset_of!(Published, pid)),
            ("reserved", offset_of!(Published, reserved)),
            ("start_time", offset_of!(Published, start_time)),
            ("seq", offset_of!(Published, seq)),
            ("t1_used", offset_of!(Published, t1_used)),
            ("t2_used", offset_of!(Published, t2_used)),
            ("t2_peak", offset_of!(Published, t2_peak)),
            ("movable_allocs", offset_of!(Published, movable_allocs)),
            ("tier_vram", offset_of!(Published, tier_vram)),
            ("promoted_bytes", offset_of!(Published, promoted_bytes)),
            ("demoted_bytes", offset_of!(Published, demoted_bytes)),
            ("promotions", offset_of!(Published, promotions)),
            ("demotions", offset_of!(Published, demotions)),
            ("swaps", offset_of!(Published, swaps)),
            ("room_made_bytes", offset_of!(Published, room_made_bytes)),
            ("kept_vram", offset_of!(Published, kept_vram)),
            ("end", Published::SIZE),
        ]
    }

    /// The record's other readers lay it out by hand: the fake CUDA's tests (a C struct,
    /// tests/fakecuda/programs/shimstats.h) and the GPU suite's sampler
    /// (python/gbgpu/free_vram.py). A field added or moved here must move there too.
    #[test]
    fn the_c_and_python_readers_lay_the_record_out_as_it_is() {
        let header = include_str!("../../tests/fakecuda/programs/shimstats.h");
        let body = header
            .split("struct shim_published {")
            .nth(1)
            .and_then(|rest| rest.split("};").next())
            .expect("shimstats.h declares struct shim_published");
        // Its members in order, each `unsigned long long` (8 bytes) or `unsigned` (4).
        let (mut at, mut count) = (0, 0);
        let mut laid_out = [("", 0); 20];
        for declaration in body.split(';').map(str::trim).filter(|d| !d.is_empty()) {
            let (width, names) = match declaration.strip_prefix("unsigned long long") {
                Some(names) => (8, names),
                None => (4, declaration.strip_prefix("unsigned").expect("unsigned members only")),
            };
            for name in names.split(',').map(str::trim) {
                assert!(count < 19, "more members in shimstats.h than in the record");
                laid_out[count] = (name, at);
                (at, count) = (at + width, count + 1);
            }
        }
        laid_out[count] = ("end", at);
        assert_eq!(laid_out, offsets(), "shimstats.h's struct shim_published");

        let sampler = include_str!("../../python/gbgpu/free_vram.py");
        let line =
            sampler.lines().find(|l| l.starts_with("KEPT_AT, KEPT_SINCE_SIZE = ")).expect("free_vram.py's offsets");
        let mut numbers = line.split('=').nth(1).unwrap_or("").split(',').map(|n| n.trim().parse::<usize>().ok());
        let read = (numbers.next().flatten(), numbers.next().flatten(), numbers.next());
        let kept_at = core::mem::offset_of!(Published, kept_vram);
        assert_eq!(read, (Some(kept_at), Some(kept_at + 8), None), "free_vram.py's KEPT_AT and KEPT_SINCE_SIZE");
        for (field, at) in [("magic", 0), ("size", 12), ("seq", 32)] {
            assert!(offsets().contains(&(field, at)), "free_vram.py reads {field} at {at}");
        }
    }

    #[test]
    fn the_layout_is_what_from_bytes_reads() {
        assert_eq!(Published::SIZE, 136);
        assert_eq!(core::mem::offset_of!(Published, kept_vram), Published::SIZE_BEFORE_KEPT);
        assert_eq!(core::mem::offset_of!(Published, swaps), Published::SIZE_BEFORE_SWAPS);
        assert_eq!(core::mem::offset_of!(Published, room_made_bytes), Published::SIZE_BEFORE_ROOM_MADE);
        assert_eq!(core::mem::offset_of!(Published, seq), 32);
        assert_eq!(core::mem::offset_of!(Published, demotions), 104);
        let record = Published {
            magic: PUBLISHED_MAGIC,
            version: PUBLISHED_VERSION,
            size: Published::SIZE as u32,
            pid: 42,
            start_time: 7,
            seq: 4,
            t2_used: 3 << 30,
            tier_vram: 1 << 30,
            demotions: 9,
            swaps: 2,
            room_made_bytes: 5 << 20,
            kept_vram: 3 << 20,
            ..Published::default()
        };
        // SAFETY: a plain repr(C) struct of integers, read as its bytes.
        let bytes: [u8; Published::SIZE] = unsafe { core::mem::transmute(record) };
        assert_eq!(Published::from_bytes(&bytes), Some(record));
        // A writer from before `swaps`: its shorter record, swaps read as 0.
        let mut older = bytes[..Published::SIZE_BEFORE_SWAPS].to_vec();
        older[12..16].copy_from_slice(&(Published::SIZE_BEFORE_SWAPS as u32).to_le_bytes());
        let read = Published::from_bytes(&older).expect("an older record");
        assert_eq!((read.swaps, read.demotions, read.size), (0, 9, Published::SIZE_BEFORE_SWAPS as u32));
        // A writer from before `room_made_bytes`: its swaps read, its room made as 0.
        let mut older = bytes[..Published::SIZE_BEFORE_ROOM_MADE].to_vec();
        older[12..16].copy_from_slice(&(Published::SIZE_BEFORE_ROOM_MADE as u32).to_le_bytes());
        let read = Published::from_bytes(&older).expect("an older record");
        assert_eq!((read.swaps, read.room_made_bytes), (2, 0));
        // A writer from before `kept_vram`: its room made read, what is kept as 0.
        let mut older = bytes[..Published::SIZE_BEFORE_KEPT].to_vec();
        older[12..16].copy_from_slice(&(Published::SIZE_BEFORE_KEPT as u32).to_le_bytes());
        let read = Published::from_bytes(&older).expect("an older record");
        assert_eq!((read.room_made_bytes, read.kept_vram), (5 << 20, 0));
        let writing = Published { seq: 5, ..record };
        // SAFETY: as above.
        let bytes: [u8; Published::SIZE] = unsafe { core::mem::transmute(writing) };
        assert_eq!(Published::from_bytes(&bytes), None, "odd seq: being written");
        assert_eq!(Published::from_bytes(&bytes[..100]), None);
        let foreign = Published { magic: 1, ..record };
        // SAFETY: as above.
        let bytes: [u8; Published::SIZE] = unsafe { core::mem::transmute(foreign) };
        assert_eq!(Published::from_bytes(&bytes), None);
    }
}
