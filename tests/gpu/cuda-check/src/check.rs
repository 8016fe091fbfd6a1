//! What every subcommand reports with: PASS/FAIL verdicts and their tally, KV figures,
//! the test pattern, and CUDA errors as text.

use super::*;

/// The value element `i` of a buffer filled with `seed` holds (pattern.ptx computes the same).
pub(crate) fn pattern(i: u64, seed: u32) -> u32 {
    ((i as u32).wrapping_mul(0x9E37_79B1).wrapping_add(seed)) ^ ((i >> 32) as u32)
}

pub(crate) struct Tally {
    pub(crate) passed: u32,
    pub(crate) failed: u32,
}

impl Tally {
    pub(crate) fn record(&mut self, name: &str, ok: bool, detail: impl AsRef<str>) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
        println!("{} {}: {}", if ok { "PASS" } else { "FAIL" }, name, detail.as_ref());
        let _ = std::io::stdout().flush();
    }
}

pub(crate) fn kv(key: &str, value: impl std::fmt::Display) {
    println!("KV {key}={value}");
}

pub(crate) fn rt_name(e: rt::cudaError_t) -> String {
    // SAFETY: cudaGetErrorName returns a static string for every code, including unknown ones.
    unsafe { CStr::from_ptr(rt::cudaGetErrorName(e)) }.to_string_lossy().into_owned()
}

pub(crate) fn rt_check(what: &str, e: rt::cudaError_t) -> Result<(), String> {
    if e == rt::cudaError_t::cudaSuccess {
        Ok(())
    } else {
        Err(format!("{what}: {} ({})", rt_name(e), e as i32))
    }
}

pub(crate) fn cu_check(what: &str, e: cu::CUresult) -> Result<(), String> {
    if e == cu::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string or leaves it null.
    unsafe { cu::cuGetErrorName(e, &mut name) };
    let name = if name.is_null() {
        "unknown".to_string()
    } else {
        // SAFETY: non-null, NUL-terminated static string from the driver.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    };
    Err(format!("{what}: {name} ({})", e as i32))
}

/// Whether a successful call left an error pending in the runtime (then cleared): CUDA's own
/// successful calls never do, and programs that check cudaGetLastError after their kernel
/// launches (PyTorch does, after every launch) would fail on a stale one.
pub(crate) fn stale_error_after_success() -> Option<rt::cudaError_t> {
    // SAFETY: plain runtime queries.
    let pending = unsafe { rt::cudaPeekAtLastError() };
    if pending == rt::cudaError_t::cudaSuccess {
        return None;
    }
    unsafe { rt::cudaGetLastError() };
    Some(pending)
}

pub(crate) fn record_stale_errors(tally: &mut Tally, name: &str, call: &str, stale: &[(usize, rt::cudaError_t)]) {
    tally.record(
        name,
        stale.is_empty(),
        if stale.is_empty() {
            format!("no successful {call} left an error pending (cudaPeekAtLastError after each)")
        } else {
            let first = stale
                .iter()
                .take(3)
                .map(|(i, e)| format!("buffer {i}: {}", rt_name(*e)))
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "{} successful {call} calls left an error pending for the next cudaGetLastError ({first})",
                stale.len()
            )
        },
    );
}
