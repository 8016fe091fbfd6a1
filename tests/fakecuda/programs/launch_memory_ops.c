/* gblaunch memops (see launch_tests.c): every driver form of a memset and of a copy that
 * touches device memory (CUDA arrays on the other side too: AtoD, DtoA, 3D batches), in
 * its legacy and its per-thread form, fetched through cuGetProcAddress as the runtime and
 * PyTorch fetch them (each checked to be the symbol of its name), then the runtime's
 * cudaMemcpy/cudaMemcpyAsync/cudaMemset, then a capture. Each step checks the data it
 * moved and, under the shim, that the shim counted what the device ran (fakegpu_count
 * "memset" + "memcpy"), the allocation it wrote named once more as written
 * (greenboost_shim_writes_naming) and as used (greenboost_shim_launches_naming), the one
 * it read as used and not as written (an array names nothing). A copy or memset recorded
 * into a graph counts only when the graph launches. */
#define _GNU_SOURCE
#include "launch_tests.h"

cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t n);

#define WORDS 4096                /* 32-bit words each step moves */
#define BYTES (WORDS * 4)
#define PITCH 256                 /* 2D and 3D: bytes per row */
#define ROWS 16
#define LAST_ROW ((ROWS - 1) * PITCH / 4) /* the word starting the last row */
#define BUFFER (4 * MiB)          /* large enough to go to T2 under a small budget */

static CUstream s;
static CUcontext ctx;
static uint32_t host[WORDS], back[WORDS];
static uint32_t stamp = 0x100;    /* each step's value, never seen before */
/* The word a byte or half-word memset of v leaves. */
#define BYTE_WORD(v) ((uint32_t)((v) & 0xff) * 0x01010101u)
#define HALF_WORD(v) ((uint32_t)((v) & 0xffff) * 0x10001u)

/* ---- what a step changed ---- */

struct counts { unsigned long long shim_ops, device_ops, written_writes, written_named, read_writes, read_named; };

static struct counts counts_of(CUdeviceptr written, CUdeviceptr read)
{
    struct shim_stats st = shim_stats();
    struct counts c = { st.memory_ops, fakegpu_count("memset") + fakegpu_count("memcpy"), 0, 0, 0, 0 };
    if (written)
        c.written_writes = shim_writes_naming((void *)(uintptr_t)written), c.written_named = named(written);
    if (read)
        c.read_writes = shim_writes_naming((void *)(uintptr_t)read), c.read_named = named(read);
    return c;
}

/* After `ops` operations that wrote in the allocation `written` and read `read` (0: host
 * memory, or a memset's value); the same allocation for both is named once per op. */
static void stepped(const char *what, struct counts before, unsigned ops, CUdeviceptr written, CUdeviceptr read)
{
    struct counts now = counts_of(written, read);
    CHECK(now.device_ops == before.device_ops + ops, "%s: the device ran %llu operations, want %u\n", what,
          now.device_ops - before.device_ops, ops);
    if (!shim_observes())
        return;
    CHECK(now.shim_ops - before.shim_ops == ops, "%s: the shim counted %llu copies and memsets, the device ran %u\n",
          what, now.shim_ops - before.shim_ops, ops);
    if (written) {
        CHECK(now.written_writes - before.written_writes == ops && now.written_named - before.written_named == ops,
              "%s: the allocation written was named as written %llu and as used %llu times, want %u\n", what,
              now.written_writes - before.written_writes, now.written_named - before.written_named, ops);
    }
    if (read && read != written) {
        CHECK(now.read_named - before.read_named == ops && now.read_writes == before.read_writes,
              "%s: the allocation read was named as used %llu and as written %llu times, want %u and 0\n", what,
              now.read_named - before.read_named, now.read_writes - before.read_writes, ops);
    }
}

/* One operation (`call`) that writes in `written` and reads `read`, run to its end. */
#define STEP_N(ops, what, written, read, call)                    \
    do {                                                          \
        struct counts before_ = counts_of(written, read);         \
        OK(call);                                                 \
        OK(cuStreamSynchronize(s));                               \
        stepped(what, before_, ops, written, read);               \
    } while (0)
#define STEP(what, written, read, call) STEP_N(1, what, written, read, call)

/* ---- data ---- */

