//! `driver_call!`: how `calls` and `device_facts` call the driver's own functions.

/// Calls a real driver function or answers CUDA_ERROR_NOT_INITIALIZED when it is missing.
/// `$why` is the SAFETY argument of this very call, written at the call site.
macro_rules! driver_call {
    ($function:ident($($arg:expr),*), $why:literal) => {{
        let _why: &str = $why;
        match real::$function() {
            // SAFETY: `real` resolved the driver's own function with this C signature, and
            // the arguments are sound for it for the reason `$why` gives at the call site:
            // values the driver validates itself, or pointers to live locals or to ranges
            // the caller guarantees.
            Some(function) => unsafe { function($($arg),*) },
            None => CuResult::NOT_INITIALIZED,
        }
    }};
}
