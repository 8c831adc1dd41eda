//! The coroutine: creation, resume, and the forced unwind on drop.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{self, ManuallyDrop};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr::{self, NonNull};

use spindle_context::{Context, Entry, Link, MIN_STACK_SIZE, STACK_RESERVED, Transfer};
use spindle_stack::{Owner, Stack, StackError, StackPool};
#[cfg(feature = "stack-shared")]
use spindle_stack::{SharedSlot, SharedStack};

use crate::exchange::{ForcedUnwind, PANICKED, RETURNED, Slot, TAG, UNWIND, UNWOUND, YIELDED};
use crate::sanitizer::Fiber;
use crate::{DefaultStack, Yielder, id};

/// A marker that makes a type `!Send` and `!Sync`.
pub(crate) type NotSend = PhantomData<*mut ()>;

/// What a [`resume`](Coroutine::resume) produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoroutineResult<Yield, Return> {
    /// The coroutine suspended with this value; it can be resumed again.
    Yield(Yield),
    /// The coroutine's closure returned this value; the coroutine is finished.
    Return(Return),
}

impl<Yield, Return> CoroutineResult<Yield, Return> {
    /// The yielded value, if the coroutine suspended.
    pub fn into_yield(self) -> Option<Yield> {
        match self {
            CoroutineResult::Yield(y) => Some(y),
            CoroutineResult::Return(_) => None,
        }
    }

