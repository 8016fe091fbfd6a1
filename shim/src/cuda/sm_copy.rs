//! Copies made by the SMs: a kernel of ours, JIT-compiled by the driver from the PTX
//! below, in which each thread moves 16 bytes at a time over a grid-stride loop. For
//! sources the copy engine reads slowly: managed memory resident on the host (movable
//! T2), which a copy-engine copy read at about 9 GB/s on the H200, where kernels read it
//! over the link at 42-51 GB/s as they read pinned memory.
//!
//! Loaded once per context by its user (GEMM staging keeps one per scratch); a context
//! whose driver cannot load it (no JIT for the device) gets `None`, and the caller reads
//! in place.

use std::ffi::{c_void, CStr};

use crate::cuda;
use crate::cuda::ffi::*;

/// `gb_copy16(dst, src, count)`: `count` 16-byte vectors. sm_50 PTX, so that every device
/// the driver supports can JIT it.
const PTX: &[u8] = b"
.version 6.0
.target sm_50
.address_size 64

.visible .entry gb_copy16(.param .u64 gb_copy16_dst, .param .u64 gb_copy16_src, .param .u64 gb_copy16_count)
{
    .reg .pred %p<2>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [gb_copy16_dst];
    ld.param.u64 %rd2, [gb_copy16_src];
    ld.param.u64 %rd3, [gb_copy16_count];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.u64 %rd4, %rd4, %rd5;
    mul.wide.u32 %rd6, %r4, %r2;
LOOP16:
    setp.ge.u64 %p1, %rd4, %rd3;
    @%p1 bra DONE16;
    shl.b64 %rd7, %rd4, 4;
    add.u64 %rd8, %rd2, %rd7;
    ld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd8];
    add.u64 %rd9, %rd1, %rd7;
    st.global.v4.u32 [%rd9], {%r5, %r6, %r7, %r8};
    add.u64 %rd4, %rd4, %rd6;
    bra.uni LOOP16;
DONE16:
    ret;
}

\0";

const VECTOR: &CStr = c"gb_copy16";
/// Threads per block, and most blocks of a launch: enough loads in flight to cover the
/// link's latency many times over, and no more blocks than a grid-stride loop needs.
const THREADS: u32 = 256;
const MAX_BLOCKS: u32 = 1024;

/// The copy kernel of one context.
///
/// # Invariants
/// `vector` is `gb_copy16` of a module loaded into the context the copies run in; the
/// module is never unloaded (it lives as long as the context).
#[derive(Clone, Copy, Debug)]
pub struct SmCopy {
    vector: CuFunction,
}

impl SmCopy {
    /// The kernel, loaded into the current context.
    pub fn load() -> Option<SmCopy> {
        let module = cuda::module_load_data(PTX).ok()?;
        let vector = cuda::module_get_function(module, VECTOR).ok()?;
        Some(SmCopy { vector })
    }

    /// Enqueues the copy of `len` bytes from `source` to `target` on `stream`: the
    /// whole 16-byte vectors by the kernel, the few bytes before `source`'s first 16-byte
    /// boundary and after its last one by the copy engine (at any rate they take
    /// microseconds). `target` must be as far from a 16-byte boundary as `source`:
    /// staging keeps each operand's alignment within 256 bytes.
    pub fn copy(&self, target: CuDevicePtr, source: CuDevicePtr, len: u64, stream: Stream) -> CuResult {
        if target % 16 != source % 16 {
            return CuResult::INVALID_VALUE;
        }
        let head = ((16 - source % 16) % 16).min(len);
        let vectors = (len - head) / 16;
        let middle = head + vectors * 16;
        let ends = [(0, head), (middle, len - middle)];
        for (offset, bytes) in ends.into_iter().filter(|(_, bytes)| *bytes != 0) {
            let status = cuda::memcpy_async(target + offset, source + offset, bytes, stream);
            if status != CuResult::SUCCESS {
                return status;
            }
        }
        if vectors == 0 {
            return CuResult::SUCCESS;
        }
        launch(self.vector, target + head, source + head, vectors, stream)
    }
}

/// One launch of the copy kernel over `count` vectors.
fn launch(function: CuFunction, target: CuDevicePtr, source: CuDevicePtr, count: u64, stream: Stream) -> CuResult {
    let blocks = count.div_ceil(u64::from(THREADS)).clamp(1, u64::from(MAX_BLOCKS)) as u32;
    let (mut target, mut source, mut count) = (target, source, count);
    let mut params: [*mut c_void; 3] = [(&raw mut target).cast(), (&raw mut source).cast(), (&raw mut count).cast()];
    // SAFETY: the copy kernel takes (u64 dst, u64 src, u64 count), and `params` points
    // to three live u64 locals in that order; the ranges are device memory of the
    // stream's context that the caller (staging) keeps until the copy has run: a scratch
    // buffer and the program's operand, read before its product on the same stream.
    unsafe { cuda::launch_kernel(function, blocks, THREADS, stream, &mut params) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ptx_is_one_nul_terminated_image_with_the_kernel() {
        assert_eq!(PTX.iter().filter(|byte| **byte == 0).count(), 1);
        assert_eq!(PTX.last(), Some(&0));
        let text = std::str::from_utf8(&PTX[..PTX.len() - 1]).unwrap();
        assert!(text.contains(&format!(".visible .entry {}(", VECTOR.to_str().unwrap())));
    }
}
