//! gb-gpu-check: the CUDA program of GreenBoost's GPU suite (tests/gpu/run.sh).
//!
//! It reaches CUDA the way an unmodified application does: the runtime (libcudart) and the
//! driver (libcuda) are dlopened by cudarc and every function is looked up with dlsym at first
//! use, so under `LD_PRELOAD=libgreenboost_cuda.so` each look-up goes through the shim's dlsym
//! routing. Kernels are hand-written PTX (pattern.ptx) loaded with cuModuleLoadData.
//!
//! Subcommands (each prints `PASS name: ...` / `FAIL name: ...` lines and `KV key=value`
//! figures that run.sh collects; the exit status is 1 when anything failed):
//!   report                      capacities as every API reports them, versions, device name
//!   alloc [options]             allocate past the budget, write and verify with kernels
//!   vmm                         which host locations cuMemCreate accepts; one is mapped and
//!                               checked with the kernels
//!   balloon --leave-gib L       hold plain cudaMalloc memory until killed, leaving L GiB free
//!
//! alloc options:
//!   --label NAME        prefix of the test names (default alloc)
//!   --total-gib T       bytes to hold at once through cudaMalloc (default 24)
//!   --chunk-mib C       size of each cudaMalloc (default 1024)
//!   --async-gib A       bytes to hold at once through cudaMallocAsync (default 0: skip)
//!   --budget-gib B      the VRAM budget the shim was given (0: none); VRAM-resident bytes of
//!                       this program's allocations must stay within it
//!   --t2-cap-gib C      the T2 cap the shim was given (0: none); T2 bytes must stay within it
//!   --expect vram|t2|oom
//!                       vram: every allocation is device memory (no shim);
//!                       t2: every allocation succeeds and some are host memory mapped for the
//!                       GPU (the shim's T2);
//!                       oom: cudaMalloc answers cudaErrorMemoryAllocation before the total
//!                       (no shim under a balloon, or the shim with its T2 capped)
//!   import                      asks the driver to import a DMA-BUF (udmabuf where the kernel
//!                               has it, else a memfd) as external memory, DMABUF_FD (9) and
//!                               OPAQUE_FD (1), and prints the answers

use std::ffi::{c_void, CStr, CString};
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use cudarc::driver::sys as cu;
use cudarc::runtime::sys as rt;

const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;
const THREADS_PER_BLOCK: u32 = 256;
/// Enough blocks to fill every multiprocessor of a large GPU; the kernels loop over the rest.
const MAX_BLOCKS: u64 = 132 * 32;
/// Bytes read back to the host from the start, middle and end of every buffer.
const READBACK_WINDOW: usize = MIB;
/// Bytes uploaded from the host into a buffer and checked on the GPU.
const UPLOAD_WINDOW: usize = 64 * MIB;

static PTX: &str = concat!(include_str!("pattern.ptx"), "\0");

/// The value element `i` of a buffer filled with `seed` holds (pattern.ptx computes the same).
fn pattern(i: u64, seed: u32) -> u32 {
    ((i as u32).wrapping_mul(0x9E37_79B1).wrapping_add(seed)) ^ ((i >> 32) as u32)
}

struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    fn record(&mut self, name: &str, ok: bool, detail: impl AsRef<str>) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
        println!("{} {}: {}", if ok { "PASS" } else { "FAIL" }, name, detail.as_ref());
        let _ = std::io::stdout().flush();
    }
}

fn kv(key: &str, value: impl std::fmt::Display) {
    println!("KV {key}={value}");
}

fn rt_name(e: rt::cudaError_t) -> String {
    // SAFETY: cudaGetErrorName returns a static string for every code, including unknown ones.
    unsafe { CStr::from_ptr(rt::cudaGetErrorName(e)) }.to_string_lossy().into_owned()
}

fn rt_check(what: &str, e: rt::cudaError_t) -> Result<(), String> {
    if e == rt::cudaError_t::cudaSuccess {
        Ok(())
    } else {
        Err(format!("{what}: {} ({})", rt_name(e), e as i32))
    }
}