    /// The return value, if the coroutine finished.
    pub fn into_return(self) -> Option<Return> {
        match self {
            CoroutineResult::Yield(_) => None,
            CoroutineResult::Return(r) => Some(r),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Made, never resumed: the closure waits in `initial`. On a stack the coroutine owns this
    /// also covers "resumed, not finished" (the link tells the two apart: `has_started`), so
    /// that resuming stores nothing but the new context.
    NotStarted,
    /// Suspended in `Yielder::suspend`: `context` holds it.
    Suspended,
    /// Returned, panicked or unwound: nothing of it is left on its stack.
    Finished,
}

/// The closure of a coroutine that has not started, type-erased.
///
/// On a stack the coroutine owns, the closure lives in the *closure slot* right above the
/// context's top (the word above the [`Link`]): the closure itself for small closures, or a
/// pointer to a boxed closure for big ones. The entry function, monomorphised for the
/// placement, finds it there from its link; so the first resume is exactly like every other
/// one. On a copying stack the closure is boxed and handed to the entry with the first resume's
/// input instead (see [`FirstResume`]): the region is not the coroutine's until then, and a
/// closure slot would stay in the bytes saved at every eviction.
struct Initial {
    /// The closure (on the stack) or the box holding it.
    closure: NonNull<u8>,
    /// How to run or drop it.
    vtable: &'static InitialVtable,
}

/// The type-specific operations on an [`Initial`] closure (one static table per closure type
/// and placement, so a coroutine carries one pointer instead of two).
struct InitialVtable {
    /// Drops the closure without running it (the coroutine is dropped before it started).
    drop: unsafe fn(NonNull<u8>),
    /// The monomorphised entry function.
    entry: Entry,
}

/// The vtables, as associated constants so that `&Vtables::<..>::IN_PLACE` is promoted to a
/// `'static`.
struct Vtables<F, Input, Yield, Return>(PhantomData<(F, Input, Yield, Return)>);

impl<F, Input, Yield, Return> Vtables<F, Input, Yield, Return>
where
    F: FnOnce(&Yielder<Input, Yield>, Input) -> Return,
{
    const IN_PLACE: InitialVtable = InitialVtable {
        drop: drop_in_place::<F>,
        entry: coroutine_entry::<F, Input, Yield, Return, InPlace>,
    };
    const BOXED: InitialVtable = InitialVtable {
        drop: drop_box::<F>,
        entry: coroutine_entry::<F, Input, Yield, Return, Boxed>,
    };
    const HANDED: InitialVtable = InitialVtable {
        drop: drop_box::<F>,
        entry: coroutine_entry::<F, Input, Yield, Return, Handed>,
    };
}

/// What the first resume of a coroutine on a copying stack sends instead of its input slot's
/// word: that word and the boxed closure. It lives in the resumer's frame, like the input slot,
/// and the entry reads it right after the switch.
#[repr(C, align(8))]
struct FirstResume {
    /// The input slot's word, as every other resume sends it.
    input: usize,
    /// The `Box<F>`'s pointer.
    closure: NonNull<u8>,
}

/// Where the entry finds its closure: the placement, as a type parameter of the entry.
trait Placement {
    /// Moves the closure out of where this placement keeps it, given the link and the word
    /// the first resume sent, which it leaves as the input slot's word.
    ///
    /// # Safety
    ///
    /// `link` and `first` are those of the first resume of a coroutine placed this way; this
    /// runs once per coroutine.
    unsafe fn take<F>(link: Link, first: &mut usize) -> F;
}

/// The closure itself is in the closure slot (the word above the link, and up).
struct InPlace;
/// The closure slot holds a `Box<F>`'s pointer.
struct Boxed;
/// The first resume sends a [`FirstResume`] with a `Box<F>`'s pointer (copying stacks).
struct Handed;

impl Placement for InPlace {
    unsafe fn take<F>(link: Link, _: &mut usize) -> F {
        // SAFETY: the closure slot, the word above the link, holds a live F that is moved out
        // exactly once (caller's contract; see `assemble`).
        unsafe { ptr::read(link.as_ptr().wrapping_add(1).cast::<F>()) }
    }
}

impl Placement for Boxed {
    unsafe fn take<F>(link: Link, _: &mut usize) -> F {
        // SAFETY: the closure slot, the word above the link, holds the pointer of a `Box<F>`
        // (caller's contract; see `assemble`); the box is consumed exactly once.
        unsafe { *Box::from_raw(link.as_ptr().wrapping_add(1).cast::<*mut F>().read()) }
    }
}

impl Placement for Handed {
    unsafe fn take<F>(_: Link, first: &mut usize) -> F {
        // SAFETY: the first resume of a coroutine placed this way sends the address of a
        // `FirstResume` in its frame, alive until we switch back (see `try_resume`).
        let handed = unsafe { ptr::read(*first as *const FirstResume) };
        *first = handed.input;
        // SAFETY: its closure is the pointer of a `Box<F>` (see `assemble`), consumed exactly
        // once (caller's contract).
        unsafe { *Box::from_raw(handed.closure.as_ptr().cast::<F>()) }
    }
}

/// A stackful coroutine: a closure running on its own stack, which can suspend at any depth.
///
/// `Input` is what [`resume`](Coroutine::resume) sends in (the closure's second argument for
/// the first resume, the return value of [`Yielder::suspend`] afterwards), `Yield` what the
/// coroutine hands out when it suspends, `Return` what its closure returns. `S` is the stack
/// kind (see the [crate docs](crate#stacks)).
///
/// See the [crate docs](crate) for an example and the guarantees: panics cross back to the
/// resumer, dropping unwinds the coroutine's stack, `mem::forget` only leaks, and a coroutine
/// stays on its thread.
///
/// # Thread exit
///
/// A suspended coroutine may hold a reference into a thread-local across its suspension
/// (`KEY.with(|v| { yielder.suspend(()); v.get() })`). Thread-locals are destroyed when their
/// thread exits, so **once a thread has begun destroying its thread-locals, no coroutine runs
/// on it again**: [`try_resume`](Coroutine::try_resume) returns
/// [`ResumeErrorKind::ThreadExiting`] (and [`resume`](Coroutine::resume) panics with it), and
/// dropping a started, unfinished coroutine leaks its stack with its frames, as `mem::forget`
/// would, instead of unwinding them. A coroutine kept in a `thread_local!` is dropped exactly
/// then: drop it before the thread ends if its destructors must run. A coroutine that never
/// started is dropped as usual (its closure holds no borrow).
///
/// On Linux with glibc and on Windows this holds for every thread-local; on other targets, for
/// those first used before the thread's first resume (see the crate docs).
pub struct Coroutine<Input, Yield, Return, S: Stack = DefaultStack> {
    /// Dropped by hand: after the coroutine's frames are gone, or never if they cannot be
    /// unwound (then it leaks, like `mem::forget`).
    stack: ManuallyDrop<S>,
    /// The suspended coroutine (`Suspended`, or `NotStarted` on a stack that is not copying).
    context: Option<Context>,
    /// The slot at the top of the stack through which the coroutine finds its resumer.
    link: Link,
    /// The closure, until the first resume.
    initial: Option<Initial>,
    state: State,
    /// [`Builder::allow_suspend_while_unwinding`] was set.
    suspend_while_unwinding: bool,
    id: u64,
    /// The sanitizers' view of the coroutine (zero-sized unless a sanitizer cfg is set).
    fiber: Fiber,
    /// `!Send` and `!Sync`: a started stack may hold thread-bound data. The function types make
    /// the struct covariant/contravariant the way its uses are.
    _not_send: NotSend,
    _types: PhantomData<fn(Input) -> (Yield, Return)>,
}

/// Why [`Coroutine::try_resume`] did not resume; the input comes back.
pub struct ResumeError<Input> {
    /// What went wrong.
    pub kind: ResumeErrorKind,
    /// The input that was not delivered.
    pub input: Input,
}

/// The reasons a resume can be refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum ResumeErrorKind {
    /// The coroutine has already finished (returned or panicked).
    Finished,
    /// A copying stack could not be switched to this coroutine (see
    /// [`Stack::before_resume`]): the save buffer of the region's occupant could not be
    /// allocated, or the region is in use by a running coroutine.
    Stack(StackError),
    /// The thread has begun destroying its thread-locals (it is exiting): no coroutine runs
    /// on it any more, since a suspended one may hold a reference into a thread-local that is
    /// already gone. See [`Coroutine`]'s section on thread exit.
    ThreadExiting,
}

impl<Input> fmt::Debug for ResumeError<Input> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumeError")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl<Input> fmt::Display for ResumeError<Input> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ResumeErrorKind::Finished => f.write_str(
                "cannot resume a coroutine that has finished (check `is_finished()` first)",
            ),
            ResumeErrorKind::Stack(e) => write!(f, "cannot resume the coroutine: {e}"),
            ResumeErrorKind::ThreadExiting => f.write_str(
                "cannot resume a coroutine while its thread destroys its thread-locals (the \
                 thread is exiting); the coroutine is left as it is and leaked when dropped",
            ),
        }
    }
}

impl<Input> std::error::Error for ResumeError<Input> {}

/// Closures larger than this go in a `Box` instead of on the coroutine's stack, so that a huge
/// capture cannot eat the stack.
const MAX_CLOSURE_ON_STACK: usize = 1024;

/// The least stack below the closure slot that a coroutine is built with: the context's
/// reserved words and the smallest stack a context accepts. (With the slot, which takes less
/// than `2 * MAX_CLOSURE_ON_STACK` bytes, well under a page.)
const MIN_FRAME_ROOM: usize = STACK_RESERVED + MIN_STACK_SIZE;

/// A stack without room for the coroutine's first frame was given to a coroutine (`usable`
/// is `None` if its top lies below its limit).
#[cold]
#[inline(never)]
#[track_caller]
fn stack_too_small(usable: Option<usize>) -> ! {
    match usable {
        Some(usable) => panic!(
            "the stack given to the coroutine is too small for its first frame ({usable} usable \
             bytes); use a stack of at least a page"
        ),
        None => panic!("the stack given to the coroutine has its top below its limit"),
    }
}