static uint32_t fresh_device(CUdeviceptr p)
{
    OK(cuMemsetD32_v2(p, ++stamp, WORDS));
    return stamp;
}
static uint32_t fresh_host(void)
{
    ++stamp;
    for (int i = 0; i < WORDS; i++)
        host[i] = stamp;
    return stamp;
}
static void expect_words(CUdeviceptr p, uint32_t want, size_t first, size_t last, const char *what)
{
    OK(cuMemcpyDtoH_v2(back, p, BYTES));
    CHECK(back[first] == want && back[last] == want, "%s: words %zu and %zu are %#x and %#x, want %#x\n", what, first,
          last, back[first], back[last], want);
}
static void expect_host(uint32_t want, const char *what)
{
    CHECK(host[0] == want && host[WORDS - 1] == want, "%s: host words are %#x and %#x, want %#x\n", what, host[0],
          host[WORDS - 1], want);
}

/* The driver function `name` at `version`, the per-thread form when `per_thread`, which
 * must be the symbol `symbol` (the shim's hook under the shim). */
static void *proc(const char *name, int version, int per_thread, const char *symbol)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    OK(cuGetProcAddress_v2(name, &fn, version, flags, &q));
    CHECK(fn && fn == dlsym(RTLD_DEFAULT, symbol), "cuGetProcAddress(%s, %d, %s) is not %s\n", name, version,
          per_thread ? "per-thread" : "default", symbol);
    return fn;
}
/* `type var` = the form of this pass (`pt`), its symbol in var_sym. */
#define FORM(type, var, name, version, legacy, per_thread)                    \
    const char *var##_sym = pt ? per_thread : legacy;                         \
    type var = (type)proc(name, version, pt, var##_sym)

typedef CUresult (*set8_t)(CUdeviceptr, unsigned char, size_t);
typedef CUresult (*set16_t)(CUdeviceptr, unsigned short, size_t);
typedef CUresult (*set32_t)(CUdeviceptr, unsigned int, size_t);
typedef CUresult (*set8a_t)(CUdeviceptr, unsigned char, size_t, CUstream);
typedef CUresult (*set16a_t)(CUdeviceptr, unsigned short, size_t, CUstream);
typedef CUresult (*set32a_t)(CUdeviceptr, unsigned int, size_t, CUstream);
typedef CUresult (*set2d8_t)(CUdeviceptr, size_t, unsigned char, size_t, size_t);
typedef CUresult (*set2d16_t)(CUdeviceptr, size_t, unsigned short, size_t, size_t);
typedef CUresult (*set2d32_t)(CUdeviceptr, size_t, unsigned int, size_t, size_t);
typedef CUresult (*set2d8a_t)(CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream);
typedef CUresult (*set2d16a_t)(CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream);
typedef CUresult (*set2d32a_t)(CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream);

/* Memsets: each writes `a` with a byte, half-word or word pattern of a new stamp. */
static void memsets(int pt, CUdeviceptr a)
{
    CUstream on = pt ? NULL : s; /* the per-thread forms: stream 0 is the thread's stream */
    FORM(set8_t, d8, "cuMemsetD8", 12080, "cuMemsetD8_v2", "cuMemsetD8_v2_ptds");
    FORM(set16_t, d16, "cuMemsetD16", 12080, "cuMemsetD16_v2", "cuMemsetD16_v2_ptds");
    FORM(set32_t, d32, "cuMemsetD32", 12080, "cuMemsetD32_v2", "cuMemsetD32_v2_ptds");
    FORM(set8a_t, d8a, "cuMemsetD8Async", 12080, "cuMemsetD8Async", "cuMemsetD8Async_ptsz");
    FORM(set16a_t, d16a, "cuMemsetD16Async", 12080, "cuMemsetD16Async", "cuMemsetD16Async_ptsz");
    FORM(set32a_t, d32a, "cuMemsetD32Async", 12080, "cuMemsetD32Async", "cuMemsetD32Async_ptsz");
    FORM(set2d8_t, e8, "cuMemsetD2D8", 12080, "cuMemsetD2D8_v2", "cuMemsetD2D8_v2_ptds");
    FORM(set2d16_t, e16, "cuMemsetD2D16", 12080, "cuMemsetD2D16_v2", "cuMemsetD2D16_v2_ptds");
    FORM(set2d32_t, e32, "cuMemsetD2D32", 12080, "cuMemsetD2D32_v2", "cuMemsetD2D32_v2_ptds");
    FORM(set2d8a_t, e8a, "cuMemsetD2D8Async", 12080, "cuMemsetD2D8Async", "cuMemsetD2D8Async_ptsz");
    FORM(set2d16a_t, e16a, "cuMemsetD2D16Async", 12080, "cuMemsetD2D16Async", "cuMemsetD2D16Async_ptsz");
    FORM(set2d32a_t, e32a, "cuMemsetD2D32Async", 12080, "cuMemsetD2D32Async", "cuMemsetD2D32Async_ptsz");
    uint32_t b, h, w;
    b = ++stamp;
    STEP(d8_sym, a, 0, d8(a, (unsigned char)b, BYTES));
    expect_words(a, BYTE_WORD(b), 0, WORDS - 1, d8_sym);
    h = ++stamp;
    STEP(d16_sym, a, 0, d16(a, (unsigned short)h, BYTES / 2));
    expect_words(a, HALF_WORD(h), 0, WORDS - 1, d16_sym);
    w = ++stamp;
    STEP(d32_sym, a, 0, d32(a, w, WORDS));
    expect_words(a, w, 0, WORDS - 1, d32_sym);
    b = ++stamp;
    STEP(d8a_sym, a, 0, d8a(a, (unsigned char)b, BYTES, on));
    expect_words(a, BYTE_WORD(b), 0, WORDS - 1, d8a_sym);
    h = ++stamp;
    STEP(d16a_sym, a, 0, d16a(a, (unsigned short)h, BYTES / 2, on));
    expect_words(a, HALF_WORD(h), 0, WORDS - 1, d16a_sym);
    w = ++stamp;
    STEP(d32a_sym, a, 0, d32a(a, w, WORDS, on));
    expect_words(a, w, 0, WORDS - 1, d32a_sym);
    /* 2D: ROWS rows of PITCH bytes, each filled whole. */
    b = ++stamp;
    STEP(e8_sym, a, 0, e8(a, PITCH, (unsigned char)b, PITCH, ROWS));
    expect_words(a, BYTE_WORD(b), 0, LAST_ROW, e8_sym);
    h = ++stamp;
    STEP(e16_sym, a, 0, e16(a, PITCH, (unsigned short)h, PITCH / 2, ROWS));
    expect_words(a, HALF_WORD(h), 0, LAST_ROW, e16_sym);
    w = ++stamp;
    STEP(e32_sym, a, 0, e32(a, PITCH, w, PITCH / 4, ROWS));
    expect_words(a, w, 0, LAST_ROW, e32_sym);
    b = ++stamp;
    STEP(e8a_sym, a, 0, e8a(a, PITCH, (unsigned char)b, PITCH, ROWS, on));
    expect_words(a, BYTE_WORD(b), 0, LAST_ROW, e8a_sym);
    h = ++stamp;
    STEP(e16a_sym, a, 0, e16a(a, PITCH, (unsigned short)h, PITCH / 2, ROWS, on));
    expect_words(a, HALF_WORD(h), 0, LAST_ROW, e16a_sym);
    w = ++stamp;
    STEP(e32a_sym, a, 0, e32a(a, PITCH, w, PITCH / 4, ROWS, on));
    expect_words(a, w, 0, LAST_ROW, e32a_sym);
}

typedef CUresult (*copy_t)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*copya_t)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*htod_t)(CUdeviceptr, const void *, size_t);
typedef CUresult (*htoda_t)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*dtoh_t)(void *, CUdeviceptr, size_t);
typedef CUresult (*dtoha_t)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*peer_t)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
typedef CUresult (*peera_t)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);

/* Copies of one range: each moves a new stamp from a to b, b to a, or the host. */
static void copies(int pt, CUdeviceptr a, CUdeviceptr b)
{
    CUstream on = pt ? NULL : s;
    FORM(copy_t, cp, "cuMemcpy", 12080, "cuMemcpy", "cuMemcpy_ptds");
    FORM(copya_t, cpa, "cuMemcpyAsync", 12080, "cuMemcpyAsync", "cuMemcpyAsync_ptsz");
    FORM(htod_t, hd, "cuMemcpyHtoD", 12080, "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds");
    FORM(htoda_t, hda, "cuMemcpyHtoDAsync", 12080, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz");
    FORM(dtoh_t, dh, "cuMemcpyDtoH", 12080, "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds");
    FORM(dtoha_t, dha, "cuMemcpyDtoHAsync", 12080, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz");
    FORM(copy_t, dd, "cuMemcpyDtoD", 12080, "cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds");
    FORM(copya_t, dda, "cuMemcpyDtoDAsync", 12080, "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz");
    FORM(peer_t, pe, "cuMemcpyPeer", 12080, "cuMemcpyPeer", "cuMemcpyPeer_ptds");
    FORM(peera_t, pea, "cuMemcpyPeerAsync", 12080, "cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz");
    uint32_t v;
    v = fresh_device(a);
    STEP(cp_sym, b, a, cp(b, a, BYTES));
    expect_words(b, v, 0, WORDS - 1, cp_sym);
    v = fresh_device(b);
    STEP(cpa_sym, a, b, cpa(a, b, BYTES, on));
    expect_words(a, v, 0, WORDS - 1, cpa_sym);
    v = fresh_host();
    STEP(hd_sym, a, 0, hd(a, host, BYTES));
    expect_words(a, v, 0, WORDS - 1, hd_sym);
    v = fresh_host();
    STEP(hda_sym, b, 0, hda(b, host, BYTES, on));
    expect_words(b, v, 0, WORDS - 1, hda_sym);
    v = fresh_device(a);
    STEP(dh_sym, 0, a, dh(host, a, BYTES));
    expect_host(v, dh_sym);
    v = fresh_device(b);
    STEP(dha_sym, 0, b, dha(host, b, BYTES, on));
    expect_host(v, dha_sym);
    v = fresh_device(a);
    STEP(dd_sym, b, a, dd(b, a, BYTES));
    expect_words(b, v, 0, WORDS - 1, dd_sym);
    v = fresh_device(b);
    STEP(dda_sym, a, b, dda(a, b, BYTES, on));
    expect_words(a, v, 0, WORDS - 1, dda_sym);
    v = fresh_device(a);
    STEP(pe_sym, b, a, pe(b, ctx, a, ctx, BYTES));
    expect_words(b, v, 0, WORDS - 1, pe_sym);
    v = fresh_device(b);
    STEP(pea_sym, a, b, pea(a, ctx, b, ctx, BYTES, on));
    expect_words(a, v, 0, WORDS - 1, pea_sym);
    /* Within one allocation (its first half to its second): named once. */
    v = fresh_device(a);
    STEP(dd_sym, a, a, dd(a + BYTES / 2, a, BYTES / 2));
    expect_words(a, v, WORDS / 2, WORDS - 1, "a copy within one allocation");
    /* Zero bytes: nothing runs, nothing is counted or named. */
    STEP_N(0, "a copy of zero bytes", b, a, dd(b, a, 0));
}

typedef CUresult (*copy2d_t)(const CUDA_MEMCPY2D *);
typedef CUresult (*copy2da_t)(const CUDA_MEMCPY2D *, CUstream);
typedef CUresult (*copy3d_t)(const CUDA_MEMCPY3D *);
typedef CUresult (*copy3da_t)(const CUDA_MEMCPY3D *, CUstream);
typedef CUresult (*copy3dp_t)(const CUDA_MEMCPY3D_PEER *);
typedef CUresult (*copy3dpa_t)(const CUDA_MEMCPY3D_PEER *, CUstream);
typedef CUresult (*batch12_t)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t,
                              size_t *, CUstream);
typedef CUresult (*batch13_t)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t,
                              CUstream);

