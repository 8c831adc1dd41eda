//! How this crate is built: notes for whoever changes it (the crate docs say how to use it;
//! the repository's ARCHITECTURE.md places the crate among the others).
//!
//! A `Policy` trait shaped after Boost.Fiber's `algorithm` (push a ready task with a `Reason`, pop
//! the next for worker `w`, `has_work`, `drain`, stats) over an opaque `Task` whose `home()` says
//! which worker it must run on (a started, non-migratable coroutine) or none. Three policies:
//!
//! | policy | queues | order | use it for |
//! |---|---|---|---|
//! | `Fifo` | a global queue + a pinned queue per worker, entries ticketed by a global counter | each worker takes, among what it may run, the one pushed first | a fairness reference; latency-fair with few cores |
//! | `RoundRobin` | per worker: a private ring (its own pushes) + an inbox (other threads'), merged in arrival order; new tasks dealt in turn | per-worker FIFO, no migration, no stealing | predictable placement, per-worker state |
//! | `WorkStealing` | per worker: a Chase–Lev deque (crossbeam) of stealable tasks, a pinned FIFO + inbox, a lock-free run-next slot; a global injector. With one worker every task counts as pinned to it (no thieves: run-next by plain stores, no deque or injector) | run-next (a task woken or spawned by the worker; inherits the slice), own queues, injector every 61st pop, steal half of a random victim; a thief takes a run-next only after 3 µs (Go's grace), so a task spawned or woken by one about to block runs next on the same worker — with invariant 2 a pair split across workers would stay split | throughput: the default |
//!
//! Each work-stealing worker's parts sit on cache lines of their own, grouped by who writes them:
//! the private state (the deque's owner end, pinned queue, tick) and the owner's counters, the
//! stealer (read-only), the run-next slot (the owner writes it on every spawn and wake-up; thieves
//! look at it only once the deques came up empty), the inbox (other threads push), and the thieves'
//! `stolen_from` count. Were they to share lines, a spinning thief's look at a victim's stealer
//! would pull in the line of the victim's run-next and private state, and the victim's next spawn
//! would miss on its own compare-and-swap. Round-robin's inbox sits on its own lines for the same
//! reason (other workers push to it on every other spawn).
//!
//! `Idle` is Go's spinning-worker protocol: spinning and sleeping counts in one word, a pusher
//! enqueues then fences (SeqCst) and reads the counts, a sleeper registers then fences and
//! re-checks the queues, so one of them always sees the other (no lost wake-up); at most half the
//! busy workers spin; the last spinner to find work wakes a successor. On a runtime of one worker
//! the runtime skips the pusher's half when the pusher is that worker (`Shared::schedule_from`): it
//! is awake and re-checks its queues before it sleeps, and there is nobody else to wake, so the
//! fence would buy nothing. Loom models (preemption bound 2, tokio's `cfg(loom)` module swap, a
//! loom-checked stand-in for crossbeam's deque) cover every policy's push/pop/steal and the idle
//! protocol. Proptests check every policy against a sequential model. One lost wake-up needs about
//! four preemptions across three threads, beyond the models' bound, so a step-by-step test covers
//! it (`spindle-sched/tests/idle_steps.rs`): a worker that spun until it announced its sleep and is
//! claimed by a pinned push (`notify_worker`) before its re-check counts as spun dry, not awake, so
//! that when the re-check finds work it wakes a successor (`end_spin` with work) — an unpinned push
//! may have skipped waking anyone because it counted on that spinner. `woke` after a real park
//! makes it awake.
//!
//! A worker's private state (round-robin's ring, work-stealing's deque owner end, pinned queue,
//! tick and rng) sits in an `OwnerCell`: a try-lock, so that a wrong-thread call is slow, never
//! undefined. A worker thread **binds** it for life (`Policy::bind_worker`): it takes the lock once
//! and records a thread token (a thread-local's address); its borrows then compare tokens (two
//! plain loads) instead of locking, and other threads still find it locked. The runtime binds each
//! worker thread and unbinds it in a drop guard (`drain` waits for unbound workers). Loom models
//! run both the bound and the try-lock paths.
//!
//! `has_work(w)` must not read `false` for a task pushed before the call and not popped since, from
//! any thread (the runtime only asks from worker `w`, but the trait is public). Round-robin keeps
//! its private ring's length in an atomic the owner stores after each change; while the owner moves
//! its inbox behind the ring, both could read empty (the inbox emptied, the length not yet stored).
//! So the owner stores a length of at least one *before* it empties the inbox, and `has_work` reads
//! the inbox first (loom model `round_robin_has_work_from_another_thread_during_an_inbox_move`,
//! which fails without it).