impl<Input, Yield, Return> Coroutine<Input, Yield, Return, DefaultStack>
where
    Input: 'static,
    Yield: 'static,
    Return: 'static,
{
    /// A coroutine running `f` on a stack from the global [`StackPool`].
    ///
    /// Nothing runs until the first [`resume`](Coroutine::resume), whose input becomes `f`'s
    /// second argument.
    ///
    /// # Errors
    ///
    /// The pool could not provide a stack (out of memory, or the `vm.max_map_count` limit —
    /// the error says which and what to do).
    #[inline]
    pub fn new<F>(f: F) -> Result<Self, StackError>
    where
        F: FnOnce(&Yielder<Input, Yield>, Input) -> Return + 'static,
    {
        Builder::new().build(f)
    }
}

impl<Input, Yield, Return, S> Coroutine<Input, Yield, Return, S>
where
    Input: 'static,
    Yield: 'static,
    Return: 'static,
    S: Stack,
{
    /// A coroutine running `f` on `stack`. The stack is released (dropped) after the coroutine
    /// is dropped and its frames are gone.
    ///
    /// For a [`SharedStack`] use [`with_shared_stack`](Coroutine::with_shared_stack); passing a
    /// copying stack here is a compile-time error.
    ///
    /// ```
    /// use spindle_coro::{Coroutine, CoroutineResult};
    /// use spindle_stack::FixedStack;
    ///
    /// let stack = FixedStack::new(256 * 1024)?;
    /// let mut co = Coroutine::with_stack(stack, |_: &spindle_coro::Yielder<(), ()>, ()| 42);
    /// assert_eq!(co.resume(()), CoroutineResult::Return(42));
    /// # Ok::<(), spindle_stack::StackError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// As [`Builder::build_with_stack`]: only for a foreign [`Stack`] too small for the
    /// coroutine's first frame.
    pub fn with_stack<F>(stack: S, f: F) -> Self
    where
        F: FnOnce(&Yielder<Input, Yield>, Input) -> Return + 'static,
    {
        Builder::new().build_with_stack(stack, f)
    }
}

impl<Input, Yield, Return, S: Stack> Coroutine<Input, Yield, Return, S> {
    /// The coroutine's id: unique in this process, and what a stack-overflow message prints
    /// for an unnamed coroutine.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// True once the closure has returned or panicked (or the coroutine was unwound).
    pub fn is_finished(&self) -> bool {
        self.state == State::Finished
    }

    /// True once the coroutine has been resumed at least once.
    pub fn is_started(&self) -> bool {
        self.has_started()
    }

    /// The stack the coroutine runs on.
    pub fn stack(&self) -> &S {
        &self.stack
    }

    /// Runs the coroutine until it suspends or finishes.
    ///
    /// On the first call, `input` is the closure's second argument; afterwards it is what the
    /// pending [`Yielder::suspend`] returns.
    ///
    /// # Panics
    ///
    /// * If the coroutine panics, the panic is re-raised here with its payload (the coroutine
    ///   is then finished).
    /// * If the coroutine has already finished, or — for shared stacks only — if the switch
    ///   cannot happen (see [`try_resume`](Coroutine::try_resume), which returns these as
    ///   errors instead).
    // Always inlined: a scheduler's resume is its hot path, and out of line it costs a call,
    // a return and the saves around them on every switch (the inliner's size estimate counts
    // the switch's checks, which are mostly cold).
    #[inline(always)]
    pub fn resume(&mut self, input: Input) -> CoroutineResult<Yield, Return> {
        match self.try_resume(input) {
            Ok(result) => result,
            Err(e) => resume_failed(&e),
        }
    }

    /// Like [`resume`](Coroutine::resume), but returns the input with an error instead of
    /// panicking when the coroutine cannot be resumed: it has finished, or its copying stack
    /// could not be switched (out of memory for the save buffer, or the region is occupied by
    /// the running coroutine — a coroutine cannot resume another one on its own region).
    /// A panic inside the coroutine is still re-raised.
    #[inline(always)]
    pub fn try_resume(
        &mut self,
        input: Input,
    ) -> Result<CoroutineResult<Yield, Return>, ResumeError<Input>> {
        if !crate::thread_exit::ready_to_resume() {
            return Err(ResumeError {
                kind: ResumeErrorKind::ThreadExiting,
                input,
            });
        }
        // On a copying stack, the closure to hand to the entry if this is the first resume.
        let mut handed = None;
        if S::COPYING {
            // SAFETY: we are on the thread that owns the stack (the coroutine is !Send), in the
            // resumer, not on the region (a coroutine running on it would be its occupant and
            // make this fail with `SharedStackBusy`).
            match unsafe { self.take_region() } {
                Ok(closure) => handed = closure,
                Err(kind) => return Err(ResumeError { kind, input }),
            }
        }
        // Not started (on a stack it owns) and suspended look the same from here: a context to
        // resume with an exchange. Finished coroutines have none.
        let Some(context) = &self.context else {
            return Err(ResumeError {
                kind: ResumeErrorKind::Finished,
                input,
            });
        };
        // The field keeps its (now stale) value until the switch back overwrites it: not
        // clearing it keeps the loop-carried context in a register instead of a store/reload.
        // SAFETY: the pointer of a suspended context, which this resume consumes.
        let context = unsafe { Context::from_ptr(context.as_ptr()) };
        let input = Slot::new(input);
        let first;
        let word = match handed {
            None => input.word(0),
            Some(closure) => {
                first = FirstResume {
                    input: input.word(0),
                    closure,
                };
                ptr::from_ref(&first).addr()
            }
        };
        // SAFETY: the coroutine is fresh or suspended in `Yielder::suspend`, on its own stack,
        // which is alive (we own it) and holds its bytes (restored for a copying stack). The
        // coroutine moves the input out of `input` (and, on a copying stack's first resume, the
        // closure out of `first`) before it switches back.
        let t = unsafe { self.switch_in(context, word) };
        Ok(self.switched_back(t))
    }

