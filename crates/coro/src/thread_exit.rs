//! Knowing when a thread has begun destroying its thread-locals.
//!
//! A suspended coroutine may hold a reference into a thread-local across its suspension
//! (`SOME_TLS.with(|v| { yielder.suspend(()); use(v) })`). Thread-locals are destroyed only at
//! thread exit, in the reverse order of their first use; a coroutine that is dropped (its
//! forced unwind runs its destructors) or resumed from a later thread-local's destructor could
//! then touch a value that is already gone. So the rule is: **once a thread has begun
//! destroying its thread-locals, no coroutine code runs on it** — `try_resume` refuses
//! ([`ResumeErrorKind::ThreadExiting`](crate::ResumeErrorKind::ThreadExiting)) and `Drop`
//! leaks the coroutine's stack with its frames, exactly as `mem::forget` would.
//!
//! Knowing that the destruction has begun is the hard part: the first destructor to run is the
//! one registered last, so no flag set by a destructor of ours registered at some earlier
//! point can be trusted to be set first.
//!
//! * On Linux with glibc (dynamically linked), Rust's std registers each thread-local's
//!   destructor with `__cxa_thread_atexit_impl`, through a weak symbol. This crate defines that
//!   symbol (so std, linked into the same executable, calls ours) and forwards to glibc's,
//!   registering with each destructor a *mark* right after it. glibc runs the list last-in
//!   first-out, so each destructor's mark runs immediately before it, and the flag is set before
//!   the first thread-local destructor of the thread runs, whatever the order of registration.
//!   glibc's own implementation is reached with `dlsym(RTLD_NEXT, …)`.
//! * On Windows, std runs every thread-local destructor from one TLS callback, in the
//!   `.CRT$XLB` section of the executable's callback array; the loader calls the callbacks in
//!   the order of their sections' names. This crate places a callback in `.CRT$XLAS`, sorted
//!   before std's, which sets the flag when the thread (or, for the main thread, the process)
//!   detaches. So the flag is set before any thread-local destructor runs, as on glibc. The
//!   flag is a raw TLS slot there (`TlsAlloc`), not a `thread_local!`: where std keeps
//!   thread-locals in OS-keyed slots (windows-gnu), a destroyed one reads as new again, so a
//!   flag kept in one could read "not exiting" after its own destruction.
//! * Elsewhere (other C libraries, static glibc, macOS), a thread-local of this crate
//!   whose destructor sets the flag is first used at the thread's first resume. That covers the
//!   thread-locals first used before it, not those first used later: there a reference into a
//!   thread-local held across a suspension while the thread exits stays the caller's
//!   responsibility (see the crate docs).
//!
//! The rejected alternatives: scanning the call stack for glibc's destructor loop at each drop
//! (complete for drops, but a resume cannot pay for it), and refusing only coroutines whose
//! stacks hold such a reference (not knowable).

use std::cell::Cell;

/// [`THREAD`]: not yet prepared for resumes (or its signal stack could not be installed).
const UNPREPARED: u8 = 0;
/// [`THREAD`]: prepared (signal stack, exit watch), and not exiting.
const READY: u8 = 1;
/// [`THREAD`]: the thread has begun destroying its thread-locals. Final. (Not used on
/// Windows, where the exit is kept in a raw TLS slot: see the module docs.)
#[cfg(not(windows))]
const EXITING: u8 = 2;

thread_local! {
    /// What this thread is to a resume: [`UNPREPARED`], [`READY`] or `EXITING`. One byte, so
    /// that a resume checks both its preparation and the thread's exit with one load. No
    /// destructor: readable at any point of the thread's exit.
    static THREAD: Cell<u8> = const { Cell::new(UNPREPARED) };
}

/// Whether this thread has begun destroying its thread-locals (see the module docs).
#[cfg(not(windows))]
#[inline]
pub(crate) fn thread_is_exiting() -> bool {
    THREAD.with(Cell::get) == EXITING
}

/// Records that this thread has begun destroying its thread-locals (from a destructor).
#[cfg(not(windows))]
fn set_exiting() {
    THREAD.with(|t| t.set(EXITING));
}

