//! The IO driver of each worker: which backend, how it is made, and the fallback.
//!
//! Every worker owns one driver, made on its own thread when it starts. It sleeps in the
//! driver's `park` when it has nothing to run, polls it without blocking every
//! [`DRIVER_POLL_EVERY`](crate::worker) scheduling ticks while busy, and other threads wake it
//! through the driver's unparker — so IO events and cross-thread wake-ups share one mechanism
//! (no wake-up is lost, and an idle worker uses no CPU).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use spindle_io::Driver;

/// Makes a driver on the calling worker thread.
pub type DriverFactory = Arc<dyn Fn() -> io::Result<Box<dyn Driver>> + Send + Sync>;

/// Which IO backend the workers use ([`RuntimeBuilder::io`](crate::RuntimeBuilder::io)).
///
/// | backend | platforms | cargo feature of `spindle-rt` |
/// |---|---|---|
/// | `IoUring` | Linux ≥ 5.19 | `io-uring` (default) |
/// | `Epoll` | Linux | `io-epoll` (default) |
/// | `Kqueue` | macOS, FreeBSD | `io-kqueue` (default) |
/// | `Iocp` | Windows | `io-iocp` (default) |
/// | `Polling` | all of the above (the `polling` crate) | `io-polling` |
///
/// [`Auto`](IoBackend::Auto) (the default) reads the `SPINDLE_IO` environment variable
/// (`uring`, `epoll`, `kqueue`, `iocp`, `polling` or `none`) and otherwise takes the
/// platform's best: on Linux io_uring, falling back to epoll — logged once, at `warn` through
/// the [`log`] facade (target `spindle_rt::io`), with the reason — when the kernel refuses a ring (too old, `io_uring_disabled`, a seccomp profile that
/// blocks it, a memlock limit too small). Under valgrind `Auto` skips io_uring (valgrind does
/// not see the kernel's writes into the ring, so a worker waiting for a wake-up there would
/// never wake). A backend asked for explicitly never falls back: `build` reports its error.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum IoBackend {
    /// `SPINDLE_IO`, else the platform's best (see above).
    #[default]
    Auto,
    /// No IO driver: workers sleep in `std::thread::park`; IO types wait on the blocking pool.
    None,
    /// epoll (Linux).
    Epoll,
    /// io_uring (Linux).
    IoUring,
    /// kqueue (macOS, BSDs).
    Kqueue,
    /// IOCP (Windows).
    Iocp,
    /// The portable backend on the `polling` crate.
    Polling,
    /// A driver of your own, made on each worker thread by the function.
    Custom(DriverFactory),
}

impl fmt::Debug for IoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoBackend::Auto => "Auto",
            IoBackend::None => "None",
            IoBackend::Epoll => "Epoll",
            IoBackend::IoUring => "IoUring",
            IoBackend::Kqueue => "Kqueue",
            IoBackend::Iocp => "Iocp",
            IoBackend::Polling => "Polling",
            IoBackend::Custom(_) => "Custom",
        })
    }
}

/// A backend resolved for this process: what each worker makes.
#[derive(Clone)]
pub(crate) enum Resolved {
    None,
    Factory(&'static str, DriverFactory),
}

/// Prints the fallback notice only once per process.
static FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

impl IoBackend {
    /// Decides what the workers will make, probing `Auto`'s first choice on this thread.
    pub(crate) fn resolve(&self) -> io::Result<Resolved> {
        match self {
            IoBackend::Auto => match std::env::var("SPINDLE_IO") {
                Ok(name) if !name.is_empty() => {
                    let backend = IoBackend::from_name(&name).ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!(
                                "SPINDLE_IO={name:?} names no IO backend (uring, epoll, \
                                 kqueue, iocp, polling or none)"
                            ),
                        )
                    })?;
                    backend.resolve()
                }
                _ => Ok(auto()),
            },
            IoBackend::None => Ok(Resolved::None),
            IoBackend::Custom(f) => Ok(Resolved::Factory("custom", f.clone())),
            explicit => factory(explicit).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "the {explicit:?} IO backend is not available: not this platform, or \
                         spindle-rt was built without its cargo feature"
                    ),
                )
            }),
        }
    }

    fn from_name(name: &str) -> Option<IoBackend> {
        Some(match name.to_ascii_lowercase().as_str() {
            "uring" | "io_uring" | "io-uring" | "iouring" => IoBackend::IoUring,
            "epoll" => IoBackend::Epoll,
            "kqueue" => IoBackend::Kqueue,
            "iocp" => IoBackend::Iocp,
            "polling" => IoBackend::Polling,
            "none" => IoBackend::None,
            _ => return None,
        })
    }
}

