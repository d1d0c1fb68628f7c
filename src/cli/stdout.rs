//! Standard output for everything the CLI prints, and what a closed pipe
//! means.
//!
//! Invariant: every result the CLI prints goes through [`Stdout`] (never
//! `println!`, which panics on a closed pipe). A write that finds the
//! reader gone (`EPIPE`: `cellar scan t | head`) marks the output closed;
//! [`closed`] then tells `cli::main` to end quietly with status 0, whatever
//! error the failed write became on its way up (a CSV writer's, say), as a
//! Unix filter does when the reader has what it wanted. Commands that
//! change data decide for themselves whether to stop (`cellar write`
//! applies its whole input either way).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// True once a write to standard output found its reader gone.
pub(crate) fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Standard output, locked; notes a closed pipe (see the module doc).
pub(crate) struct Stdout(std::io::StdoutLock<'static>);

/// Standard output for results.
pub(crate) fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

fn noted<T>(r: std::io::Result<T>) -> std::io::Result<T> {
    if let Err(e) = &r
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        CLOSED.store(true, Ordering::Relaxed);
    }
    r
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        noted(self.0.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        noted(self.0.write_all(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        noted(self.0.flush())
    }
}
