//! gb-guest-tests: the in-guest half of the QEMU module suite (`make kmod-test`).
//!
//! tests/qemu/guest-suite.sh loads greenboost.ko with the parameters each subcommand
//! expects and runs it. Every test prints `PASS name`, `FAIL name: reason` or
//! `SKIP name: reason`; each subcommand ends with `N passed, M failed` and exits
//! non-zero on a failure. Subcommands:
//!
//!   all                    every test that runs on one module load (see `MAIN`)
//!   run NAME               one test of any list
//!   list                   names of all tests
//!   reserve-refusal        with the module loaded with a reserve above RAM
//!   check-unload-log       after rmmod: the final stats line is in dmesg
//!   t3-noswap, t3          the t3 guest's tests, before and after `swapon`
//!   hold-buffer SIZE       allocate, map, print `HOLDING id size`, sleep until killed
//!
//! Environment: GB_STRESS_SECONDS (default 10), GB_FUZZ_SEED.

mod gb;
mod harness;
mod tests;
mod uring;

use harness::{run_tests, Test, TestResult};
use std::time::Duration;
use tests::*;

const fn t(name: &'static str, secs: u64, run: fn() -> TestResult) -> Test {
    Test { name, limit: Duration::from_secs(secs), run }
}

/// Tests for one module load with guest-suite.sh's main parameters (a cap above RAM, a
/// small reserve, parameters writable at run time).
const MAIN: &[Test] = &[
    t("abi_version", 30, alloc::abi_version),
    t("device_node_mode", 30, alloc::device_node_mode),
    t("dmesg_load_banner", 30, stats::dmesg_banner),
    t("alloc_size_zero_einval", 30, alloc::alloc_size_zero),
    t("alloc_readonly_open_ebadf", 30, access::readonly_open_cannot_alloc),
    t("alloc_unaligned_rounded_up", 60, alloc::alloc_unaligned),
    t("alloc_one_page", 30, alloc::alloc_one_page),
    t("alloc_2mib", 30, alloc::alloc_2mib),
    t("alloc_1gib", 600, alloc::alloc_1gib),
    t("alloc_over_cap_enomem", 60, alloc::alloc_over_cap),
    t("alloc_over_ram_enomem", 120, alloc::alloc_over_ram),
    t("alloc_bad_fields_einval", 30, alloc::alloc_bad_fields),
    t("bad_pointers_efault", 30, alloc::bad_pointers),
    t("unknown_ioctls_enotty", 30, alloc::unknown_ioctls),
    t("register_eventfd_errors", 30, alloc::register_eventfd_errors),
    t("report_t1", 30, alloc::report_t1),
    t("proc_stats", 30, alloc::proc_stats),
    t("mmap_bounds", 30, mmap::mmap_bounds),
    t("mmap_vma_flags", 30, mmap::mmap_vma_flags),
    t("mmap_shared_views", 60, mmap::mmap_shared_views),
    t("buffer_outlives_fds", 30, mmap::buffer_lifetime),
    t("mmap_dontneed_refaults_and_pins", 60, fault::dontneed_refaults),
    t("mmap_split_move_fork", 60, fault::split_move_fork),
    t("madvise_cold_partial_chunk", 60, fault::madvise_cold_partial_chunk),
    t("remap_and_remove_refused", 30, fault::remap_and_remove_refused),
    t("fresh_pages_zeroed_after_secret", 600, mmap::fresh_pages_zeroed),
    t("scm_rights_fd_passing", 60, lifecycle::scm_rights),
    t("fork_inherited_fd", 60, lifecycle::fork_inherit),
    t("close_releases_to_baseline", 30, lifecycle::close_releases),
    t("kill9_releases_to_baseline", 60, lifecycle::kill9_releases),
    t("dmabuf_sync_ioctl", 30, fuzz::dmabuf_sync),
    t("importer_sg_table", 60, importer::importer_sg_table),
    t("importer_vmap_large", 120, importer::importer_vmap_large),
    t("importer_segments_within_limits", 60, attach::segments_within_limits),
    t("importer_attachments_and_cpu_syncs", 60, attach::attachments_and_cpu_syncs),
    t("importer_held_past_close", 120, attach::held_past_close),
    t("importer_map_twice_ebusy", 30, importer::importer_map_twice),
    t("longterm_pin_io_uring_odirect", 120, pin::longterm_pin_io_uring),
    t("pinned_pages_not_recycled", 120, pin::pinned_pages_not_recycled),
    t("vmsplice_keeps_charge", 60, held::vmsplice_keeps_charge),
    t("kill9_uring_pinned_released", 60, held::kill9_uring_pinned_released),
    t("held_chunks_charge_their_user", 60, held::held_chunks_charge_their_user),
    t("alloc_sigkill_stops", 180, killable::alloc_sigkill_stops),
    t("peak_ignores_allocs_in_flight", 180, killable::peak_ignores_allocs_in_flight),
    t("reserve_concurrent_allocs", 240, killable::reserve_concurrent_allocs),
    t("alloc_fault_injection_enomem", 120, inject::alloc_fault_injection_enomem),
    t("alloc_fail_nth_sweep", 600, inject::alloc_fail_nth_sweep),
    t("alloc_lower_order_fallback", 120, inject::alloc_lower_order_fallback),
    t("numa_strict_placement", 120, numa::numa_placement),
    t("numa_memoryless_node", 30, numa::numa_memoryless_node),
    t("sysfs_stats", 30, stats::sysfs_stats),
    t("proc_rows_only_through_device", 60, access::proc_rows_visibility),
    t("dmesg_on_demand_report", 30, stats::dmesg_report),
    t("pool_cap_cumulative", 60, pressure::pool_cap_cumulative),
    t("uid_cap", 60, pressure::uid_cap),
    t("uid_buffer_limit", 60, limits::uid_buffer_limit),
    t("refusals_do_not_rearm_watchdog", 60, cache::refusals_do_not_rearm_watchdog),
    t("cache_shrinker", 60, cache::cache_shrinker),
    t("cap_holds_with_cache_on_another_node", 90, cache::cap_holds_with_cache_on_another_node),
    t("memcg_limit", 120, charges::memcg_limit),
    t("memlock_unprivileged", 60, charges::memlock_unprivileged),
    t("concurrent_4x8_stress", 900, stress::concurrent_stress),
    t("random_ioctls_12000", 900, fuzz::random_ioctls),
    t("pressure_eventfd", 180, pressure::pressure_eventfd),
    t("eventfd_crossings_race", 120, pressure::eventfd_crossings_race),
];

