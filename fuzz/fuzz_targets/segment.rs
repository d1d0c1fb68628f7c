//! Fuzz target: see `cellar::fuzzing::segment`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cellar::fuzzing::segment(data));