    /// Switches into the coroutine with `data` (`Context::resume` with our link), the
    /// sanitizers told (see the `sanitizer` module; nothing but the switch without them).
    ///
    /// Aborts if the coroutine suspended while it unwinds (see
    /// [`suspended_while_unwinding`](Self::suspended_while_unwinding)).
    ///
    /// # Safety
    ///
    /// `context` is this coroutine's suspended context, its stack alive and holding its
    /// bytes, and `data` what the coroutine expects (an input slot that lives until it
    /// switches back, or `UNWIND`).
    #[inline(always)]
    unsafe fn switch_in(&mut self, context: Context, data: usize) -> Transfer {
        // The panic count is the thread's: if it is higher when the coroutine switches back
        // than it was here, a panic is in flight on the coroutine's stack. (Not watched for a
        // coroutine allowed to suspend while it unwinds, except in a forced unwind: two reads
        // of the count per resume that a scheduler's hot path need not pay.)
        let watch = !self.suspend_while_unwinding || data == UNWIND;
        let resumer_panicking = watch && std::thread::panicking();
        // SAFETY: the switch follows, `leave` right after it; the stack's bounds do not change
        // while it lives, and the coroutine has a context, so it has not finished.
        let resumer = unsafe { self.fiber.enter(self.stack.limit(), self.stack.top()) };
        // SAFETY: forwarded contract; `link` is that stack's link slot.
        let t = unsafe { context.resume(data, self.link) };
        // SAFETY: right after the switch back, with what `enter` returned.
        unsafe { self.fiber.leave(resumer) };
        if watch && std::thread::panicking() && !resumer_panicking {
            self.suspended_while_unwinding(t.data, data == UNWIND);
        }
        t
    }

