/work/main/tests/qemu/guest/target/release/deps/greenboost_abi-eae6fe613a0671e5.d: /work/main/abi/src/lib.rs /work/main/abi/src/greenboost_abi.rs

/work/main/tests/qemu/guest/target/release/deps/libgreenboost_abi-eae6fe613a0671e5.rmeta: /work/main/abi/src/lib.rs /work/main/abi/src/greenboost_abi.rs

/work/main/abi/src/lib.rs:
/work/main/abi/src/greenboost_abi.rs:
