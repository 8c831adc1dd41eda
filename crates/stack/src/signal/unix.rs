//! The `SIGSEGV`/`SIGBUS` handler.
//!
//! # Why global state
//!
//! Signal dispositions are per process, so the handler and the previous dispositions it
//! chains to are process-wide statics (atomics, written once at installation). The stacks
//! it knows about are in [`crate::registry`].
//!
//! # Async-signal safety
//!
//! The handler only does atomic loads and stores, `mprotect`, `sigaction`, `write(2)`,
//! `raise` and `abort`. It formats its message by hand into a buffer on the (alternate)
//! signal stack: no allocation, no locks, no `std::fmt`.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Once;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use crate::error::StackError;
use crate::registry::{self, Slot, StackRange};
use crate::report;

static INSTALL: Once = Once::new();
/// The errno of a failed installation (0: installed).
static INSTALL_ERRNO: AtomicI32 = AtomicI32::new(0);

/// A signal's disposition before ours, which faults that are not ours are passed to.
struct PreviousAction {
    handler: AtomicUsize,
    flags: AtomicI32,
}

impl PreviousAction {
    const fn new() -> Self {
        PreviousAction {
            handler: AtomicUsize::new(libc::SIG_DFL),
            flags: AtomicI32::new(0),
        }
    }

    fn remember(&self, action: &libc::sigaction) {
        self.flags.store(action.sa_flags, Ordering::Relaxed);
        self.handler.store(action.sa_sigaction, Ordering::Release);
    }
}

static PREVIOUS_SEGV: PreviousAction = PreviousAction::new();
static PREVIOUS_BUS: PreviousAction = PreviousAction::new();

fn previous_action(signal: c_int) -> Option<&'static PreviousAction> {
    match signal {
        libc::SIGSEGV => Some(&PREVIOUS_SEGV),
        libc::SIGBUS => Some(&PREVIOUS_BUS),
        _ => None,
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Installs the handler for `SIGSEGV` and `SIGBUS`, once per process.
pub(crate) fn install_fault_handler() -> Result<(), StackError> {
    INSTALL.call_once(|| {
        // The handler reads the cached page size; make sure it is cached.
        crate::os::page_size();
        for signal in [libc::SIGSEGV, libc::SIGBUS] {
            if let Err(errno) = install_one(signal) {
                INSTALL_ERRNO.store(errno, Ordering::Relaxed);
            }
        }
    });
    match INSTALL_ERRNO.load(Ordering::Relaxed) {
        0 => Ok(()),
        code => Err(StackError::os("sigaction", code, 0)),
    }
}

fn install_one(signal: c_int) -> Result<(), i32> {
    let Some(previous) = previous_action(signal) else {
        return Ok(());
    };
    // SAFETY: `sigaction` is plain data; all-zero is a valid (empty) value.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // Read the current disposition first, so the handler can chain correctly from its very
    // first invocation.
    // SAFETY: querying only (null new action); `old` is valid and writable.
    if unsafe { libc::sigaction(signal, ptr::null(), &mut old) } != 0 {
        return Err(last_errno());
    }
    previous.remember(&old);

    // SAFETY: as above.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction =
        on_fault as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as libc::sighandler_t;
    // SA_ONSTACK: an overflowing stack has no room for the handler's frame.
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: `sa_mask` is a valid sigset_t to initialize.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is fully initialized and `on_fault` is async-signal-safe; `old` is
    // writable.
    if unsafe { libc::sigaction(signal, &action, &mut old) } != 0 {
        return Err(last_errno());
    }
    // Someone may have changed it between the two calls.
    previous.remember(&old);
    Ok(())
}

/// The handler itself.
extern "C" fn on_fault(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let _errno = ErrnoGuard::save();
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t; for SIGSEGV/SIGBUS
    // `si_addr` is the faulting address.
    let addr = unsafe { (*info).si_addr() }.addr();
    if let Some((slot, range)) = registry::find(addr) {
        if addr < range.guard_end {
            report_overflow(slot, range);
        }
        if range.kind.is_growable() && addr < slot.committed_low() {
            grow(slot, range, addr);
            // Returning re-runs the faulting instruction, now on committed memory.
            return;
        }
    }
    // SAFETY: we pass on exactly what the kernel gave us, as the previous handler expects.
    unsafe { chain(signal, info, context) };
}

/// Prints the overflow line and aborts.
fn report_overflow(slot: &Slot, range: StackRange) -> ! {
    let owner = slot.load_owner();
    let line = report::overflow_line(
        owner.as_ref(),
        range.kind,
        range.usable_size(),
        range.guard_size(),
    );
    write_to_stderr(line.as_bytes());
    // SAFETY: abort is async-signal-safe and has no preconditions.
    unsafe { libc::abort() }
}

/// Commits more of a growable stack: at least down to one page below the faulting page,
/// and at least double what was committed (so a deep recursion faults O(log n) times).
fn grow(slot: &Slot, range: StackRange, addr: usize) {
    let page = crate::os::page_size();
    let committed_low = slot.committed_low();
    let committed = range.top - committed_low;
    let fault_page = addr & !(page - 1);
    let needed = (range.top - fault_page).saturating_add(page);
    let target = committed
        .saturating_mul(2)
        .max(needed)
        .min(range.usable_size());
    let new_low = range.top - target;
    if new_low >= committed_low {
        return;
    }
    // SAFETY: `[new_low, committed_low)` is page-aligned and lies in this stack's
    // reservation above its hard guard (`target <= usable`, so `new_low >= guard_end`). The
    // reservation belongs to the stack, so making it read-write exposes nobody else's memory.
    let result = unsafe {
        libc::mprotect(
            ptr::without_provenance_mut::<c_void>(new_low),
            committed_low - new_low,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    if result != 0 {
        let owner = slot.load_owner();
        let line = report::growth_failure_line(
            owner.as_ref(),
            committed,
            target,
            range.usable_size(),
            last_errno(),
        );
        write_to_stderr(line.as_bytes());
        // SAFETY: abort is async-signal-safe and has no preconditions.
        unsafe { libc::abort() }
    }
    slot.lower_committed_low(new_low);
}

/// Passes a fault that is not ours to the previous disposition.
///
/// # Safety
///
/// The arguments are the ones the kernel passed to our handler.
unsafe fn chain(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let Some(previous) = previous_action(signal) else {
        return;
    };
    let handler = previous.handler.load(Ordering::Acquire);
    let flags = previous.flags.load(Ordering::Relaxed);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Restore the default and return: the faulting instruction runs again and the
        // default action terminates the process, with the usual signal and core dump.
        // SAFETY: `sigaction` is plain data; all-zero is SIG_DFL with an empty mask.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = libc::SIG_DFL;
        // SAFETY: `action` is valid; resetting to the default is always allowed.
        unsafe { libc::sigaction(signal, &action, ptr::null_mut()) };
        // SAFETY: `info` is valid (see `on_fault`).
        if handler == libc::SIG_DFL && unsafe { sent_by_a_process(info) } {
            // Nothing re-faults for a signal sent with kill(2): raise it again. It is blocked
            // while we run and is delivered, with the default action, when we return.
            // SAFETY: raise is async-signal-safe.
            unsafe { libc::raise(signal) };
        }
        return;
    }
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous action was installed with SA_SIGINFO, so its handler has this
        // signature; we call it the way the kernel would have.
        let previous_handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(handler) };
        previous_handler(signal, info, context);
    } else {
        // SAFETY: without SA_SIGINFO the handler takes only the signal number.
        let previous_handler: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
        previous_handler(signal);
    }
}

/// Whether the signal came from kill(2)/tgkill(2) rather than a fault.
///
/// # Safety
///
/// `info` is a valid siginfo_t.
#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe fn sent_by_a_process(info: *const libc::siginfo_t) -> bool {
    // SAFETY: the caller guarantees `info` is valid. Linux: codes <= 0 (SI_USER, SI_QUEUE,
    // SI_TKILL, ...) come from processes.
    unsafe { (*info).si_code <= 0 }
}

/// Elsewhere, assume a fault (the worst case is that a kill(2)-sent SIGSEGV is dropped).
///
/// # Safety
///
/// Always safe; `unsafe` only to match the Linux version.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
unsafe fn sent_by_a_process(_info: *const libc::siginfo_t) -> bool {
    false
}

/// `write(2)`s all of `bytes` to stderr, retrying on EINTR and partial writes.
fn write_to_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid readable buffer of that length; write is
        // async-signal-safe.
        let written =
            unsafe { libc::write(libc::STDERR_FILENO, bytes.as_ptr().cast(), bytes.len()) };
        match usize::try_from(written) {
            Ok(n) if n > 0 => bytes = &bytes[n.min(bytes.len())..],
            _ if last_errno() == libc::EINTR => {}
            _ => return,
        }
    }
}

/// Restores errno when the handler returns, so the interrupted code never sees our calls'
/// errno values.
struct ErrnoGuard {
    saved: c_int,
}

impl ErrnoGuard {
    fn save() -> Self {
        let saved = match errno_location() {
            // SAFETY: errno_location returns this thread's errno, valid for the thread's life.
            Some(location) => unsafe { *location },
            None => 0,
        };
        ErrnoGuard { saved }
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        if let Some(location) = errno_location() {
            // SAFETY: as in `save`.
            unsafe { *location = self.saved };
        }
    }
}

#[cfg(target_os = "linux")]
fn errno_location() -> Option<*mut c_int> {
    // SAFETY: no preconditions; returns this thread's errno.
    Some(unsafe { libc::__errno_location() })
}

#[cfg(target_os = "android")]
fn errno_location() -> Option<*mut c_int> {
    // SAFETY: no preconditions; returns this thread's errno.
    Some(unsafe { libc::__errno() })
}

#[cfg(any(target_os = "freebsd", target_vendor = "apple"))]
fn errno_location() -> Option<*mut c_int> {
    // SAFETY: no preconditions; returns this thread's errno.
    Some(unsafe { libc::__error() })
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_vendor = "apple"
)))]
fn errno_location() -> Option<*mut c_int> {
    None
}