    /// The coroutine switched back while a panic of its own is in flight (only a suspend
    /// can do that: a finished coroutine's panic was caught at its entry). It suspended while
    /// it unwinds — from a destructor, or from the panic hook. Aborts, unless `forced` is
    /// false and the builder allowed it: then the resumer carries on, panicking as far as
    /// `std::thread::panicking()` can tell, until the coroutine's unwind ends.
    #[cold]
    #[inline(never)]
    fn suspended_while_unwinding(&self, word: usize, forced: bool) {
        if word & TAG != YIELDED || (!forced && self.suspend_while_unwinding) {
            return;
        }
        let why = if forced {
            "called Yielder::suspend from a destructor during the forced unwind of its drop, \
             which cannot go on"
        } else {
            "called Yielder::suspend during a panic's unwind (from a destructor or the panic \
             hook), which would leave its resumer with std::thread::panicking() = true, \
             poisoning every lock it releases (Builder::allow_suspend_while_unwinding allows it \
             for resumers written for that)"
        };
        // Named as an overflow message names it: by the owner recorded on its stack (a
        // runtime's task name and id, or the builder's name), else by its own id.
        let who = spindle_stack::describe_owner(self.stack.limit())
            .unwrap_or_else(|| format!("coroutine #{}", self.id));
        let line = format!(
            "spindle: a coroutine cannot suspend while it unwinds: {who} {why}; aborting\n"
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        std::process::abort()
    }

    /// Copying stacks: makes the region ours (evicting its occupant), and on the first resume
    /// builds the coroutine's first frame there and returns the boxed closure, which that
    /// resume hands to the entry (see [`FirstResume`]).
    ///
    /// # Safety
    ///
    /// As for [`Stack::before_resume`].
    #[cold]
    unsafe fn take_region(&mut self) -> Result<Option<NonNull<u8>>, ResumeErrorKind> {
        match self.state {
            State::Finished => Err(ResumeErrorKind::Finished),
            State::Suspended => {
                let sp = self.context.as_ref().map(Context::as_ptr);
                // SAFETY: forwarded contract.
                unsafe { self.stack.before_resume(sp) }.map_err(ResumeErrorKind::Stack)?;
                Ok(None)
            }
            State::NotStarted => {
                // SAFETY: forwarded contract; nothing to restore yet.
                unsafe { self.stack.before_resume(None) }.map_err(ResumeErrorKind::Stack)?;
                // The resume that follows starts it (a copying stack's link may hold another
                // coroutine's bytes later, so the state, not the link, says so).
                self.state = State::Suspended;
                let Some(initial) = &self.initial else {
                    unreachable!("a coroutine that has not started has its closure")
                };
                // The region is ours: build the first frame right under its top (the word
                // above the link; see `assemble`). No closure slot: the resume hands the
                // closure over.
                let context_top = self.link.as_ptr().wrapping_add(1) as usize;
                let size = context_top - self.stack.limit().as_ptr() as usize;
                // SAFETY: `[limit, context_top)` is the region, ours until we are evicted, which
                // saves whatever we leave there; `context_top` is its top, non-null.
                self.context = Some(unsafe {
                    Context::new(
                        NonNull::new_unchecked(context_top as *mut u8),
                        size,
                        initial.vtable.entry,
                    )
                });
                Ok(Some(initial.closure))
            }
        }
    }

    /// Interprets the word the coroutine switched back with.
    #[inline]
    fn switched_back(&mut self, t: Transfer) -> CoroutineResult<Yield, Return> {
        match t.data & TAG {
            YIELDED => {
                // SAFETY: the coroutine sent a slot with the yielded value on its stack, which
                // stays put while it is suspended (for a copying stack: until another coroutine
                // takes the region, which cannot happen before we return).
                let value = unsafe { Slot::<Yield>::take_untagged(t.data) };
                if S::COPYING {
                    // SAFETY: the coroutine has just suspended with this stack pointer.
                    unsafe { self.stack.after_suspend(t.context.as_ptr()) };
                }
                // (The state stays `NotStarted` after a first resume on a stack the coroutine
                // owns: its link tells, see `has_started`, so the hot path stores nothing more.)
                self.context = Some(t.context);
                CoroutineResult::Yield(value)
            }
            RETURNED => {
                // SAFETY: the entry sent a slot with the return value; it never runs again.
                let value = unsafe { Slot::<Return>::take(t.data) };
                self.finished(t.context.as_ptr());
                CoroutineResult::Return(value)
            }
            PANICKED => {
                // SAFETY: the entry sent a slot with the panic payload; it never runs again.
                let payload = unsafe { Slot::<Box<dyn Any + Send>>::take(t.data) };
                self.finished(t.context.as_ptr());
                resume_unwind(payload)
            }
            other => unreachable!("a plain resume is never answered with tag {other}"),
        }
    }

    /// Whether the coroutine has run. Copying stacks record it in the state; on other stacks
    /// the state says `NotStarted` until the coroutine finishes and the link tells (the first
    /// resume records a resumer there), which keeps a store off the resume path.
    fn has_started(&self) -> bool {
        match self.state {
            State::Finished | State::Suspended => true,
            // SAFETY: a coroutine that is not finished on a stack it owns keeps its bytes on
            // that stack, link included.
            State::NotStarted => !S::COPYING && unsafe { self.link.has_resumer() },
        }
    }

    /// Records that the coroutine finished, its last switch back made with stack pointer `sp`.
    fn finished(&mut self, sp: NonNull<u8>) {
        self.state = State::Finished;
        self.context = None;
        // SAFETY: the coroutine has just switched back for the last time, with `sp`, from the
        // stack whose top this is.
        unsafe { self.fiber.finish(sp, self.stack.top()) };
        if S::COPYING {
            // SAFETY: the coroutine finished; nothing of it is left on the region.
            unsafe { self.stack.after_finish() };
        }
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn resume_failed<Input>(e: &ResumeError<Input>) -> ! {
    panic!("{e}")
}

impl<Input, Yield, Return, S: Stack> Drop for Coroutine<Input, Yield, Return, S> {
    // Inlined: a finished coroutine (the common case, which the caller often knows) only
    // returns its stack; the rest is out of line in `finish_for_drop`.
    #[inline]
    fn drop(&mut self) {
        if self.state != State::Finished && !self.finish_for_drop() {
            // Its frames could not be unwound: leak the stack with them, exactly as
            // `mem::forget` would (freeing it could break pinned values on it).
            return;
        }
        // SAFETY: the coroutine's frames are gone (never started, unwound, or finished), and
        // the stack is dropped exactly once (`force_unwind` unwinds out of here if it dropped
        // it itself).
        unsafe { ManuallyDrop::drop(&mut self.stack) };
    }
}

impl<Input, Yield, Return, S: Stack> Coroutine<Input, Yield, Return, S> {
    /// The drop of a coroutine that has not finished: drops the closure of one that never
    /// started, unwinds one that did. False if its frames must be leaked with its stack.
    #[cold]
    #[inline(never)]
    fn finish_for_drop(&mut self) -> bool {
        if !self.has_started() {
            if let Some(initial) = self.initial.take() {
                // SAFETY: the closure never ran; it is dropped exactly once.
                unsafe { (initial.vtable.drop)(initial.closure) };
            }
            return true;
        }
        // Its frames may hold references into thread-locals that the exiting thread has
        // destroyed: they must not run again. Leak them with the stack.
        !crate::thread_exit::thread_is_exiting() && self.force_unwind()
    }

    /// Unwinds a suspended coroutine's stack: resumes it with the UNWIND flag, so its pending
    /// `suspend` unwinds, until it has finished. Returns false if it could not even be switched
    /// to (a copying stack that cannot take it back): then its frames must be leaked.
    fn force_unwind(&mut self) -> bool {
        // This may run from a thread-local destructor at thread exit, after std removed the
        // thread's alternate signal stack: ask the OS, not the thread's cached answer. (An
        // error leaves overflow and growth without their handler stack, as at creation.)
        let _ = spindle_stack::prepare_thread_uncached();
        crate::thread_exit::keep_linked();
        let mut escaped = None;
        while self.state != State::Finished {
            if S::COPYING {
                let sp = self.context.as_ref().map(Context::as_ptr);
                // SAFETY: as in `try_resume`.
                if unsafe { self.stack.before_resume(sp) }.is_err() {
                    return false;
                }
            }
            let Some(context) = self.context.take() else {
                unreachable!("a suspended coroutine has a context")
            };
            // SAFETY: as in `try_resume`; with UNWIND the coroutine reads no input.
            let t = unsafe { self.switch_in(context, UNWIND) };
            match t.data & TAG {
                YIELDED => {
                    // It caught the unwind and suspended again; its next `suspend` unwinds
                    // again on the next round. Drop what it yielded — after the stack knows it
                    // suspended, and catching a panic of that drop (kept as the escaped one):
                    // leaving here early kept a copying stack's region busy for good, refusing
                    // every other coroutine on it.
                    // SAFETY: as in `switched_back`.
                    let value = unsafe { Slot::<Yield>::take(t.data) };
                    if S::COPYING {
                        // SAFETY: it has just suspended with this stack pointer.
                        unsafe { self.stack.after_suspend(t.context.as_ptr()) };
                    }
                    self.context = Some(t.context);
                    drop_catching(value, &mut escaped);
                }
                RETURNED => {
                    // SAFETY: as in `switched_back`.
                    let value = unsafe { Slot::<Return>::take(t.data) };
                    self.finished(t.context.as_ptr());
                    drop_catching(value, &mut escaped);
                }
                PANICKED => {
                    // SAFETY: as in `switched_back`.
                    let payload = unsafe { Slot::<Box<dyn Any + Send>>::take(t.data) };
                    self.finished(t.context.as_ptr());
                    if escaped.is_none() {
                        escaped = Some(payload);
                    }
                }
                _ => self.finished(t.context.as_ptr()), // UNWOUND
            }
        }
        if let Some(payload) = escaped {
            // A new panic escaped while the coroutine unwound (its code caught the forced
            // unwind and panicked). Propagate it like a panic from a destructor — unless we are
            // already unwinding, where a second panic would abort; then it is dropped.
            if !std::thread::panicking() {
                // SAFETY: the coroutine is finished and its frames are gone; we unwind out of
                // `Drop` right after, so the stack is not dropped twice.
                unsafe { ManuallyDrop::drop(&mut self.stack) };
                resume_unwind(payload);
            }
        }
        true
    }
}

/// Drops `value`; if its destructor panics, keeps the payload in `escaped` (unless one is
/// there already: that one propagates, this one is dropped).
fn drop_catching<T>(value: T, escaped: &mut Option<Box<dyn Any + Send>>) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(value)))
        && escaped.is_none()
    {
        *escaped = Some(payload);
    }
}