/* Copies by descriptor, a to b (the 2D one also from the host), and batches. */
static void described(int pt, CUdeviceptr a, CUdeviceptr b)
{
    CUstream on = pt ? NULL : s;
    FORM(copy2d_t, c2, "cuMemcpy2D", 12080, "cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds");
    FORM(copy2d_t, c2u, "cuMemcpy2DUnaligned", 12080, "cuMemcpy2DUnaligned_v2", "cuMemcpy2DUnaligned_v2_ptds");
    FORM(copy2da_t, c2a, "cuMemcpy2DAsync", 12080, "cuMemcpy2DAsync_v2", "cuMemcpy2DAsync_v2_ptsz");
    FORM(copy3d_t, c3, "cuMemcpy3D", 12080, "cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds");
    FORM(copy3da_t, c3a, "cuMemcpy3DAsync", 12080, "cuMemcpy3DAsync_v2", "cuMemcpy3DAsync_v2_ptsz");
    FORM(copy3dp_t, c3p, "cuMemcpy3DPeer", 12080, "cuMemcpy3DPeer", "cuMemcpy3DPeer_ptds");
    FORM(copy3dpa_t, c3pa, "cuMemcpy3DPeerAsync", 12080, "cuMemcpy3DPeerAsync", "cuMemcpy3DPeerAsync_ptsz");
    FORM(batch12_t, b12, "cuMemcpyBatchAsync", 12080, "cuMemcpyBatchAsync", "cuMemcpyBatchAsync_ptsz");
    FORM(batch13_t, b13, "cuMemcpyBatchAsync", 13000, "cuMemcpyBatchAsync_v2", "cuMemcpyBatchAsync_v2_ptsz");
    /* ROWS rows of PITCH bytes; the 3D copies as 2 layers of ROWS / 2 rows. */
    CUDA_MEMCPY2D d2 = { .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcPitch = PITCH,
                         .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b, .dstPitch = PITCH,
                         .WidthInBytes = PITCH, .Height = ROWS };
    CUDA_MEMCPY2D h2 = d2;
    h2.srcMemoryType = CU_MEMORYTYPE_HOST, h2.srcHost = host, h2.srcDevice = 0;
    CUDA_MEMCPY3D d3 = { .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcPitch = PITCH,
                         .srcHeight = ROWS / 2, .dstMemoryType = CU_MEMORYTYPE_UNIFIED, .dstDevice = b,
                         .dstPitch = PITCH, .dstHeight = ROWS / 2, .WidthInBytes = PITCH, .Height = ROWS / 2,
                         .Depth = 2 };
    CUDA_MEMCPY3D_PEER p3 = { .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcContext = ctx,
                              .srcPitch = PITCH, .srcHeight = ROWS / 2, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                              .dstDevice = b, .dstContext = ctx, .dstPitch = PITCH, .dstHeight = ROWS / 2,
                              .WidthInBytes = PITCH, .Height = ROWS / 2, .Depth = 2 };
    uint32_t v;
    /* Each copy of a's fresh words into b: one operation writing b, reading a. */
#define COPIED_FROM_A(sym, call)                  \
    do {                                          \
        v = fresh_device(a);                      \
        STEP(sym, b, a, call);                    \
        expect_words(b, v, 0, LAST_ROW, sym);     \
    } while (0)
    COPIED_FROM_A(c2_sym, c2(&d2));
    v = fresh_host();
    STEP(c2_sym, b, 0, c2(&h2));
    expect_words(b, v, 0, LAST_ROW, "a 2D copy from the host");
    COPIED_FROM_A(c2u_sym, c2u(&d2));
    COPIED_FROM_A(c2a_sym, c2a(&d2, on));
    COPIED_FROM_A(c3_sym, c3(&d3));
    COPIED_FROM_A(c3a_sym, c3a(&d3, on));
    COPIED_FROM_A(c3p_sym, c3p(&p3));
    COPIED_FROM_A(c3pa_sym, c3pa(&p3, on));
#undef COPIED_FROM_A
    /* A batch of two copies, a's halves to b's: two operations. */
    CUdeviceptr dsts[2] = { b, b + BYTES / 2 }, srcs[2] = { a, a + BYTES / 2 };
    size_t sizes[2] = { BYTES / 2, BYTES / 2 }, first = 0, fail = 0;
    CUmemcpyAttributes order = { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM };
    CUstream batch_on = pt ? NULL : s; /* not the legacy stream */
    v = fresh_device(a);
    STEP_N(2, b12_sym, b, a, b12(dsts, srcs, sizes, 2, &order, &first, 1, &fail, batch_on));
    expect_words(b, v, 0, WORDS - 1, b12_sym);
    v = fresh_device(a);
    STEP_N(2, b13_sym, b, a, b13(dsts, srcs, sizes, 2, &order, &first, 1, batch_on));
    expect_words(b, v, 0, WORDS - 1, b13_sym);
}

