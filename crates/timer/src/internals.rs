//! How this crate is built: notes for whoever changes it (the crate docs say how to use it;
//! the repository's ARCHITECTURE.md places the crate among the others).
//!
//! `TimerWheel<T>`: 11 levels × 64 slots over u64 ticks (1 ms by default), entries in a slab linked
//! by index into per-slot lists, an occupancy bitmap per level. Insert and cancel are O(1) (the
//! `sched` suite of `cargo xtask bench` compares them with a `BTreeMap`); deadlines round up (never
//! early), the whole u64 range is kept (no clamping: libco clamps at 60 s), keys carry a generation
//! so stale keys are refused. One wheel per worker, no locks.