impl<Input, Yield, Return, S: Stack> fmt::Debug for Coroutine<Input, Yield, Return, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coroutine")
            .field("id", &self.id)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// The entry function of every coroutine, monomorphised per closure type and placement.
extern "C" fn coroutine_entry<F, Input, Yield, Return, P: Placement>(t: Transfer, link: Link) -> !
where
    F: FnOnce(&Yielder<Input, Yield>, Input) -> Return,
{
    // Every resume sends its input slot, the first one too (on a copying stack with the
    // closure: `P::take` leaves the slot's word).
    let mut first = t.data;
    // SAFETY: this is the first resume of a coroutine placed as `P` says (see `assemble` /
    // `take_region`), and it runs once per coroutine.
    let f = unsafe { P::take::<F>(link, &mut first) };
    let yielder = Yielder::new(link);
    // SAFETY: the first resume sends a slot with the input (never UNWIND: a coroutine that
    // has not started is dropped without being switched to).
    let input = unsafe { Slot::<Input>::take(first) };
    // The closure given to `catch_unwind` captures one `AssertUnwindSafe` (so it is unwind-safe
    // itself) rather than being wrapped in one: the wrapper's `call_once` is a call frame of
    // its own, which a closure that never returns keeps on the stack (the inliner leaves calls
    // that diverge out of line), and a copying stack saves it with every eviction.
    let call = AssertUnwindSafe((f, &yielder, input));
    let outcome = catch_unwind(move || {
        let AssertUnwindSafe((f, yielder, input)) = { call };
        f(yielder, input)
    });
    // The output stays in this frame; the resumer moves it out after the last switch.
    let returned;
    let panicked;
    let word = match outcome {
        Ok(value) => {
            returned = Slot::new(value);
            returned.word(RETURNED)
        }
        Err(payload) if payload.is::<ForcedUnwind>() && yielder.is_unwinding() => UNWOUND,
        Err(payload) => {
            panicked = Slot::new(payload);
            panicked.word(PANICKED)
        }
    };
    // Nothing with a destructor is left on this stack (slots never drop their contents).
    // Switch back for the last time.
    // SAFETY: we were entered by `Context::resume` with this link.
    unsafe { spindle_context::suspend(link, word) };
    // A finished coroutine is never resumed (it has no context any more).
    std::process::abort()
}

/// Configures a coroutine before creating it: its name (printed by a stack-overflow message).
///
/// ```
/// use spindle_coro::{Builder, CoroutineResult};
///
/// let mut co = Builder::new().name("tokenizer").build(|yielder, text: &'static str| {
///     for word in text.split(' ') {
///         yielder.suspend(word);
///     }
/// })?;
/// assert_eq!(co.resume("a b"), CoroutineResult::Yield("a"));
/// assert_eq!(co.resume(""), CoroutineResult::Yield("b"));
/// assert_eq!(co.resume(""), CoroutineResult::Return(()));
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
#[derive(Debug, Default, Clone)]
pub struct Builder {
    name: Option<String>,
    suspend_while_unwinding: bool,
}

impl Builder {
    /// A builder with no name.
    pub fn new() -> Self {
        Builder::default()
    }

    /// Names the coroutine (only the first 48 bytes are kept by stacks for messages).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Lets the coroutine [`suspend`](Yielder::suspend) while it unwinds from a panic (a
    /// destructor that waits for something on the way out), which otherwise aborts the
    /// process (see the [crate docs](crate#documented-aborts)).
    ///
    /// Rust counts panics per thread, not per stack: until the coroutine's unwind is over,
    /// `std::thread::panicking()` reads `true` in its resumer and in everything the resumer
    /// runs meanwhile, and every `std::sync::Mutex` or `RwLock` guard dropped there poisons
    /// its lock. Allow it only for a resumer written for that (a scheduler that only runs
    /// coroutines, whose own locks ignore poisoning). A suspend during the forced unwind of a
    /// coroutine being dropped still aborts: that unwind cannot go on.
    pub fn allow_suspend_while_unwinding(mut self) -> Self {
        self.suspend_while_unwinding = true;
        self
    }

    /// Creates the coroutine on a stack from the global [`StackPool`].
    ///
    /// # Errors
    ///
    /// The pool could not provide a stack; see [`StackError`].
    #[inline]
    pub fn build<Input, Yield, Return, F>(
        self,
        f: F,
    ) -> Result<Coroutine<Input, Yield, Return>, StackError>
    where
        F: FnOnce(&Yielder<Input, Yield>, Input) -> Return + 'static,
        Input: 'static,
        Yield: 'static,
        Return: 'static,
    {
        spindle_stack::prepare_thread()?;
        let stack = StackPool::get_global()?;
        Ok(self.assemble(stack, f))
    }

