//! Which allocations a launch names: every pointer-sized word of every parameter value
//! (pointer arguments, and pointers inside structs passed by value) looked up in the
//! address index, every tensor map passed by value looked up among the maps the
//! program encoded, and every word that is a live texture object's handle taken for the
//! memory it reads. A value that merely equals an address inside an allocation is
//! counted as naming it: a kernel may be given a pointer in any form, and a false
//! naming only warms a range, where a missed one would hide a reader.

use std::ffi::c_void;

use crate::cuda::ffi::{CuDevicePtr, CuFunction};
use crate::cuda::launch_ffi::{
    CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE, CU_LAUNCH_PARAM_END, TENSOR_MAP_BYTES,
};
use crate::launch::param_layout::{self, Layout, Param};
use crate::launch::{tensor_maps, texture_objects};
use crate::memory::address_index::RangeUse;
use crate::memory::recent_ranges::Finder;
use crate::sys::shards::Shard;

/// Where a launch's parameter values are, as cuLaunchKernel takes them.
#[derive(Clone, Copy, Debug)]
enum Values {
    /// `kernelParams`: one pointer per parameter, to its value.
    Array(*const *const c_void),
    /// `extra`'s CU_LAUNCH_PARAM_BUFFER_POINTER: every value packed at its offset.
    Packed { buffer: *const u8, size: usize },
}

impl Values {
    /// The values of a launch given `params` and `extra` (the driver refuses both at
    /// once, and a launch with parameters but neither); `None` when neither says where.
    ///
    /// # Safety
    /// `extra`, when non-null, is a CU_LAUNCH_PARAM_END-terminated key/value array that
    /// the driver accepted.
    unsafe fn of(params: *mut *mut c_void, extra: *mut *mut c_void) -> Option<Values> {
        if !params.is_null() {
            return Some(Values::Array(params.cast_const().cast()));
        }
        if extra.is_null() {
            return None;
        }
        let (mut buffer, mut size) = (std::ptr::null::<u8>(), None);
        // The driver's own limit is the terminator; a handful of keys exist.
        for pair in 0..16 {
            // SAFETY: the array is END-terminated (the contract) and read up to its END.
            let key = unsafe { *extra.add(2 * pair) } as usize;
            if key == CU_LAUNCH_PARAM_END {
                break;
            }
            // SAFETY: every key but END is followed by its value.
            let value = unsafe { *extra.add(2 * pair + 1) };
            match key {
                CU_LAUNCH_PARAM_BUFFER_POINTER => buffer = value.cast_const().cast(),
                // SAFETY: the size key's value points at a size_t (cuda.h).
                CU_LAUNCH_PARAM_BUFFER_SIZE if !value.is_null() => size = Some(unsafe { *value.cast::<usize>() }),
                _ => {}
            }
        }
        match (buffer.is_null(), size) {
            (false, Some(size)) => Some(Values::Packed { buffer, size }),
            _ => None,
        }
    }

    /// The bytes of parameter `index` laid out as `param`, if they can be read.
    ///
    /// # Safety
    /// As for cuLaunchKernel: an `Array` has one valid value pointer per parameter of
    /// the function, a `Packed` buffer is valid for `size` bytes.
    unsafe fn bytes(&self, index: usize, param: Param) -> Option<&[u8]> {
        let (start, len) = match *self {
            // SAFETY: one pointer per parameter, each to a value of the parameter's size.
            Values::Array(values) => (unsafe { *values.add(index) }.cast::<u8>(), param.size as usize),
            Values::Packed { buffer, size } => {
                let end = (param.offset as usize).checked_add(param.size as usize)?;
                if end > size {
                    return None;
                }
                // SAFETY: within the buffer's `size` bytes (checked).
                (unsafe { buffer.add(param.offset as usize) }, param.size as usize)
            }
        };
        // SAFETY: `len` readable bytes at `start` (the contract), borrowed for the scan.
        (!start.is_null()).then(|| unsafe { std::slice::from_raw_parts(start, len) })
    }
}