#[cfg(windows)]
pub(crate) use tls_callback::thread_is_exiting;

/// Whether a coroutine may run on this thread now: prepares the thread on its first resume
/// (see [`prepare_thread`]); false once the thread has begun destroying its thread-locals.
/// One thread-local load after the first time (on Windows, one load of the exit flag's slot,
/// which a prepared thread marks ready: see `tls_callback`). Inlined: the thread-local address it computes is used at once, in the resumer's
/// frame, which stays on its thread until the resume returns (the rule against cached
/// thread-local addresses is about a coroutine's own frames across its suspends).
#[inline(always)]
pub(crate) fn ready_to_resume() -> bool {
    #[cfg(windows)]
    {
        if tls_callback::is_ready() {
            return true;
        }
        if thread_is_exiting() {
            return false;
        }
    }
    THREAD.with(Cell::get) == READY || prepare_thread()
}

/// The first resume on a thread (or one after its signal stack could not be installed):
/// makes sure the thread has what the stacks' fault handler needs (an alternate signal stack
/// — the coroutine may have been built on another thread and moved here through
/// `SendCoroutine`) and that its exit will be noticed. Returns false if the thread is exiting.
#[cold]
#[inline(never)]
fn prepare_thread() -> bool {
    if thread_is_exiting() {
        return false;
    }
    // Without an alternate signal stack an overflow still dies, as a bare SIGSEGV instead of
    // the message (and a growable stack cannot grow); not worth refusing the resume for. The
    // thread stays unprepared then, so that the next resume tries again.
    let prepared = spindle_stack::prepare_thread().is_ok();
    watch_thread_exit();
    THREAD.with(|t| {
        if prepared && t.get() == UNPREPARED {
            t.set(READY);
        }
    });
    #[cfg(windows)]
    if prepared {
        tls_callback::mark_ready();
    }
    true
}

/// Keeps this crate's `__cxa_thread_atexit_impl` in the executable: a `#[no_mangle]` function
/// of an rlib is linked only if its object file is pulled in for another symbol, and std's
/// reference to it is weak, which pulls nothing in. Called from a path that every program
/// dropping a coroutine links (not run on the hot path).
#[inline]
pub(crate) fn keep_linked() {
    #[cfg(all(
        target_os = "linux",
        target_env = "gnu",
        not(target_feature = "crt-static"),
        not(miri)
    ))]
    std::hint::black_box(marks::__cxa_thread_atexit_impl as *const ());
}

/// Makes sure the thread's exit will be noticed: a no-op where every thread-local destructor
/// is marked (glibc); elsewhere the first call on a thread registers the sentinel.
#[inline]
fn watch_thread_exit() {
    #[cfg(not(any(
        all(
            target_os = "linux",
            target_env = "gnu",
            not(target_feature = "crt-static"),
            not(miri)
        ),
        windows
    )))]
    sentinel::watch();
    #[cfg(windows)]
    tls_callback::watch();
}

#[cfg(not(any(
    all(
        target_os = "linux",
        target_env = "gnu",
        not(target_feature = "crt-static"),
        not(miri)
    ),
    windows
)))]
mod sentinel {
    use std::cell::Cell;

    /// Its destructor sets the flag.
    struct Sentinel;

    impl Drop for Sentinel {
        fn drop(&mut self) {
            super::set_exiting();
        }
    }

    thread_local! {
        static SENTINEL: Sentinel = const { Sentinel };
        static WATCHING: Cell<bool> = const { Cell::new(false) };
    }

    #[inline]
    pub(super) fn watch() {
        if !WATCHING.with(Cell::get) {
            WATCHING.with(|w| w.set(true));
            // First use registers its destructor; after destruction it fails, which is fine.
            let _ = SENTINEL.try_with(|_| ());
        }
    }
}

#[cfg(all(
    target_os = "linux",
    target_env = "gnu",
    not(target_feature = "crt-static"),
    not(miri)
))]
mod marks {
    use std::ffi::{c_int, c_void};
    use std::sync::atomic::{AtomicUsize, Ordering};

    type Dtor = unsafe extern "C" fn(*mut c_void);
    type AtexitImpl = unsafe extern "C" fn(Dtor, *mut c_void, *mut c_void) -> c_int;

