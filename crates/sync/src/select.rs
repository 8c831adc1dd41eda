//! Waiting on several channel operations at once: [`Select`] and [`select!`](crate::select!).
//!
//! # Design
//!
//! No coroutine or thread per arm (may's `select!` spawns one per branch). A select is one
//! waiting task with one heap-allocated waiter record:
//!
//! 1. **Try** every arm without waiting, starting at a random one (so that no arm starves);
//!    the first that completes wins. With a `default` arm, stop here.
//! 2. **Register** the waiter in every arm's channel (one queue entry per arm, all pointing to
//!    the same record, each with its arm's index and a message slot). While registering, each
//!    channel says whether its operation could complete now (a message arrived between 1 and
//!    2); if so, it does not queue that arm (a queued receive could be handed a newer message
//!    than the one buffered), and the select aborts its record, unregisters, and goes back to
//!    1. An arm that completed in an earlier wait of the same `Select` registers nowhere.
//! 3. **Park once.** A peer completes exactly one arm: it claims the record with one
//!    compare-and-swap (so two channels can never both complete it), moves the message into or
//!    out of that arm's slot, and wakes the task. A deadline aborts the record with the same
//!    compare-and-swap: whoever wins decides, so a message handed over as the deadline passes
//!    is received, not lost.
//! 4. **Unregister** from the other channels; the completed arm reads its slot.
//!
//! A waiting select is passive: it is registered and parked, never trying operations at the
//! same time, so two selects can never each claim the other (crossbeam's `Select` is built the
//! same way). If the select's coroutine is cancelled while parked, it unregisters everywhere,
//! and a message it was handed in that instant is put back at the front of its channel.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::chan::Chan;
use crate::chan::Slot;
use crate::chan::error::{RecvError, SendError, TryRecvError, TrySendError};
use crate::waiter::{Waiter, deadline_after};

pub(crate) mod sealed {
    use super::RecvError;

    /// Gives the select machinery the channel behind a sending handle.
    pub trait AsChan<T> {
        fn chan(&self) -> &crate::chan::Chan<T>;
    }

    /// Makes the select arm of a receiving handle (a channel's, or a oneshot's, which has no
    /// `Chan`).
    pub trait RecvArmSource<T> {
        fn recv_arm<'a>(&'a self, out: &'a mut Option<Result<T, RecvError>>) -> Box<dyn Arm + 'a>
        where
            T: 'a;
    }

    /// One arm of a select, type-erased.
    ///
    /// An arm completes at most once per `Select`: once it has (its `out` holds a result), it
    /// is *spent*, and `try_now` and `register` return
    /// false without touching its channel, so that a later wait neither takes another message
    /// (dropping the first: the caller cannot read `out` before the `Select` is dropped) nor
    /// reports the arm again.
    pub trait Arm {
        /// Whether this arm has completed already (see above).
        fn spent(&self) -> bool;
        /// Tries the operation without waiting; true if it completed (the result is stored).
        fn try_now(&mut self) -> bool;
        /// Registers `cx` with operation index `op`; true if the operation could complete now.
        fn register(&mut self, cx: &std::sync::Arc<crate::waiter::Waiter>, op: usize) -> bool;
        /// Removes the registration (this arm was not completed): a send arm takes its message
        /// back.
        fn unregister(&mut self, cx: &std::sync::Arc<crate::waiter::Waiter>);
        /// A peer completed this arm: read the result.
        fn complete(&mut self);
        /// A peer completed this arm but the select is unwinding (cancelled): do not lose what
        /// it was handed.
        fn complete_abandoned(&mut self);
    }
}

use sealed::Arm;

/// A receiving handle that can be an arm of a [`Select`] or [`select!`](crate::select!):
/// [`mpsc::Receiver`](crate::mpsc::Receiver), [`mpmc::Receiver`](crate::mpmc::Receiver),
/// [`oneshot::Receiver`](crate::oneshot::Receiver), and references to them.
pub trait SelectRecv<T>: sealed::RecvArmSource<T> {}

/// A sending handle that can be an arm of a [`Select`] or [`select!`](crate::select!):
/// [`mpsc::Sender`](crate::mpsc::Sender), [`mpmc::Sender`](crate::mpmc::Sender), and
/// references to them.
pub trait SelectSend<T>: sealed::AsChan<T> {}

