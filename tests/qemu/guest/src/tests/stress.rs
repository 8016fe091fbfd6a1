//! 4 processes x 8 threads allocating, mapping, writing, verifying, passing buffers
//! between threads and freeing, for a fixed time; then the pool must be back at its
//! baseline and every buffer must have held exactly what its owner wrote.

use crate::gb::*;
use crate::harness::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PROCESSES: usize = 4;
const THREADS: usize = 8;

fn seconds() -> u64 {
    std::env::var("GB_STRESS_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10)
}

#[derive(Default)]
struct Counters {
    allocs: AtomicU64,
    enomem: AtomicU64,
    handoffs: AtomicU64,
}

fn worker(dev: &Dev, seed: u64, deadline: Instant, shared: &Mutex<Vec<(Buffer, u64)>>, c: &Counters) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let pg = page_size();
    let mut held: Vec<(Buffer, Mapping, u64)> = Vec::new();
    while Instant::now() < deadline {
        match rng.below(10) {
            0..=4 => {
                // 1 page to 4 MiB, often not page-aligned.
                let size = 1 + rng.below(4 << 20);
                match dev.try_alloc(size) {
                    Ok(b) => {
                        c.allocs.fetch_add(1, Ordering::Relaxed);
                        if b.size != round_up(size, pg) {
                            return Err(format!("ALLOC({size}) gave {}", b.size));
                        }
                        let m = b.map()?;
                        if let Err(e) = m.verify_zero(page_words()) {
                            return Err(format!("fresh buffer {}: {e}", b.id));
                        }
                        let tag = rng.next();
                        m.fill(tag, 61);
                        held.push((b, m, tag));
                    }
                    // Many threads at once can legitimately reach the cap or reserve.
                    Err(libc::ENOMEM) => {
                        c.enomem.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => return Err(format!("ALLOC({size}): {}", errname(e))),
                }
            }
            5..=6 if !held.is_empty() => {
                let i = rng.below(held.len() as u64) as usize;
                let (b, m, tag) = held.swap_remove(i);
                m.verify(tag, 61).map_err(|e| format!("buffer {} before free: {e}", b.id))?;
            }
            7 if !held.is_empty() => {
                // Hand a buffer (fd only) to another thread of this process.
                let (b, m, tag) = held.swap_remove(0);
                drop(m);
                shared.lock().unwrap().push((b, tag));
            }
            8 => {
                let taken = shared.lock().unwrap().pop();
                if let Some((b, tag)) = taken {
                    c.handoffs.fetch_add(1, Ordering::Relaxed);
                    let m = b.map()?;
                    m.verify(tag, 61).map_err(|e| format!("handed-over buffer {}: {e}", b.id))?;
                    held.push((b, m, tag));
                }
            }
            _ => {
                dev.pool()?;
                dev.proc_stats()?;
            }
        }
        if held.len() > 6 {
            let (b, m, tag) = held.remove(0);
            m.verify(tag, 61).map_err(|e| format!("buffer {}: {e}", b.id))?;
        }
    }
    for (b, m, tag) in held {
        m.verify(tag, 61).map_err(|e| format!("buffer {} at the end: {e}", b.id))?;
    }
    Ok(())
}

fn process(index: usize, secs: u64) -> i32 {
    let run = || -> Result<String, String> {
        let dev = Arc::new(Dev::open()?);
        let deadline = Instant::now() + Duration::from_secs(secs);
        let shared = Arc::new(Mutex::new(Vec::new()));
        let counters = Arc::new(Counters::default());
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (dev, shared, counters) = (dev.clone(), shared.clone(), counters.clone());
                std::thread::spawn(move || worker(&dev, (index * THREADS + t) as u64 * 7919 + 1, deadline, &shared, &counters))
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "worker thread panicked".to_string())??;
        }
        shared.lock().unwrap().clear();
        Ok(format!(
            "process {index}: {} allocs, {} ENOMEM, {} hand-offs",
            counters.allocs.load(Ordering::Relaxed),
            counters.enomem.load(Ordering::Relaxed),
            counters.handoffs.load(Ordering::Relaxed)
        ))
    };
    match run() {
        Ok(s) => {
            note(&s);
            0
        }
        Err(e) => {
            note(&format!("process {index}: {e}"));
            1
        }
    }
}

pub fn concurrent_stress() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let secs = seconds();
    let mut kids: Vec<Child> = (0..PROCESSES).map(|i| Child::spawn(move || process(i, secs))).collect();
    let mut failures = Vec::new();
    for (i, k) in kids.iter_mut().enumerate() {
        if let Some(d) = k.wait_timeout(Duration::from_secs(secs * 20 + 60)).map(describe_status).unwrap_or(Some("hung".into())) {
            failures.push(format!("process {i} {d}"));
        }
    }
    ensure(failures.is_empty(), || failures.join("; "))?;
    let st = dev.pool()?;
    ensure(st.allocs > base.allocs + PROCESSES as u64, || format!("only {} allocations in {secs} s", st.allocs - base.allocs))?;
    dev.settle_to(&base, Duration::from_secs(10))?;
    note(&format!("{} allocations, {} refused, in {PROCESSES}x{THREADS} threads over {secs} s", st.allocs - base.allocs, st.alloc_failures - base.alloc_failures));
    Ok(Outcome::Pass)
}
