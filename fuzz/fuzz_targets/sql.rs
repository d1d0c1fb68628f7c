//! Fuzz target: see `cellar::fuzzing::sql`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cellar::fuzzing::sql(data));