impl<T, R: SelectRecv<T> + ?Sized> SelectRecv<T> for &R {}
impl<T, R: SelectSend<T> + ?Sized> SelectSend<T> for &R {}
impl<T, R: sealed::AsChan<T> + ?Sized> sealed::AsChan<T> for &R {
    fn chan(&self) -> &Chan<T> {
        (**self).chan()
    }
}
impl<T, R: sealed::RecvArmSource<T> + ?Sized> sealed::RecvArmSource<T> for &R {
    fn recv_arm<'a>(&'a self, out: &'a mut Option<Result<T, RecvError>>) -> Box<dyn Arm + 'a>
    where
        T: 'a,
    {
        (**self).recv_arm(out)
    }
}

/// The receive arm on a channel.
pub(crate) fn chan_recv_arm<'a, T: 'a>(
    chan: &'a Chan<T>,
    out: &'a mut Option<Result<T, RecvError>>,
) -> Box<dyn Arm + 'a> {
    Box::new(RecvArm {
        chan,
        out,
        slot: None,
    })
}

struct RecvArm<'a, T> {
    chan: &'a Chan<T>,
    out: &'a mut Option<Result<T, RecvError>>,
    slot: Option<Arc<Slot<T>>>,
}

impl<T> Arm for RecvArm<'_, T> {
    fn spent(&self) -> bool {
        self.out.is_some()
    }

    fn try_now(&mut self) -> bool {
        if self.spent() {
            return false;
        }
        match self.chan.try_recv() {
            Ok(msg) => *self.out = Some(Ok(msg)),
            Err(TryRecvError::Disconnected) => *self.out = Some(Err(RecvError)),
            Err(TryRecvError::Empty) => return false,
        }
        true
    }

    fn register(&mut self, cx: &Arc<Waiter>, op: usize) -> bool {
        if self.spent() {
            return false; // waits nowhere (see `Arm`)
        }
        let (slot, ready) = self.chan.register_recv(cx, op);
        self.slot = Some(slot);
        ready
    }

    fn unregister(&mut self, cx: &Arc<Waiter>) {
        // (No slot: spent, registered nowhere.)
        if self.slot.take().is_some() {
            self.chan.unregister_recv(cx);
        }
    }

    fn complete(&mut self) {
        let slot = self.slot.take().expect("a completed arm was registered");
        // SAFETY: the waiter was completed with this arm: the slot is ours.
        let msg = unsafe { slot.take() };
        if msg.is_some() {
            self.chan.handoff_taken();
        }
        *self.out = Some(msg.ok_or(RecvError));
    }

    fn complete_abandoned(&mut self) {
        if let Some(slot) = self.slot.take() {
            // SAFETY: as in `complete`.
            if let Some((msg, handover)) = unsafe { slot.take_handed() } {
                self.chan.requeue(msg, handover);
                self.chan.handoff_taken();
            }
        }
    }
}

struct SendArm<'a, T> {
    chan: &'a Chan<T>,
    msg: Option<T>,
    out: &'a mut Option<Result<(), SendError<T>>>,
    slot: Option<Arc<Slot<T>>>,
}

impl<T> Arm for SendArm<'_, T> {
    fn spent(&self) -> bool {
        self.out.is_some()
    }

    fn try_now(&mut self) -> bool {
        let Some(msg) = self.msg.take() else {
            return false;
        };
        match self.chan.try_send(msg) {
            Ok(()) => *self.out = Some(Ok(())),
            Err(TrySendError::Disconnected(m)) => *self.out = Some(Err(SendError(m))),
            Err(TrySendError::Full(m)) => {
                self.msg = Some(m);
                return false;
            }
        }
        true
    }

    fn register(&mut self, cx: &Arc<Waiter>, op: usize) -> bool {
        // A send arm completed by an earlier wait of this `Select` has no message left: it
        // can never complete again, so it waits nowhere. (Registered with an empty slot, a
        // zero-capacity channel's receiver claimed it as a rendezvous that carried nothing,
        // and on a channel with room it looked ready for ever without completing.)
        let Some(msg) = self.msg.take() else {
            return false;
        };
        let slot = Slot::new_arc(Some(msg));
        let ready = self.chan.register_send(cx, op, &slot);
        self.slot = Some(slot);
        ready
    }

    fn unregister(&mut self, cx: &Arc<Waiter>) {
        if let Some(slot) = self.slot.take() {
            self.chan.unregister_send(cx);
            // SAFETY: not completed with this arm and no longer registered: nobody else
            // touches the slot.
            self.msg = unsafe { slot.take() };
        }
    }

    fn complete(&mut self) {
        let slot = self.slot.take().expect("a completed arm was registered");
        // SAFETY: the waiter was completed with this arm: the slot is ours.
        *self.out = Some(match unsafe { slot.take() } {
            None => Ok(()),
            Some(m) => Err(SendError(m)),
        });
    }

    fn complete_abandoned(&mut self) {
        self.slot = None; // delivered (or the receivers are gone): nothing to undo
    }
}

