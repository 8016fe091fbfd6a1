//! The few CUDA driver entry points `demo` uses, loaded at run time from the driver's
//! `libcuda.so.1` (so the CLI runs, and explains itself, where there is no driver).
//! Under the shim these lookups go through its `dlsym`, exactly as an application's do.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use libloading::Library;

pub type CuResult = c_int;
pub type DevicePtr = u64;
type Handle = *mut c_void;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
pub const CU_MEMORYTYPE_HOST: c_uint = 1;
pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;

macro_rules! driver_api {
    ($($name:ident: fn($($arg:ty),*);)*) => {
        /// Resolved driver functions; the library stays loaded as long as this lives.
        #[allow(non_snake_case)]
        pub struct Cuda {
            $($name: unsafe extern "C" fn($($arg),*) -> CuResult,)*
            _library: Library,
        }

        impl Cuda {
            fn resolve(library: Library) -> Result<Cuda, String> {
                // SAFETY: each symbol is declared with the driver API's C prototype
                // (cuda.h); the pointers stay valid while `_library` is held.
                unsafe {
                    Ok(Cuda {
                        $($name: *library
                            .get::<unsafe extern "C" fn($($arg),*) -> CuResult>(concat!(stringify!($name), "\0").as_bytes())
                            .map_err(|e| format!("the CUDA driver library lacks {}: {e}; update the NVIDIA driver", stringify!($name)))?,)*
                        _library: library,
                    })
                }
            }
        }
    };
}

driver_api! {
    cuInit: fn(c_uint);
    cuDeviceGetCount: fn(*mut c_int);
    cuDeviceGet: fn(*mut c_int, c_int);
    cuDeviceGetName: fn(*mut c_char, c_int, c_int);
    cuDeviceTotalMem_v2: fn(*mut usize, c_int);
    cuDeviceGetAttribute: fn(*mut c_int, c_int, c_int);
    cuDevicePrimaryCtxRetain: fn(*mut Handle, c_int);
    cuCtxSetCurrent: fn(Handle);
    cuCtxSynchronize: fn();
    cuModuleLoadData: fn(*mut Handle, *const c_void);
    cuModuleGetFunction: fn(*mut Handle, Handle, *const c_char);
    cuLaunchKernel: fn(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut *mut c_void, *mut *mut c_void);
    cuMemAlloc_v2: fn(*mut DevicePtr, usize);
    cuMemFree_v2: fn(DevicePtr);
    cuMemGetInfo_v2: fn(*mut usize, *mut usize);
    cuMemcpyDtoH_v2: fn(*mut c_void, DevicePtr, usize);
    cuMemsetD8_v2: fn(DevicePtr, u8, usize);
    cuPointerGetAttribute: fn(*mut c_void, c_int, DevicePtr);
    cuGetErrorName: fn(CuResult, *mut *const c_char);
}

/// A CUDA error as the driver names it, with what we were doing.
pub struct CudaError {
    pub code: CuResult,
    pub message: String,
}

pub struct Device {
    pub ordinal: c_int,
    pub name: String,
    pub total_memory: u64,
    pub multiprocessors: u32,
}

impl Cuda {
    /// Loads the driver library (`GREENBOOST_CUDA_LIBRARY` overrides the name, for tests).
    pub fn load() -> Result<Cuda, String> {
        let name = std::env::var_os("GREENBOOST_CUDA_LIBRARY").unwrap_or_else(|| "libcuda.so.1".into());
        // SAFETY: loading the CUDA driver library runs its initialisers, as any CUDA
        // program does.
        let library =
            unsafe { Library::new(&name) }.map_err(|e| format!("{} cannot be loaded ({e})", name.to_string_lossy()))?;
        Cuda::resolve(library)
    }

