//! `alloc` and `balloon`: allocating past the budget through cudaMalloc and
//! cudaMallocAsync, writing and verifying with the kernels; holding plain memory for the
//! other tests.

use super::*;

pub(crate) struct AllocOptions {
    pub(crate) label: String,
    pub(crate) total: usize,
    pub(crate) chunk: usize,
    pub(crate) async_total: usize,
    pub(crate) budget: usize,
    pub(crate) t2_cap: usize,
    pub(crate) expect: String,
}

pub(crate) fn parse_alloc_options(args: &[String]) -> Result<AllocOptions, String> {
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

pub(crate) struct Buffer {
    pub(crate) ptr: *mut c_void,
    pub(crate) seed: u32,
    pub(crate) placement: Placement,
}

pub(crate) fn placement_split(buffers: &[Buffer], chunk: usize) -> (usize, usize, usize) {
    let count = |p: fn(&Placement) -> bool| buffers.iter().filter(|b| p(&b.placement)).count() * chunk;
    (count(|p| *p == Placement::Vram), count(|p| *p == Placement::Host), count(|p| matches!(p, Placement::Other(_))))
}

/// Checks every buffer on the GPU and reads windows of each back; returns the failures.
pub(crate) fn verify_all(kernels: &Kernels, buffers: &[Buffer], chunk: usize, stream: rt::cudaStream_t) -> Vec<String> {
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
pub(crate) struct Held {
    pub(crate) buffers: Vec<Buffer>,
    /// What stopped the allocations short of `total` (the runtime error is cleared).
    pub(crate) alloc_error: Option<rt::cudaError_t>,
    /// (buffer index, error) for each successful allocation that left an error pending.
    pub(crate) stale: Vec<(usize, rt::cudaError_t)>,
}

/// `chunk`-byte buffers from `allocate` until `total` bytes are held or it fails, each filled
/// on `stream` as it arrives (seed `seed_base` + its index). Placements are found once the
/// caller has synchronised ([`place_all`]).
pub(crate) fn allocate_and_fill(
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

/// Asks where each buffer (of `chunk` bytes) lives.
pub(crate) fn place_all(buffers: &mut [Buffer], chunk: usize) -> Result<(), String> {
    for b in buffers {
        b.placement = placement(b.ptr, chunk)?;
    }
    Ok(())
}

pub(crate) fn alloc(tally: &mut Tally, o: &AllocOptions) -> Result<(), String> {
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
    place_all(&mut buffers, o.chunk)?;
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
pub(crate) fn alloc_async(tally: &mut Tally, o: &AllocOptions, kernels: &Kernels) -> Result<(), String> {
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
    place_all(&mut buffers, o.chunk)?;
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

/// Holds device memory until killed so that only `leave` bytes stay free for other processes.
pub(crate) fn balloon(leave: usize) -> Result<(), String> {
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