    /// Creates the coroutine on `stack` (any kind but a copying one; see
    /// [`build_shared`](Builder::build_shared)).
    ///
    /// # Panics
    ///
    /// If the stack has no room for the coroutine's first frame (the closure, when it is kept
    /// on the stack, and a few hundred bytes). A stack of a page or more always has room, so
    /// only a foreign [`Stack`] implementation can be that small.
    pub fn build_with_stack<Input, Yield, Return, S, F>(
        self,
        stack: S,
        f: F,
    ) -> Coroutine<Input, Yield, Return, S>
    where
        F: FnOnce(&Yielder<Input, Yield>, Input) -> Return + 'static,
        Input: 'static,
        Yield: 'static,
        Return: 'static,
        S: Stack,
    {
        const {
            assert!(
                !S::COPYING,
                "copying (shared) stacks need `Coroutine::with_shared_stack` / `Builder::build_shared`"
            )
        };
        // Without an alternate signal stack an overflow still dies, just as a bare SIGSEGV
        // instead of the message; not worth failing the creation for.
        let _ = spindle_stack::prepare_thread();
        self.assemble(stack, f)
    }

    /// Creates the coroutine on the shared `region`: see
    /// [`Coroutine::with_shared_stack`] for the contract.
    ///
    /// # Safety
    ///
    /// As for [`Coroutine::with_shared_stack`].
    #[cfg(feature = "stack-shared")]
    pub unsafe fn build_shared<Input, Yield, Return, F>(
        self,
        region: &SharedStack,
        f: F,
    ) -> Coroutine<Input, Yield, Return, SharedSlot>
    where
        F: FnOnce(&Yielder<Input, Yield>, Input) -> Return + 'static,
        Input: 'static,
        Yield: 'static,
        Return: 'static,
    {
        let _ = spindle_stack::prepare_thread();
        self.assemble(region.slot(), f)
    }

    #[inline]
    fn assemble<Input, Yield, Return, S, F>(
        self,
        stack: S,
        f: F,
    ) -> Coroutine<Input, Yield, Return, S>
    where
        F: FnOnce(&Yielder<Input, Yield>, Input) -> Return + 'static,
        Input: 'static,
        Yield: 'static,
        Return: 'static,
        S: Stack,
    {
        let top = stack.top().as_ptr() as usize;
        // SAFETY: `Stack`'s contract: its top is 16-byte aligned (so the slot computed below
        // needs no rounding of its own).
        unsafe { std::hint::assert_unchecked(top.is_multiple_of(16)) };
        let in_place = mem::size_of::<F>() <= MAX_CLOSURE_ON_STACK
            && mem::align_of::<F>() <= MAX_CLOSURE_ON_STACK
            && !S::COPYING;
        // A copying stack may leave its top `UNSAVED_TOP` bytes out of what it keeps for a
        // suspended coroutine. Only the context's reserved words lie there, which
        // `STACK_RESERVED`'s contract lets a copying stack drop: a suspended coroutine on it
        // has been resumed (its context is made right before its first resume, in
        // `try_resume`), is entered again only through `switch_in` (a `resume`), and whatever
        // another coroutine left in those words was left after its own first resume. A stack
        // type that leaves out more would lose live frames.
        const {
            assert!(
                !S::COPYING || S::UNSAVED_TOP <= STACK_RESERVED,
                "a copying stack may leave at most the context's reserved top bytes unsaved"
            )
        };
        // The closure slot sits right under the top, the context's own area right under it. A
        // copying stack has none (the closure is handed over with the first resume): its
        // context's top is the region's.
        let (slot, vtable): (usize, &'static InitialVtable) = if S::COPYING {
            (top, &Vtables::<F, Input, Yield, Return>::HANDED)
        } else if in_place {
            let align = mem::align_of::<F>().max(16);
            (
                top.wrapping_sub(mem::size_of::<F>()) & !(align - 1),
                &Vtables::<F, Input, Yield, Return>::IN_PLACE,
            )
        } else {
            (
                top.wrapping_sub(16),
                &Vtables::<F, Input, Yield, Return>::BOXED,
            )
        };
        // A real check, not a debug one: a foreign `Stack` may be that small, and everything
        // below writes under `top` on the strength of it. Left out at compile time for a
        // stack type whose `MIN_USABLE_SIZE` covers the slot (less than `size + align` bytes
        // under `top`, or 16 for a box pointer, or none on a copying stack) and the frame.
        let limit = stack.limit().as_ptr() as usize;
        let slot_room = if S::COPYING {
            0
        } else if in_place {
            mem::size_of::<F>() + mem::align_of::<F>().max(16)
        } else {
            16
        };
        if slot_room + MIN_FRAME_ROOM > S::MIN_USABLE_SIZE {
            let room = if slot <= top {
                slot.checked_sub(limit)
            } else {
                None
            };
            if room.is_none_or(|room| room < MIN_FRAME_ROOM) {
                stack_too_small(top.checked_sub(limit));
            }
        }
        let id = id::next();
        stack.set_owner(Owner {
            id,
            name: self.name.as_deref(),
        });
        let closure: *mut u8 = if in_place {
            // SAFETY: the stack is ours and unused; `slot` is aligned for F and inside it, with
            // room below (checked above).
            unsafe { (slot as *mut F).write(f) };
            slot as *mut u8
        } else {
            let boxed = Box::into_raw(Box::new(f)).cast::<u8>();
            if !S::COPYING {
                // SAFETY: the top word of the stack, ours and unused.
                unsafe { (slot as *mut *mut u8).write(boxed) };
            } // (a copying stack's entry gets it with the first resume)
            boxed
        };
        // `slot` is 16-aligned in every case (a stack's top is), so it is the context's top as is.
        // SAFETY: non-null: at least MIN_FRAME_ROOM above the stack's limit (checked above).
        let context_top = unsafe { NonNull::new_unchecked(slot as *mut u8) };
        // SAFETY: `Context::new` prepares (for copying stacks: will prepare, on the first
        // resume) this stack at `context_top`.
        let link = unsafe { Link::for_stack(context_top) };
        let context = if S::COPYING {
            None // built on the region at the first resume, when the region is ours
        } else {
            // At least MIN_FRAME_ROOM: checked above.
            let size = slot - limit;
            // SAFETY: `[limit, slot)` is unused stack memory owned by `stack`, which the
            // coroutine keeps alive until the context is gone.
            Some(unsafe { Context::new(context_top, size, vtable.entry) })
        };
        Coroutine {
            stack: ManuallyDrop::new(stack),
            context,
            link,
            initial: Some(Initial {
                // SAFETY: from a reference or a Box: non-null.
                closure: unsafe { NonNull::new_unchecked(closure) },
                vtable,
            }),
            state: State::NotStarted,
            suspend_while_unwinding: self.suspend_while_unwinding,
            id,
            fiber: Fiber::default(),
            _not_send: PhantomData,
            _types: PhantomData,
        }
    }
}