/// What reading a launch's parameters found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Naming {
    /// Distinct allocations named.
    pub ranges: u32,
    /// Whether every parameter could be read (the layout known, every value reachable).
    pub read: bool,
}

/// A word of a launch's parameters that names an allocation.
#[derive(Clone, Copy, Debug)]
pub struct Named<'a> {
    /// Where the allocation named starts.
    pub start: CuDevicePtr,
    /// Its use.
    pub uses: &'a RangeUse,
    /// The address named, inside the allocation.
    pub address: CuDevicePtr,
    /// The first word of this launch to name the allocation (a launch counts once per
    /// allocation; every address it names is a start, `RangeUse::note_start`).
    pub first: bool,
}

impl Named<'_> {
    /// Notes the naming, by a launch of `weight` (`kernel_times::weight`) on the thread
    /// of `shard`, in the range's use: a launch on its first naming, a start on any.
    pub fn note(&self, weight: u64, shard: Shard) {
        let offset = self.address.saturating_sub(self.start);
        if self.first {
            self.uses.note_launch(offset, weight, shard);
        } else {
            self.uses.note_start(offset, weight, shard);
        }
    }
}

/// Reads the parameters of a launch of `function` (`params` or `extra`, as
/// cuLaunchKernel takes them), calling `visit` for every word naming an allocation that
/// `finder` (`None`: no allocation lives) finds.
///
/// # Safety
/// `params` and `extra` are those of a launch of `function` (or a kernel node's) that
/// the driver accepted.
pub unsafe fn name_launch<'s>(
    function: CuFunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    finder: Option<&mut Finder<'s>>,
    visit: impl FnMut(Named<'s>),
) -> Naming {
    // SAFETY: per this function's contract: values the driver accepted for `function`,
    // which `layout` describes.
    param_layout::with(function, |layout| unsafe { name(layout, Values::of(params, extra), finder, visit) })
}

/// Reads a launch's parameters, calling `visit` for every word naming an allocation.
///
/// # Safety
/// `values` are the parameters of a launch of a function laid out as `layout`, which
/// the driver accepted (see `Values::bytes`).
unsafe fn name<'s>(
    layout: &Layout,
    values: Option<Values>,
    mut finder: Option<&mut Finder<'s>>,
    mut visit: impl FnMut(Named<'s>),
) -> Naming {
    let Layout::Known(params) = layout else { return Naming::default() };
    if params.is_empty() {
        return Naming { ranges: 0, read: true };
    }
    let Some(values) = values else { return Naming::default() };
    let (textures, maps) = (texture_objects::any(), tensor_maps::any());
    let mut read = true;
    let mut seen = SeenAddresses::default();
    let mut note = |address: CuDevicePtr| {
        if let Some(found) = finder.as_mut().and_then(|finder| finder.find(address)) {
            if seen.first_time(address) {
                visit(Named { start: found.start, uses: found.uses, address, first: found.first });
            }
        }
    };
    for (index, param) in params.iter().enumerate() {
        // SAFETY: per this function's contract.
        let Some(bytes) = (unsafe { values.bytes(index, *param) }) else {
            read = false;
            continue;
        };
        let in_maps = if maps { map_blocks(bytes, &mut note) } else { 0 };
        words_outside(bytes, in_maps, |word| match textures.then(|| texture_objects::address_of(word)).flatten() {
            Some(address) => note(address),
            None => note(word),
        });
    }
    let ranges = finder.map_or(0, |finder| finder.distinct());
    Naming { ranges: u32::try_from(ranges).unwrap_or(u32::MAX), read }
}

/// The addresses one launch has named so far, that it names each once: a kernel may be
/// given the same pointer in several words (a struct holding it twice, a tensor map
/// beside the pointer it maps) and reads it once; counted once per word, the start's
/// piece of a partitioned allocation (`rules::range_heat`) would be as hot as that many
/// reads.
#[derive(Default)]
struct SeenAddresses {
    addresses: [CuDevicePtr; SEEN_KEPT],
    count: usize,
}

