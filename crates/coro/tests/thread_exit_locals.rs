//! A coroutine suspended inside `KEY.with(..)` holds a reference into a thread-local. When its
//! thread exits, thread-locals are destroyed in the reverse order of first use, so a coroutine
//! dropped or resumed from a later thread-local's destructor would run code (destructors, or the
//! rest of its body) that uses the destroyed value. Expected: once the thread has begun
//! destroying its thread-locals, no coroutine code runs — a drop leaks the coroutine, a resume
//! is refused with `ThreadExiting` — whatever the order in which the thread-locals were first
//! used. While the thread runs, dropping unwinds as usual (control).
//!
//! The borrowed value's destructor raises a flag; the coroutine's code checks the flag before
//! it would touch the value, so a violation is counted instead of committed.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use spindle_coro::{Coroutine, CoroutineResult, ResumeErrorKind, Yielder};

type Co = Coroutine<(), (), ()>;

/// Coroutine code that ran after the value it borrows was destroyed.
static VIOLATIONS: AtomicUsize = AtomicUsize::new(0);
/// Coroutine cleanups that ran while the value was alive.
static CLEAN_DROPS: AtomicUsize = AtomicUsize::new(0);
/// Resumes refused with `ThreadExiting`.
static REFUSED: AtomicUsize = AtomicUsize::new(0);
/// The tests share the counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    VIOLATIONS.store(0, Ordering::SeqCst);
    CLEAN_DROPS.store(0, Ordering::SeqCst);
    REFUSED.store(0, Ordering::SeqCst);
    guard
}

/// The borrowed thread-local's value: `alive` turns false when it is destroyed.
struct Borrowed {
    alive: Cell<bool>,
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        self.alive.set(false);
    }
}

thread_local! {
    static BORROWED: Borrowed = const { Borrowed { alive: Cell::new(true) } };
}

/// Lives on the coroutine's stack, holding the borrow; its destructor "uses" it.
struct UsesBorrow<'a>(&'a Borrowed);

impl Drop for UsesBorrow<'_> {
    fn drop(&mut self) {
        // The memory of a destroyed `thread_local!` still lies in the thread's TLS block, so
        // reading `alive` here tells without undefined behaviour in practice; it is what the
        // test looks at.
        if self.0.alive.get() {
            CLEAN_DROPS.fetch_add(1, Ordering::SeqCst);
        } else {
            VIOLATIONS.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A coroutine that suspends while it holds a borrow of `BORROWED`, twice.
fn borrowing() -> Co {
    Coroutine::new(|y: &Yielder<(), ()>, ()| {
        y.suspend(());
        BORROWED.with(|b| {
            let _uses = UsesBorrow(b);
            y.suspend(());
            if !b.alive.get() {
                VIOLATIONS.fetch_add(1, Ordering::SeqCst);
            }
            y.suspend(());
        });
    })
    .unwrap()
}

/// Holds a coroutine; at thread exit drops it (`resume == false`) or resumes it first.
struct Holder {
    co: RefCell<Option<Co>>,
    resume: Cell<bool>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(mut co) = self.co.borrow_mut().take() {
            if self.resume.get() {
                match co.try_resume(()) {
                    Err(e) if matches!(e.kind, ResumeErrorKind::ThreadExiting) => {
                        REFUSED.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => panic!("unexpected resume error: {e}"),
                    Ok(_) => {}
                }
            }
            drop(co);
        }
    }
}

thread_local! {
    static HOLDER: Holder = const { Holder { co: RefCell::new(None), resume: Cell::new(false) } };
}

/// Runs a thread that makes the borrowing coroutine, with `HOLDER` first used before the
/// coroutine's first resume (`holder_first`) or between its two resumes (so that `BORROWED`,
/// first used in the second resume, is destroyed first either way), and keeps it in `HOLDER`.
fn thread_exit_with_coroutine_held(holder_first: bool, resume_at_exit: bool) {
    std::thread::spawn(move || {
        if holder_first {
            HOLDER.with(|h| h.resume.set(resume_at_exit));
        }
        let mut co = borrowing();
        assert_eq!(co.resume(()), CoroutineResult::Yield(()));
        if !holder_first {
            HOLDER.with(|h| h.resume.set(resume_at_exit));
        }
        // Now suspended inside `BORROWED.with` (first used here, after `HOLDER`).
        assert_eq!(co.resume(()), CoroutineResult::Yield(()));
        HOLDER.with(|h| *h.co.borrow_mut() = Some(co));
    })
    .join()
    .unwrap();
}

#[test]
fn dropped_at_thread_exit_runs_no_code_after_its_borrowed_thread_local_died() {
    let _serial = serial();
    thread_exit_with_coroutine_held(true, false);
    assert_eq!(VIOLATIONS.load(Ordering::SeqCst), 0);
    // Leaked: its cleanup did not run at all.
    assert_eq!(CLEAN_DROPS.load(Ordering::SeqCst), 0);
}

#[test]
fn dropped_at_thread_exit_runs_no_code_whatever_the_order_of_first_use() {
    let _serial = serial();
    thread_exit_with_coroutine_held(false, false);
    assert_eq!(VIOLATIONS.load(Ordering::SeqCst), 0);
    assert_eq!(CLEAN_DROPS.load(Ordering::SeqCst), 0);
}

#[test]
fn resumed_at_thread_exit_is_refused() {
    let _serial = serial();
    for holder_first in [true, false] {
        REFUSED.store(0, Ordering::SeqCst);
        thread_exit_with_coroutine_held(holder_first, true);
        assert_eq!(VIOLATIONS.load(Ordering::SeqCst), 0);
        assert_eq!(
            REFUSED.load(Ordering::SeqCst),
            1,
            "holder first used {}",
            if holder_first { "first" } else { "second" }
        );
    }
}

/// Control: dropped while its thread runs, the coroutine unwinds and its cleanup runs with the
/// thread-local alive.
#[test]
fn dropped_while_the_thread_runs_unwinds() {
    let _serial = serial();
    std::thread::spawn(|| {
        let mut co = borrowing();
        assert_eq!(co.resume(()), CoroutineResult::Yield(()));
        assert_eq!(co.resume(()), CoroutineResult::Yield(()));
        drop(co);
    })
    .join()
    .unwrap();
    assert_eq!(VIOLATIONS.load(Ordering::SeqCst), 0);
    assert_eq!(CLEAN_DROPS.load(Ordering::SeqCst), 1);
}