    /// glibc's `__cxa_thread_atexit_impl`: 0 not looked up yet, 1 not found.
    static REAL: AtomicUsize = AtomicUsize::new(0);

    fn real() -> Option<AtexitImpl> {
        let mut found = REAL.load(Ordering::Acquire);
        if found == 0 {
            // SAFETY: a NUL-terminated name; RTLD_NEXT from this object finds the next
            // definition, glibc's (this one is in the executable or a library before libc).
            let sym = unsafe { libc::dlsym(libc::RTLD_NEXT, c"__cxa_thread_atexit_impl".as_ptr()) };
            found = if sym.is_null() { 1 } else { sym as usize };
            REAL.store(found, Ordering::Release);
        }
        // SAFETY: a non-sentinel value is the address of glibc's function, which has this
        // signature (glibc's `cxa_thread_atexit_impl.c`).
        (found > 1).then(|| unsafe { std::mem::transmute::<usize, AtexitImpl>(found) })
    }

    /// Runs right before the thread-local destructor registered just before it.
    unsafe extern "C" fn mark(_: *mut c_void) {
        super::set_exiting();
    }

    /// The definition that std (and C++ runtimes linked into this executable) call to register
    /// a thread-local's destructor: glibc's, with a mark registered after each destructor (see
    /// the module docs). Returns glibc's answer, or -1 if glibc has none (older than 2.18;
    /// the destructor then never runs, as a leak).
    ///
    /// # Safety
    ///
    /// As glibc's: `dtor` may be called once with `obj` at thread exit; `dso` is an address
    /// inside the calling object (its `__dso_handle`).
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn __cxa_thread_atexit_impl(
        dtor: Dtor,
        obj: *mut c_void,
        dso: *mut c_void,
    ) -> c_int {
        let Some(real) = real() else {
            return -1;
        };
        // SAFETY: forwarded contract.
        let registered = unsafe { real(dtor, obj, dso) };
        if registered == 0 {
            // SAFETY: `mark` ignores its argument and only sets a const-initialised
            // thread-local without destructor; it lives in the same object as this function,
            // which `dso` keeps loaded as long as the caller's.
            let _ = unsafe { real(mark, std::ptr::null_mut(), dso) };
        }
        registered
    }
}

#[cfg(windows)]
mod tls_callback {
    use std::ffi::c_void;
    use std::sync::atomic::{AtomicU32, Ordering};

    use windows_sys::Win32::System::Threading::{
        TLS_OUT_OF_INDEXES, TlsAlloc, TlsGetValue, TlsSetValue,
    };

    /// `DLL_PROCESS_DETACH` and `DLL_THREAD_DETACH` (winnt.h).
    const DLL_PROCESS_DETACH: u32 = 0;
    const DLL_THREAD_DETACH: u32 = 3;

    /// The flag's TLS slot, allocated at the first resume in the process
    /// (`TLS_OUT_OF_INDEXES`: not yet, or the process has none left — then no thread is ever
    /// seen exiting, as on targets without a hook).
    static SLOT: AtomicU32 = AtomicU32::new(TLS_OUT_OF_INDEXES);

    /// The slot's values: null until the thread's first resume; [`READY_MARK`] once the thread
    /// is prepared (so that a resume needs no other thread-local: `THREAD` is an OS-keyed slot
    /// behind a call on windows-gnu); [`EXITING_MARK`] from the thread's detach on, final.
    const EXITING_MARK: usize = 1;
    const READY_MARK: usize = 2;

    /// The loader calls the entries of the `.CRT$XL*` sections in the order of the sections'
    /// names; std's destructor runner is in `.CRT$XLB` (and `.CRT$XLA` is the array's start
    /// marker), so this entry runs before it.
    #[used]
    #[unsafe(link_section = ".CRT$XLAS")]
    static ON_TLS_EVENT: unsafe extern "system" fn(*mut c_void, u32, *mut c_void) = on_tls_event;