/// Waits for the first of several channel operations to complete — the builder behind
/// [`select!`](crate::select!).
///
/// Each arm writes its result into an `Option` the caller lends; the wait returns the index of
/// the arm that completed (arms are numbered in the order they were added), or `None` for the
/// timeout / default. Exactly one arm completes.
///
/// ```
/// use std::time::Duration;
/// use spindle_sync::{Select, mpsc};
///
/// let (tx1, rx1) = mpsc::unbounded::<i32>();
/// let (tx2, rx2) = mpsc::bounded::<&str>(0);
/// tx1.send(7).unwrap();
///
/// let mut got = None;
/// let mut sent = None;
/// let index = {
///     let mut sel = Select::new();
///     sel.recv(&rx1, &mut got);
///     sel.send(&tx2, "hi", &mut sent); // nobody receives on rx2: not ready
///     sel.wait_timeout(Duration::from_secs(1))
/// };
/// assert_eq!(index, Some(0));
/// assert_eq!(got, Some(Ok(7)));
/// assert!(sent.is_none());
/// # drop((tx2, rx2));
/// ```
///
/// # Specification
///
/// * [`wait`](Select::wait): blocks until one arm completes; returns `Some(index)`. With no
///   arms (or none left: see below) it returns `None` at once.
/// * [`wait_timeout`](Select::wait_timeout) / [`wait_deadline`](Select::wait_deadline): `None`
///   if the deadline passes first (no arm completed, every send message is dropped with the
///   builder).
/// * [`try_wait`](Select::try_wait): the `default` arm: tries each arm once, `None` if none
///   is ready.
/// * A receive on a disconnected channel and a send to a channel without receivers are
///   *ready* (they complete at once, with an error), as in crossbeam.
/// * Messages of send arms that were not chosen are dropped with the builder.
/// * **Spurious wake-ups**: none. **Fairness**: arms are tried starting at a random one.
/// * **Budget**: every blocking wait (not [`try_wait`](Select::try_wait)) counts against the
///   runtime's cooperative budget before it tries an arm, as a blocking `send`/`recv` does.
/// * **Each arm completes at most once per `Select`.** Waiting again on the same `Select`
///   retries the arms that have not completed; one that has is spent: a receive arm does not
///   take another message (its `out` holds the first until the `Select` is dropped), a send
///   arm has no message left. Once every arm is spent, a wait acts as with no arms: `wait`
///   and `try_wait` return `None` at once, a timed wait sleeps out its timeout.
pub struct Select<'a> {
    arms: Vec<Box<dyn Arm + 'a>>,
}

impl<'a> Select<'a> {
    /// An empty select.
    pub fn new() -> Self {
        Select { arms: Vec::new() }
    }

