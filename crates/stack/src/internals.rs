//! How this crate is built: notes for whoever changes it (the crate docs say how to use it;
//! the repository's ARCHITECTURE.md places the crate among the others).
//!
//! See `crates/stack/src/lib.rs`. The `Stack` trait (top, limit, guard, `set_owner`, and three
//! hooks used only by copying stacks) and four kinds:
//!
//! * `FixedStack`: one `mmap` (`MAP_NORESERVE | MAP_STACK`), a `PROT_NONE` guard below, committed
//!   lazily. Windows: `VirtualAlloc` reserve+commit with a `PAGE_NOACCESS` guard (compile-checked).
//! * `StackPool` / `PooledStack`: a per-thread cache (keyed by pool) in front of a shared
//!   `Mutex<Vec>`; bounded; excess unmapped; a thread's cache flushes to the shared pool at thread
//!   exit. Deep use is given back with `MADV_DONTNEED` below `keep_resident` every `trim_every`-th
//!   recycle of a stack, when a thread's cache is flushed, and (with `trim_when_shared`) whenever a
//!   recycle passes a stack to the shared pool — a full thread cache's overflow, or every recycle
//!   of a pool without a thread cache.
//! * `GrowableStack`: reserves `max` as `PROT_NONE`, commits `initial`; the fault handler grows it
//!   with `mprotect`. Never moves. Unix only.
//! * `SharedStack` / `SharedSlot`: libaco-style copying stacks. The region's occupant's used bytes
//!   `[sp, top - 16)` are copied to its heap buffer when another coroutine takes the region, and
//!   copied back when it is resumed — only when ownership changes. The top 16 bytes
//!   (`Stack::UNSAVED_TOP`) are the context's link and entry words, which a suspended context
//!   does not need kept (see `spindle_context::STACK_RESERVED`): a 16-byte allocation step less
//!   per suspended coroutine. A slot's state (saved stack pointer, save buffer, owner record) is
//!   boxed for a stable address; the region keeps up to 1,024 dropped slots' states for the next
//!   `slot()` (their save buffers freed), since a region serves many short-lived coroutines
//!   (skynet: an allocation and a free less per coroutine).
//!
//! Overflow: every guarded stack is registered in a global append-only registry of slots (chunks
//! never freed, read with atomics). A `SIGSEGV`/`SIGBUS` handler on an alternate signal stack
//! (`prepare_thread` installs one per thread) finds the stack by the fault address, grows a
//! growable stack, or prints one line naming the owner and aborts; faults that are not ours go to
//! the previous handler. Exhaustion: `ENOMEM` is diagnosed (mapping count vs. `vm.max_map_count`,
//! `RLIMIT_AS`) into a `StackError` that says what to do. Stacks are registered with valgrind
//! (client requests written in inline asm).
