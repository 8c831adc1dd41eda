//! The examples, exercised: each example's `serve` runs in a runtime while plain threads act
//! as clients.

#[allow(dead_code)]
#[path = "../examples/echo.rs"]
mod echo;
#[allow(dead_code)]
#[path = "../examples/http_hello.rs"]
mod http_hello;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// Starts `serve` on a fresh loopback listener in its own runtime; returns the address and the
/// runtime (dropping it stops the server).
fn start(
    serve: fn(spindle_io::net::TcpListener) -> std::io::Result<()>,
) -> (SocketAddr, spindle_rt::Runtime) {
    let rt = spindle_rt::Runtime::builder().workers(2).build().unwrap();
    let listener = spindle_io::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(move || serve(listener));
    (addr, rt)
}

fn client(addr: SocketAddr) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn echo_serves_many_clients_at_once() {
    let (addr, _rt) = start(echo::serve);
    let clients: Vec<_> = (0..16u8)
        .map(|k| {
            std::thread::spawn(move || {
                let mut s = client(addr);
                for i in 0..50u8 {
                    let msg = vec![k ^ i; 1 + usize::from(i) * 31];
                    s.write_all(&msg).unwrap();
                    let mut back = vec![0; msg.len()];
                    s.read_exact(&mut back).unwrap();
                    assert_eq!(back, msg);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}

fn read_responses(s: &mut std::net::TcpStream, n: usize) -> String {
    let one =
        "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, world!";
    let mut buf = vec![0; one.len() * n];
    s.read_exact(&mut buf).unwrap();
    let text = String::from_utf8(buf).unwrap();
    assert_eq!(text, one.repeat(n));
    text
}

#[test]
fn http_keep_alive_and_pipelining() {
    let (addr, _rt) = start(http_hello::serve);
    let mut s = client(addr);
    // Keep-alive: three requests one after the other on one connection.
    for _ in 0..3 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        read_responses(&mut s, 1);
    }
    // Pipelining: ten requests in one write, a body on one of them, split across writes.
    let mut batch = Vec::new();
    for i in 0..10 {
        if i == 4 {
            batch.extend_from_slice(b"POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
        } else {
            batch.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        }
    }
    let (a, b) = batch.split_at(37);
    s.write_all(a).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    s.write_all(b).unwrap();
    read_responses(&mut s, 10);
    // Connection: close is honoured after the response.
    s.write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    read_responses(&mut s, 1);
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

#[test]
fn http_rejects_garbage_and_closes() {
    let (addr, _rt) = start(http_hello::serve);
    let mut s = client(addr);
    s.write_all(b"NOT HTTP\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
}
