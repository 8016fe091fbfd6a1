/work/main/tests/qemu/guest/target/release/deps/greenboost_abi-d2143e1a7bc9b71f.d: /work/main/abi/src/lib.rs /work/main/abi/src/greenboost_abi.rs

/work/main/tests/qemu/guest/target/release/deps/libgreenboost_abi-d2143e1a7bc9b71f.rlib: /work/main/abi/src/lib.rs /work/main/abi/src/greenboost_abi.rs

/work/main/tests/qemu/guest/target/release/deps/libgreenboost_abi-d2143e1a7bc9b71f.rmeta: /work/main/abi/src/lib.rs /work/main/abi/src/greenboost_abi.rs

/work/main/abi/src/lib.rs:
/work/main/abi/src/greenboost_abi.rs:
