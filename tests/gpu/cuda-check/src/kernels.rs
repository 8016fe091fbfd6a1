//! The PTX kernels (pattern.ptx) that write and verify the test pattern, and the host-side
//! readback and upload checks.

use super::*;

pub(crate) static PTX: &str = concat!(include_str!("pattern.ptx"), "\0");

/// The pattern kernels, loaded into the runtime's primary context.
pub(crate) struct Kernels {
    pub(crate) fill: cu::CUfunction,
    pub(crate) check: cu::CUfunction,
    /// Two u64 on the device: mismatch count and lowest mismatching index.
    pub(crate) result: *mut c_void,
}

impl Kernels {
    pub(crate) fn load() -> Result<Self, String> {
        let mut module: cu::CUmodule = std::ptr::null_mut();
        // SAFETY: PTX is NUL-terminated text; the runtime made its primary context current.
        cu_check("cuModuleLoadData", unsafe { cu::cuModuleLoadData(&mut module, PTX.as_ptr().cast()) })?;
        let function = |name: &str| -> Result<cu::CUfunction, String> {
            let mut f: cu::CUfunction = std::ptr::null_mut();
            let c_name = CString::new(name).expect("kernel names have no NUL");
            // SAFETY: module is loaded; c_name outlives the call.
            cu_check(&format!("cuModuleGetFunction({name})"), unsafe {
                cu::cuModuleGetFunction(&mut f, module, c_name.as_ptr())
            })?;
            Ok(f)
        };
        let mut result: *mut c_void = std::ptr::null_mut();
        // SAFETY: plain allocation of 16 bytes.
        rt_check("cudaMalloc(result)", unsafe { rt::cudaMalloc(&mut result, 16) })?;
        Ok(Kernels { fill: function("gb_fill")?, check: function("gb_check")?, result })
    }

    pub(crate) fn launch(
        &self,
        f: cu::CUfunction,
        elements: u64,
        params: &mut [*mut c_void],
        stream: rt::cudaStream_t,
    ) -> Result<(), String> {
        let blocks = elements.div_ceil(THREADS_PER_BLOCK as u64).clamp(1, MAX_BLOCKS) as u32;
        // SAFETY: params point at values that live until the call returns, matching the
        // kernel's parameter list; cuLaunchKernel copies them.
        let e = unsafe {
            cu::cuLaunchKernel(
                f,
                blocks,
                1,
                1,
                THREADS_PER_BLOCK,
                1,
                1,
                0,
                stream as cu::CUstream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        cu_check("cuLaunchKernel", e)
    }

    /// Writes `pattern(base + k, seed)` into the `bytes / 4` elements at `ptr`.
    pub(crate) fn fill(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        base: u64,
        seed: u32,
        stream: rt::cudaStream_t,
    ) -> Result<(), String> {
        let (mut p, mut n, mut base, mut seed) = (ptr as u64, (bytes / 4) as u64, base, seed);
        let mut params = [
            (&mut p as *mut u64).cast(),
            (&mut n as *mut u64).cast(),
            (&mut base as *mut u64).cast(),
            (&mut seed as *mut u32).cast(),
        ];
        self.launch(self.fill, n, &mut params, stream)
    }

    /// Counts on the GPU the elements at `ptr` that differ from the pattern; returns
    /// (mismatches, lowest mismatching element index).
    pub(crate) fn check(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        base: u64,
        seed: u32,
        stream: rt::cudaStream_t,
    ) -> Result<(u64, u64), String> {
        let init: [u64; 2] = [0, u64::MAX];
        // SAFETY: result holds 16 bytes; init is 16 bytes.
        rt_check("cudaMemcpyAsync(result init)", unsafe {
            rt::cudaMemcpyAsync(
                self.result,
                init.as_ptr().cast(),
                16,
                rt::cudaMemcpyKind::cudaMemcpyHostToDevice,
                stream,
            )
        })?;
        let (mut p, mut n, mut base, mut seed, mut result) =
            (ptr as u64, (bytes / 4) as u64, base, seed, self.result as u64);
        let mut params = [
            (&mut p as *mut u64).cast(),
            (&mut n as *mut u64).cast(),
            (&mut base as *mut u64).cast(),
            (&mut seed as *mut u32).cast(),
            (&mut result as *mut u64).cast(),
        ];
        self.launch(self.check, n, &mut params, stream)?;
        let mut out: [u64; 2] = [0, 0];
        // SAFETY: as above; the copy waits for the stream.
        rt_check("cudaMemcpyAsync(result)", unsafe {
            rt::cudaMemcpyAsync(
                out.as_mut_ptr().cast(),
                self.result,
                16,
                rt::cudaMemcpyKind::cudaMemcpyDeviceToHost,
                stream,
            )
        })?;
        // SAFETY: stream is valid.
        rt_check("cudaStreamSynchronize", unsafe { rt::cudaStreamSynchronize(stream) })?;
        Ok((out[0], out[1]))
    }
}

/// Reads back windows at the start, middle and end of a buffer filled with `seed` and
/// compares them on the host; returns a description of the first difference.
pub(crate) fn readback(ptr: *mut c_void, bytes: usize, seed: u32) -> Result<(), String> {
    let window = READBACK_WINDOW.min(bytes);
    let mut host = vec![0u32; window / 4];
    for offset in [0, (bytes / 2 - window / 2) & !3, bytes - window] {
        // SAFETY: offset + window <= bytes; host holds window bytes.
        rt_check("cudaMemcpy(D2H)", unsafe {
            rt::cudaMemcpy(
                host.as_mut_ptr().cast(),
                ptr.cast::<u8>().add(offset).cast(),
                window,
                rt::cudaMemcpyKind::cudaMemcpyDeviceToHost,
            )
        })?;
        let base = (offset / 4) as u64;
        if let Some(k) = host.iter().enumerate().position(|(k, &v)| v != pattern(base + k as u64, seed)) {
            return Err(format!(
                "host readback differs at byte {} (got {:#x}, want {:#x})",
                offset + 4 * k,
                host[k],
                pattern(base + k as u64, seed)
            ));
        }
    }
    Ok(())
}

/// Uploads a host-generated pattern into a window of the buffer and checks it on the GPU.
pub(crate) fn upload_and_check(kernels: &Kernels, ptr: *mut c_void, bytes: usize, seed: u32) -> Result<(), String> {
    let window = UPLOAD_WINDOW.min(bytes);
    let offset = ((bytes - window) / 2) & !3;
    let base = (offset / 4) as u64;
    let host: Vec<u32> = (0..(window / 4) as u64).map(|k| pattern(base + k, seed)).collect();
    // SAFETY: offset + window <= bytes.
    rt_check("cudaMemcpy(H2D)", unsafe {
        rt::cudaMemcpy(
            ptr.cast::<u8>().add(offset).cast(),
            host.as_ptr().cast(),
            window,
            rt::cudaMemcpyKind::cudaMemcpyHostToDevice,
        )
    })?;
    let dst = ptr.wrapping_byte_add(offset);
    match kernels.check(dst, window, base, seed, std::ptr::null_mut())? {
        (0, _) => Ok(()),
        (n, first) => Err(format!("{n} elements differ after upload, first at element {first}")),
    }
}
