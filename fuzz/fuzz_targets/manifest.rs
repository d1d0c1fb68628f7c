//! Fuzz target: see `cellar::fuzzing::manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cellar::fuzzing::manifest(data));