const RESERVE: &[Test] = &[t("reserve_above_ram_refuses", 60, pressure::reserve_above_ram)];
/// The t3 guest (little RAM, an NVMe disk for swap), before `swapon`.
const T3_NOSWAP: &[Test] = &[
    t("t3_needs_swap", 30, t3::t3_needs_swap),
    t("pressure_rule_no_swap", 180, t3_pressure::pressure_rule_no_swap),
];
/// The t3 guest with the NVMe swap on.
const T3: &[Test] = &[
    t("t3_swap_is_nvme", 30, t3_pressure::swap_is_nvme),
    t("t3_demote_promote", 120, t3::t3_demote_promote),
    t("t3_move_refusals", 60, t3::t3_move_refusals),
    t("t3_status_agrees", 60, t3::t3_status_agrees),
    t("t3_larger_than_ram", 300, t3::t3_larger_than_ram),
    t("t3_kill9_holder", 180, t3::t3_kill9_holder),
    t("t3_fault_behind_move_killable", 120, move_wait::fault_behind_move_killable),
    t("t3_importer_map_twice_ebusy", 30, importer::t3_importer_map_twice),
    t("t3_uid_t3_cap", 60, limits::uid_t3_cap),
    t("t3_pins_within_limits", 120, limits::t3_pins_within_limits),
    t("pressure_rule_with_swap", 300, t3_pressure::pressure_rule_with_swap),
];
const UNLOAD: &[Test] = &[t("unload_final_stats_logged", 30, stats::unload_logged)];

fn summary(tally: harness::Tally) -> i32 {
    println!("{} passed, {} failed", tally.passed, tally.failed);
    i32::from(tally.failed != 0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let all = || MAIN.iter().chain(RESERVE).chain(UNLOAD).chain(T3_NOSWAP).chain(T3);
    let code = match args.first().map(String::as_str) {
        Some("all") => summary(run_tests(MAIN, None)),
        Some("reserve-refusal") => summary(run_tests(RESERVE, None)),
        Some("check-unload-log") => summary(run_tests(UNLOAD, None)),
        Some("t3-noswap") => summary(run_tests(T3_NOSWAP, None)),
        Some("t3") => summary(run_tests(T3, None)),
        Some("run") if args.len() == 2 => match all().find(|t| t.name == args[1]) {
            Some(test) => summary(run_tests(std::slice::from_ref(test), None)),
            None => {
                eprintln!("no test named {}", args[1]);
                2
            }
        },
        Some("list") => {
            all().for_each(|t| println!("{}", t.name));
            0
        }
        Some("hold-buffer") if args.len() == 2 => match args[1].parse() {
            Ok(size) => tests::lifecycle::hold_buffer(size),
            Err(_) => {
                eprintln!("hold-buffer: SIZE must be a byte count");
                2
            }
        },
        _ => {
            eprintln!("usage: gb-guest-tests all | run NAME | list | reserve-refusal | check-unload-log | t3-noswap | t3 | hold-buffer SIZE");
            2
        }
    };
    std::process::exit(code);
}
