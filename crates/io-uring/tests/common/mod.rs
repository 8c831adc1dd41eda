//! A tiny single-threaded executor for the tests: coroutines (spindle-coro) parked through a
//! `spindle_park::Hook`, with deadlines and cancellation, whose idle loop parks in a
//! `UringDriver` — the way the runtime will use the driver.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake as WakeTrait, Waker};
use std::time::{Duration, Instant};

use spindle_coro::{Coroutine, CoroutineResult, Yielder};
use spindle_io::{Driver, Op, Unpark};
use spindle_io_uring::UringDriver;
use spindle_park::{Hook, Wake};

/// The payload a cancelled task unwinds with.
pub struct Cancelled;

/// A task's waker: sets its permit and queues it.
struct TaskWaker {
    id: usize,
    permit: AtomicBool,
    ready: Arc<Mutex<VecDeque<usize>>>,
    unparker: Arc<dyn Unpark>,
    /// The executor's thread: a wake from there needs no unpark (the loop sees the queue).
    home: std::thread::ThreadId,
}

impl WakeTrait for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.permit.swap(true, Ordering::AcqRel) {
            self.ready.lock().unwrap().push_back(self.id);
            if std::thread::current().id() != self.home {
                self.unparker.unpark();
            }
        }
    }
}

/// A task's control block.
struct Ctl {
    yielder: Cell<*const Yielder<(), ()>>,
    waker: Arc<TaskWaker>,
    deadline: Cell<Option<Instant>>,
    cancel: Cell<bool>,
    cancel_delivered: Cell<bool>,
    defer: Cell<u32>,
}

struct Task {
    co: Option<Coroutine<(), (), ()>>,
    ctl: Rc<Ctl>,
}

/// The executor. Drop order: tasks (unwound) before the driver. It must not move while tasks
/// are suspended (they hold `&UringDriver`): drop them with `drop_tasks` first.
pub struct Exec {
    tasks: RefCell<Vec<Option<Task>>>,
    ready: Arc<Mutex<VecDeque<usize>>>,
    current: Cell<Option<usize>>,
    cancels: RefCell<Vec<(Instant, usize)>>,
    /// Tasks that ended by cancellation.
    pub cancelled: RefCell<Vec<usize>>,
    pub driver: UringDriver,
}

impl Exec {
    pub fn new(driver: UringDriver) -> Self {
        Exec {
            tasks: RefCell::new(Vec::new()),
            ready: Arc::new(Mutex::new(VecDeque::new())),
            current: Cell::new(None),
            cancels: RefCell::new(Vec::new()),
            cancelled: RefCell::new(Vec::new()),
            driver,
        }
    }

    /// Spawns a task; it runs on the next `run`.
    pub fn spawn(&self, f: impl FnOnce() + 'static) -> usize {
        let mut tasks = self.tasks.borrow_mut();
        let id = tasks.len();
        let ctl = Rc::new(Ctl {
            yielder: Cell::new(std::ptr::null()),
            waker: Arc::new(TaskWaker {
                id,
                permit: AtomicBool::new(false),
                ready: self.ready.clone(),
                unparker: self.driver.unparker(),
                home: std::thread::current().id(),
            }),
            deadline: Cell::new(None),
            cancel: Cell::new(false),
            cancel_delivered: Cell::new(false),
            defer: Cell::new(0),
        });
        let ctl2 = ctl.clone();
        let co = Coroutine::new(move |y: &Yielder<(), ()>, ()| {
            ctl2.yielder.set(y);
            f();
        })
        .expect("a coroutine stack");
        tasks.push(Some(Task { co: Some(co), ctl }));
        self.ready.lock().unwrap().push_back(id);
        id
    }

    /// Asks task `id` to cancel `after` from now.
    pub fn cancel_after(&self, id: usize, after: Duration) {
        self.cancels.borrow_mut().push((Instant::now() + after, id));
    }

    /// Drops every task (unwinding the suspended ones), in place: tasks hold references to the
    /// driver across their suspensions, so the executor must not move while they exist.
    pub fn drop_tasks(&self) {
        let tasks = std::mem::take(&mut *self.tasks.borrow_mut());
        drop(tasks);
    }

    fn ctl(&self, id: usize) -> Option<Rc<Ctl>> {
        self.tasks.borrow().get(id)?.as_ref().map(|t| t.ctl.clone())
    }

    fn current_ctl(&self) -> Rc<Ctl> {
        self.ctl(self.current.get().expect("in a task"))
            .expect("current task")
    }

    fn live(&self) -> usize {
        self.tasks.borrow().iter().filter(|t| t.is_some()).count()
    }

    /// Runs until every task has finished. Panics of tasks propagate.
    pub fn run(&self) {
        // SAFETY: on the test thread's own stack, around the loop that resumes the tasks (and
        // always comes back); nothing here runs in a coroutine.
        unsafe {
            spindle_park::with_hook(self, || {
                spindle_io::with_driver(&self.driver, || self.run_loop())
            })
        };
    }