/// Addresses a launch's naming remembers; past them, a repeat counts again (a launch
/// naming more distinct addresses than this is rare, and counting one twice only warms it).
const SEEN_KEPT: usize = 16;

impl SeenAddresses {
    /// Whether this launch names `address` for the first time (remembered if there is room).
    fn first_time(&mut self, address: CuDevicePtr) -> bool {
        if self.addresses[..self.count].contains(&address) {
            return false;
        }
        if self.count < SEEN_KEPT {
            self.addresses[self.count] = address;
            self.count += 1;
        }
        true
    }
}

/// The tensor maps the program encoded inside a parameter value, whole or as members of a
/// struct (CUTLASS's Hopper kernels take theirs in their one parameter struct; a map is
/// 64-byte aligned, so it lies at a multiple of 64 from the value's start): `note` is
/// given each one's address, and the 64-byte blocks they cover come back as bits (block
/// `k`, bit `k`; blocks past the 64th are not looked at), their words not to be read as
/// pointers: a map packs its address with other fields, and a packed word that equals an
/// address names whatever allocation holds it. (Some kernel of an HF decode on an H100
/// named three 4 GiB boundaries + 0x80 about 18 times a token each, which made the weights
/// spanning them the hottest memory there, bench/results/2026-12-06-93e22b00cdef-longctx-repeat-h100.md;
/// whether its words were a map's is not known.)
fn map_blocks(bytes: &[u8], mut note: impl FnMut(CuDevicePtr)) -> u64 {
    let mut blocks = 0u64;
    let mut start = 0;
    // A parameter that is one map is looked up whole; blocks of a larger struct only where
    // a map may begin (`may_be_encoded` forgets some that the table keeps).
    let whole = bytes.len() == TENSOR_MAP_BYTES;
    while start + TENSOR_MAP_BYTES <= bytes.len() && start / MAP_ALIGN < 63 {
        let block = &bytes[start..start + TENSOR_MAP_BYTES];
        match (whole || tensor_maps::may_be_encoded(block)).then(|| tensor_maps::address_of(block)).flatten() {
            Some(address) => {
                note(address);
                blocks |= 0b11 << (start / MAP_ALIGN);
                start += TENSOR_MAP_BYTES;
            }
            None => start += MAP_ALIGN,
        }
    }
    blocks
}

/// A tensor map's alignment (CUtensorMap is `alignas(64)`).
const MAP_ALIGN: usize = 64;