    /// A TLS callback (`PIMAGE_TLS_CALLBACK`): marks the thread as exiting when it detaches.
    unsafe extern "system" fn on_tls_event(_module: *mut c_void, reason: u32, _: *mut c_void) {
        if reason == DLL_THREAD_DETACH || reason == DLL_PROCESS_DETACH {
            let slot = SLOT.load(Ordering::Acquire);
            if slot != TLS_OUT_OF_INDEXES {
                // SAFETY: a slot this process allocated and never frees.
                unsafe { TlsSetValue(slot, std::ptr::without_provenance_mut(EXITING_MARK)) };
            }
        }
    }

    /// Allocates the slot at the first resume in the process, and keeps the callback linked
    /// (nothing else refers to it, and an rlib's object is linked only if referred to).
    #[inline]
    pub(super) fn watch() {
        if SLOT.load(Ordering::Relaxed) == TLS_OUT_OF_INDEXES {
            allocate();
        }
    }

    #[cold]
    fn allocate() {
        std::hint::black_box(&ON_TLS_EVENT);
        // SAFETY: no arguments; the slot is never freed (a process-lifetime flag).
        let slot = unsafe { TlsAlloc() };
        if slot == TLS_OUT_OF_INDEXES {
            // No slot left in the process: thread exit goes unseen here, as on targets
            // without a hook (the documented fallback).
            return;
        }
        if SLOT
            .compare_exchange(
                TLS_OUT_OF_INDEXES,
                slot,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // Another thread won the race: its slot serves every thread.
            // SAFETY: the slot was just allocated by this call and is used by no one.
            unsafe { windows_sys::Win32::System::Threading::TlsFree(slot) };
        }
    }

    /// Whether this thread has begun destroying its thread-locals (see the module docs).
    #[inline]
    pub(crate) fn thread_is_exiting() -> bool {
        let slot = SLOT.load(Ordering::Relaxed);
        // SAFETY: a slot allocated by this process and never freed; before allocation nothing
        // is read.
        slot != TLS_OUT_OF_INDEXES && unsafe { slot_value(slot) }.addr() == EXITING_MARK
    }

    /// Whether this thread is prepared for resumes and not exiting (see [`READY_MARK`]).
    #[inline]
    pub(crate) fn is_ready() -> bool {
        let slot = SLOT.load(Ordering::Relaxed);
        // SAFETY: as in `thread_is_exiting`.
        slot != TLS_OUT_OF_INDEXES && unsafe { slot_value(slot) }.addr() == READY_MARK
    }

    /// Marks this prepared thread ready, unless it is exiting (the mark is final) or the slot
    /// could not be allocated (then every resume takes the slower path).
    pub(super) fn mark_ready() {
        let slot = SLOT.load(Ordering::Acquire);
        if slot != TLS_OUT_OF_INDEXES && !thread_is_exiting() {
            // SAFETY: a slot this process allocated and never frees.
            unsafe { TlsSetValue(slot, std::ptr::without_provenance_mut(READY_MARK)) };
        }
    }

    /// The calling thread's value in TLS slot `slot`: what `TlsGetValue` returns, read
    /// without calling it for the first 64 slots on x86_64. Every resume reads the flag, and
    /// the call (through the import table, into kernelbase, which also clears the last
    /// error) is most of that read's cost.
    ///
    /// # Safety
    ///
    /// `slot` was allocated by `TlsAlloc` in this process and is not freed.
    #[inline(always)]
    unsafe fn slot_value(slot: u32) -> *mut c_void {
        #[cfg(target_arch = "x86_64")]
        if slot < 64 {
            let value: *mut c_void;
            // SAFETY: on x86_64 Windows `gs` addresses the current thread's TEB, whose
            // `TlsSlots` array (winternl.h) of the first 64 slots lies at offset 0x1480 and
            // holds what `TlsSetValue` stored; `slot < 64` keeps the load inside it. A plain
            // load of the calling thread's own TEB, as `TlsGetValue` makes.
            unsafe {
                std::arch::asm!(
                    "mov {value}, qword ptr gs:[{slot} * 8 + 0x1480]",
                    value = lateout(reg) value,
                    slot = in(reg) slot as usize,
                    options(nostack, readonly, preserves_flags),
                );
            }
            return value;
        }
        // SAFETY: forwarded contract.
        unsafe { TlsGetValue(slot) }
    }
}
