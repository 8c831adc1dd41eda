//! An echo server: one coroutine per connection, written as blocking code.
//!
//! ```text
//! cargo run --release -p spindle-rt --example echo -- 127.0.0.1:7000
//! ```
//!
//! Each connection's coroutine reads and writes with plain `std::io` calls; when a call would
//! block, only that coroutine is suspended and the worker runs others. `SPINDLE_IO=uring` (or
//! `epoll`, `polling`) picks the IO backend.

use std::io::{self, Read, Write};

use spindle_io::net::{TcpListener, TcpStream};

/// Serves `listener` for ever (until `accept` fails for good).
pub fn serve(listener: TcpListener) -> io::Result<()> {
    loop {
        let (stream, _peer) = match listener.accept() {
            Ok(conn) => conn,
            // Out of descriptors and the like: the listener backs off by itself; go on.
            Err(e) if is_transient(&e) => continue,
            Err(e) => return Err(e),
        };
        spindle_rt::spawn(move || {
            if let Err(e) = echo(stream) {
                eprintln!("connection ended: {e}");
            }
        });
    }
}

/// Errors after which the listener still works: a connection that died in the backlog, or out
/// of descriptors (the listener backs off by itself; they come back as connections close).
fn is_transient(e: &io::Error) -> bool {
    const EMFILE: i32 = 24; // the same on Linux, the BSDs and macOS
    const ENFILE: i32 = 23;
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    ) || e
        .raw_os_error()
        .is_some_and(|code| code == EMFILE || code == ENFILE)
}

/// Copies everything the peer sends back to it, until it closes.
fn echo(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n])?;
    }
}

#[allow(dead_code)] // `main` is unused when a test includes this file as a module
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7000".to_string());
    let rt = spindle_rt::Runtime::new()?;
    println!("echo on {addr} ({} IO)", rt.io_backend());
    rt.block_on(move || serve(TcpListener::bind(addr.as_str())?))?;
    Ok(())
}