    /// Adds a receive arm; its result goes to `out`. Returns the arm's index.
    pub fn recv<T: 'a, R: SelectRecv<T> + ?Sized>(
        &mut self,
        rx: &'a R,
        out: &'a mut Option<Result<T, RecvError>>,
    ) -> usize {
        self.arms.push(rx.recv_arm(out));
        self.arms.len() - 1
    }

    /// Adds a send arm of `msg`; its result goes to `out`. Returns the arm's index.
    pub fn send<T: 'a, S: SelectSend<T> + ?Sized>(
        &mut self,
        tx: &'a S,
        msg: T,
        out: &'a mut Option<Result<(), SendError<T>>>,
    ) -> usize {
        self.arms.push(Box::new(SendArm {
            chan: tx.chan(),
            msg: Some(msg),
            out,
            slot: None,
        }));
        self.arms.len() - 1
    }

    #[doc(hidden)]
    pub fn __arm_recv<T: 'a, R: SelectRecv<T> + ?Sized>(
        &mut self,
        rx: &'a R,
        _unit: (),
        out: &'a mut Option<Result<T, RecvError>>,
    ) {
        self.recv(rx, out);
    }

    #[doc(hidden)]
    pub fn __arm_send<T: 'a, S: SelectSend<T> + ?Sized>(
        &mut self,
        tx: &'a S,
        msg: T,
        out: &'a mut Option<Result<(), SendError<T>>>,
    ) {
        self.send(tx, msg, out);
    }

    /// Waits until an arm completes.
    pub fn wait(&mut self) -> Option<usize> {
        self.run(None, false)
    }

    /// Waits until an arm completes, at most `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<usize> {
        match deadline_after(timeout) {
            Some(deadline) => self.run(Some(deadline), false),
            None => self.run(None, false),
        }
    }

    /// Waits until an arm completes, until `deadline` at most.
    pub fn wait_deadline(&mut self, deadline: Instant) -> Option<usize> {
        self.run(Some(deadline), false)
    }

    /// Completes an arm that is ready now, if any.
    pub fn try_wait(&mut self) -> Option<usize> {
        self.run(None, true)
    }

    fn run(&mut self, deadline: Option<Instant>, nonblocking: bool) -> Option<usize> {
        let n = self.arms.len();
        if self.arms.iter().all(|arm| arm.spent()) {
            // No arms, or every arm completed in an earlier wait: nothing can complete (and a
            // `wait` would park for ever).
            if let (Some(deadline), false) = (deadline, nonblocking) {
                // Only a timeout: sleep it out.
                while crate::loom::park_until(deadline) == crate::loom::Wake::Woken {}
            }
            return None;
        }
        if !nonblocking {
            // A blocking select counts against the runtime's cooperative budget, as a blocking
            // `send`/`recv` does, and before it acts (the yield is a cancellation point): a
            // coroutine looping on a select whose arm is always ready would otherwise keep its
            // worker for ever.
            crate::loom::consume_budget();
        }
        loop {
            let start = random_below(n);
            for i in 0..n {
                let k = (start + i) % n;
                if self.arms[k].try_now() {
                    return Some(k);
                }
            }
            if nonblocking || deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            let cx = Waiter::new();
            let mut registered = 0;
            let mut ready = false;
            for (k, arm) in self.arms.iter_mut().enumerate() {
                registered += 1;
                if arm.register(&cx, k) {
                    ready = true;
                    break;
                }
            }
            let outcome = if ready {
                if cx.try_abort() {
                    for arm in &mut self.arms[..registered] {
                        arm.unregister(&cx);
                    }
                    continue;
                }
                // Completed by a peer while we were registering.
                Some(cx.completed_after_abort_failed())
            } else {
                let abandon = Abandon {
                    arms: &mut self.arms[..registered],
                    cx: &cx,
                };
                let outcome = cx.wait(deadline);
                std::mem::forget(abandon);
                outcome
            };
            for (j, arm) in self.arms[..registered].iter_mut().enumerate() {
                if Some(j) != outcome {
                    arm.unregister(&cx);
                }
            }
            if let Some(k) = outcome {
                self.arms[k].complete();
            }
            return outcome;
        }
    }
}

impl Default for Select<'_> {
    fn default() -> Self {
        Select::new()
    }
}

impl fmt::Debug for Select<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Select")
            .field("arms", &self.arms.len())
            .finish()
    }
}

/// A select unwinds out of its park (cancelled): unregister everywhere; keep a message it was
/// handed in that instant.
struct Abandon<'s, 'a> {
    arms: &'s mut [Box<dyn Arm + 'a>],
    cx: &'s Arc<Waiter>,
}

impl Drop for Abandon<'_, '_> {
    fn drop(&mut self) {
        let completed = if self.cx.try_abort() {
            None
        } else {
            Some(self.cx.completed_after_abort_failed())
        };
        for (j, arm) in self.arms.iter_mut().enumerate() {
            if Some(j) == completed {
                arm.complete_abandoned();
            } else {
                arm.unregister(self.cx);
            }
        }
    }
}

/// A pseudo-random index below `n` (xorshift per thread); 0 under loom (determinism).
fn random_below(n: usize) -> usize {
    #[cfg(loom)]
    {
        let _ = n;
        0
    }
    #[cfg(not(loom))]
    {
        use std::cell::Cell;
        thread_local! {
            static STATE: Cell<u32> = const { Cell::new(0) };
        }
        if n <= 1 {
            return 0;
        }
        let r = STATE
            .try_with(|s| {
                let mut x = s.get();
                if x == 0 {
                    // Seed from the address of the thread-local (differs per thread).
                    x = (s as *const Cell<u32> as usize as u32) | 1;
                }
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                s.set(x);
                x
            })
            .unwrap_or(0);
        r as usize % n
    }
}