typedef CUresult (*atod_t)(CUdeviceptr, CUarray, size_t, size_t);
typedef CUresult (*dtoa_t)(CUarray, size_t, CUdeviceptr, size_t);
typedef CUresult (*batch3d12_t)(size_t, CUDA_MEMCPY3D_BATCH_OP *, size_t *, unsigned long long, CUstream);
typedef CUresult (*batch3d13_t)(size_t, CUDA_MEMCPY3D_BATCH_OP *, unsigned long long, CUstream);
#define ARRAY_WIDTH (PITCH / 4)         /* a CUDA array of BYTES: 32-bit elements, PITCH bytes a row */
#define ARRAY_ROWS (WORDS / ARRAY_WIDTH)

/* An operand of a 3D batch: a pointer, tightly packed, or the array from row `row`. */
static CUmemcpy3DOperand pointer_operand(CUdeviceptr p)
{
    return (CUmemcpy3DOperand){ .type = CU_MEMCPY_OPERAND_TYPE_POINTER, .op.ptr = { .ptr = p } };
}
static CUmemcpy3DOperand array_operand(CUarray array, size_t row)
{
    return (CUmemcpy3DOperand){ .type = CU_MEMCPY_OPERAND_TYPE_ARRAY, .op.array = { array, { 0, row, 0 } } };
}

