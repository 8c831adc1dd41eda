//! Ring configuration and the errors of setting a ring up.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::driver::UringDriver;

/// The default number of submission queue entries.
pub const DEFAULT_ENTRIES: u32 = 256;

/// How to set up a [`UringDriver`]'s ring. Made with [`UringConfig::new`], finished with
/// [`build`](UringConfig::build).
///
/// ```no_run
/// use spindle_io_uring::UringConfig;
///
/// let driver = UringConfig::new().entries(1024).build()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UringConfig {
    pub(crate) entries: u32,
    pub(crate) cq_entries: Option<u32>,
    pub(crate) sqpoll_idle: Option<Duration>,
    pub(crate) defer_taskrun: bool,
}

impl Default for UringConfig {
    fn default() -> Self {
        UringConfig::new()
    }
}

impl UringConfig {
    /// The defaults: [`DEFAULT_ENTRIES`] submission entries, a completion queue of twice that,
    /// no SQPOLL thread, deferred task running where the kernel has it.
    pub fn new() -> Self {
        UringConfig {
            entries: DEFAULT_ENTRIES,
            cq_entries: None,
            sqpoll_idle: None,
            defer_taskrun: true,
        }
    }

    /// The number of submission queue entries (a power of two is used, rounded up by the
    /// kernel; 1..=32768). More operations than this may be in flight: a full queue is flushed
    /// to the kernel and the push retried.
    #[must_use]
    pub fn entries(mut self, entries: u32) -> Self {
        self.entries = entries;
        self
    }

    /// The number of completion queue entries (default: twice [`entries`](Self::entries)).
    /// Completions beyond it are not lost: the kernel keeps them (`IORING_FEAT_NODROP`) until
    /// the queue has room.
    #[must_use]
    pub fn cq_entries(mut self, entries: u32) -> Self {
        self.cq_entries = Some(entries);
        self
    }

    /// Starts a kernel thread that polls the submission queue (`IORING_SETUP_SQPOLL`), going
    /// idle after `idle`. Off by default: it costs a busy kernel thread per worker. Turns
    /// [`defer_taskrun`](Self::defer_taskrun) off (the kernel does not allow both).
    #[must_use]
    pub fn sqpoll(mut self, idle: Option<Duration>) -> Self {
        self.sqpoll_idle = idle;
        if idle.is_some() {
            self.defer_taskrun = false;
        }
        self
    }

    /// Whether to run completion work only when the driver enters the kernel
    /// (`IORING_SETUP_DEFER_TASKRUN | SINGLE_ISSUER | TASKRUN_FLAG`, Linux 6.1+): completions are
    /// never delivered by interrupting the worker, only in its `park`. On by default; ignored
    /// (with a fallback to the plain mode) on kernels without it.
    #[must_use]
    pub fn defer_taskrun(mut self, on: bool) -> Self {
        self.defer_taskrun = on && self.sqpoll_idle.is_none();
        self
    }

    /// Sets the ring up on this thread (the driver is not `Send`: it belongs to the thread that
    /// made it).
    ///
    /// # Errors
    ///
    /// The ring could not be set up; the message says why (no io_uring in this kernel,
    /// forbidden by a seccomp profile or by `kernel.io_uring_disabled`, the locked-memory limit,
    /// bad parameters, the kernel too old for this driver) and that the runtime falls back to
    /// epoll. The error's [`get_ref`](io::Error::get_ref) is a [`SetupError`], which keeps the
    /// OS error code.
    pub fn build(&self) -> io::Result<UringDriver> {
        UringDriver::with_config(self)
    }
}

/// Why a ring could not be set up: the payload of the `io::Error` that
/// [`UringConfig::build`] and [`UringDriver::new`] return.
///
/// ```
/// use spindle_io_uring::{SetupError, UringConfig};
///
/// // More entries than the kernel allows: a clear error, never a panic.
/// let err = UringConfig::new().entries(1 << 30).build().unwrap_err();
/// let setup = err.get_ref().and_then(|e| e.downcast_ref::<SetupError>()).unwrap();
/// assert_eq!(setup.os_error(), Some(libc::EINVAL));
/// assert!(err.to_string().contains("falls back to epoll"));
/// ```
#[derive(Debug)]
pub struct SetupError {
    os_error: Option<i32>,
    message: String,
}

impl SetupError {
    /// The OS error code (`ENOSYS`, `EPERM`, `ENOMEM`, `EINVAL`...), if the failure came from a
    /// syscall.
    pub fn os_error(&self) -> Option<i32> {
        self.os_error
    }

    /// Wraps the failure of `what` (a syscall) into an `io::Error` of the same kind.
    pub(crate) fn from_os(what: &str, err: &io::Error, config: &UringConfig) -> io::Error {
        let code = err.raw_os_error();
        let why = match code {
            Some(libc::ENOSYS) => {
                "this kernel has no io_uring (ENOSYS: not built in, or hidden by a seccomp \
                 filter that answers ENOSYS)"
                    .to_string()
            }
            Some(libc::EPERM) => match io_uring_disabled() {
                Some(2) => "io_uring is disabled on this machine (sysctl kernel.io_uring_disabled \
                            = 2); set it to 0 to allow it"
                    .to_string(),
                Some(1) => "io_uring is restricted to the group in kernel.io_uring_group \
                            (sysctl kernel.io_uring_disabled = 1) and this process is not in it"
                    .to_string(),
                _ => "io_uring is forbidden for this process (EPERM): typically a container's \
                      seccomp profile (Docker's default one blocks io_uring_setup) or an LSM \
                      policy"
                    .to_string(),
            },
            Some(libc::ENOMEM) => format!(
                "not enough memory for a ring of {} entries (ENOMEM): without CAP_IPC_LOCK, \
                 rings count against the locked-memory limit (RLIMIT_MEMLOCK, now {}) on \
                 kernels before 5.12 and on recent ones (6.18 does); raise it (`ulimit -l`) \
                 or use fewer entries",
                config.entries,
                memlock_limit()
            ),
            Some(libc::EINVAL) => format!(
                "the kernel refused the ring parameters (EINVAL; entries = {}, cq_entries = \
                 {:?}, sqpoll = {:?}): entries must be 1..=32768 and cq_entries at least as \
                 many, up to 65536",
                config.entries, config.cq_entries, config.sqpoll_idle
            ),
            Some(libc::EMFILE | libc::ENFILE) => {
                "out of file descriptors (EMFILE/ENFILE): raise the limit (`ulimit -n`)".to_string()
            }
            _ => format!("{err}"),
        };
        io::Error::new(
            err.kind(),
            SetupError {
                os_error: code,
                message: format!("io_uring driver: {what} failed: {why}"),
            },
        )
    }

    /// The kernel lacks something this driver needs.
    pub(crate) fn too_old(what: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::Unsupported,
            SetupError {
                os_error: None,
                message: format!(
                    "io_uring driver: this kernel's io_uring lacks {what} (Linux 5.11 or newer is \
                     needed)"
                ),
            },
        )
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; with the default IO choice (IoBackend::Auto) the runtime falls back to epoll",
            self.message
        )
    }
}

impl std::error::Error for SetupError {}

/// `/proc/sys/kernel/io_uring_disabled` (Linux 6.6+), if readable.
fn io_uring_disabled() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The soft RLIMIT_MEMLOCK, for messages.
fn memlock_limit() -> String {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` into `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return "unknown".to_string();
    }
    if limit.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        format!("{} KiB", limit.rlim_cur / 1024)
    }
}
