//! How this crate is built: notes for whoever changes it (the crate docs say how to use it;
//! the repository's ARCHITECTURE.md places the crate among the others).
//!
//! `Coroutine<Input, Yield, Return, S: Stack = PooledStack>`:
//!
//! * **Creation** writes the closure into the *closure slot* just under the stack's top (a boxed
//!   closure's pointer instead, for closures over 1 KiB) and prepares the context right under
//!   it; no heap allocation on a pooled stack. The entry function (monomorphised per closure
//!   type and placement) finds the closure from its own link slot (`Entry` receives the link),
//!   so the **first resume is exactly like every other one** — no branch on "started" in the
//!   resume path. Copying stacks are the exception: their closure is boxed and their first
//!   resume (which takes a cold path anyway) sends the entry a `FirstResume` with the box and
//!   the input slot, so that no closure slot sits in the bytes saved at every eviction.
//! * **Protocol** (`src/exchange.rs`): a switch carries one word each way, and values travel by
//!   pointer to the *sender's* stack, read by the receiver right after the switch (while the sender
//!   is suspended): resumer → coroutine a pointer to a `Slot` holding the input (or `UNWIND`);
//!   coroutine → resumer a pointer to a `Slot` holding the output, tagged in its low bits (yielded,
//!   returned, panicked, unwound). Zero-sized values send no address. Neither side keeps a pointer
//!   into the other's stack between switches.
//! * **State** is not stored on the resume path: on a stack the coroutine owns, "started" is read
//!   from the link slot (`Link::has_resumer`) when it matters (drop); copying stacks record it in
//!   their cold path.
//! * **Panics** are caught by `catch_unwind` in the entry and re-raised with `resume_unwind` in the
//!   resumer; nothing unwinds through asm. A coroutine must not suspend while a panic unwinds its
//!   stack (a destructor that waits): the panic count is the thread's, so the resumer would read
//!   `std::thread::panicking()` as true and poison every lock it releases. The resumer reads
//!   `panicking()` before and after each switch (two loads of std's global count on the resume
//!   path); if it rose, the coroutine suspended mid-unwind and the process aborts with a line
//!   naming it — unless `Builder::allow_suspend_while_unwinding` (spindle-rt sets it: its
//!   cancellation unwinds may park in destructors, and its docs say what `panicking()` reads
//!   meanwhile).
//! * **Drop** of a suspended coroutine resumes it with the unwind bit; its `suspend` raises a
//!   private `ForcedUnwind` payload (via `resume_unwind`, so the panic hook stays quiet), every
//!   destructor on its stack runs, and the entry reports `UNWOUND`. A coroutine that catches it and
//!   suspends again is unwound again at once. A panic escaping a destructor during that unwind
//!   aborts (Rust's rule; documented), and so does a destructor that suspends during it (with
//!   spindle's line: the unwind cannot go on, the next `UNWIND` would raise a panic inside that
//!   destructor). Before the unwind the dropping thread is prepared with `prepare_thread_uncached`
//!   (a `sigaltstack` query): a coroutine dropped from a thread-local destructor runs after std
//!   freed the thread's alternate signal stack, while spindle's cached "prepared" flag still says
//!   yes. If a copying stack cannot take the coroutine back (out of memory for the save buffer),
//!   its frames and stack are leaked rather than freed. A value the coroutine yields or returns
//!   during the forced unwind is dropped after the stack has been told the coroutine stopped, under
//!   `catch_unwind` (its panic propagates from the drop once the unwind is over): dropped before
//!   that, a panicking destructor would leave a copying stack's region marked running for good,
//!   refusing every other coroutine on it (`tests/forced_unwind.rs`).
//! * **`mem::forget`** leaks the stack; since everything (closure, `Input`, `Yield`, `Return`) is
//!   `'static`, no borrow can outlive its referent through a forgotten coroutine.
//! * **`!Send`**; `SendCoroutine` is the `unsafe` escape hatch with its contract. So a thread may
//!   resume a coroutine it did not build: `try_resume` calls `prepare_thread` (one thread-local
//!   flag, in a non-inlined function so that no TLS address is kept across a migrating caller's
//!   suspends).
//! * **Stacks**: the first frame is checked to fit (a real check: a foreign `Stack` may be tiny).
//!   An unguarded stack only comes from an `unsafe` constructor (`*_unchecked`), whose caller
//!   promises no overflow; the `Stack` trait's contract requires a guard otherwise, since any safe
//!   code runs on it.
//! * **Shared stacks** are `unsafe` to use (`Coroutine::with_shared_stack`): safe Rust can still
//!   lend a pointer into the stack to something that runs while the coroutine is suspended (a
//!   thread from `std::thread::scope`), and while suspended its bytes are elsewhere (invariant
//!   3 in ARCHITECTURE.md).
