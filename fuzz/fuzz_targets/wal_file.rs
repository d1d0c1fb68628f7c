//! Fuzz target: see `cellar::fuzzing::wal_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cellar::fuzzing::wal_file(data));