/// # Safety
///
/// `p` points to a live `F` that is not used afterwards.
unsafe fn drop_in_place<F>(p: NonNull<u8>) {
    // SAFETY: forwarded contract.
    unsafe { ptr::drop_in_place(p.cast::<F>().as_ptr()) }
}

/// # Safety
///
/// `p` came from `Box::<F>::into_raw` and the `F` in it is live and not used afterwards.
unsafe fn drop_box<F>(p: NonNull<u8>) {
    // SAFETY: forwarded contract.
    drop(unsafe { Box::from_raw(p.cast::<F>().as_ptr()) })
}

#[cfg(feature = "stack-shared")]
impl<Input, Yield, Return> Coroutine<Input, Yield, Return, SharedSlot>
where
    Input: 'static,
    Yield: 'static,
    Return: 'static,
{
    /// A coroutine running `f` on the shared stack `region`, whose memory it shares with the
    /// other coroutines created on it.
    ///
    /// Only the running coroutine's bytes are in the region. When another coroutine on the same
    /// region is resumed, this one's used bytes (from its stack pointer to the top) are copied
    /// to a heap buffer sized to what it uses, and copied back when it is resumed again — only
    /// when ownership of the region changes. Memory per suspended coroutine is therefore what
    /// it actually uses, which is how a million coroutines fit in memory.
    ///
    /// A coroutine on a region cannot resume another coroutine on the same region
    /// ([`try_resume`](Coroutine::try_resume) refuses with
    /// [`StackError::SharedStackBusy`]); give nested coroutines their own region or stack.
    ///
    /// # Safety
    ///
    /// While the coroutine is suspended its stack bytes are somewhere else, and the region holds
    /// another coroutine's. So **no pointer into the coroutine's stack may be used by anyone
    /// while it is suspended**. Safe Rust mostly prevents such pointers from escaping, but not
    /// entirely: the caller guarantees that the coroutine does not suspend while
    /// * a thread it started with [`std::thread::scope`] (or any scoped-thread or scoped-task
    ///   API) can still access data on its stack, or
    /// * it has lent a buffer or a waiter record on its stack to something that runs while it is
    ///   suspended (the kernel for IO, a wait queue, another coroutine).
    ///
    /// Spindle's own blocking primitives keep waiter records in heap task state and bounce IO
    /// buffers that lie on shared stacks, so they respect this by construction.
    pub unsafe fn with_shared_stack<F>(region: &SharedStack, f: F) -> Self
    where
        F: FnOnce(&Yielder<Input, Yield>, Input) -> Return + 'static,
    {
        // SAFETY: forwarded contract.
        unsafe { Builder::new().build_shared(region, f) }
    }
}

/// A coroutine that can be sent to another thread, by an `unsafe` promise.
///
/// [`Coroutine`] is `!Send` because a coroutine that has started may hold thread-bound data on
/// its stack. Wrap one in `SendCoroutine` to move it anyway, when you know better.
pub struct SendCoroutine<Input, Yield, Return, S: Stack = DefaultStack>(
    Coroutine<Input, Yield, Return, S>,
);

// SAFETY: `SendCoroutine::new`'s contract makes the caller responsible for everything on the
// coroutine's stack being usable from another thread; the types crossing the switch and the
// stack must be Send themselves.
unsafe impl<Input: Send, Yield: Send, Return: Send, S: Stack + Send> Send
    for SendCoroutine<Input, Yield, Return, S>
{
}

impl<Input, Yield, Return, S: Stack> SendCoroutine<Input, Yield, Return, S> {
    /// Allows `co` to move to another thread.
    ///
    /// # Safety
    ///
    /// Until the coroutine is dropped, whatever its stack holds — the closure's captures and,
    /// once it has started, every local live at its suspension point — must be sound to use
    /// from whichever thread resumes (or drops) it next:
    /// * no references into thread-locals, and no values the compiler may have derived from a
    ///   thread-local's address before a suspend (a `thread_local!` access must not straddle a
    ///   `suspend`);
    /// * no `Rc`, `RefCell` guard or other `!Send` value shared with the old thread, no OS
    ///   handles that are bound to a thread (locks held, thread-affine handles);
    /// * the closure, if the coroutine has not started, must itself be `Send`.
    ///
    /// Copying stacks are excluded by the bounds: their region belongs to one thread.
    pub unsafe fn new(co: Coroutine<Input, Yield, Return, S>) -> Self {
        SendCoroutine(co)
    }

    /// The coroutine, on its new thread.
    pub fn into_inner(self) -> Coroutine<Input, Yield, Return, S> {
        self.0
    }

    /// The coroutine, in place (to resume it without moving it out and back).
    pub fn get_mut(&mut self) -> &mut Coroutine<Input, Yield, Return, S> {
        &mut self.0
    }
}

impl<Input, Yield, Return, S: Stack> fmt::Debug for SendCoroutine<Input, Yield, Return, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SendCoroutine").field(&self.0).finish()
    }
}