    fn run_loop(&self) {
        let mut ticks = 0u64;
        loop {
            self.fire_timers();
            let batch: Vec<usize> = self.ready.lock().unwrap().drain(..).collect();
            for id in batch {
                self.resume(id);
                ticks += 1;
            }
            if self.live() == 0 {
                break;
            }
            // Timers are looked at after the batch ran: it may have set new deadlines.
            let next = self.fire_timers();
            let timeout = if !self.ready.lock().unwrap().is_empty() {
                Some(Duration::ZERO)
            } else {
                next.map(|n| n.saturating_duration_since(Instant::now()))
            };
            self.driver.park(timeout).expect("driver park");
        }
        let _ = ticks;
    }

    /// Queues the tasks whose deadline or cancellation is due; returns the next one due.
    fn fire_timers(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let due: Vec<usize> = {
            let mut cancels = self.cancels.borrow_mut();
            let due = cancels
                .iter()
                .filter(|(t, _)| *t <= now)
                .map(|(_, id)| *id)
                .collect();
            cancels.retain(|(t, _)| *t > now);
            for (t, _) in cancels.iter() {
                next = Some(next.map_or(*t, |n| n.min(*t)));
            }
            due
        };
        for id in due {
            if let Some(ctl) = self.ctl(id) {
                ctl.cancel.set(true);
                self.ready.lock().unwrap().push_back(id);
            }
        }
        let deadlines: Vec<(usize, Option<Instant>)> = self
            .tasks
            .borrow()
            .iter()
            .enumerate()
            .filter_map(|(id, t)| t.as_ref().map(|t| (id, t.ctl.deadline.get())))
            .collect();
        for (id, deadline) in deadlines {
            if let Some(d) = deadline {
                if d <= now {
                    self.ready.lock().unwrap().push_back(id);
                } else {
                    next = Some(next.map_or(d, |n| n.min(d)));
                }
            }
        }
        next
    }

    fn resume(&self, id: usize) {
        let Some(mut co) = self
            .tasks
            .borrow_mut()
            .get_mut(id)
            .and_then(|t| t.as_mut())
            .and_then(|t| t.co.take())
        else {
            return;
        };
        self.current.set(Some(id));
        let result = catch_unwind(AssertUnwindSafe(|| co.resume(())));
        self.current.set(None);
        let finished = match result {
            Ok(CoroutineResult::Yield(())) => false,
            Ok(CoroutineResult::Return(())) => true,
            Err(payload) => {
                if payload.downcast_ref::<Cancelled>().is_some() {
                    self.cancelled.borrow_mut().push(id);
                    true
                } else {
                    resume_unwind(payload)
                }
            }
        };
        let mut tasks = self.tasks.borrow_mut();
        if finished {
            drop(co);
            tasks[id] = None;
        } else if let Some(t) = tasks[id].as_mut() {
            t.co = Some(co);
        }
    }
}

impl Hook for Exec {
    fn in_task(&self) -> bool {
        self.current.get().is_some()
    }

    fn park(&self, deadline: Option<Instant>) -> Wake {
        let ctl = self.current_ctl();
        loop {
            if ctl.cancel.get() {
                if ctl.defer.get() == 0 {
                    resume_unwind(Box::new(Cancelled));
                }
                if !ctl.cancel_delivered.replace(true) {
                    return Wake::Woken;
                }
            }
            if ctl.waker.permit.swap(false, Ordering::AcqRel) {
                return Wake::Woken;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Wake::TimedOut;
            }
            ctl.deadline.set(deadline);
            let yielder = ctl.yielder.get();
            // SAFETY: set by the task's closure to its yielder, which lives on the task's stack
            // for as long as the closure runs; we are inside it (this is the task's park).
            unsafe { &*yielder }.suspend(());
            ctl.deadline.set(None);
        }
    }

    fn waker(&self) -> Waker {
        Waker::from(self.current_ctl().waker.clone())
    }

    fn defer_cancel(&self, defer: bool) {
        let ctl = self.current_ctl();
        if defer {
            ctl.defer.set(ctl.defer.get() + 1);
        } else {
            ctl.defer.set(ctl.defer.get() - 1);
        }
    }

    fn cancel_requested(&self) -> bool {
        self.current_ctl().cancel.get()
    }

    fn checkpoint(&self) {
        let ctl = self.current_ctl();
        if ctl.cancel.get() && ctl.defer.get() == 0 {
            resume_unwind(Box::new(Cancelled));
        }
    }
}

/// Submits through the current task's driver (the tests pass only sockets they made).
pub fn submit(op: Op<'_>, deadline: Option<Instant>) -> io::Result<usize> {
    // SAFETY: every test submits operations on sockets of its own, with buffers that outlive
    // the call; nothing parks the driver.
    unsafe { spindle_io::current(|d| d.proactor().expect("a proactor").submit(op, deadline)) }
        .expect("in a task with a driver")
}

/// A connected pair of non-blocking Unix stream sockets.
pub fn socketpair() -> (
    std::os::unix::net::UnixStream,
    std::os::unix::net::UnixStream,
) {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}
