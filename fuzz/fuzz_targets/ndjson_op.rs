//! Fuzz target: see `cellar::fuzzing::ndjson_op`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cellar::fuzzing::ndjson_op(data));
