//! The blocking pool: threads for work that blocks (a synchronous library, file IO without a
//! native backend, DNS), so that it suspends only the coroutine that asked for it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::task::lock;

type Job = Box<dyn FnOnce() + Send + 'static>;

thread_local! {
    /// The pool whose thread this is (null: none), so that a shutdown run by one of the pool's
    /// own jobs can tell: it would wait for the coroutine that waits for that very job.
    static SERVING: Cell<*const Inner> = const { Cell::new(ptr::null()) };
}

/// A bounded pool of threads that exit after `keep_alive` without work.
pub(crate) struct BlockingPool {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<PoolState>,
    work: Condvar,
    /// Signalled when a thread leaves (or a start is settled): `shutdown` waits on it.
    exited: Condvar,
    max_threads: usize,
    keep_alive: Duration,
    /// Threads alive now (for tests and metrics).
    threads: AtomicUsize,
    /// Tests: the next thread start fails, after this job (another submitter's, as if it came
    /// meanwhile) was queued.
    #[cfg(test)]
    fail_next_start: Mutex<Option<Job>>,
}

struct PoolState {
    /// Queued jobs, each with its submission's number: a submission whose thread could not
    /// start takes back its own job, not one queued by another submitter meanwhile.
    queue: VecDeque<(u64, Job)>,
    next_id: u64,
    /// Threads waiting for work that no submission has claimed yet. A submission that finds
    /// one claims it here, at once (and counts it in `notified`): the thread lowers nothing
    /// when it wakes. Lowered by the thread itself, it stayed up until the thread ran, and a
    /// second submission meanwhile counted on the same thread: two jobs queued behind one
    /// thread, far below the bound (a job that waits for the other then never ends).
    idle: usize,
    /// Wake-ups sent to claimed threads and not yet taken by a waking thread.
    notified: usize,
    threads: usize,
    /// Threads counted in `threads` whose handle is not in `handles` yet (being started).
    starting: usize,
    /// The threads started, to join at shutdown. Those that exited (idle) are dropped when the
    /// next thread starts, so this holds at most the live threads and one more.
    handles: Vec<JoinHandle<()>>,
    shutdown: bool,
}

impl BlockingPool {
    pub(crate) fn new(max_threads: usize, keep_alive: Duration) -> Self {
        BlockingPool {
            inner: Arc::new(Inner {
                state: Mutex::new(PoolState {
                    queue: VecDeque::new(),
                    next_id: 0,
                    idle: 0,
                    notified: 0,
                    threads: 0,
                    starting: 0,
                    handles: Vec::new(),
                    shutdown: false,
                }),
                work: Condvar::new(),
                exited: Condvar::new(),
                max_threads,
                keep_alive,
                threads: AtomicUsize::new(0),
                #[cfg(test)]
                fail_next_start: Mutex::new(None),
            }),
        }
    }

    /// Queues `job`; starts a thread if none is idle and the bound allows. Returns false if the
    /// pool is shut down (the job is dropped).
    pub(crate) fn submit(&self, job: Job) -> Result<(), std::io::Error> {
        let inner = &self.inner;
        let mut state = lock(&inner.state);
        if state.shutdown {
            return Err(std::io::Error::other(
                "the runtime is shutting down: no blocking work",
            ));
        }
        let id = state.next_id;
        state.next_id = id.wrapping_add(1);
        state.queue.push_back((id, job));
        if state.idle > 0 {
            state.idle -= 1;
            state.notified += 1;
            drop(state);
            inner.work.notify_one();
            return Ok(());
        }
        if state.threads < inner.max_threads {
            state.threads += 1;
            state.starting += 1;
            drop(state);
            let started = start_thread(inner);
            let mut state = lock(&inner.state);
            state.starting -= 1;
            if state.shutdown && state.starting == 0 {
                inner.exited.notify_all();
            }
            match started {
                Ok(handle) => {
                    state.handles.retain(|h| !h.is_finished());
                    state.handles.push(handle);
                }
                Err(e) => {
                    state.threads -= 1;
                    // If no thread exists at all, the job would wait for ever: take it back
                    // and report the error. Our own job — found by its number: another
                    // submitter may have queued one behind it meanwhile, whose coroutine waits
                    // for it (and whose borrows it uses). If ours is gone, a thread that
                    // existed meanwhile took it.
                    if state.threads == 0
                        && let Some(i) = state.queue.iter().position(|(j, _)| *j == id)
                    {
                        let ours = state.queue.remove(i);
                        drop(state);
                        drop(ours); // (its captures' destructors run outside the lock)
                        return Err(e);
                    }
                }
            }
        }
        // Otherwise the job waits for a busy thread to come back.
        Ok(())
    }