    pub fn check(&self, code: CuResult, what: &str) -> Result<(), CudaError> {
        if code == CUDA_SUCCESS {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string or leaves it null.
        let known = unsafe { (self.cuGetErrorName)(code, &mut name) } == CUDA_SUCCESS && !name.is_null();
        let name = if known {
            // SAFETY: the driver returned a NUL-terminated static string.
            unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
        } else {
            format!("CUDA error {code}")
        };
        Err(CudaError { code, message: format!("{what} failed: {name}") })
    }

    /// `cuInit` and the first device, as the driver describes it.
    pub fn first_device(&self) -> Result<Device, CudaError> {
        // SAFETY: in every call below, the out-pointers are valid locals of the declared
        // types, and the name buffer's length is passed alongside it.
        unsafe {
            self.check((self.cuInit)(0), "cuInit")?;
            let mut count = 0;
            self.check((self.cuDeviceGetCount)(&mut count), "cuDeviceGetCount")?;
            if count == 0 {
                return Err(CudaError { code: 100, message: "the driver sees no CUDA device".into() });
            }
            let mut ordinal = 0;
            self.check((self.cuDeviceGet)(&mut ordinal, 0), "cuDeviceGet")?;
            let mut name = [0 as c_char; 128];
            self.check((self.cuDeviceGetName)(name.as_mut_ptr(), name.len() as c_int, ordinal), "cuDeviceGetName")?;
            let mut total = 0usize;
            self.check((self.cuDeviceTotalMem_v2)(&mut total, ordinal), "cuDeviceTotalMem_v2")?;
            let mut multiprocessors = 0;
            self.check(
                (self.cuDeviceGetAttribute)(&mut multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ordinal),
                "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
            )?;
            Ok(Device {
                ordinal,
                name: CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
                total_memory: total as u64,
                multiprocessors: multiprocessors.max(1) as u32,
            })
        }
    }

    /// Makes the device's primary context current on this thread.
    pub fn use_device(&self, device: &Device) -> Result<(), CudaError> {
        let mut context: Handle = std::ptr::null_mut();
        // SAFETY: `context` is a valid out-pointer; the retained context stays alive
        // for the process (the demo never releases it).
        unsafe {
            self.check((self.cuDevicePrimaryCtxRetain)(&mut context, device.ordinal), "cuDevicePrimaryCtxRetain")?;
            self.check((self.cuCtxSetCurrent)(context), "cuCtxSetCurrent")
        }
    }

    /// Loads PTX text and returns the named kernels.
    pub fn load_kernels<const N: usize>(&self, ptx: &CStr, names: [&CStr; N]) -> Result<[Handle; N], CudaError> {
        let mut module: Handle = std::ptr::null_mut();
        // SAFETY: `ptx` is NUL-terminated PTX text; out-pointers are valid.
        unsafe {
            self.check(
                (self.cuModuleLoadData)(&mut module, ptx.as_ptr().cast()),
                "cuModuleLoadData (JIT of the demo kernels)",
            )?;
            let mut functions = [std::ptr::null_mut(); N];
            for (function, name) in functions.iter_mut().zip(names) {
                self.check((self.cuModuleGetFunction)(function, module, name.as_ptr()), "cuModuleGetFunction")?;
            }
            Ok(functions)
        }
    }

    pub fn alloc(&self, size: u64) -> Result<DevicePtr, CudaError> {
        let mut pointer: DevicePtr = 0;
        // SAFETY: `pointer` is a valid out-pointer.
        self.check(unsafe { (self.cuMemAlloc_v2)(&mut pointer, size as usize) }, "cuMemAlloc_v2")?;
        Ok(pointer)
    }

    pub fn free(&self, pointer: DevicePtr) -> Result<(), CudaError> {
        // SAFETY: `pointer` came from `alloc` and is freed once.
        self.check(unsafe { (self.cuMemFree_v2)(pointer) }, "cuMemFree_v2")
    }

    pub fn memset(&self, pointer: DevicePtr, value: u8, size: u64) -> Result<(), CudaError> {
        // SAFETY: `pointer..pointer+size` lies inside one allocation of ours.
        self.check(unsafe { (self.cuMemsetD8_v2)(pointer, value, size as usize) }, "cuMemsetD8_v2")
    }

    pub fn copy_to_host(&self, destination: &mut [u8], source: DevicePtr) -> Result<(), CudaError> {
        // SAFETY: `destination` is writable for its length; `source` lies inside one
        // allocation of ours with at least that many bytes.
        self.check(
            unsafe { (self.cuMemcpyDtoH_v2)(destination.as_mut_ptr().cast(), source, destination.len()) },
            "cuMemcpyDtoH_v2",
        )
    }

    /// `(free, total)` device memory as the (possibly shimmed) driver reports it.
    pub fn memory_info(&self) -> Result<(u64, u64), CudaError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        self.check(unsafe { (self.cuMemGetInfo_v2)(&mut free, &mut total) }, "cuMemGetInfo_v2")?;
        Ok((free as u64, total as u64))
    }

    /// CU_MEMORYTYPE_DEVICE for VRAM, CU_MEMORYTYPE_HOST for mapped host memory (T2).
    pub fn memory_type(&self, pointer: DevicePtr) -> Result<c_uint, CudaError> {
        let mut kind: c_uint = 0;
        // SAFETY: MEMORY_TYPE writes one unsigned int, into `kind`.
        let rc = unsafe {
            (self.cuPointerGetAttribute)((&mut kind as *mut c_uint).cast(), CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pointer)
        };
        self.check(rc, "cuPointerGetAttribute(MEMORY_TYPE)")?;
        Ok(kind)
    }

    /// Launches a 1-D grid with the given parameter pointers and waits for it.
    pub fn launch_and_wait(
        &self,
        function: Handle,
        blocks: u32,
        threads: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        // SAFETY: `params` holds one pointer per kernel parameter, each pointing at a
        // live value of the parameter's type (the callers build them from locals).
        unsafe {
            self.check(
                (self.cuLaunchKernel)(
                    function,
                    blocks,
                    1,
                    1,
                    threads,
                    1,
                    1,
                    0,
                    std::ptr::null_mut(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
                "cuLaunchKernel",
            )?;
            self.check((self.cuCtxSynchronize)(), "cuCtxSynchronize (kernel execution)")
        }
    }
}
