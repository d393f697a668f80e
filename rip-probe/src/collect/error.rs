//! What can fail while collecting: the process (discover's errors), the
//! kernel (BPF, tracefs, BTF, uprobes) and the process's ring files.

/// Why collecting failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process cannot be observed.
    #[error(transparent)]
    Discover(#[from] crate::discover::Error),
    /// The kernel cannot be observed as asked.
    #[error(transparent)]
    Kernel(#[from] super::kernel::Error),
    /// A ring file could not be read (librip's reader says why).
    #[error(transparent)]
    Ring(#[from] librip::reader::ReadError),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