    pub(crate) fn threads(&self) -> usize {
        self.inner.threads.load(Ordering::Acquire)
    }

    /// Whether the calling thread is one of this pool's (running one of its jobs).
    pub(crate) fn is_own_thread(&self) -> bool {
        SERVING
            .try_with(|serving| ptr::eq(serving.get(), Arc::as_ptr(&self.inner)))
            .unwrap_or(false)
    }

    /// Stops accepting work and joins the threads: idle ones exit at once, busy ones after the
    /// jobs queued. Waits until `deadline` at most (`None`: as long as it takes); returns false
    /// if threads were still busy then, which are left to finish on their own (detached).
    ///
    /// Not to be called on one of the pool's own threads ([`is_own_thread`]), which it would
    /// wait for.
    ///
    /// [`is_own_thread`]: BlockingPool::is_own_thread
    pub(crate) fn shutdown(&self, deadline: Option<Instant>) -> bool {
        let inner = &self.inner;
        let mut state = lock(&inner.state);
        state.shutdown = true;
        inner.work.notify_all();
        // `starting`: a submission that found the pool open before the flag was set may still
        // be starting its thread, whose handle we must not miss.
        while state.threads > 0 || state.starting > 0 {
            state = match deadline {
                None => inner.exited.wait(state).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    inner
                        .exited
                        .wait_timeout(state, deadline - now)
                        .map(|(s, _)| s)
                        .unwrap_or_else(|e| e.into_inner().0)
                }
            };
        }
        let all_left = state.threads == 0 && state.starting == 0;
        let handles = std::mem::take(&mut state.handles);
        drop(state);
        for handle in handles {
            // Every thread has left its loop (only its exit is left to wait for), or this one
            // has; one still in a job at the deadline is detached.
            if all_left || handle.is_finished() {
                let _ = handle.join();
            }
        }
        all_left
    }
}

fn start_thread(inner: &Arc<Inner>) -> std::io::Result<JoinHandle<()>> {
    #[cfg(test)]
    if let Some(job) = lock(&inner.fail_next_start).take() {
        let id = u64::MAX;
        lock(&inner.state).queue.push_back((id, job));
        return Err(std::io::Error::other("injected: no thread"));
    }
    let inner = inner.clone();
    std::thread::Builder::new()
        .name("spindle-blocking".into())
        .spawn(move || worker(inner))
}

fn worker(inner: Arc<Inner>) {
    SERVING.with(|serving| serving.set(Arc::as_ptr(&inner)));
    inner.threads.fetch_add(1, Ordering::AcqRel);
    let mut state = lock(&inner.state);
    loop {
        if let Some((_, job)) = state.queue.pop_front() {
            drop(state);
            // A panic in a job is caught where the job was made (see `blocking`).
            job();
            state = lock(&inner.state);
            continue;
        }
        if state.shutdown {
            break;
        }
        state.idle += 1;
        let (next, timeout) = inner
            .work
            .wait_timeout(state, inner.keep_alive)
            .unwrap_or_else(|e| e.into_inner());
        state = next;
        // Claimed by a submission (which lowered `idle` for us), or woken by the timeout, the
        // shutdown or spuriously (still counted idle). Which thread takes a claim does not
        // matter: each waking thread takes at most one, and the claimed job is in the queue.
        if state.notified > 0 {
            state.notified -= 1;
        } else {
            state.idle -= 1;
        }
        if timeout.timed_out() && state.queue.is_empty() {
            break;
        }
    }
    state.threads -= 1;
    if state.shutdown && state.threads == 0 {
        inner.exited.notify_all();
    }
    drop(state);
    inner.threads.fetch_sub(1, Ordering::AcqRel);
}