/* Copies with a CUDA array on one side (the array is no allocation: it names nothing, the
 * device memory side is named) and batches of 3D copies between pointers and arrays. */
static void arrays(int pt, CUdeviceptr a, CUdeviceptr b)
{
    CUstream on = pt ? NULL : s; /* the batches: not the legacy stream */
    FORM(atod_t, ad, "cuMemcpyAtoD", 12080, "cuMemcpyAtoD_v2", "cuMemcpyAtoD_v2_ptds");
    FORM(dtoa_t, da, "cuMemcpyDtoA", 12080, "cuMemcpyDtoA_v2", "cuMemcpyDtoA_v2_ptds");
    FORM(batch3d12_t, c12, "cuMemcpy3DBatchAsync", 12080, "cuMemcpy3DBatchAsync", "cuMemcpy3DBatchAsync_ptsz");
    FORM(batch3d13_t, c13, "cuMemcpy3DBatchAsync", 13000, "cuMemcpy3DBatchAsync_v2",
         "cuMemcpy3DBatchAsync_v2_ptsz");
    CUarray array;
    CUDA_ARRAY_DESCRIPTOR desc = { ARRAY_WIDTH, ARRAY_ROWS, CU_AD_FORMAT_UNSIGNED_INT32, 1 };
    OK(cuArrayCreate_v2(&array, &desc));
    uint32_t v = fresh_device(a);
    STEP(da_sym, 0, a, da(array, 0, a, BYTES));
    STEP(ad_sym, b, 0, ad(b, array, 0, BYTES));
    expect_words(b, v, 0, WORDS - 1, "a copy through a CUDA array");
    /* Two operations each: a's halves into the array's, then the array's into b's. */
    CUDA_MEMCPY3D_BATCH_OP to_array[2], from_array[2];
    for (int i = 0; i < 2; i++) {
        CUDA_MEMCPY3D_BATCH_OP op = { .extent = { ARRAY_WIDTH, ARRAY_ROWS / 2, 1 },
                                      .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM };
        to_array[i] = from_array[i] = op;
        to_array[i].src = pointer_operand(a + i * BYTES / 2);
        to_array[i].dst = from_array[i].src = array_operand(array, i * ARRAY_ROWS / 2);
        from_array[i].dst = pointer_operand(b + i * BYTES / 2);
    }
    size_t fail = 0;
    v = fresh_device(a);
    STEP_N(2, c12_sym, 0, a, c12(2, to_array, &fail, 0, on));
    STEP_N(2, c13_sym, b, 0, c13(2, from_array, 0, on));
    expect_words(b, v, 0, WORDS - 1, "a 3D batch through a CUDA array");
    /* Between two pointers: ROWS rows of PITCH bytes as 2 layers, each way. */
    CUDA_MEMCPY3D_BATCH_OP both[2] = { { .src = pointer_operand(a), .dst = pointer_operand(b),
                                         .extent = { PITCH, ROWS / 2, 2 },
                                         .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM } };
    both[0].src.op.ptr.rowLength = both[0].dst.op.ptr.rowLength = PITCH;
    both[1] = both[0];
    both[1].src.op.ptr.ptr = b, both[1].dst.op.ptr.ptr = a;
    v = fresh_device(a);
    STEP(c12_sym, b, a, c12(1, &both[0], &fail, 0, on));
    expect_words(b, v, 0, LAST_ROW, c12_sym);
    v = fresh_device(b);
    STEP(c13_sym, a, b, c13(1, &both[1], 0, on));
    expect_words(a, v, 0, LAST_ROW, c13_sym);
    /* An operation of zero extent: the driver refuses the batch; nothing runs or counts. */
    both[1] = both[0];
    both[1].extent.depth = 0;
    struct counts before = counts_of(b, a);
    CHECK(c12(2, both, &fail, 0, on) == CUDA_ERROR_INVALID_VALUE && fail == 1,
          "%s: a batch with an operation of zero extent was not refused at it (failIdx %zu)\n", c12_sym, fail);
    OK(cuStreamSynchronize(s));
    stepped("a refused 3D batch", before, 0, b, a);
    OK(cuArrayDestroy(array));
}

