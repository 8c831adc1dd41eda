//! Work that blocks a thread, run on the runtime's blocking pool while only the calling task
//! waits: regular files on readiness backends, DNS, anything without a non-blocking form.

use std::cell::Cell;
use std::io;
use std::ptr;
use std::sync::{Arc, Mutex};
use std::task::Waker;

/// A pool of threads for blocking work, provided by the runtime (`spindle-rt`'s blocking
/// pool) and installed per worker thread with [`with_blocking_pool`].
pub trait BlockingPool: Send + Sync + 'static {
    /// Runs `job` on one of the pool's threads, soon.
    ///
    /// # Errors
    ///
    /// The pool is shutting down, or no thread could be started and none exists; the job is
    /// dropped unrun.
    fn spawn(&self, job: Box<dyn FnOnce() + Send + 'static>) -> io::Result<()>;
}

thread_local! {
    static POOL: Cell<*const dyn BlockingPool> = const { Cell::new(ptr::null::<NoPool>() as *const dyn BlockingPool) };
}

/// A type to make a null `*const dyn BlockingPool` from (never instantiated).
struct NoPool;

impl BlockingPool for NoPool {
    fn spawn(&self, job: Box<dyn FnOnce() + Send + 'static>) -> io::Result<()> {
        job();
        Ok(())
    }
}

/// Runs `f` with `pool` as this thread's blocking pool, then restores the previous one (also if
/// `f` unwinds). A runtime calls it around each worker's loop.
///
/// # Safety
///
/// The installation belongs to the thread, not to the stack `f` runs on: `f` must not suspend
/// a coroutine that this call runs in. A suspension would leave `pool` installed for whatever
/// the thread runs next, borrowed from a frame that is then switched away from — on a copying
/// stack, its bytes are copied out and the address reused by another coroutine. A runtime calls
/// this on its worker thread's own stack, around its scheduler loop (which switches into
/// coroutines and always back).
pub unsafe fn with_blocking_pool<R>(pool: &dyn BlockingPool, f: impl FnOnce() -> R) -> R {
    struct Restore(*const dyn BlockingPool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0;
            let _ = POOL.try_with(|c| c.set(previous));
        }
    }
    let erased: *const dyn BlockingPool = pool;
    // SAFETY: only the trait object's lifetime bound changes. The pointer is dereferenced only
    // while installed, i.e. while `f` runs, which `pool` outlives; `Restore` uninstalls it when
    // this returns or unwinds.
    let erased: *const (dyn BlockingPool + 'static) = unsafe {
        std::mem::transmute::<*const dyn BlockingPool, *const (dyn BlockingPool + 'static)>(erased)
    };
    let previous = POOL.with(|c| c.replace(erased));
    let _restore = Restore(previous);
    f()
}

/// Runs `f` on the current runtime's blocking pool and parks the calling task until it has
/// returned; outside a runtime's task (or with no pool installed) runs it right here.
///
/// `f` may borrow from the caller: the caller does not return, and is not unwound by a
/// cancellation, before `f` has finished (cancellation is deferred meanwhile and carried out
/// after). A panic in `f` continues in the caller.
///
/// # Errors
///
/// The pool refused the job (shutting down, no thread): the error says so and `f` did not run.
pub fn offload<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let pool = POOL.try_with(Cell::get).unwrap_or(ptr::null::<NoPool>());
    if pool.is_null() || !spindle_park::in_task() {
        return Ok(f());
    }
    struct Done<T> {
        result: Mutex<Option<std::thread::Result<T>>>,
        waker: Waker,
    }
    let done: Arc<Done<T>> = Arc::new(Done {
        result: Mutex::new(None),
        waker: spindle_park::waker(),
    });
    let done2 = done.clone();
    let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        *done2.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        done2.waker.wake_by_ref();
    });
    // SAFETY: only the lifetime bound changes. `f` and `T` may borrow from the caller's frame;
    // the caller neither returns nor unwinds (cancellation is deferred below) before the job
    // has run and stored its result, after which the job touches nothing borrowed.
    let job: Box<dyn FnOnce() + Send + 'static> = unsafe {
        std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Box<dyn FnOnce() + Send + 'static>>(
            job,
        )
    };
    let guard = spindle_park::defer_cancel();
    // SAFETY: installed by `with_blocking_pool` on this thread while the pool is alive; used
    // only during this call, before any suspension.
    unsafe { &*pool }.spawn(job)?;
    let result = loop {
        if let Some(r) = done.result.lock().unwrap_or_else(|e| e.into_inner()).take() {
            break r;
        }
        spindle_park::park();
    };
    drop(guard);
    spindle_park::checkpoint();
    Ok(result.unwrap_or_else(|p| std::panic::resume_unwind(p)))
}