/// Waits on several channel operations at once and runs the arm of the one that completes.
///
/// ```text
/// select! {
///     recv(receiver) -> result => body,        // result: Result<T, RecvError>
///     send(sender, message) -> result => body, // result: Result<(), SendError<T>>
///     default => body,                         // none ready now
///     timeout(duration) => body,               // or `default(duration)` (crossbeam's
///                                              // spelling), or `deadline(instant)`
/// }
/// ```
///
/// Any number of `recv` and `send` arms (on [`mpsc`](crate::mpsc), [`mpmc`](crate::mpmc) and
/// [`oneshot`](crate::oneshot) handles, in any mix) and at most one of `default`, `timeout`,
/// `deadline`, and at least one arm in all (`select! {}` does not compile: nothing could
/// complete it). Bodies are blocks or expressions followed by a comma; the `select!` is an
/// expression whose value is the body's that ran. The receiver, sender and message
/// expressions are all evaluated first, in order; messages of send arms that do not run are
/// dropped. See [`Select`] for the semantics and the design (no coroutine per arm).
///
/// ```
/// use std::time::Duration;
/// use spindle_sync::{mpmc, select};
///
/// let (tx, rx) = mpmc::unbounded::<u32>();
/// let (done_tx, done_rx) = mpmc::bounded::<()>(0);
/// std::thread::spawn(move || {
///     tx.send(1).unwrap();
///     done_tx.send(()).unwrap();
/// });
/// let mut total = 0;
/// loop {
///     select! {
///         recv(rx) -> msg => total += msg.unwrap(),
///         recv(done_rx) -> _ => break,
///         timeout(Duration::from_secs(5)) => panic!("stuck"),
///     }
/// }
/// // `done` may win the race with the last message: collect what is left.
/// total += rx.try_iter().sum::<u32>();
/// assert_eq!(total, 1);
/// ```
///
/// ```compile_fail
/// spindle_sync::select! {} // error: select! needs at least one arm
/// ```
#[macro_export]
macro_rules! select {
    ($($tokens:tt)*) => {
        $crate::__select_parse!(() () ($($tokens)*))
    };
}