fn cu_check(what: &str, e: cu::CUresult) -> Result<(), String> {
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
fn stale_error_after_success() -> Option<rt::cudaError_t> {
    // SAFETY: plain runtime queries.
    let pending = unsafe { rt::cudaPeekAtLastError() };
    if pending == rt::cudaError_t::cudaSuccess {
        return None;
    }
    unsafe { rt::cudaGetLastError() };
    Some(pending)
}

fn record_stale_errors(tally: &mut Tally, name: &str, call: &str, stale: &[(usize, rt::cudaError_t)]) {
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

/// Where the driver says a pointer's memory lives.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Placement {
    /// Device memory: VRAM (tier T1).
    Vram,
    /// Host memory mapped for the GPU: the shim's T2 (pinned, or movable managed memory
    /// preferred on the host).
    Host,
    Other(u32),
}

fn placement(ptr: *mut c_void) -> Result<Placement, String> {
    // The shim's movable T2 (live tiering) is managed memory, which the driver calls
    // device memory wherever it lives. The shim moves it by prefetch alone (its preferred
    // location stays the host), so the last prefetch says where it went, and the
    // preferred location where it is until a first move.
    let mut managed: u32 = 0;
    // SAFETY: CU_POINTER_ATTRIBUTE_IS_MANAGED writes one unsigned int.
    let e = unsafe {
        cu::cuPointerGetAttribute(
            (&mut managed as *mut u32).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            ptr as cu::CUdeviceptr,
        )
    };
    cu_check("cuPointerGetAttribute(IS_MANAGED)", e)?;
    if managed != 0 {
        let prefetched =
            managed_location(ptr, cu::CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION)?;
        let location = if prefetched == CU_DEVICE_INVALID {
            managed_location(ptr, cu::CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION)?
        } else {
            prefetched
        };
        return Ok(if location >= 0 { Placement::Vram } else { Placement::Host });
    }
    let mut memory_type: u32 = 0;
    // SAFETY: CU_POINTER_ATTRIBUTE_MEMORY_TYPE writes one unsigned int.
    let e = unsafe {
        cu::cuPointerGetAttribute(
            (&mut memory_type as *mut u32).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr as cu::CUdeviceptr,
        )
    };
    cu_check("cuPointerGetAttribute(MEMORY_TYPE)", e)?;
    Ok(match memory_type {
        x if x == cu::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 => Placement::Vram,
        x if x == cu::CUmemorytype::CU_MEMORYTYPE_HOST as u32 => Placement::Host,
        x => Placement::Other(x),
    })
}

/// `CU_DEVICE_INVALID`: a range attribute with no location (never prefetched, say).
const CU_DEVICE_INVALID: i32 = -2;

/// A location attribute (preferred, last prefetch) of the managed allocation at `ptr`:
/// a device ordinal, -1 for the host, or `CU_DEVICE_INVALID`.
fn managed_location(ptr: *mut c_void, attribute: cu::CUmem_range_attribute) -> Result<i32, String> {
    let mut location: i32 = CU_DEVICE_INVALID;
    // SAFETY: both location attributes write one int; the range is the first byte of a
    // live managed allocation (the caller saw IS_MANAGED).
    let e = unsafe {
        cu::cuMemRangeGetAttribute((&mut location as *mut i32).cast(), 4, attribute, ptr as cu::CUdeviceptr, 1)
    };
    cu_check("cuMemRangeGetAttribute", e)?;
    Ok(location)
}

/// The pattern kernels, loaded into the runtime's primary context.
struct Kernels {
    fill: cu::CUfunction,
    check: cu::CUfunction,
    /// Two u64 on the device: mismatch count and lowest mismatching index.
    result: *mut c_void,
}

impl Kernels {
    fn load() -> Result<Self, String> {
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

    fn launch(
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
    fn fill(
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
    fn check(
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
fn readback(ptr: *mut c_void, bytes: usize, seed: u32) -> Result<(), String> {
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
fn upload_and_check(kernels: &Kernels, ptr: *mut c_void, bytes: usize, seed: u32) -> Result<(), String> {
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

fn init_runtime() -> Result<(), String> {
    // SAFETY: plain runtime calls; cudaFree(NULL) creates the primary context.
    rt_check("cudaSetDevice(0)", unsafe { rt::cudaSetDevice(0) })?;
    rt_check("cudaFree(NULL)", unsafe { rt::cudaFree(std::ptr::null_mut()) })
}

fn mem_get_info() -> Result<(usize, usize), String> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: two out-parameters.
    rt_check("cudaMemGetInfo", unsafe { rt::cudaMemGetInfo(&mut free, &mut total) })?;
    Ok((free, total))
}

/// cudaGetDeviceProperties under the name libcudart exports (`_v2` since CUDA 12).
fn device_properties() -> Result<rt::cudaDeviceProp, String> {
    type GetProps = unsafe extern "C" fn(*mut rt::cudaDeviceProp, i32) -> rt::cudaError_t;
    // SAFETY: the library is libcudart, loaded by cudarc; both names have this signature.
    let lib = unsafe { rt::culib() };
    let get: libloading::Symbol<GetProps> =
        unsafe { lib.get(b"cudaGetDeviceProperties_v2\0").or_else(|_| lib.get(b"cudaGetDeviceProperties\0")) }
            .map_err(|e| format!("cudaGetDeviceProperties not found: {e}"))?;
    let mut props = std::mem::MaybeUninit::<rt::cudaDeviceProp>::zeroed();
    // SAFETY: props is large enough for the CUDA 13 struct the runtime writes.
    rt_check("cudaGetDeviceProperties", unsafe { get(props.as_mut_ptr(), 0) })?;
    // SAFETY: written by the runtime (and zeroed before).
    Ok(unsafe { props.assume_init() })
}

/// NVML's view of device 0's memory, looked up with dlopen + dlsym as ollama does.
fn nvml_memory() -> Result<Vec<(String, u64)>, String> {
    #[repr(C)]
    struct NvmlMemory {
        total: u64,
        free: u64,
        used: u64,
    }
    #[repr(C)]
    struct NvmlMemoryV2 {
        version: u32,
        total: u64,
        reserved: u64,
        free: u64,
        used: u64,
    }
    // SAFETY: loading the driver's NVML; its initialisers have no preconditions.
    let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
        .map_err(|e| format!("dlopen libnvidia-ml.so.1: {e}"))?;
    type Init = unsafe extern "C" fn() -> i32;
    type Handle = unsafe extern "C" fn(u32, *mut *mut c_void) -> i32;
    type Memory = unsafe extern "C" fn(*mut c_void, *mut NvmlMemory) -> i32;
    type MemoryV2 = unsafe extern "C" fn(*mut c_void, *mut NvmlMemoryV2) -> i32;
    let mut out = Vec::new();
    // SAFETY: the signatures are NVML's; every out-parameter is a live local.
    unsafe {
        let init: libloading::Symbol<Init> = lib.get(b"nvmlInit_v2\0").map_err(|e| e.to_string())?;
        let rc = init();
        if rc != 0 {
            return Err(format!("nvmlInit_v2 returned {rc}"));
        }
        let handle_by_index: libloading::Symbol<Handle> =
            lib.get(b"nvmlDeviceGetHandleByIndex_v2\0").map_err(|e| e.to_string())?;
        let mut device: *mut c_void = std::ptr::null_mut();
        let rc = handle_by_index(0, &mut device);
        if rc != 0 {
            return Err(format!("nvmlDeviceGetHandleByIndex_v2 returned {rc}"));
        }
        let memory: libloading::Symbol<Memory> = lib.get(b"nvmlDeviceGetMemoryInfo\0").map_err(|e| e.to_string())?;
        let mut m = NvmlMemory { total: 0, free: 0, used: 0 };
        let rc = memory(device, &mut m);
        if rc != 0 {
            return Err(format!("nvmlDeviceGetMemoryInfo returned {rc}"));
        }
        out.extend([
            ("nvml.total".to_string(), m.total),
            ("nvml.free".to_string(), m.free),
            ("nvml.used".to_string(), m.used),
        ]);
        if let Ok(memory_v2) = lib.get::<MemoryV2>(b"nvmlDeviceGetMemoryInfo_v2\0") {
            // nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2): size | 2 << 24.
            let mut m = NvmlMemoryV2 {
                version: std::mem::size_of::<NvmlMemoryV2>() as u32 | 2 << 24,
                total: 0,
                reserved: 0,
                free: 0,
                used: 0,
            };
            let rc = memory_v2(device, &mut m);
            if rc == 0 {
                out.extend([
                    ("nvml_v2.total".to_string(), m.total),
                    ("nvml_v2.free".to_string(), m.free),
                    ("nvml_v2.used".to_string(), m.used),
                ]);
            } else {
                out.push(("nvml_v2.error".to_string(), rc as u64));
            }
        }
    }
    Ok(out)
}

fn report(tally: &mut Tally) -> Result<(), String> {
    init_runtime()?;
    let mut version = 0i32;
    // SAFETY: out-parameters.
    rt_check("cudaDriverGetVersion", unsafe { rt::cudaDriverGetVersion(&mut version) })?;
    kv("cuda.driver_version", version);
    rt_check("cudaRuntimeGetVersion", unsafe { rt::cudaRuntimeGetVersion(&mut version) })?;
    kv("cuda.runtime_version", version);
    let props = device_properties()?;
    // SAFETY: name is NUL-terminated within its 256 bytes (zeroed before the call).
    let name = unsafe { CStr::from_ptr(props.name.as_ptr()) }.to_string_lossy().into_owned();
    kv("device.name", name.replace(' ', "_"));
    kv("device.cc", format!("{}.{}", props.major, props.minor));
    kv("props.total", props.totalGlobalMem);
    let (free, total) = mem_get_info()?;
    kv("cudaMemGetInfo.free", free);
    kv("cudaMemGetInfo.total", total);
    let mut device: cu::CUdevice = 0;
    let mut bytes = 0usize;
    // SAFETY: out-parameters.
    cu_check("cuDeviceGet", unsafe { cu::cuDeviceGet(&mut device, 0) })?;
    cu_check("cuDeviceTotalMem_v2", unsafe { cu::cuDeviceTotalMem_v2(&mut bytes, device) })?;
    kv("cuDeviceTotalMem.total", bytes);
    let (mut free, mut total) = (0usize, 0usize);
    cu_check("cuMemGetInfo_v2", unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) })?;
    kv("cuMemGetInfo.free", free);
    kv("cuMemGetInfo.total", total);
    match nvml_memory() {
        Ok(values) => values.into_iter().for_each(|(k, v)| kv(&k, v)),
        Err(e) => tally.record("report.nvml", false, e),
    }
    tally.record("report.queries", true, format!("{name}: every capacity query answered"));
    Ok(())
}

struct AllocOptions {
    label: String,
    total: usize,
    chunk: usize,
    async_total: usize,
    budget: usize,
    t2_cap: usize,
    expect: String,
}

fn parse_alloc_options(args: &[String]) -> Result<AllocOptions, String> {
    let mut o = AllocOptions {
        label: "alloc".into(),
        total: 24 * GIB,
        chunk: GIB,
        async_total: 0,
        budget: 0,
        t2_cap: 0,
        expect: "vram".into(),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--label" => o.label = value.clone(),
            "--total-gib" => o.total = number()? * GIB,
            "--chunk-mib" => o.chunk = number()? * MIB,
            "--async-gib" => o.async_total = number()? * GIB,
            "--budget-gib" => o.budget = number()? * GIB,
            "--t2-cap-gib" => o.t2_cap = number()? * GIB,
            "--expect" if ["vram", "t2", "oom"].contains(&value.as_str()) => o.expect = value.clone(),
            _ => return Err(format!("unknown option {flag} {value}")),
        }
    }
    if o.chunk == 0 || !o.chunk.is_multiple_of(4) || o.chunk < READBACK_WINDOW {
        return Err("--chunk-mib must be at least 1".into());
    }
    Ok(o)
}

struct Buffer {
    ptr: *mut c_void,
    seed: u32,
    placement: Placement,
}

fn placement_split(buffers: &[Buffer], chunk: usize) -> (usize, usize, usize) {
    let count = |p: fn(&Placement) -> bool| buffers.iter().filter(|b| p(&b.placement)).count() * chunk;
    (count(|p| *p == Placement::Vram), count(|p| *p == Placement::Host), count(|p| matches!(p, Placement::Other(_))))
}

/// Checks every buffer on the GPU and reads windows of each back; returns the failures.
fn verify_all(kernels: &Kernels, buffers: &[Buffer], chunk: usize, stream: rt::cudaStream_t) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, b) in buffers.iter().enumerate() {
        match kernels.check(b.ptr, chunk, 0, b.seed, stream) {
            Ok((0, _)) => {}
            Ok((n, first)) => {
                failures.push(format!("buffer {i} ({:?}): {n} elements differ, first at element {first}", b.placement))
            }
            Err(e) => failures.push(format!("buffer {i}: {e}")),
        }
        if let Err(e) = readback(b.ptr, chunk, b.seed) {
            failures.push(format!("buffer {i} ({:?}): {e}", b.placement));
        }
    }
    failures
}

/// What [`allocate_and_fill`] came to.
struct Held {
    buffers: Vec<Buffer>,
    /// What stopped the allocations short of `total` (the runtime error is cleared).
    alloc_error: Option<rt::cudaError_t>,
    /// (buffer index, error) for each successful allocation that left an error pending.
    stale: Vec<(usize, rt::cudaError_t)>,
}

/// `chunk`-byte buffers from `allocate` until `total` bytes are held or it fails, each filled
/// on `stream` as it arrives (seed `seed_base` + its index). Placements are found once the
/// caller has synchronised ([`place_all`]).
fn allocate_and_fill(
    kernels: &Kernels,
    chunk: usize,
    total: usize,
    seed_base: u32,
    stream: rt::cudaStream_t,
    mut allocate: impl FnMut(&mut *mut c_void) -> rt::cudaError_t,
) -> Result<Held, String> {
    let mut held = Held { buffers: Vec::new(), alloc_error: None, stale: Vec::new() };
    while held.buffers.len() * chunk < total {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        let e = allocate(&mut ptr);
        if e != rt::cudaError_t::cudaSuccess {
            // SAFETY: clears the (non-sticky) error the failed call recorded.
            unsafe { rt::cudaGetLastError() };
            held.alloc_error = Some(e);
            break;
        }
        if let Some(pending) = stale_error_after_success() {
            held.stale.push((held.buffers.len(), pending));
        }
        let seed = seed_base + held.buffers.len() as u32;
        kernels.fill(ptr, chunk, 0, seed, stream)?;
        held.buffers.push(Buffer { ptr, seed, placement: Placement::Other(0) });
    }
    Ok(held)
}

/// Asks the driver where each buffer lives.
fn place_all(buffers: &mut [Buffer]) -> Result<(), String> {
    for b in buffers {
        b.placement = placement(b.ptr)?;
    }
    Ok(())
}

fn alloc(tally: &mut Tally, o: &AllocOptions) -> Result<(), String> {
    init_runtime()?;
    let kernels = Kernels::load()?;
    let (free, total) = mem_get_info()?;
    kv(&format!("{}.start_free", o.label), free);
    kv(&format!("{}.start_total", o.label), total);
    let gib = |b: usize| format!("{:.2} GiB", b as f64 / GIB as f64);

    // Phase 1: cudaMalloc until `total` is held at once, each buffer filled as it arrives.
    let started = Instant::now();
    let Held { mut buffers, alloc_error, stale } =
        allocate_and_fill(&kernels, o.chunk, o.total, 0x5EED_0000, std::ptr::null_mut(), |ptr| {
            // SAFETY: out-parameter.
            unsafe { rt::cudaMalloc(ptr, o.chunk) }
        })?;
    // SAFETY: plain synchronisation.
    rt_check("cudaDeviceSynchronize after fills", unsafe { rt::cudaDeviceSynchronize() })?;
    place_all(&mut buffers)?;
    let held = buffers.len() * o.chunk;
    let (vram, host, other) = placement_split(&buffers, o.chunk);
    let (peak_free, peak_total) = mem_get_info()?;
    let l = &o.label;
    kv(&format!("{l}.held_bytes"), held);
    kv(&format!("{l}.vram_bytes"), vram);
    kv(&format!("{l}.t2_bytes"), host);
    kv(&format!("{l}.alloc_fill_seconds"), format!("{:.2}", started.elapsed().as_secs_f64()));
    kv(&format!("{l}.peak_free"), peak_free);
    kv(&format!("{l}.peak_total"), peak_total);
    let split = format!(
        "held {} in {} buffers: {} VRAM, {} host-mapped (T2), {} other",
        gib(held),
        buffers.len(),
        gib(vram),
        gib(host),
        gib(other)
    );

    match o.expect.as_str() {
        "oom" => {
            let oom = alloc_error == Some(rt::cudaError_t::cudaErrorMemoryAllocation);
            tally.record(
                &format!("{l}.oom"),
                oom,
                format!("{split}; cudaMalloc ended with {}", alloc_error.map(rt_name).unwrap_or("no error".into())),
            );
            if o.budget > 0 || o.t2_cap > 0 {
                let ok = other == 0
                    && (o.budget == 0 || vram <= o.budget)
                    && (o.t2_cap == 0 || (host > 0 && host <= o.t2_cap));
                tally.record(
                    &format!("{l}.placement"),
                    ok,
                    format!(
                        "{split}; expected VRAM part within {} and T2 part within {}",
                        gib(o.budget),
                        gib(o.t2_cap)
                    ),
                );
            }
        }
        _ => {
            let all = alloc_error.is_none();
            tally.record(
                &format!("{l}.cudaMalloc_total"),
                all,
                format!("{split}{}", alloc_error.map(|e| format!("; stopped by {}", rt_name(e))).unwrap_or_default()),
            );
            let placement_ok = match o.expect.as_str() {
                "vram" => host == 0 && other == 0,
                _ => host > 0 && other == 0 && (o.budget == 0 || vram <= o.budget),
            };
            let want = match o.expect.as_str() {
                "vram" => "all in VRAM".to_string(),
                _ if o.budget > 0 => format!("some in T2, VRAM part within the {} budget", gib(o.budget)),
                _ => "some in T2".to_string(),
            };
            tally.record(&format!("{l}.placement"), placement_ok, format!("{split}; expected {want}"));
        }
    }

    record_stale_errors(tally, &format!("{l}.cudaMalloc_last_error"), "cudaMalloc", &stale);

    // Every buffer must still hold its own pattern now that all of them exist.
    let started = Instant::now();
    let failures = verify_all(&kernels, &buffers, o.chunk, std::ptr::null_mut());
    kv(&format!("{l}.verify_seconds"), format!("{:.2}", started.elapsed().as_secs_f64()));
    tally.record(
        &format!("{l}.cudaMalloc_verify"),
        failures.is_empty() && !buffers.is_empty(),
        if failures.is_empty() {
            format!("{} buffers checked on the GPU and read back", buffers.len())
        } else {
            failures.join("; ")
        },
    );

    // Host-to-device copies into the first and the last buffer (VRAM and, under the shim, T2).
    if let (Some(first), Some(last)) = (buffers.first(), buffers.last()) {
        let result = upload_and_check(&kernels, first.ptr, o.chunk, 0xC0FFEE)
            .map_err(|e| format!("first buffer ({:?}): {e}", first.placement))
            .and_then(|_| {
                upload_and_check(&kernels, last.ptr, o.chunk, 0xBEEF)
                    .map_err(|e| format!("last buffer ({:?}): {e}", last.placement))
            });
        tally.record(
            &format!("{l}.upload"),
            result.is_ok(),
            result.err().unwrap_or_else(|| {
                format!(
                    "{} uploaded into the first ({:?}) and last ({:?}) buffers and checked on the GPU",
                    gib(UPLOAD_WINDOW),
                    first.placement,
                    last.placement
                )
            }),
        );
    }

    // Free everything; a second free of the same pointer must be refused as CUDA refuses it.
    let mut free_errors = Vec::new();
    for (i, b) in buffers.iter().enumerate() {
        // SAFETY: each pointer was returned by cudaMalloc and is freed once.
        if let Err(e) = rt_check(&format!("cudaFree(buffer {i}, {:?})", b.placement), unsafe { rt::cudaFree(b.ptr) }) {
            free_errors.push(e);
        }
    }
    tally.record(
        &format!("{l}.cudaFree"),
        free_errors.is_empty(),
        if free_errors.is_empty() { format!("{} buffers freed", buffers.len()) } else { free_errors.join("; ") },
    );
    if let Some(last) = buffers.last() {
        // SAFETY: a pointer freed above; CUDA answers a second free with an error code.
        let e = unsafe { rt::cudaFree(last.ptr) };
        unsafe { rt::cudaGetLastError() };
        kv(&format!("{l}.double_free_code"), e as i32);
        tally.record(
            &format!("{l}.double_free"),
            e != rt::cudaError_t::cudaSuccess,
            format!("second cudaFree of a {:?} buffer returned {}", last.placement, rt_name(e)),
        );
    }
    let (end_free, _) = mem_get_info()?;
    kv(&format!("{l}.end_free"), end_free);

    if o.async_total > 0 {
        alloc_async(tally, o, &kernels)?;
    }
    Ok(())
}

/// cudaMallocAsync/cudaFreeAsync on a stream: `async_total` held at once, filled and checked
/// on the stream, freed stream-ordered.
fn alloc_async(tally: &mut Tally, o: &AllocOptions, kernels: &Kernels) -> Result<(), String> {
    let l = format!("{}.async", o.label);
    let mut stream: rt::cudaStream_t = std::ptr::null_mut();
    // SAFETY: out-parameter.
    rt_check("cudaStreamCreate", unsafe { rt::cudaStreamCreate(&mut stream) })?;
    let Held { mut buffers, alloc_error, stale } =
        allocate_and_fill(kernels, o.chunk, o.async_total, 0xA5A5_0000, stream, |ptr| {
            // SAFETY: out-parameter; stream is valid.
            unsafe { rt::cudaMallocAsync(ptr, o.chunk, stream) }
        })?;
    // SAFETY: stream is valid.
    rt_check("cudaStreamSynchronize", unsafe { rt::cudaStreamSynchronize(stream) })?;
    place_all(&mut buffers)?;
    let (vram, host, other) = placement_split(&buffers, o.chunk);
    kv(&format!("{l}.vram_bytes"), vram);
    kv(&format!("{l}.t2_bytes"), host);
    let held = buffers.len() * o.chunk;
    let gib = |b: usize| format!("{:.2} GiB", b as f64 / GIB as f64);
    let split = format!(
        "held {} in {} buffers: {} VRAM, {} T2, {} other (pool)",
        gib(held),
        buffers.len(),
        gib(vram),
        gib(host),
        gib(other)
    );
    record_stale_errors(tally, &format!("{l}.cudaMallocAsync_last_error"), "cudaMallocAsync", &stale);
    tally.record(
        &format!("{l}.cudaMallocAsync_total"),
        alloc_error.is_none(),
        format!("{split}{}", alloc_error.map(|e| format!("; stopped by {}", rt_name(e))).unwrap_or_default()),
    );
    match o.expect.as_str() {
        "t2" => {
            let ok = host > 0 && (o.budget == 0 || vram <= o.budget);
            tally.record(
                &format!("{l}.placement"),
                ok,
                format!(
                    "{split}; expected some in T2{}",
                    if o.budget > 0 { format!(", VRAM part within {}", gib(o.budget)) } else { String::new() }
                ),
            );
        }
        "vram" => tally.record(&format!("{l}.placement"), host == 0, format!("{split}; expected none in T2")),
        _ => {}
    }
    let failures = verify_all(kernels, &buffers, o.chunk, stream);
    tally.record(
        &format!("{l}.verify"),
        failures.is_empty() && !buffers.is_empty(),
        if failures.is_empty() {
            format!("{} buffers checked on the stream and read back", buffers.len())
        } else {
            failures.join("; ")
        },
    );
    let mut free_errors = Vec::new();
    for b in &buffers {
        // SAFETY: pointers from cudaMallocAsync, freed once, stream-ordered.
        if let Err(e) = rt_check("cudaFreeAsync", unsafe { rt::cudaFreeAsync(b.ptr, stream) }) {
            free_errors.push(e);
        }
    }
    // SAFETY: stream is valid; destroyed after its work is done.
    let sync = rt_check("cudaStreamSynchronize after frees", unsafe { rt::cudaStreamSynchronize(stream) });
    if let Err(e) = sync {
        free_errors.push(e);
    }
    unsafe { rt::cudaStreamDestroy(stream) };
    tally.record(
        &format!("{l}.cudaFreeAsync"),
        free_errors.is_empty(),
        if free_errors.is_empty() {
            format!("{} buffers freed stream-ordered", buffers.len())
        } else {
            free_errors.join("; ")
        },
    );
    Ok(())
}

/// CUDA_EXTERNAL_MEMORY_HANDLE_DESC with the handle type as a plain number, so that types
/// the headers do not name (DMABUF_FD = 9) can be asked for.
#[repr(C)]
struct ExternalMemoryHandleDesc {
    handle_type: u32,
    /// The handle union (fd, win32 pair, NvSciBuf object): 16 bytes, 8-aligned.
    handle: [u64; 2],
    size: u64,
    flags: u32,
    reserved: [u32; 16],
}

/// A DMA-BUF fd from /dev/udmabuf over a sealed memfd, or the memfd itself where the
/// kernel has no udmabuf; returns (fd, what it is).
fn probe_fd(size: usize) -> Result<(i32, &'static str), String> {
    #[repr(C)]
    struct UdmabufCreate {
        memfd: u32,
        flags: u32,
        offset: u64,
        size: u64,
    }
    /// _IOW('u', 0x42, struct udmabuf_create)
    const UDMABUF_CREATE: libc::c_ulong = 0x4018_7542;
    // SAFETY: plain system calls on fds this function owns.
    unsafe {
        let memfd = libc::memfd_create(c"gb-import-probe".as_ptr(), libc::MFD_ALLOW_SEALING);
        if memfd < 0
            || libc::ftruncate(memfd, size as libc::off_t) != 0
            || libc::fcntl(memfd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) != 0
        {
            return Err(format!("memfd: {}", std::io::Error::last_os_error()));
        }
        let udmabuf = libc::open(c"/dev/udmabuf".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if udmabuf >= 0 {
            let create = UdmabufCreate {
                memfd: memfd as u32,
                flags: 1, /* UDMABUF_FLAGS_CLOEXEC */
                offset: 0,
                size: size as u64,
            };
            let dmabuf = libc::ioctl(udmabuf, UDMABUF_CREATE, &create);
            libc::close(udmabuf);
            if dmabuf >= 0 {
                libc::close(memfd);
                return Ok((dmabuf, "udmabuf"));
            }
        }
        Ok((memfd, "memfd"))
    }
}

/// Asks the driver to import an fd as external memory with both handle types the kmod
/// backend tries, and prints the answers (the driver's behaviour, not a test of ours).
fn import_probe() -> Result<(), String> {
    init_runtime()?;
    type Import = unsafe extern "C" fn(*mut *mut c_void, *const ExternalMemoryHandleDesc) -> i32;
    // SAFETY: libcuda is loaded by cudarc; cuImportExternalMemory has this signature.
    let import: libloading::Symbol<Import> =
        unsafe { cu::culib().get(b"cuImportExternalMemory\0") }.map_err(|e| e.to_string())?;
    const SIZE: usize = 2 * MIB;
    for (label, handle_type) in [("dmabuf_fd", 9u32), ("opaque_fd", 1u32)] {
        let (fd, source) = probe_fd(SIZE)?;
        kv("import.source", source);
        let desc = ExternalMemoryHandleDesc {
            handle_type,
            handle: [fd as u64, 0],
            size: SIZE as u64,
            flags: 0,
            reserved: [0; 16],
        };
        let mut memory: *mut c_void = std::ptr::null_mut();
        // SAFETY: desc is a complete descriptor; on success the driver owns fd.
        let code = unsafe { import(&mut memory, &desc) };
        kv(&format!("import.{label}_code"), code);
        if code == 0 {
            // SAFETY: imported above.
            unsafe { cu::cuDestroyExternalMemory(memory.cast()) };
        } else {
            // SAFETY: the driver did not take the fd.
            unsafe { libc::close(fd) };
        }
    }
    Ok(())
}

/// CUmemAllocationProp with plain numbers, so that any location type can be asked for.
#[repr(C)]
#[derive(Clone, Copy)]
struct MemAllocationProp {
    allocation_type: u32,
    requested_handle_types: u32,
    location_type: u32,
    location_id: i32,
    win32_metadata: *mut c_void,
    compression_type: u8,
    gpu_direct_rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}

/// Which host locations the driver's virtual memory management accepts for a physical
/// allocation (what the shim's VMM fallback and PyTorch's expandable segments need), and a
/// kernel writing and checking one such allocation through a mapping.
fn vmm_host_probe(tally: &mut Tally) -> Result<(), String> {
    init_runtime()?;
    let kernels = Kernels::load()?;
    type Attribute = unsafe extern "C" fn(*mut i32, i32, i32) -> i32;
    type Create = unsafe extern "C" fn(*mut u64, usize, *const MemAllocationProp, u64) -> i32;
    type Granularity = unsafe extern "C" fn(*mut usize, *const MemAllocationProp, i32) -> i32;
    // SAFETY: libcuda is loaded by cudarc; these are the driver's signatures with enums as
    // plain integers.
    let lib = unsafe { cu::culib() };
    let (attribute, create, granularity) = unsafe {
        (
            lib.get::<Attribute>(b"cuDeviceGetAttribute\0").map_err(|e| e.to_string())?,
            lib.get::<Create>(b"cuMemCreate\0").map_err(|e| e.to_string())?,
            lib.get::<Granularity>(b"cuMemGetAllocationGranularity\0").map_err(|e| e.to_string())?,
        )
    };
    for (name, id) in [
        ("host_numa_id", 134),
        ("numa_id", 131),
        ("host_numa_vmm_supported", 141),
        ("host_vmm_supported", 145),
        ("vmm_supported", 102),
    ] {
        let mut value = -1;
        // SAFETY: out-parameter.
        let code = unsafe { attribute(&mut value, id, 0) };
        kv(&format!("vmm.attr.{name}"), if code == 0 { value.to_string() } else { format!("error{code}") });
    }
    let mut node = -1;
    // SAFETY: out-parameter.
    unsafe { attribute(&mut node, 134, 0) };
    let base = MemAllocationProp {
        allocation_type: 1, // CU_MEM_ALLOCATION_TYPE_PINNED
        requested_handle_types: 0,
        location_type: 0,
        location_id: 0,
        win32_metadata: std::ptr::null_mut(),
        compression_type: 0,
        gpu_direct_rdma_capable: 0,
        usage: 0,
        reserved: [0; 4],
    };
    let mut working = None;
    // (label, location type, id): HOST_NUMA on the device's node (0 when it has none),
    // HOST_NUMA_CURRENT, HOST (CUDA 13), DEVICE for comparison.
    for (label, location_type, id) in
        [("host_numa", 3u32, node.max(0)), ("host_numa_current", 4, 0), ("host", 2, 0), ("device", 1, 0)]
    {
        for (handles_label, handles) in [("none", 0u32), ("posix_fd", 1u32)] {
            let prop = MemAllocationProp { location_type, location_id: id, requested_handle_types: handles, ..base };
            let mut grain = 0usize;
            // SAFETY: out-parameter; 0 = CU_MEM_ALLOC_GRANULARITY_MINIMUM.
            let code = unsafe { granularity(&mut grain, &prop, 0) };
            let size = if code == 0 && grain > 0 { (64 * MIB).div_ceil(grain) * grain } else { 64 * MIB };
            let mut handle = 0u64;
            // SAFETY: a complete property struct; out-parameter.
            let code = unsafe { create(&mut handle, size, &prop, 0) };
            kv(&format!("vmm.create.{label}.{handles_label}"), format!("{code} (granularity {grain})"));
            if code == 0 {
                if working.is_none() && location_type != 1 {
                    working = Some((label, handle, size));
                } else {
                    // SAFETY: created above, never mapped.
                    unsafe { cu::cuMemRelease(handle) };
                }
            }
        }
    }
    let Some((label, handle, size)) = working else {
        tally.record(
            "vmm.host_kernel",
            false,
            "the driver created no host-located VMM allocation (see the vmm.create codes)",
        );
        return Ok(());
    };
    // Map it, give the device access, and write and check it with the kernels.
    let mut va: cu::CUdeviceptr = 0;
    // SAFETY: reserve, map and set access on the range created above; undone below.
    let result = unsafe {
        cu_check("cuMemAddressReserve", cu::cuMemAddressReserve(&mut va, size, 0, 0, 0))
            .and_then(|_| cu_check("cuMemMap", cu::cuMemMap(va, size, 0, handle, 0)))
            .and_then(|_| {
                let access = cu::CUmemAccessDesc {
                    location: cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: 0 },
                    flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                };
                cu_check("cuMemSetAccess", cu::cuMemSetAccess(va, size, &access, 1))
            })
            .and_then(|_| kernels.fill(va as *mut c_void, size, 0, 0x7777, std::ptr::null_mut()))
            .and_then(|_| kernels.check(va as *mut c_void, size, 0, 0x7777, std::ptr::null_mut()))
            .and_then(|(bad, _)| readback(va as *mut c_void, size, 0x7777).map(|_| bad))
    };
    let placement = placement(va as *mut c_void).map(|p| format!("{p:?}")).unwrap_or_else(|e| e);
    kv("vmm.host_pointer_memory_type", &placement);
    tally.record("vmm.host_kernel", matches!(result, Ok(0)), match &result {
        Ok(0) => format!("{label} allocation of {} mapped, written and checked by kernels, read back (pointer memory type {placement})", size / MIB),
        Ok(bad) => format!("{label}: {bad} elements differ"),
        Err(e) => format!("{label}: {e}"),
    });
    // SAFETY: undoing the mapping made above (each step tolerates the earlier ones failing).
    unsafe {
        cu::cuMemUnmap(va, size);
        cu::cuMemAddressFree(va, size);
        cu::cuMemRelease(handle);
    }
    Ok(())
}

/// Holds device memory until killed so that only `leave` bytes stay free for other processes.
fn balloon(leave: usize) -> Result<(), String> {
    init_runtime()?;
    let mut held = 0usize;
    let mut pointers = Vec::new();
    for step in [GIB, 256 * MIB, 32 * MIB] {
        loop {
            let (free, _) = mem_get_info()?;
            if free < leave + step {
                break;
            }
            let mut ptr: *mut c_void = std::ptr::null_mut();
            // SAFETY: out-parameter.
            rt_check("balloon cudaMalloc", unsafe { rt::cudaMalloc(&mut ptr, step) })?;
            pointers.push(ptr);
            held += step;
        }
    }
    let (free, _) = mem_get_info()?;
    println!("BALLOON held={held} free={free}");
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut tally = Tally { passed: 0, failed: 0 };
    let result = match args.first().map(String::as_str) {
        Some("report") => report(&mut tally),
        Some("alloc") => parse_alloc_options(&args[1..]).and_then(|o| alloc(&mut tally, &o)),
        Some("import") => import_probe(),
        Some("vmm") => vmm_host_probe(&mut tally),
        Some("balloon") => match args.get(1..3) {
            Some([flag, gib]) if flag == "--leave-gib" => gib.parse::<usize>().map_err(|e| e.to_string()).and_then(|g| balloon(g * GIB)),
            _ => Err("usage: gb-gpu-check balloon --leave-gib L".into()),
        },
        _ => Err("usage: gb-gpu-check report | alloc [options] | import | vmm | balloon --leave-gib L (see the source's header)".into()),
    };
    if let Err(e) = result {
        tally.record(&format!("{}.run", args.first().map(String::as_str).unwrap_or("gb-gpu-check")), false, e);
    }
    if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