/// The backends `Auto` tries, best first. Under valgrind io_uring is left out: valgrind does
/// not see the kernel's writes into the ring's shared memory, so a worker waiting in
/// `io_uring_enter` for a wake-up from another thread is never woken and the program hangs.
fn auto_candidates(on_valgrind: bool) -> impl Iterator<Item = IoBackend> {
    [
        IoBackend::IoUring,
        IoBackend::Epoll,
        IoBackend::Kqueue,
        IoBackend::Iocp,
        IoBackend::Polling,
    ]
    .into_iter()
    .filter(move |b| !(on_valgrind && matches!(b, IoBackend::IoUring)))
}

/// The platform's best backend that works here.
fn auto() -> Resolved {
    for candidate in auto_candidates(spindle_stack::running_on_valgrind()) {
        let Some(Resolved::Factory(name, make)) = factory(&candidate) else {
            continue;
        };
        // Probe on this thread: a kernel that refuses one ring refuses them all.
        match make() {
            Ok(driver) => {
                drop(driver);
                return Resolved::Factory(name, make);
            }
            Err(e) => {
                if !FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "the {name} IO backend is unavailable ({e}); falling back to the next \
                         one (set SPINDLE_IO to choose)"
                    );
                }
            }
        }
    }
    Resolved::None
}

/// The factory of a compiled-in backend, if this platform and build have it.
// With no backend compiled in for this target, every arm but the last is gone.
#[allow(unreachable_code, unused_variables)]
fn factory(backend: &IoBackend) -> Option<Resolved> {
    let make: DriverFactory = match backend {
        #[cfg(all(feature = "io-uring", target_os = "linux"))]
        IoBackend::IoUring => {
            Arc::new(|| Ok(Box::new(spindle_io_uring::UringDriver::new()?) as Box<dyn Driver>))
        }
        #[cfg(all(feature = "io-epoll", target_os = "linux"))]
        IoBackend::Epoll => {
            Arc::new(|| Ok(Box::new(spindle_io_epoll::EpollDriver::new()?) as Box<dyn Driver>))
        }
        #[cfg(all(
            feature = "io-kqueue",
            any(target_vendor = "apple", target_os = "freebsd")
        ))]
        IoBackend::Kqueue => {
            Arc::new(|| Ok(Box::new(spindle_io_kqueue::KqueueDriver::new()?) as Box<dyn Driver>))
        }
        #[cfg(all(feature = "io-iocp", windows))]
        IoBackend::Iocp => {
            Arc::new(|| Ok(Box::new(spindle_io_iocp::IocpDriver::new()?) as Box<dyn Driver>))
        }
        #[cfg(feature = "io-polling")]
        IoBackend::Polling => {
            Arc::new(|| Ok(Box::new(spindle_io_polling::PollingDriver::new()?) as Box<dyn Driver>))
        }
        _ => return None,
    };
    Some(Resolved::Factory(name_of(backend), make))
}

fn name_of(backend: &IoBackend) -> &'static str {
    match backend {
        IoBackend::IoUring => "io_uring",
        IoBackend::Epoll => "epoll",
        IoBackend::Kqueue => "kqueue",
        IoBackend::Iocp => "iocp",
        IoBackend::Polling => "polling",
        IoBackend::Custom(_) => "custom",
        IoBackend::Auto | IoBackend::None => "none",
    }
}

/// The runtime's blocking pool, as `spindle-io` sees it (files, DNS).
impl spindle_io::BlockingPool for crate::blocking::BlockingPool {
    fn spawn(&self, job: Box<dyn FnOnce() + Send + 'static>) -> io::Result<()> {
        self.submit(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(on_valgrind: bool) -> Vec<&'static str> {
        auto_candidates(on_valgrind).map(|b| name_of(&b)).collect()
    }

    #[test]
    fn auto_tries_io_uring_first_natively_and_never_under_valgrind() {
        assert_eq!(
            names(false),
            ["io_uring", "epoll", "kqueue", "iocp", "polling"]
        );
        assert_eq!(names(true), ["epoll", "kqueue", "iocp", "polling"]);
    }
}
