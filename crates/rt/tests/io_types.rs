//! The runtime's IO types at their edges, one module per type: address resolution, datagram
//! sockets and files on io_uring from copying stacks, pipes' short reads, a wait whose driver
//! shuts down, and read timeouts carried over from std sockets.
#![cfg(target_os = "linux")]

mod common;

#[path = "io_types/addr.rs"]
mod addr;
#[path = "io_types/dgram.rs"]
mod dgram;
#[path = "io_types/file.rs"]
mod file;
#[path = "io_types/pipe.rs"]
mod pipe;
#[path = "io_types/shutdown.rs"]
mod shutdown;
#[path = "io_types/timeouts.rs"]
mod timeouts;
