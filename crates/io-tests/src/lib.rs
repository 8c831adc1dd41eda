//! The IO conformance suite lives in `tests/conformance.rs`: every behaviour the IO types
//! promise, run against every backend this platform has (on Linux: epoll, io_uring, polling,
//! a runtime without a driver, and plain threads with no runtime at all).
#![deny(missing_docs)]
