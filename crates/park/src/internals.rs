//! How this crate is built: notes for whoever changes it (the crate docs say how to use it;
//! the repository's ARCHITECTURE.md places the crate among the others).
//!
//! One interface for waiting: `park()` / `park_until(deadline)` and `waker()`. A runtime installs a
//! `Hook` per worker thread (`with_hook`, scoped; `unsafe`, as are `with_budget` here and
//! `spindle_io::with_driver` / `with_blocking_pool`: the installation is the thread's, so a closure
//! that suspended a coroutine it ran in would leave it installed for whatever the thread ran next,
//! borrowed from a frame switched away from — on a copying stack, an address another coroutine's
//! bytes then fill; so these four are `unsafe` with that contract); code running in one of its
//! coroutines parks the coroutine, anything else parks the thread (with a permit next to the thread
//! handle, so unrelated `std::thread::unpark`s are not wake-ups; a wait during thread-local
//! destruction, once the parker's thread-local is gone, uses one late parker throughout: with a
//! fresh parker per call, a waker's permit and the park's would differ and the wake-up would be
//! lost, `tests/park_at_thread_exit.rs`. Handing the first parker on to those late waits when
//! wakers of it are still out at thread exit would leak it whenever a wait queue's entry outlived
//! the thread — common: LeakSanitizer reports it in the sync stress tests — so a late wait gets the
//! late parker, and only a waker handed out in one thread-local destructor and waited for in a
//! later one would miss its wake). Semantics: one permit per task, like `std::thread::park`;
//! `Woken` only after a real wake (possibly of a stale waker clone); callers loop on their
//! condition. A cancelled coroutine's park unwinds. The hook slot is read through a non-inlined
//! accessor, never cached across a switch (invariant 2). `spin::SpinLock` is the other side of
//! waiting: the lock of critical sections that never park (a few stores; the unlock is a plain
//! store, where `std::sync::Mutex` pays a read-modify-write; its guard is `Sync` only for a `Sync`
//! value, as `MutexGuard` is), shared by `spindle-rt` and `spindle-sync`, which do not depend on
//! each other. `block_cache` is shared by the two for the same reason: per-thread caches of freed
//! blocks of up to 1 KiB by 64-byte size class, enabled by the runtime on its workers (see
//! "spindle-rt", task allocation), used for tasks and for one-shot channels.
//!
//! What IO needs of a task, also through the hook (defaults do nothing, so a minimal runtime need
//! not care): `defer_cancel()` → `CancelGuard` (while held, park never unwinds; a cancel request
//! wakes the park once so the holder can see `cancel_requested()`, stop what borrows its frame — an
//! io_uring cancel, a pool job — and keep waiting; `checkpoint()` carries the cancel out
//! afterwards; the guard keeps the task's name from `Hook::begin_cancel_deferral` and its drop
//! calls `Hook::end_cancel_deferral(name)`, so that a guard handed to another task by a
//! thread-local ends its maker's deferral, not the dropper's — the runtime does it for a task
//! pinned to that thread, and leaves a migratable one's alone, whose depth may be in use on another
//! thread), `pin_to_thread()` → `PinGuard` (a migratable task stays on its worker while an
//! operation lives in that worker's ring), `on_copying_stack()` (buffers must be bounced),
//! `consume_budget()` (an operation that completed without waiting counts against the slice; with a
//! `Budget` installed by `with_budget` — a per-worker word the runtime refills per slice and its
//! monitor may exhaust from another thread — an operation that leaves some of it is a thread-local
//! read, a load and a store, and the hook is asked only at the last unit), `is_current_waker(&w)` →
//! `Hook::will_wake` (whether a kept waker is the current task's, so a primitive may reuse it; the
//! default says no). The two per-wait questions have one-call forms, `Hook::try_park` and
//! `Hook::try_will_wake` (defaults: `in_task` then the other), which the runtime answers with one
//! read of its running coroutine: two indirect calls fewer per blocked operation. `waker()` asks
//! `Hook::try_waker` the same way: one virtual call instead of `in_task` then `waker`, and the
//! runtime answers without looking its worker up again through a thread-local.