/// Each pointer-sized word of a parameter value but those in the 64-byte blocks of
/// `skipped` (`map_blocks`): a pointer, alone or inside a struct, lies at a multiple of 8
/// from the value's start (its alignment).
fn words_outside(bytes: &[u8], skipped: u64, mut each: impl FnMut(u64)) {
    for (at, chunk) in bytes.chunks_exact(8).enumerate() {
        let block = at * 8 / MAP_ALIGN;
        if block < 64 && skipped & (1 << block) != 0 {
            continue;
        }
        each(u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8])));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_names_each_address_once_however_many_words_hold_it() {
        use crate::memory::address_index::{Range, RangeUse, Snapshot};
        use crate::memory::recent_ranges;
        use std::sync::Arc;

        let uses: Arc<RangeUse> = Arc::default();
        let snapshot = Arc::new(Snapshot::from_ranges(vec![Range { start: 0x1000, end: 0x9000, uses }]));
        // Three 16-byte parameters: the operand's start twice (a struct of two pointers),
        // then a second start inside it beside the first again.
        let values: [[u64; 2]; 3] = [[0x1000, 0x1000], [0x4000, 0x1000], [7, 0x4000]];
        let pointers: Vec<*const c_void> = values.iter().map(|value| value.as_ptr().cast::<c_void>()).collect();
        let layout = Layout::Known((0..3).map(|at| Param { offset: 16 * at, size: 16 }).collect());
        let mut visits = Vec::new();
        let naming = recent_ranges::with_finder(&snapshot, |finder| {
            // SAFETY: one pointer per parameter, each to 16 readable bytes that live
            // through the call.
            unsafe {
                name(&layout, Some(Values::Array(pointers.as_ptr())), Some(finder), |named| {
                    visits.push((named.address, named.first))
                })
            }
        });
        assert_eq!(visits, [(0x1000, true), (0x4000, false)], "each address once, the allocation's first once");
        assert_eq!(naming, Naming { ranges: 1, read: true });
    }

    #[test]
    fn a_tensor_map_inside_a_struct_names_its_address_and_its_words_name_nothing() {
        use crate::memory::address_index::{Range, RangeUse, Snapshot};
        use crate::memory::recent_ranges;
        use std::sync::Arc;

        // Two allocations: an operand at 0x1_0000_0000.. and a weight spanning the 4 GiB
        // boundary at 0x2_0000_0000, which a word of the map's encoding happens to equal.
        let (operand, weight): (Arc<RangeUse>, Arc<RangeUse>) = (Arc::default(), Arc::default());
        let ranges = vec![
            Range { start: 0x1_0000_0000, end: 0x1_1000_0000, uses: operand },
            Range { start: 0x1_ff00_0000, end: 0x2_0100_0000, uses: weight },
        ];
        let snapshot = Arc::new(Snapshot::from_ranges(ranges));
        let mut map = [0u64; TENSOR_MAP_BYTES / 8];
        map[0] = 0x0123_4567;
        map[3] = 0x2_0000_0080; // packed fields, not a pointer
        map[7] = 0x5a5a;
        let map_bytes: Vec<u8> = map.iter().flat_map(|word| word.to_ne_bytes()).collect();
        tensor_maps::encoded(&map_bytes.try_into().expect("128 bytes"), 0x1_0000_4000);
        // One 256-byte struct: a pointer to the operand, then the map at offset 64.
        let mut value = [0u64; 32];
        value[0] = 0x1_0000_8000;
        value[8..24].copy_from_slice(&map);
        let pointer = value.as_ptr().cast::<c_void>();
        let layout = Layout::Known(Box::new([Param { offset: 0, size: 256 }]));
        let mut visits = Vec::new();
        recent_ranges::with_finder(&snapshot, |finder| {
            // SAFETY: one parameter of 256 readable bytes that live through the call.
            unsafe { name(&layout, Some(Values::Array(&pointer)), Some(finder), |named| visits.push(named.address)) }
        });
        assert_eq!(visits, [0x1_0000_4000, 0x1_0000_8000], "the map's address and the pointer, not the map's word");
    }

    #[test]
    fn past_the_addresses_kept_a_repeat_counts_again() {
        let mut seen = SeenAddresses::default();
        assert!((0..SEEN_KEPT as u64).all(|k| seen.first_time(0x1000 * (k + 1))), "distinct ones are firsts");
        assert!(!seen.first_time(0x1000), "a kept one repeated");
        assert!(seen.first_time(0xfff000) && seen.first_time(0xfff000), "no room to keep it: counted each time");
    }

    #[test]
    fn every_aligned_word_of_a_value_is_looked_at_and_nothing_shorter() {
        let mut value = [0u8; 20];
        value[..8].copy_from_slice(&0x1000u64.to_ne_bytes());
        value[8..16].copy_from_slice(&0x2000u64.to_ne_bytes());
        let mut found = Vec::new();
        words_outside(&value, 0, |word| found.push(word));
        assert_eq!(found, [0x1000, 0x2000], "the 4 trailing bytes hold no pointer");
        found.clear();
        words_outside(&[0u8; 4], 0, |word| found.push(word));
        assert!(found.is_empty());
    }
}