/// Runs `f` on the runtime's blocking pool and suspends the current coroutine until it
/// returns; its worker runs other coroutines meanwhile. Outside a coroutine, runs `f` on the
/// calling thread (which may block anyway).
///
/// A panic in `f` continues in the caller.
///
/// ```
/// let rt = spindle_rt::Runtime::builder().workers(1).build()?;
/// let n = rt.block_on(|| {
///     spindle_rt::blocking(|| {
///         std::thread::sleep(std::time::Duration::from_millis(5)); // blocks a pool thread
///         7
///     })
/// });
/// assert_eq!(n, 7);
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
///
/// # Panics
///
/// If the runtime is shutting down or no pool thread can be started (and none exists).
pub fn blocking<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let Some(shared) = crate::worker::current_shared().filter(|_| spindle_park::in_task()) else {
        return f();
    };
    struct Done<T> {
        result: Mutex<Option<std::thread::Result<T>>>,
        waker: Mutex<Option<std::task::Waker>>,
    }
    let done: Arc<Done<T>> = Arc::new(Done {
        result: Mutex::new(None),
        waker: Mutex::new(Some(spindle_park::waker())),
    });
    let done2 = done.clone();
    let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        *lock(&done2.result) = Some(r);
        if let Some(w) = lock(&done2.waker).take() {
            w.wake();
        }
    });
    // SAFETY: only the lifetime bound changes. `f` (and `T`) may borrow from the caller's
    // frame; the caller does not return — nor unwind: cancellation is held off below — before
    // the job has run and reported.
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
    // The coroutine must not unwind while the job may still use its borrows.
    let _no_cancel = crate::join::CancelGuard::new();
    if let Err(e) = shared.blocking.submit(job) {
        panic!("cannot run blocking work: {e}");
    }
    loop {
        if let Some(r) = lock(&done.result).take() {
            return r.unwrap_or_else(|p| std::panic::resume_unwind(p));
        }
        spindle_park::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn flag_job(flag: &Arc<AtomicBool>) -> Job {
        let flag = flag.clone();
        Box::new(move || flag.store(true, Ordering::SeqCst))
    }

    #[test]
    fn a_submission_whose_thread_cannot_start_takes_back_its_own_job_only() {
        // The pool has no thread; this submission's thread fails to start after another
        // submitter queued a job behind ours. Ours is handed back (an error, never run); the
        // other stays queued and runs once a thread can start. (Taking back the last job, as
        // before, took the other submitter's and left ours queued: run later, after its
        // coroutine had unwound.)
        let pool = BlockingPool::new(1, Duration::from_secs(5));
        let (mine, other, later) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        *lock(&pool.inner.fail_next_start) = Some(flag_job(&other));
        let err = pool.submit(flag_job(&mine)).unwrap_err();
        assert!(err.to_string().contains("injected"), "{err}");
        {
            let state = lock(&pool.inner.state);
            let ids: Vec<u64> = state.queue.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, [u64::MAX], "only the other submitter's job is left");
            assert_eq!(state.threads, 0);
        }
        pool.submit(flag_job(&later)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !(other.load(Ordering::SeqCst) && later.load(Ordering::SeqCst)) {
            assert!(
                std::time::Instant::now() < deadline,
                "the queued jobs never ran"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            !mine.load(Ordering::SeqCst),
            "the failed submission's job ran"
        );
        assert!(pool.shutdown(None));
    }

    #[test]
    fn a_shutdown_with_a_deadline_leaves_a_job_that_never_returns() {
        // A job that blocks past the deadline: the shutdown returns false at the deadline
        // instead of waiting for it, and leaves its thread to finish on its own.
        let pool = BlockingPool::new(2, Duration::from_secs(5));
        let (release, released) = std::sync::mpsc::channel::<()>();
        let started = Arc::new(AtomicBool::new(false));
        let started2 = started.clone();
        pool.submit(Box::new(move || {
            started2.store(true, Ordering::SeqCst);
            let _ = released.recv();
        }))
        .unwrap();
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let begun = Instant::now();
        assert!(!pool.shutdown(Some(begun + Duration::from_millis(50))));
        assert!(
            begun.elapsed() < Duration::from_secs(5),
            "waited for the stuck job"
        );
        assert_eq!(
            pool.threads(),
            1,
            "the busy thread is left to finish its job"
        );
        release.send(()).unwrap();
    }
}
