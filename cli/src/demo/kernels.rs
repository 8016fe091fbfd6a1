//! The demo's GPU kernels (PTX, JIT-compiled by the driver) and the pattern they write,
//! which the host checks too.

use std::ffi::CStr;

/// Two kernels over 32-bit words, grid-stride loops: `gb_fill` writes
/// `(index * 0x9E3779B1) ^ seed`, `gb_verify` counts words that differ into `*errors`.
/// PTX ISA 6.0 for sm_52 and later: the driver JITs it for the GPU at hand.
pub(super) const KERNELS_PTX: &CStr = c"
.version 6.0
.target sm_52
.address_size 64

.visible .entry gb_fill(.param .u64 p_data, .param .u64 p_words, .param .u32 p_seed)
{
    .reg .pred %p;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_data];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u64 %rd2, [p_words];
    ld.param.u32 %r1, [p_seed];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %nctaid.x;
    mul.wide.u32 %rd3, %r2, %r3;
    cvt.u64.u32 %rd4, %r4;
    add.u64 %rd3, %rd3, %rd4;
    mul.wide.u32 %rd5, %r5, %r3;
FILL_LOOP:
    setp.ge.u64 %p, %rd3, %rd2;
    @%p bra FILL_DONE;
    cvt.u32.u64 %r6, %rd3;
    mul.lo.u32 %r6, %r6, 0x9E3779B1;
    xor.b32 %r6, %r6, %r1;
    shl.b64 %rd6, %rd3, 2;
    add.u64 %rd7, %rd1, %rd6;
    st.global.u32 [%rd7], %r6;
    add.u64 %rd3, %rd3, %rd5;
    bra FILL_LOOP;
FILL_DONE:
    ret;
}

.visible .entry gb_verify(.param .u64 p_data, .param .u64 p_words, .param .u32 p_seed, .param .u64 p_errors)
{
    .reg .pred %p<3>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<11>;
    ld.param.u64 %rd1, [p_data];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u64 %rd2, [p_words];
    ld.param.u32 %r1, [p_seed];
    ld.param.u64 %rd8, [p_errors];
    cvta.to.global.u64 %rd8, %rd8;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %nctaid.x;
    mul.wide.u32 %rd3, %r2, %r3;
    cvt.u64.u32 %rd4, %r4;
    add.u64 %rd3, %rd3, %rd4;
    mul.wide.u32 %rd5, %r5, %r3;
    mov.u64 %rd9, 0;
VERIFY_LOOP:
    setp.ge.u64 %p1, %rd3, %rd2;
    @%p1 bra VERIFY_DONE;
    cvt.u32.u64 %r6, %rd3;
    mul.lo.u32 %r6, %r6, 0x9E3779B1;
    xor.b32 %r6, %r6, %r1;
    shl.b64 %rd6, %rd3, 2;
    add.u64 %rd7, %rd1, %rd6;
    ld.global.u32 %r7, [%rd7];
    setp.ne.u32 %p2, %r7, %r6;
    selp.u64 %rd10, 1, 0, %p2;
    add.u64 %rd9, %rd9, %rd10;
    add.u64 %rd3, %rd3, %rd5;
    bra VERIFY_LOOP;
VERIFY_DONE:
    setp.eq.u64 %p1, %rd9, 0;
    @%p1 bra VERIFY_RET;
    atom.global.add.u64 %rd10, [%rd8], %rd9;
VERIFY_RET:
    ret;
}
";

/// The value `gb_fill` writes at word `index` (checked on the host for sampled words).
pub(super) fn pattern(index: u64, seed: u32) -> u32 {
    (index as u32).wrapping_mul(0x9E37_79B1) ^ seed
}

pub(super) fn seed_of(buffer: usize) -> u32 {
    (buffer as u32).wrapping_mul(0x0100_0193).wrapping_add(0x5EED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_pattern_matches_the_kernel_formula() {
        assert_eq!(pattern(0, 7), 7);
        assert_eq!(pattern(1, 0), 0x9E37_79B1);
        // The kernel truncates the index to 32 bits before multiplying.
        assert_eq!(pattern(1 << 32, 5), 5);
        assert_ne!(seed_of(0), seed_of(1));
    }

    #[test]
    fn ptx_declares_both_kernels() {
        let ptx = KERNELS_PTX.to_str().unwrap();
        assert!(ptx.contains(".entry gb_fill("));
        assert!(ptx.contains(".entry gb_verify("));
    }
}
