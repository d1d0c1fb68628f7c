//! Fuzz target: see `cellar::fuzzing::key`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cellar::fuzzing::key(data));
