//! Cellar's integration tests: one binary, one module per behaviour.

mod archive;
mod bad_input;
mod cli;
mod common;
mod compaction;
mod concurrency;
mod corruption;
mod crash;
mod disk_full;
mod export;
mod faults;
mod filters;
mod fuzz_corpus;
mod golden;
mod model;
mod ordering;
mod power_loss;
mod recovery;
mod s3_server;
mod segments;
mod series;
mod sql;
mod torture;
mod values;
mod visibility;
mod write_order;
