//! How this crate is built: notes for whoever changes it (the crate docs say how to use it;
//! the repository's ARCHITECTURE.md places the crate among the others).
//!
//! One mechanism under every primitive (`src/waiter.rs`): a waiting caller allocates a **waiter
//! record** (`Arc`: its `Waker` and one state word), queues it in the primitive's wait queue under
//! the primitive's internal lock, releases the lock and parks (`spindle_park`, whose permit makes
//! "register, unlock, park" race-free). Every way out of a wait — a notification, a hand-off, a
//! timeout, a cancellation, another `select` arm winning — is one compare-and-swap on the state
//! word, so exactly one party decides, and whoever decides owns what is handed over (a lock,
//! permits, a message slot). Consequences: no spurious wake-ups are visible to callers; a timeout
//! racing a hand-off keeps the hand-off; a cancelled coroutine's drop guard removes its record and
//! passes on what it was handed in that instant (a message goes back to the front of its channel,
//! in the order it was sent: hand-overs to waiting receivers are numbered, and a message given back
//! goes behind those given back with smaller numbers (at the very front, two receivers cancelled
//! one after the other would give their messages back reversed),
//! `messages_given_back_by_several_receivers_keep_their_order`). A message handed to a waiting
//! receiver counts as a sender (`Chan::handed_over`) until that receiver takes it or gives it back
//! (`Chan::handoff_taken`): otherwise the last sender's drop would tell the other waiting receivers
//! "disconnected" while a handed-over message could still come back into the buffer, where a
//! consumer that had stopped at the disconnect would never look (loom model
//! `disconnect_waits_for_a_handed_over_message_to_be_taken`, which fails without it; the count
//! costs two read-modify-writes per hand-over to a waiting receiver). Records are on the heap, so
//! coroutines on copying stacks can wait (invariant 3; stress-tested). A lock's grant is seen by
//! its waiter only after the lock's state counts it: the granter claims the record (`try_claim`,
//! `BUSY`), updates the state, then publishes (`publish_claimed`) and wakes. Otherwise a waiter
//! that sees a `try_select`ed grant at once (its timed park has just timed out) could release the
//! lock before the state counts it: an `RwLock`'s reader count would wrap (an overflow panic in
//! `tests/races.rs`), a writer's release could come before the grant's state write and leave the
//! lock write-locked for ever, and a `Mutex` waiter woken to retry could clear `WOKEN` before the
//! unlock sets it, so that every later unlock would skip the queue (loom models
//! `rwlock_{writer,reader}_timing_out_as_it_is_granted_releases_the_lock` and
//! `mutex_retry_seen_by_a_timing_out_waiter_strands_nobody`, which need 3 preemptions and fail
//! without this order; the loom leg builds with overflow checks). The other primitives have models
//! at 3 preemptions too (`tests/loom_timeouts.rs`: semaphore grants racing timeouts, cancels,
//! dropped futures and `close`; condvar, notify, waitgroup, once-cell; mutex hand-off to an overdue
//! timed or cancelled waiter; rwlock read batches with timed and cancelled readers); each fails
//! when the code it covers is deliberately broken. The semaphore marks a grant before its state
//! counts it, safely: its `PARKED` bit stays set until the count, and every fast path fails or
//! takes the queue lock while it is. `mutex_retry_and_handoff` yields while it holds the lock, so
//! that a blocking-thread model reaches the mutex's re-queue and hand-off (without the yield the
//! losing waiter's spin yields to the main thread, which then unlocks). `select`
//! (`tests/chan_edge_cases.rs`): a blocking wait counts against the budget before it tries an arm,
//! as a blocking `send`/`recv` does (otherwise a loop on a select whose arm always has a message
//! would never yield its worker); and a send arm completed by an earlier wait of the same `Select`
//! has no message left, so it registers nowhere (queued with an empty slot, a rendezvous receiver
//! would complete it carrying nothing, and on a channel with room it would look ready for ever, so
//! `wait` would spin). The rule is general: each arm completes at most once per `Select` (a receive
//! arm whose `out` holds a result registers nowhere either: a second wait would take another
//! message and drop the first), and a wait with every arm spent returns as with no arms. And an arm
//! whose operation could complete when it registers is not queued (the select retries instead): a
//! receive entry queued beside a buffered message could be handed a newer message by a sender
//! before the select aborted (FIFO broken; `tests/select_order.rs`, and deterministically
//! `chan::tests`).
//!
//! * **Mutex**: FIFO queue with barging for throughput; a waiter overdue by 1 ms is handed the lock
//!   directly (rationed to once per ms), so none starves. **RwLock**: FIFO with read batches.
//!   **Condvar**: no spurious wake-ups; a `notify_one` taken by a waiter cancelled while re-locking
//!   is passed on. No poisoning (parking_lot's choice: a cancelled coroutine unwinds, and std's
//!   poisoning would poison every lock held across a cancellation point).
//! * **Channels** (`src/chan/`): one implementation behind mpsc/mpmc — a buffer and wait queues of
//!   senders and receivers whose records carry a message slot (a rendezvous channel hands the
//!   message through the slot); the buffer and queues hold their first element inline
//!   (`src/chan/deque.rs`), since they rarely hold more. A blocked operation spins up to 20 µs
//!   before parking, but only while its recent completions came from other threads (a peer on the
//!   same worker cannot run while it spins); a spinning waiter is not woken. A queue entry of a
//!   plain send or receive points to its record (waiter and slot, one allocation: a **packet**)
//!   without a reference count: the blocked operation owns it and keeps it until it has seen its
//!   completion or has taken its entry out of the queue under the channel's lock — which is how it
//!   gives up (timeout, cancellation, a dropped future): whoever takes a packet's entry out of its
//!   one queue decides its fate, so a completer claims it with a plain store (`BUSY`,
//!   `Waiter::mark_claimed`) instead of a compare-and-swap (a `select`'s record sits in several
//!   queues, its arms' entries hold `Arc`s and are claimed by compare-and-swap). The completer
//!   moves the message, then **wakes the waiter, then publishes** the outcome as its last touch of
//!   the record (`Waiter::complete`; a waiter woken early sees `BUSY` and waits out the few
//!   instructions left; a future's waker is cloned out and woken after the publication, since a
//!   waker may poll at once). A reference in the entry would cost an increment and a decrement per
//!   blocked operation, and a claim by compare-and-swap one read-modify-write more. A channel keeps
//!   the packet of a finished blocking send or receive as its **spare** (an `AtomicPtr`: emptied
//!   only under the channel's lock, with a load and a store; filled only when empty, with a
//!   compare-and-swap from null) for the next one, with its last waker kept: when the same task
//!   blocks on the channel again (the usual case) `Waiter::reset` sees it is the current task's
//!   (`spindle_park::is_current_waker`, the runtime's `Hook::will_wake`: same header, same vtable)
//!   and reuses it instead of dropping one and cloning another — two read-modify-writes fewer;
//!   until then it keeps that task's block (not its coroutine or stack, freed when it finished)
//!   allocated. A blocked operation that finds the spare makes no allocation and no free. The
//!   blocking `send_until`/`recv_until` (and oneshot's receive, `JoinHandle::join`) are
//!   `#[inline(always)]` around their wait, with the locked parts out of line, so that the park's
//!   switch is one frame (the runtime's hook) below the caller: every frame between the caller and
//!   the switch is a mispredicted return (see "Switch depth" in `spindle-rt`'s notes). Under loom
//!   the reuse is off except in the models written for it (`__loom::recycle_packets`; on
//!   everywhere, it would multiply every channel model's interleavings many times over): two
//!   rendezvous in a row, and a receive that may time out before the next; waking after the
//!   publication fails them (a data race on the waker the next wait rewrites). Every use of the
//!   record by its completer (the spin check, the waker, each of the publication's two stores) also
//!   reads the record's `Alive` marker (`crate::loom::Alive`, empty outside loom), which the
//!   channel writes when it takes the packet back (`Chan::recycle`, to reuse or free it): a store
//!   after the publication — which is not a data race loom sees on its own, the record being
//!   atomics — is one there (a publication before the completing thread is recorded passes both
//!   models without the marker, and fails them with it). The window between a completer's claim and
//!   its publication, which a woken waiter may see (`BUSY`, and spin), multiplies the loom models'
//!   interleavings: `two_blocked_senders_keep_their_order` is the longest model of the loom leg.
//!   `tests/chan_reuse.rs` ends blocked operations every way (timeout, completion, message handed
//!   back) and has two coroutines take turns on one record.
//! * **oneshot** (`src/oneshot.rs`) has its own, smaller protocol: one allocation holds the
//!   message, one atomic state word and the list of whoever waits (a blocked receive's waker, a
//!   future's, a select arm's record). The state word carries where the message is (sent, taken),
//!   which handle is gone, the two handles' shared ownership (two bits, no reference count: the
//!   last handle to leave frees the allocation) and the list's lock: every change is a
//!   compare-and-swap from an unlocked value, so the lock's holder is the only writer and unlocks
//!   with a plain store. A send nobody waits for, taking a message that is there, and each handle's
//!   drop are one atomic operation each; a send that finds waiters takes the lock in the same
//!   compare-and-swap that publishes the message, takes the list and unlocks before it wakes
//!   anyone. Once the outcome is published and the word unlocked, the list is empty for good, so a
//!   receive that sees the outcome never has a registration to remove (loom: the handles racing to
//!   free, two receives racing for the message, a timed receive racing the send; Miri over every
//!   order of the handles' ends). A receiver dropped after the sender's bit is clear frees the
//!   allocation after a load, with no compare-and-swap (the sender clears its bit only with its
//!   last change of the word — the unlocking store when it had to take the list — and nothing else
//!   reaches the allocation): a ping-and-pong pair of oneshots makes 5 atomic read-modify-writes in
//!   all. That order is checked by loom: loom sees races on its cells, not a use of freed memory,
//!   so the allocation carries an `Alive` marker that every use reads (with a load of an atomic
//!   that the free stores: loom only tries another order of two threads where they touch the same
//!   atomic, and without it would never schedule the receiver's free between the sender's locking
//!   compare-and-swap and its unlocking store) and the free writes;
//!   `oneshot_receiver_dropped_with_a_forgotten_registration_races_send` (which lets the send begin
//!   before the drop) fails for a drop that frees at `TX_CLOSED` and for a send that clears its bit
//!   with the locking compare-and-swap. A blocking receive allocates nothing of its own (a oneshot
//!   built on the channel implementation would need three more allocations: record, buffer, queue).
//!   The allocation comes from `spindle_park::block_cache` (a plain `Box` under loom): on a
//!   runtime's worker a freed channel's block is kept for the next one, since glibc's per-thread
//!   cache keeps only 7 blocks per size, and a burst of a thousand exchanges would send `malloc`
//!   and `free` down their slow paths. A blocking receive takes a message that is there inline
//!   (`take_sent`: a load and one compare-and-swap, before the out-of-line step that registers),
//!   the waiting list is dropped only if it holds something (it is a `ManuallyDrop` that the
//!   allocation's drop looks at: empty after every exchange), and the receive's registration guard
//!   checks inline whether it has anything to remove: no out-of-line call is made for any of the
//!   three when it would find nothing.
//! * **The internal lock** of every primitive and channel is a spin lock whose unlock is a plain
//!   store (`spindle_park::spin`, shared with `spindle-rt`; loom builds swap in a parking lock):
//!   the critical sections move a few values and never block or call user code, and
//!   `std::sync::Mutex` pays a read-modify-write to unlock too.
//! * **`select!`** (`src/select.rs`): one record registered in every arm's queue (unless an arm is
//!   ready then: the select retries); a peer claims it with the compare-and-swap, so exactly one
//!   arm completes; no coroutine per arm. `select! {}` does not compile.
//! * Tests: loom models of every queue and hand-off (`tests/loom_*.rs`, run by the loom leg),
//!   proptest against sequential models, behaviours ported from std's mpsc tests,
//!   crossbeam-channel's and Boost.Fiber's channel status matrix, cancellation at every wait,
//!   stress with a 2-worker runtime and 4 threads on the same primitives (also on shared stacks),
//!   thread-only scenarios sized for Miri (`tests/miri.rs`).
