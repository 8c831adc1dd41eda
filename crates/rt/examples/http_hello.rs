//! A minimal HTTP/1.1 "hello" server: keep-alive and pipelining, one coroutine per
//! connection, blocking-style parsing over a buffered stream.
//!
//! ```text
//! cargo run --release -p spindle-rt --example http_hello -- 127.0.0.1:8080
//! wrk -t1 -c50 -d10s http://127.0.0.1:8080/
//! ```
//!
//! Pipelining falls out of the structure: requests are parsed from a read buffer one after the
//! other, and responses are collected in a write buffer that is flushed only when no complete
//! request is left to parse — so a batch of pipelined requests costs one `write`.

use std::io::{self, Read, Write};

use spindle_io::net::{TcpListener, TcpStream};

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, world!";

/// The largest request head accepted (larger ones get a 431 and the connection is closed).
const MAX_HEAD: usize = 16 * 1024;

/// Serves `listener` for ever.
pub fn serve(listener: TcpListener) -> io::Result<()> {
    loop {
        let (stream, _) = match listener.accept() {
            Ok(conn) => conn,
            // A connection that died in the backlog, or out of descriptors (the listener
            // backs off by itself): keep serving.
            Err(e)
                if e.raw_os_error()
                    .is_some_and(|c| [103, 104, 23, 24, 4].contains(&c)) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        spindle_rt::spawn(move || {
            let _ = connection(stream);
        });
    }
}

/// What parsing one request from the buffer found.
enum Parsed {
    /// A complete request of this many bytes (head and body); keep the connection if `true`.
    Request { len: usize, keep_alive: bool },
    /// Not a complete request yet.
    Partial,
    /// Not HTTP/1.x, or too large: answer with this status line and close.
    Bad(&'static [u8]),
}

fn connection(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut input = Vec::with_capacity(4096);
    let mut output = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        // Answer every complete request in the buffer, then flush once.
        let mut start = 0;
        let mut close = false;
        loop {
            match parse(&input[start..]) {
                Parsed::Request { len, keep_alive } => {
                    output.extend_from_slice(RESPONSE);
                    start += len;
                    if !keep_alive {
                        close = true;
                        break;
                    }
                }
                Parsed::Partial => break,
                Parsed::Bad(status) => {
                    output.extend_from_slice(status);
                    close = true;
                    break;
                }
            }
        }
        input.drain(..start);
        if !output.is_empty() {
            stream.write_all(&output)?;
            output.clear();
        }
        if close {
            return Ok(());
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        input.extend_from_slice(&chunk[..n]);
    }
}

/// Parses the request at the start of `buf` (method, target, version line; headers; a body
/// only as `Content-Length` says — chunked request bodies are refused).
fn parse(buf: &[u8]) -> Parsed {
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            Parsed::Bad(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        } else {
            Parsed::Partial
        };
    };
    let head = &buf[..head_end];
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().unwrap_or_default();
    let http10 = request_line.ends_with(b"HTTP/1.0");
    if !(request_line.ends_with(b"HTTP/1.1") || http10) {
        return Parsed::Bad(
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
    }
    let mut keep_alive = !http10;
    let mut body = 0usize;
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        if name.eq_ignore_ascii_case(b"content-length") {
            match std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                Some(n) => body = n,
                None => {
                    return Parsed::Bad(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                }
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            if value.eq_ignore_ascii_case(b"close") {
                keep_alive = false;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                keep_alive = true;
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Parsed::Bad(
                b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    }
    let len = head_end + 4 + body;
    if buf.len() < len {
        return Parsed::Partial;
    }
    Parsed::Request { len, keep_alive }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[allow(dead_code)] // `main` is unused when a test includes this file as a module
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_string());
    let rt = spindle_rt::Runtime::new()?;
    println!("http on http://{addr}/ ({} IO)", rt.io_backend());
    rt.block_on(move || serve(TcpListener::bind(addr.as_str())?))?;
    Ok(())
}
