//! How this crate is built: notes for whoever changes it (the crate docs say how to use it;
//! the repository's ARCHITECTURE.md places the crate among the others).
//!
//! **Tasks.** A task is one allocation, a `TaskCell<T, F>`: a header (`repr(C)`, what every switch
//! and wake-up touches in its first 64 bytes: state word, cancel-guard depth, home, yielder,
//! vtable, reference count, id, runtime pointer, pins; then park sequence, registry key, timer,
//! name, coroutine-locals), the join cell, and the body — the allocation comes from the worker's
//! block cache (`spindle_park::block_cache`), whose blocks are aligned to a cache line, so the
//! header's first 64 bytes are one line and no two tasks share one (with a 16-byte alignment, the
//! tail of one task and the head of the next could share a line while the two run on different
//! workers). The body is the closure `F` until the first run, then the coroutine (on a
//! pooled/growable stack, or — `unsafe` `Builder::shared_stack` — made at its first run on the
//! shared region of the worker that runs it, which it never leaves; like any task it may be stolen
//! before that, so a tree of shared-stack coroutines spreads over the workers). `JoinHandle<T>` and
//! scopes hold a `TypedTask<T>` (the type-erased task plus its result type). The state machine is
//! written at the top of `src/state.rs`, which holds every transition of the state word
//! (`TaskState`; `Header` calls them with the task's park number and cancel guards): wake sets the
//! permit and, if the task is idle, marks it `ACTIVE` and queues it; queued and running are one
//! state (a task is in at most one queue or on one worker, so pops and yields write nothing); after
//! the coroutine switches back the *worker* publishes it as idle — **suspend, then publish**
//! (invariant 1): a wake-up that comes while it runs only leaves the permit, which the worker sees
//! and re-queues. A park looks before it writes: no read-modify-write before it suspends (the
//! permit is read first, the park number has one writer). Checked by loom (`tests/loom_task.rs`,
//! below) and by a stress test (32 coroutines re-parking while 4 threads and the coroutines wake
//! them at random, every policy) that would catch a coroutine resumed while running. The header
//! reaches its runtime through a plain pointer, not an `Arc`: a clone per spawn and a drop per task
//! would be two atomic read-modify-writes on the one cache line of the runtime's reference count,
//! which every worker writes. What keeps the runtime alive is the registry's count: a task counts
//! as live from its spawn until `finish` counts its end (just before `COMPLETE`), and shutdown
//! waits until every spawned task has ended — or, when `shutdown_timeout` gives up, leaks the
//! runtime's shared state with the stragglers. So a waker, a cancel or a handle used after the
//! runtime is gone finds the task `COMPLETE` and never follows the pointer (tested, also under
//! ASan: `handles_and_wakers_outlive_the_runtime`). `spawn` borrows the worker's runtime instead of
//! cloning it, for the same reason.
//!
//! **Task references and task memory.** A `TaskRef` is a counted pointer to the header, not an
//! `Arc<dyn …>`: the header carries the count (`Arc`'s protocol: relaxed increments, release
//! decrements, an acquire fence before the destruction — an acquire load of the count in the TSan
//! build, as `Arc` does, since ThreadSanitizer does not model fences) and a `&'static` vtable per
//! task type (run, destroy); a task's `Waker` is the same pointer with a `RawWakerVTable`, so
//! waking reads the header without a virtual call on the fat pointer. A parked task's idle state
//! holds a reference: the worker that publishes it idle keeps the one it popped the task with, and
//! whoever moves it out of idle (the deciding CAS) pushes that one — so waking by reference costs
//! no increment and parking no decrement. And a wake-up that moves a parked task out of idle leaves
//! no permit (`NOTIFIED`): being resumed is the wake-up, so the resumed park clears nothing; the
//! timer marks the task `FIRED` instead, and the park reads which it was with one load
//! (`Header::resumed`; a read-modify-write only after a time-out, or when a second wake-up came
//! while it was queued). Test: `a_timed_park_says_whether_it_was_woken_or_timed_out`.
//!
//! **The last reference by a load**: a count of one that the holder reads is its alone, and nobody
//! can add to it — a new reference is made only from an existing one or from a registry slot, which
//! a task leaves in `finish`, while its runner (queue, worker or idle state) still holds a
//! reference besides any other — so a drop that reads one destroys the task without the decrement,
//! and a `finish` that reads one (the worker's reference only: no handle, no waker, no timer entry)
//! skips `COMPLETE`, which nobody could read, for a result type without drop glue (a detached value
//! with drop glue is still dropped by `finish_flagged`, as the worker's own code). The detached
//! partner of a `ping_pong` and a tree's leaves finish so.
//!
//! **A destruction with nothing to drop** skips the task's drop glue, a nest of out-of-line calls
//! that would find the body gone, the result `Ok(())` or taken, no waker, no name, no carrier, no
//! coroutine-locals (`TaskCell::holds_nothing_to_drop`; the header's other fields are checked to
//! have no drop glue at compile time, with the header's size, so a new field is not missed).
//!
//! **Spawning**: a plain `spawn` from a coroutine makes its task without the builder's choices
//! (`spawn_plain`: no name, default stack, not migratable), with an id from its worker's own block
//! instead of a thread-local's, and `new_task` (inlined) makes the header only after the task's
//! block is allocated, so its fields are stored straight into the block (built by the caller first,
//! it would be copied in with a `memcpy`). The block comes from `src/task_alloc.rs`, a per-worker
//! cache of freed task blocks by 64-byte size class (Go's per-P free list of dead goroutines,
//! `gfput`/`gfget`; the caches themselves are `spindle_park::block_cache`, which the one-shot
//! channels of `spindle-sync` use too). A burst of spawns frees thousands of blocks of one size at
//! once, more than glibc's per-thread cache keeps (7 per size), so `malloc` and `free` would take
//! their slow paths. Only worker threads cache; blocks are always allocated with their class's
//! layout, so any thread may free one to the global allocator. Bounds: 4 MiB per worker while busy;
//! a worker that sleeps 1 s with nothing to do and holds more than 256 KiB wakes once and trims to
//! that (not at every sleep: a worker sleeps between every two bursts of a busy program); all of it
//! at worker exit. The same idle wake-up shrinks the stack pool (`StackPool::shrink`): idle stacks
//! beyond 256 in the worker's cache and 256 in the shared pool are unmapped — the busy caps (16,384
//! each) alone would keep a spike's stacks, and their touched pages, mapped for the life of the
//! program (`an_idle_runtime_unmaps_the_stacks_a_spike_left`). Off under ASan/TSan builds and
//! valgrind (a reused block would hide a use-after-free); `SPINDLE_TASK_CACHE=0`/`1` forces it
//! off/on (on under callgrind, to count what runs natively). The cache helps least where most tasks
//! are alive at once: FIFO runs skynet's tree breadth-first, so nearly all of its million tasks are
//! alive together, and a worker's cache cannot hold a level of the tree.
//!
//! **Workers.** `src/worker.rs`: fire due timers, pop (the policy steals), spin ~20 µs before
//! sleeping (waking a thread costs tens of µs), announce sleep, re-check, park the thread until
//! unparked or the next timer deadline. The ~20 µs look before sleeping is one phase: counted as
//! the idle protocol's spinner when the protocol allows (at most half the busy workers spin),
//! uncounted when it does not — otherwise, with two workers handing work back and forth
//! (round-robin deals each spawn to the other), only one could spin, the other would sleep, and
//! every hop would pay a wake-up. The driver is polled once when the look begins. A worker pins a
//! task to itself on its first run unless it is migratable (invariant 2: safe spawns move only
//! before they start; shared-stack tasks too — pinned at spawn, a whole tree of them would stay on
//! its root's worker). Each worker thread *binds* itself to its worker in the policy
//! (`Policy::bind_worker`): it holds the try-lock on its private queues for life and recognises
//! itself by a thread-local's address, so its own pushes and pops (a yield, a wake-up it makes)
//! cost no atomic read-modify-write; private queues are a small ring buffer whose push and pop
//! inline into the loop. With the one-state queued/running, a yield makes no atomic
//! read-modify-write. The park hook suspends the running coroutine with `Suspend::Park(deadline)`;
//! the worker arms the timer (the entry carries the park's sequence number, so a stale timer wakes
//! nothing) and then publishes the task idle with the low 24 bits of that number in its state word
//! (the *park generation*). A firing timer checks the number, then moves the task out of idle only
//! if the generation matches, in the one CAS: with the number check alone, a migratable task woken,
//! moved and parked again on another worker between the check and the CAS would take the old
//! timer's fire as its new park's time-out (unit tests in `state.rs`, and the loom model
//! `a_timer_left_from_an_earlier_park_never_schedules_a_later_one`, which fails without the
//! generation check; no runtime test makes the race happen: it needs the timer's worker preempted
//! inside a two-instruction window). A resumed park cancels its timer on its own worker with a
//! direct call (the hot path). A migratable coroutine's timer is not in that wheel but in the
//! worker's *movable* wheel (`src/handoff.rs`: a locked `TimerWheel` and its next deadline in an
//! atomic, which the owner reads where it looks at its own wheel and before it sleeps), so that a
//! coroutine that resumed on another worker cancels it there itself, and the monitor fires it while
//! the worker is stuck (below). `Header::timer` tells the two apart by the top bit of the worker
//! index (`handoff::MOVABLE`). Left until its deadline, an entry would hold a task reference, one
//! per migration, and keep finished tasks alive (`tests/timers_and_slices.rs`).
//!
//! **A yield is one visit to the queues.** A coroutine that yields comes back to the worker, which
//! re-queues it and pops the next task with one call, `Policy::yield_and_pop(w, task)` — defined as
//! `push(Some(w), task, Reason::Yielded)` then `pop(w)`, and so the default; round-robin does both
//! in one borrow of its private ring (`Ring::push_pop`: pop the front, write the yielded task
//! behind, no growth), work-stealing runs its push and pop under one borrow. The worker carries the
//! popped task to the top of its loop (`handed_over`), which still does its stop check, timer and
//! driver countdowns before running it; a worker that stops with one in hand pushes it back for the
//! shutdown's drain. `run_task`'s hot path (a started own-stack coroutine) is alone in its
//! function, with the first run and shared stacks out of line (`run_other`), so that it saves only
//! five registers around the switch and needs no large frame; a spawn pays one more call for its
//! first run. Tested against the definition by a differential proptest per policy
//! (`crates/sched/tests/yield_and_pop.rs`).
//!
//! **Switch depth and the return-stack predictor.** A CPU predicts `ret` targets with a small
//! hardware stack of return addresses — one per core, shared by every stack the thread switches
//! between. After a resume it holds the *worker's* return addresses, so every frame the resumed
//! coroutine returns from — each function between its code and the switch instruction — is a
//! mispredicted return (~20 cycles), and the worker's returns after the next suspend mispredict in
//! turn. So `yield_now` is inlined: the switch sits in the caller's frame, and a coroutine that
//! yields in a loop makes no call or return between resume and suspend. The park path is inlined
//! down to the runtime's hook for the same reason (`spindle_park::park` and `park_until`, the rt's
//! `park_current`, `spindle_sync`'s `Waiter::wait`); what stays is the hook's one virtual call
//! (`Hook::park`) and the primitive's own frame. Thread-local accessors stay out of line (invariant
//! 2): only code with no thread-local access after the switch is inlined.
//!
//! **Cancellation** sets a flag and wakes the task; the coroutine unwinds from its current or next
//! suspension point with a private payload (`CancelUnwind`), caught at its body: `join` reports
//! `Cancelled`. `CancelGuard` defers it. Once the unwind starts — and once the body has returned —
//! the coroutine holds cancellation off for good (`Header::hold_off_cancel_for_good`): a destructor
//! that parks during the unwind (a sleep, a contended lock, a guard that joins a child) or a
//! coroutine-local's destructor waits as usual. Otherwise its park would see the cancel again and
//! start a second unwind inside the first, which Rust answers with an abort ("panic in a destructor
//! during cleanup"), and a cancel during the locals' destructors would be reported as a panic
//! (`tests/lifecycle.rs`). Not `std::thread::panicking()`: the panic count is per thread, so a
//! coroutine parked mid-unwind would make every other coroutine on its worker look unwinding, and a
//! cancelled child joined by that destructor would never unwind. The unwind is sticky: a
//! `catch_unwind` in the coroutine's own code catches the payload like a panic, but dropping it
//! there (in that coroutine, outside another unwind) resumes the unwind from the drop, as .NET
//! re-raises a thread abort at the end of each `catch`; the body takes it for good
//! (`CancelUnwind::spent`). Otherwise a server loop that survives its handlers' panics (`let _ =
//! catch_unwind(handler)`) would swallow its cancellation and then, held off for good, ignore every
//! later cancel, so that dropping the runtime would wait for it for ever (`tests/cancel.rs`). A
//! payload that leaves its coroutine (sent away, returned as a value) is inert: its drop checks the
//! running task's id.
//!
//! **Coroutine-locals** are dropped one at a time at the coroutine's exit, each under its own
//! `catch_unwind` (so a panicking destructor does not end the clearing, which would leave values to
//! be dropped later on whatever thread frees the task — `!Send` values on another thread); a
//! destructor may use a local already dropped (made afresh and dropped too), but a key dropped
//! twice is refused with a panic, so destructors using each other's keys cannot loop for ever. An
//! initialiser that used its own key (through another local) has its fresh value dropped after the
//! map's borrow ends: dropped inside `entry().or_insert`, a destructor that used other locals would
//! grow the map under that borrow, and the returned pointer would read freed memory
//! (`tests/coroutine_locals.rs`). A closure dropped unrun for want of a stack
//! (`JoinError::NoStack`) is dropped as the worker's own code (`outside_coroutine`, under
//! `catch_unwind`), as a detached value is: otherwise its destructor would park a coroutine that
//! never started (a null yielder) and see the dead task as the current one.
//!
//! **Scopes** erase the children's lifetime internally (`scoped_spawn`, `unsafe`) and always join
//! every child before returning; a failing child cancels its siblings. A child's join cell has two
//! waker slots, the handle's and the scope's: a sibling may be joining the child's handle while the
//! scope waits for the child, and with one shared slot the later waiter would replace the earlier,
//! which would never wake (nor the scope return;
//! `a_sibling_joining_a_handle_and_the_scope_both_wake`). A cancellation of the coroutine running a
//! scope is held off (`defer_cancel`) from the end of the body until every child has finished, and
//! cancels the children while the scope waits: unwinding out of `scope` at once would leave
//! children borrowing from the frame (`a_cancelled_scope_cancels_and_waits_for_its_children_first`;
//! `blocking` and the IO offload hold it off the same way). Children may spawn more children
//! through the shared `&Scope` until they finish, so the scope takes the list's entries one at a
//! time until none is left; waiting only for those there are when the body returns, it would return
//! while a grandchild still borrows
//! (`children_spawned_by_children_after_the_body_are_waited_for_too`). The list keeps only what the
//! scope still needs — children that may not have finished, and finished ones whose panic no handle
//! took — and a spawn prunes the rest whenever the list has doubled since the last pruning
//! (amortised O(1); the final wait's cursor lives in the list and is moved with it), so a
//! long-lived scope's memory does not grow with every child it ever spawned
//! (`tests/scope_memory.rs`). A scope runs only in a coroutine: on a worker thread outside one (a
//! destructor the worker runs) it panics, as `Runtime::block_on` does — its children would be
//! queued on the worker its wait blocks (`tests/scope_on_worker_thread.rs`). **block_on** is a
//! scoped spawn of the root coroutine joined from the calling thread. Joining (`tests/join.rs`): a
//! scope takes a child's panic only after every child has finished (otherwise a sibling that holds
//! the failed child's handle, inside a `CancelGuard`, and joins it would find the panic taken and
//! wait for ever, and the scope with it); `join` after the handle was awaited to `Ready` panics as
//! a second poll does (rather than park for ever); `spindle_park::block_on` counts each poll that
//! leaves the future pending against the slice's budget (otherwise a future that wakes itself would
//! keep its worker for good, with no cancellation point: `tests/block_on_future.rs`), and polls a
//! pending future with a waker of its own that records the wake-up, since a park inside the
//! future's `poll` (a nested `block_on`, a `join`, a `sleep`) takes the task's one permit and the
//! loop would park for ever; and dropping a `JoinHandle` drops the coroutine's value as soon as it
//! exists — at once, or in `finish` when it finishes (a `detached` flag in the join slot) — since a
//! value holding the coroutine's own waker (a channel's kept packet) would keep the task, and so
//! itself, alive for good. That drop runs on the worker's stack inside `finish`, so it runs as the
//! worker's own code (`worker::outside_coroutine`) and under `catch_unwind`: a destructor that
//! parks there parks the thread instead of "suspending" the finished coroutine from the wrong
//! stack, and one that panics does not take the worker down (tests
//! `a_detached_value_whose_destructor_*`). A `T` without drop glue skips all of it (a detached
//! spawn of `()` pays nothing for it); a handle that `join` consumed skips its drop. Since such a
//! destructor runs on a worker thread, `Runtime::block_on` there (not only inside a coroutine)
//! panics: it would block the worker, and on one worker deadlock on the root coroutine queued on
//! it.
//!
//! **Blocking** work goes to a bounded thread pool (idle threads exit) while the caller parks (with
//! cancellation held off, since the closure may borrow from it). A submission whose thread cannot
//! start while no pool thread exists takes its own job back (found by its submission number) and
//! reports the error; taking the last queued job instead could take another submitter's and leave
//! its own queued to run after its caller had unwound. A submission that finds an idle thread
//! claims it at once (`idle` lowered by the submitter, `notified` counting claims for the waking
//! thread): were the thread to lower `idle` itself when it wakes, a second submission before that
//! would count on the same thread, and two jobs would queue behind one thread far below the bound —
//! a deadlock if one waits for the other. The pool keeps its threads' join handles (those of
//! threads that exited idle are dropped when the next one starts) and the runtime's shutdown joins
//! them, within what is left of `shutdown_timeout`'s time (a thread still in a job then is
//! detached), so that no pool thread outlives `drop(rt)` (`tests/shutdown_threads.rs`). Each pool
//! thread records its pool in a thread-local, and a shutdown run there panics, as one run by the
//! runtime's own coroutine does: it would wait for the coroutine that waits for that very job
//! (`tests/shutdown.rs`).
//!
//! **Budget and time slices**: operations that may complete without blocking cost one of 128 units.
//! A slice of its own (a task popped from a queue) ends when its budget is spent or its time is
//! over (two monitor epochs, 10–20 ms); the coroutine yields. A task popped from run-next inherits
//! the slice (Go's rule), and each hand-off costs one unit. From the first hand-off on, the slice
//! ends in time only: when its budget runs out, the worker checks the slice's age
//! (`WorkerCounters::slice_over`, the monitor's epochs, no clock read); if it is not over the
//! budget is refilled — a hand-off takes the refill (`WorkerCtx::run_task`), and a coroutine inside
//! an operation pauses (`Suspend::Pause`: it switches to its worker, which resumes it at once in
//! the same slice, so timers, IO and the monitor still see it). When the slice is over, the running
//! task yields and a task popped from run-next goes behind the worker's queues. So a chain of cheap
//! hand-offs gets as much of the worker's time as a chain of costly ones (Go's `TestPingPongHog`
//! shape: `tests/fairness.rs`), and a pair waking each other by plain wake-up and park cannot keep
//! the worker for ever (`tests/run_next_fairness.rs`). FIFO and round-robin never hand a slice on:
//! they are fair in turns, not in time. A park counts only when it finds its permit without
//! suspending (one that suspended gave its worker up, and counting it would cost every blocked
//! operation for nothing). Channel sends and receives, readiness-path socket operations and `join`
//! count **before** they act: the yield is a cancellation point, and after the operation an unwind
//! there would lose what it did (a message taken, bytes read). Without a count, a coroutine on a
//! channel that always has a message would keep its worker for ever (`tests/time_and_budget.rs`); a
//! channel round trip makes four counts. The count is out of the hook: the budget is
//! `spindle_park::Budget` in the worker's counters, installed on the worker thread (`with_budget`);
//! an operation that leaves some of it costs a thread-local read, a load and a store (no call into
//! the runtime, no check of the running coroutine, no epoch read), and the hook
//! (`coop::budget_used_up`: yield if a coroutine runs) is asked only at its last unit. The monitor
//! ends time slices: the worker notes the epoch a fresh slice began in
//! (`WorkerCounters::start_slice`), and the monitor, at every tick, exhausts the budget of a slice
//! that began two epochs ago (`end_slice_if_over`; a count-down racing with it may undo it, and the
//! next tick exhausts again) — `a_slow_ready_loop_yields_when_its_slice_is_over` fails without it.
//!
//! **Monitor**: a thread that advances slice epochs, ends slices that ran too long, and reports,
//! once per run, a coroutine that kept its worker for more than 10 ms without suspending (by name),
//! then wakes a sleeper to steal what can be stolen. `stuck_threshold(None)` turns off the report
//! only: the monitor thread keeps running, since the time slices need it
//! (`tests/timers_and_slices.rs`).
//! While every worker sleeps it sleeps too, without a timeout (a Dekker hand-shake with the worker
//! that wakes first; see `src/monitor.rs`), so an idle runtime wakes no thread at all
//! (`tests/idle_cpu.rs` counts the context switches of its threads over a second).
//!
//! **Hand-off of a stuck worker** (`src/handoff.rs`; Go's `sysmon` retaking a P). What cannot be
//! interposed — a `futex` inside `std::sync::Mutex`, a raw system call, a CPU loop — keeps the
//! worker's thread; the monitor sees it (resume counter still; thread asleep in the kernel, or
//! burning CPU, read from `/proc`). What may move then moves through the mechanisms that move it
//! when the worker is merely busy, so the worker's return races only with operations that are
//! race-free already: queued coroutines that are not pinned (every unstarted one, and migratable
//! ones) are *stolen* by the worker the monitor wakes (the deque's and the run-next slot's
//! steals; FIFO's unpinned queue is global anyway; round-robin steals nothing, by design), and
//! the due timers of migratable coroutines that parked there are *fired* by the monitor, every
//! tick until the worker's coroutine switches, from the worker's movable wheel (each entry
//! leaves the wheel under its lock, once; the park generation keeps a stale one from waking a
//! later park), queuing those coroutines as a wake-up from a plain thread would. What does not
//! move: started pinned coroutines (invariant 2), their timers (firing one would only queue it
//! to the stuck worker), and IO registrations, migratable coroutines' too (a driver is polled by
//! its own worker only; an io_uring ring has one submitter). The owner pays one relaxed load of
//! the movable wheel's next deadline per timer check; a pinned coroutine's timed park costs
//! nothing more. Tests: `tests/monitor_handoff.rs` — a worker blocked in `Mutex::lock` held by a plain
//! thread, in a raw `nanosleep`, in a CPU loop, each with 100 unstarted coroutines and a
//! migratable sleeper queued on it and a ticker on the other worker; a pinned sleeper that must
//! stay; exactly-once counts across stuck/unstuck cycles, with every policy.
//!
//! **Registry** (`src/registry.rs`): the live tasks, for shutdown and metrics, in two parts.
//!
//! **Counts**: each worker counts the tasks spawned on it and the tasks that ended on it (one
//! writer per counter: a load and a store, no read-modify-write; foreign threads share one atomic
//! pair); live = spawned − ended, every ended count read (acquire) before every spawned count, so
//! that each end the reading sees has its spawn seen too (the spawn's store happens before the push
//! that hands the task on, and so before its end).
//!
//! **Slots**: one slab (slots and a free list) per worker, each behind its own lock, holding the
//! tasks shutdown may have to cancel — those that have suspended (a yield or a park) at least once,
//! and named ones (the monitor's report looks a name up by id). A task that runs from start to end
//! without suspending never takes a slot: while it is queued unstarted, `first_run`'s look at
//! `closing` cancels it before it runs; while it runs, it either ends or reaches its first
//! suspension, where the worker gives it a slot *before* publishing it idle or queueing it, then
//! looks at `closing` (the insert's lock orders that look after shutdown's snapshot of the shard) —
//! `a_coroutine_that_first_suspends_after_shutdown_began_is_cancelled`. A slot holds the task's
//! address, not a counted reference: a task is in a slot only until `finish`, and an unfinished
//! task always has a reference standing for its next run (a queue's, its worker's, or its idle
//! state's); readers take a counted reference under the shard's lock. Uncounted slots take atomic
//! read-modify-writes off every spawn–join (with the join cell's flags below, a chained spawn makes
//! 4 per link). A task is registered by the worker that first runs it, not by its spawner:
//! otherwise a task stolen before its first run would be inserted by one worker and removed by
//! another, and the two would contend for the spawner's shard.
//!
//! **Join cell**: the finishing task writes the result, then sets `COMPLETE`; from then on the
//! result is touched only under the cell's lock. Each of the two waker fields (the handle's, the
//! scope's) has a flag in the state word (`JOIN_WAITER`, `SCOPE_WAITER`): while it is clear the
//! field's owner alone uses it — stores its waker, then sets the flag — and once `COMPLETE`
//! replaced a state with the flag set, the field is `finish`'s, which takes the waker without a
//! lock; an owner re-registering first clears its flag with a compare-and-swap that fails once
//! `COMPLETE` is set, and an owner whose flag lands after `COMPLETE` (finish has not seen it) takes
//! the result itself instead of parking (tokio's `JOIN_WAKER` protocol, per field). A dropped
//! handle of a result with drop glue sets `DETACHED`, and `finish` drops the value at once. The
//! protocol lives in `src/join_cell.rs` (the handle's `take_or_wait` and `detach`, the scope's
//! `register`, `finish`'s `put` and `after_complete`). Tested by
//! `joins_and_detaches_racing_finishes_lose_no_wake_up_and_no_value` (it hangs when the "flag after
//! `COMPLETE`" path is removed) and by **loom** (`tests/loom_task.rs`): that test compiles
//! `src/state.rs` and `src/join_cell.rs` again with its own `crate::loom` module (loom's atomics, a
//! loom lock, loom's `UnsafeCell` behind the cells — a per-test-crate module swap, since the rest
//! of the runtime is not built for loom) and plays the runtime's parts in threads: joins as a
//! thread and as a future re-polled with a new waker, a scope and a join waiting together, detaches
//! racing the finish (the value dropped exactly once, a failure kept), wake-ups and cancels racing
//! a park, a cancel held off by a guard, a timer racing a wake-up and a timer left from an earlier
//! park. Each fails with its protocol step broken (a flag landing after `COMPLETE` ignored, the
//! permit dropped for a running task, the park generation or the permit ignored by the timer or the
//! park, the scope's waker forgotten, a detach ignoring a finish that came first, finish taking an
//! unflagged field, a flag published before its waker — loom reports the last as concurrent writes
//! to the cell). So a finish nobody waits for takes no lock, and a waited-for finish with its join
//! takes two (the joiner's flag and the lock that takes the result), where one spin lock around all
//! of it would be taken by every finish and twice by a waiting join. The registry shards and the
//! join cell take a spin lock whose unlock is a plain store (`spindle_park::spin`): their critical
//! sections move a value or two and never block, and `std::sync::Mutex` pays a read-modify-write to
//! unlock as well as to lock — four per spawn–join.
//!
//! **Shutdown**: cancel every live task, wait for them to unwind, stop and join the workers; with
//! `shutdown_timeout`, what does not unwind in time is leaked, never freed under itself, and only
//! the workers that end by the deadline are joined (each thread's last act marks it ended): one
//! that a coroutine keeps (a CPU loop, a blocking call) is detached, its queues left undrained — a
//! bound worker's private queues are its own — and the shared state leaked with them. Joining every
//! worker would let a blocked one keep `shutdown_timeout` from returning at all
//! (`tests/worker_loop.rs`). A spawn from a thread that is not one of the runtime's workers counts
//! itself (a sequentially consistent increment), then looks at `closing` again and backs out with
//! an error if it is set; shutdown fences between setting `closing` and counting: either the spawn
//! sees `closing` or shutdown's count sees the spawn and waits for it. Were the spawn to look only
//! before counting, a shutdown that found nothing live in between would stop the workers, and the
//! task would never run and its `join` would hang. A spawn on a worker needs no second look (its
//! coroutine is live until after the count). A runtime dropped by one of its own coroutines, or in
//! one of its blocking-pool jobs, panics instead of waiting for itself. Once the workers are joined
//! (their exits move their cached stacks to the shared pool) the shutdown unmaps the pool's idle
//! stacks: otherwise a `Handle` that outlives the runtime would keep them all mapped.
//!
//! **Stacks**: a runtime-owned pool that keeps up to 16k stacks per thread and 16k shared,
//! untrimmed between threads (a mapped stack costs µs, a pooled one ns). Coroutines that ask for
//! another size (`Builder::stack_size`) use the runtime's pool of that size
//! (`Shared::pool_of_size`, default `PoolConfig`), released with the runtime's own pool when a
//! worker idles and at shutdown (`tests/stack_sizes.rs`). A coroutine takes its stack when a worker
//! first runs it (`Body::OwnPending`), not at spawn: a burst of 10,000 spawns holds no stacks while
//! it waits, and coroutines that run one after another reuse the same cache-warm stack. The price:
//! a coroutine that finds no stack when it is to run fails with `JoinError::NoStack` instead of its
//! spawn failing; `Builder::reserve_stack` takes the stack at the spawn for callers that want the
//! refusal there (admission control).
//!
//! **Carriers** (`src/carrier.rs`). A coroutine on the runtime's default stack does not get a
//! coroutine of its own: its worker starts it on a *carrier*, a coroutine whose body is a loop —
//! start the task it is resumed with, run it to its end, suspend with the outcome
//! (`Suspend::Finished`, a pointer to it in the task's frame on the carrier's stack), wait for the
//! next. The worker takes the outcome, puts the carrier in its cache (`CarrierCache`, up to the
//! pool's `thread_cache` while busy — FIFO and round-robin run `ping_pong` with about a thousand
//! tasks alive at once, and a smaller cap would make them retire and rebuild carriers; 64 once the
//! worker has idled a second) and finishes the task as usual. After the pool's `trim_every` tasks a
//! carrier retires, so its stack goes through the pool's recycle (which trims deep pages every
//! `trim_every`-th recycle of a stack: a deep call on a carrier can stay resident for up to
//! `trim_every`² tasks, against `trim_every` recycles without carriers — a weaker bound, accepted).
//! It is Go's `gfput`/`gfget`, which keep a dead G with its stack for the next `go`: per task this
//! removes the pool `get`, the coroutine's initial frame, the entry's `catch_unwind`, and the
//! coroutine's teardown and stack return. A resume sends a `Resume`: carry on, the header of a task
//! to start, or retire. The carrier is boxed (it moves between cache and task twice per task: one
//! word instead of 96 bytes), a `SendCoroutine` that a migratable task takes along and leaves in
//! the cache of the worker it ends on. Each start names the stack after the task (`set_owner`), so
//! an overflow reports the task that overflowed
//! (`stack_overflow_on_a_carrier_names_the_task_that_overflowed`). Idle carriers hold stacks that
//! the pool counts as in use: `WorkerMetrics::idle_carriers` shows them; a worker idle for a second
//! with excess retires them before trimming the pool, and a stopping worker retires them (resumed
//! with `Resume::RETIRE`, their loop returns: no unwind). Other stacks (a `stack_size` of another
//! size, growable, `reserve_stack`, shared) keep a coroutine per task.
//!
//! The worker starts a task on a carrier itself (`TaskRef::start_carried`, for a header marked
//! `starts_on_carrier` at spawn): it takes a carrier, installs it in the header, and resumes it
//! with `Resume::start(header)`; the carrier's loop reaches the task type's code through the
//! header's vtable (`TaskVtable::start`), which moves the closure out of the body — one indirect
//! call to the task's types per start, and nothing of the start in the worker's frame. The cache's
//! `take` and `put` inline their common case (an idle carrier; room in the cache) with the rest out
//! of line (as do, smaller, `TaskRegistry::ended` for a task without a slot and the run-next slot's
//! `put` without a thief in sight). The task's header holds its carrier (`Header::carrier`; the
//! body only says `Carried`): resuming a carrier does not depend on the task's types, so
//! `TaskRef::run` resumes it directly and calls through the vtable only for a first run, another
//! kind of stack, or once (`TaskVtable::finished`) to take a finished task's outcome. A call
//! through the vtable's `run` on every resume would be an indirect call whose target changes with
//! every task type the worker switches between (in `ping_pong` three types take turns), which
//! branch predictors miss. Tests: `tests/carriers.rs`.
//!
//! **IO.** `src/io.rs`: `IoBackend` (`Auto` reads `SPINDLE_IO`, else probes io_uring on the
//! builder's thread and falls back to epoll with a warning through the `log` facade; an explicit
//! backend never falls back — `BuildError::Io`), `Custom` for a driver of one's own, `None` for no
//! driver. Each worker makes its driver on its own thread and reports success before `build`
//! returns; it installs it (`spindle_io::with_driver`) and the blocking pool (`with_blocking_pool`)
//! around its loop. The loop polls the driver without blocking every 61 iterations while busy, and
//! once when its queues run dry; a runtime with one worker never spins (nobody but IO or a foreign
//! thread can give it work, and both wake the driver); an idle worker sleeps in `driver.park(next
//! timer)`, and the idle protocol's notifications reach it through the driver's unparker (eventfd,
//! ring eventfd, `EVFILT_USER`, `PostQueuedCompletionStatus`) — one wake-up mechanism for IO and
//! threads (invariant 6). Dropped on the worker after its tasks are gone.