/// Parses `select!` arms into a normal form (one recursion per arm, so that each arm's result
/// variable `__out` gets its own hygiene context).
#[doc(hidden)]
#[macro_export]
macro_rules! __select_parse {
    // No arm at all: it could only block for ever (`Select::wait` returns `None` at once,
    // for which a `select!` has no body).
    (() () ()) => {
        ::core::compile_error!("select! needs at least one arm")
    };
    // End.
    (($($arms:tt)*) ($($special:tt)*) ()) => {
        $crate::__select_gen!(($($arms)*) ($($special)*))
    };
    // Commas between arms.
    ($arms:tt $special:tt (, $($rest:tt)*)) => {
        $crate::__select_parse!($arms $special ($($rest)*))
    };
    // recv
    (($($arms:tt)*) $special:tt (recv($r:expr) -> $p:pat => $body:block $($rest:tt)*)) => {
        $crate::__select_parse!(
            ($($arms)* [__arm_recv ($r) (()) ($p) $body __out]) $special ($($rest)*))
    };
    (($($arms:tt)*) $special:tt (recv($r:expr) -> $p:pat => $body:expr, $($rest:tt)*)) => {
        $crate::__select_parse!(
            ($($arms)* [__arm_recv ($r) (()) ($p) { $body } __out]) $special ($($rest)*))
    };
    (($($arms:tt)*) $special:tt (recv($r:expr) -> $p:pat => $body:expr)) => {
        $crate::__select_parse!(
            ($($arms)* [__arm_recv ($r) (()) ($p) { $body } __out]) $special ())
    };
    // send
    (($($arms:tt)*) $special:tt (send($s:expr, $m:expr) -> $p:pat => $body:block $($rest:tt)*)) => {
        $crate::__select_parse!(
            ($($arms)* [__arm_send ($s) ($m) ($p) $body __out]) $special ($($rest)*))
    };
    (($($arms:tt)*) $special:tt (send($s:expr, $m:expr) -> $p:pat => $body:expr, $($rest:tt)*)) => {
        $crate::__select_parse!(
            ($($arms)* [__arm_send ($s) ($m) ($p) { $body } __out]) $special ($($rest)*))
    };
    (($($arms:tt)*) $special:tt (send($s:expr, $m:expr) -> $p:pat => $body:expr)) => {
        $crate::__select_parse!(
            ($($arms)* [__arm_send ($s) ($m) ($p) { $body } __out]) $special ())
    };
    // default / timeout / deadline: at most one.
    ($arms:tt ($($special:tt)+) (default $($rest:tt)*)) => {
        ::core::compile_error!("select! takes at most one `default`, `timeout` or `deadline` arm")
    };
    ($arms:tt ($($special:tt)+) (timeout $($rest:tt)*)) => {
        ::core::compile_error!("select! takes at most one `default`, `timeout` or `deadline` arm")
    };
    ($arms:tt ($($special:tt)+) (deadline $($rest:tt)*)) => {
        ::core::compile_error!("select! takes at most one `default`, `timeout` or `deadline` arm")
    };
    // `default(duration)`: crossbeam's spelling of `timeout(duration)`.
    ($arms:tt () (default($d:expr) => $body:block $($rest:tt)*)) => {
        $crate::__select_parse!($arms (wait_timeout ($d) $body) ($($rest)*))
    };
    ($arms:tt () (default($d:expr) => $body:expr, $($rest:tt)*)) => {
        $crate::__select_parse!($arms (wait_timeout ($d) { $body }) ($($rest)*))
    };
    ($arms:tt () (default($d:expr) => $body:expr)) => {
        $crate::__select_parse!($arms (wait_timeout ($d) { $body }) ())
    };
    ($arms:tt () (default => $body:block $($rest:tt)*)) => {
        $crate::__select_parse!($arms (try_wait () $body) ($($rest)*))
    };
    ($arms:tt () (default => $body:expr, $($rest:tt)*)) => {
        $crate::__select_parse!($arms (try_wait () { $body }) ($($rest)*))
    };
    ($arms:tt () (default => $body:expr)) => {
        $crate::__select_parse!($arms (try_wait () { $body }) ())
    };
    ($arms:tt () (timeout($d:expr) => $body:block $($rest:tt)*)) => {
        $crate::__select_parse!($arms (wait_timeout ($d) $body) ($($rest)*))
    };
    ($arms:tt () (timeout($d:expr) => $body:expr, $($rest:tt)*)) => {
        $crate::__select_parse!($arms (wait_timeout ($d) { $body }) ($($rest)*))
    };
    ($arms:tt () (timeout($d:expr) => $body:expr)) => {
        $crate::__select_parse!($arms (wait_timeout ($d) { $body }) ())
    };
    ($arms:tt () (deadline($d:expr) => $body:block $($rest:tt)*)) => {
        $crate::__select_parse!($arms (wait_deadline ($d) $body) ($($rest)*))
    };
    ($arms:tt () (deadline($d:expr) => $body:expr, $($rest:tt)*)) => {
        $crate::__select_parse!($arms (wait_deadline ($d) { $body }) ($($rest)*))
    };
    ($arms:tt () (deadline($d:expr) => $body:expr)) => {
        $crate::__select_parse!($arms (wait_deadline ($d) { $body }) ())
    };
    ($arms:tt $special:tt ($($rest:tt)+)) => {
        ::core::compile_error!(
            "select!: expected `recv(r) -> pat => body`, `send(s, msg) -> pat => body`, \
             `default => body`, `timeout(duration) => body` or `deadline(instant) => body`")
    };
}

/// Generates a parsed `select!`.
#[doc(hidden)]
#[macro_export]
macro_rules! __select_gen {
    (($([$method:ident ($chan:expr) ($msg:expr) ($p:pat) $body:block $out:ident])*) ()) => {{
        $( let mut $out = ::core::option::Option::None; )*
        {
            let mut __sel = $crate::Select::new();
            $( __sel.$method(&$chan, $msg, &mut $out); )*
            let _ = __sel.wait();
        }
        $(
            if let ::core::option::Option::Some(__v) = $out.take() {
                let $p = __v;
                $body
            } else
        )*
        {
            ::core::unreachable!("select! returned without completing an arm")
        }
    }};
    (($([$method:ident ($chan:expr) ($msg:expr) ($p:pat) $body:block $out:ident])*)
     ($wait:ident ($($arg:expr)?) $special:block)) => {{
        $( let mut $out = ::core::option::Option::None; )*
        {
            let mut __sel = $crate::Select::new();
            $( __sel.$method(&$chan, $msg, &mut $out); )*
            let _ = __sel.$wait($($arg)?);
        }
        $(
            if let ::core::option::Option::Some(__v) = $out.take() {
                let $p = __v;
                $body
            } else
        )*
        $special
    }};
}
