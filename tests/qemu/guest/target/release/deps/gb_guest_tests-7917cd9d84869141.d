/work/main/tests/qemu/guest/target/release/deps/gb_guest_tests-7917cd9d84869141.d: src/main.rs src/gb.rs src/harness.rs src/tests/mod.rs src/tests/access.rs src/tests/alloc.rs src/tests/attach.rs src/tests/fault.rs src/tests/cache.rs src/tests/charges.rs src/tests/fuzz.rs src/tests/held.rs src/tests/importer.rs src/tests/inject.rs src/tests/killable.rs src/tests/lifecycle.rs src/tests/mmap.rs src/tests/numa.rs src/tests/pin.rs src/tests/pressure.rs src/tests/stats.rs src/tests/stress.rs src/uring.rs

/work/main/tests/qemu/guest/target/release/deps/gb_guest_tests-7917cd9d84869141: src/main.rs src/gb.rs src/harness.rs src/tests/mod.rs src/tests/access.rs src/tests/alloc.rs src/tests/attach.rs src/tests/fault.rs src/tests/cache.rs src/tests/charges.rs src/tests/fuzz.rs src/tests/held.rs src/tests/importer.rs src/tests/inject.rs src/tests/killable.rs src/tests/lifecycle.rs src/tests/mmap.rs src/tests/numa.rs src/tests/pin.rs src/tests/pressure.rs src/tests/stats.rs src/tests/stress.rs src/uring.rs

src/main.rs:
src/gb.rs:
src/harness.rs:
src/tests/mod.rs:
src/tests/access.rs:
src/tests/alloc.rs:
src/tests/attach.rs:
src/tests/fault.rs:
src/tests/cache.rs:
src/tests/charges.rs:
src/tests/fuzz.rs:
src/tests/held.rs:
src/tests/importer.rs:
src/tests/inject.rs:
src/tests/killable.rs:
src/tests/lifecycle.rs:
src/tests/mmap.rs:
src/tests/numa.rs:
src/tests/pin.rs:
src/tests/pressure.rs:
src/tests/stats.rs:
src/tests/stress.rs:
src/uring.rs:
