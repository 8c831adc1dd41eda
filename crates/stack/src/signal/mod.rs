//! The fault handler: overflow messages, growable-stack growth, and chaining to whoever
//! handled `SIGSEGV`/`SIGBUS` before us; plus [`prepare_thread`], which gives a thread the
//! alternate signal stack the handler runs on. Windows: a vectored exception handler.

#[cfg(unix)]
mod altstack;
#[cfg(unix)]
mod unix;

#[cfg(unix)]
pub use altstack::prepare_thread;
#[cfg(unix)]
pub(crate) use unix::install_fault_handler;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::install_fault_handler;
#[cfg(windows)]
pub use windows::prepare_thread;