/* The runtime's copies and memset: they reach the driver through cuGetProcAddress. */
static void runtime(CUdeviceptr a, CUdeviceptr b)
{
    void *pa = (void *)(uintptr_t)a, *pb = (void *)(uintptr_t)b;
    uint32_t v;
    v = fresh_host();
    STEP("cudaMemcpy to the device", a, 0, cudaMemcpy(pa, host, BYTES, cudaMemcpyHostToDevice));
    expect_words(a, v, 0, WORDS - 1, "cudaMemcpy to the device");
    STEP("cudaMemcpy on the device", b, a, cudaMemcpy(pb, pa, BYTES, cudaMemcpyDefault));
    expect_words(b, v, 0, WORDS - 1, "cudaMemcpy on the device");
    v = fresh_device(b);
    STEP("cudaMemcpy to the host", 0, b, cudaMemcpy(host, pb, BYTES, cudaMemcpyDeviceToHost));
    expect_host(v, "cudaMemcpy to the host");
    v = fresh_device(a);
    STEP("cudaMemcpyAsync", b, a, cudaMemcpyAsync(pb, pa, BYTES, cudaMemcpyDeviceToDevice, s));
    expect_words(b, v, 0, WORDS - 1, "cudaMemcpyAsync");
    v = ++stamp;
    STEP("cudaMemset", a, 0, cudaMemset(pa, (int)(v & 0xff), BYTES));
    expect_words(a, BYTE_WORD(v), 0, WORDS - 1, "cudaMemset");
}

/* Work recorded into a graph runs, and counts, when the graph launches. */
static void captured(CUdeviceptr a, CUdeviceptr b)
{
    uint32_t v = ++stamp;
    struct counts before = counts_of(b, a);
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(cuMemsetD32Async(a, v, WORDS, s));
    OK(cuMemcpyAsync(b, a, BYTES, s));
    CUgraph graph;
    OK(cuStreamEndCapture(s, &graph));
    struct counts now = counts_of(b, a);
    CHECK(now.device_ops == before.device_ops && now.shim_ops == before.shim_ops &&
              now.written_writes == before.written_writes && now.read_writes == before.read_writes,
          "a captured memset and copy ran or were counted (device %llu, shim %llu)\n",
          now.device_ops - before.device_ops, now.shim_ops - before.shim_ops);
    CUgraphExec exec;
    OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    before = counts_of(0, 0);
    OK(cuGraphLaunch(exec, s));
    OK(cuStreamSynchronize(s));
    now = counts_of(0, 0);
    CHECK(now.device_ops == before.device_ops + 2 && (!shim_observes() || now.shim_ops == before.shim_ops + 2),
          "the graph's memset and copy: the device ran %llu, the shim counted %llu, want 2\n",
          now.device_ops - before.device_ops, now.shim_ops - before.shim_ops);
    expect_words(b, v, 0, WORDS - 1, "the graph's copy");
    OK(cuGraphExecDestroy(exec));
    OK(cuGraphDestroy(graph));
}

int test_memory_ops(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUdeviceptr a, b;
    OK(cuMemAlloc_v2(&a, BUFFER));
    OK(cuMemAlloc_v2(&b, BUFFER));
    OK(cuCtxGetCurrent(&ctx));
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cudaFree(NULL)); /* the runtime initialises before anything is counted */
    observed_reset();
    for (int pt = 0; pt < 2; pt++) {
        memsets(pt, a);
        copies(pt, a, b);
        described(pt, a, b);
        arrays(pt, a, b);
    }
    runtime(a, b);
    captured(a, b);
    printf("counts: memset %llu memcpy %llu\n", fakegpu_count("memset"), fakegpu_count("memcpy"));
    observed_check("memops", 0);
    OK(cuStreamDestroy_v2(s));
    OK(cuMemFree_v2(b));
    OK(cuMemFree_v2(a));
    return 0;
}
