//! An unmodified blocking WebSocket crate (`tungstenite`, over std's `TcpStream`) in coroutines
//! under the hook: its client and its server side.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

mod common;

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{Ticker, backends, runtime, watchdog};
use spindle_rt::IoBackend;
use tungstenite::{Error, Message};

/// Serves WebSocket echo on `listener` in coroutines, one per connection, for `conns`
/// connections: each message comes back as it came, `"reverse:<text>"` comes back reversed.
fn echo_server(listener: TcpListener, conns: usize) -> spindle_rt::JoinHandle<usize> {
    spindle_rt::spawn(move || {
        let sessions: Vec<_> = (0..conns)
            .map(|_| {
                let (stream, _) = listener.accept().unwrap();
                spindle_rt::spawn(move || {
                    let mut ws = tungstenite::accept(stream).unwrap();
                    let mut echoed = 0;
                    loop {
                        match ws.read() {
                            Ok(Message::Text(t)) => {
                                let back = match t.as_str().strip_prefix("reverse:") {
                                    Some(r) => r.chars().rev().collect::<String>(),
                                    None => t.as_str().to_string(),
                                };
                                ws.send(Message::text(back)).unwrap();
                                echoed += 1;
                            }
                            Ok(Message::Binary(b)) => {
                                ws.send(Message::Binary(b)).unwrap();
                                echoed += 1;
                            }
                            // Pings are answered and the close handshake completed by
                            // tungstenite itself, on the next read or flush.
                            Ok(_) => {}
                            Err(Error::ConnectionClosed) => return echoed,
                            Err(e) => panic!("server: {e}"),
                        }
                    }
                })
            })
            .collect();
        sessions.into_iter().map(|s| s.join().unwrap()).sum()
    })
}

/// 50 `tungstenite` clients and the `tungstenite` server sessions they talk to, all coroutines
/// of a runtime with one worker: every client completes the handshake, gets each of its 20
/// messages back (text and binary), and closes cleanly. A call that blocked the worker would
/// leave the other side unable to answer (the watchdog would fire).
#[test]
fn websocket_clients_and_server_on_one_worker() {
    const CLIENTS: usize = 50;
    const MESSAGES: usize = 20;
    for io in backends() {
        if matches!(io, IoBackend::None) {
            continue;
        }
        let name = format!("{io:?}");
        let rt = runtime(1, io);
        let echoed = watchdog(Duration::from_secs(60), move || {
            rt.block_on(|| {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let url = format!("ws://{}/echo", listener.local_addr().unwrap());
                let server = echo_server(listener, CLIENTS);
                let clients: Vec<_> = (0..CLIENTS)
                    .map(|c| {
                        let url = url.clone();
                        spindle_rt::spawn(move || {
                            let (mut ws, response) = tungstenite::connect(url).unwrap();
                            assert_eq!(response.status().as_u16(), 101);
                            for m in 0..MESSAGES {
                                if m % 2 == 0 {
                                    let text = format!("reverse:client {c} message {m}");
                                    ws.send(Message::text(text)).unwrap();
                                    let back = ws.read().unwrap();
                                    let want: String =
                                        format!("client {c} message {m}").chars().rev().collect();
                                    assert_eq!(back.into_text().unwrap().as_str(), want);
                                } else {
                                    let bytes = vec![c as u8; 1000 + m];
                                    ws.send(Message::binary(bytes.clone())).unwrap();
                                    assert_eq!(ws.read().unwrap().into_data().as_ref(), bytes);
                                }
                            }
                            ws.close(None).unwrap();
                            // The close handshake: read until the server's close frame.
                            loop {
                                match ws.read() {
                                    Ok(_) => {}
                                    Err(Error::ConnectionClosed) => break,
                                    Err(e) => panic!("client {c}: {e}"),
                                }
                            }
                        })
                    })
                    .collect();
                for c in clients {
                    c.join().unwrap();
                }
                server.join().unwrap()
            })
        });
        assert_eq!(echoed, CLIENTS * MESSAGES, "{name}");
    }
}

/// A `tungstenite` read on a stream with a read timeout and nothing to read returns std's
/// `WouldBlock` after the timeout, while the worker keeps running other coroutines; the
/// WebSocket stays usable, and the next read gets the message the server sends later.
#[test]
fn a_websocket_read_timeout_returns_would_block_and_the_socket_stays_usable() {
    const TIMEOUT: Duration = Duration::from_millis(200);
    for io in backends() {
        if matches!(io, IoBackend::None) {
            continue;
        }
        let name = format!("{io:?}");
        let rt = runtime(1, io);
        let (took, ticked) = watchdog(Duration::from_secs(60), move || {
            rt.block_on(|| {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let server = spindle_rt::spawn(move || {
                    let (stream, _) = listener.accept().unwrap();
                    let mut ws = tungstenite::accept(stream).unwrap();
                    // Quiet for longer than the client's timeout: a blocking sleep.
                    std::thread::sleep(TIMEOUT * 3);
                    ws.send(Message::text("late news")).unwrap();
                    // Until the client closes.
                    while ws.read().is_ok() {}
                });
                let stream = TcpStream::connect(addr).unwrap();
                let (mut ws, _) = tungstenite::client(format!("ws://{addr}/"), stream).unwrap();
                ws.get_ref().set_read_timeout(Some(TIMEOUT)).unwrap();
                let ticker = Ticker::start();
                let before = ticker.count();
                let start = Instant::now();
                match ws.read() {
                    Err(Error::Io(e)) => {
                        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}")
                    }
                    other => panic!("expected WouldBlock, got {other:?}"),
                }
                let took = start.elapsed();
                let ticked = ticker.count() - before;
                drop(ticker);
                ws.get_ref().set_read_timeout(None).unwrap();
                let msg = ws.read().unwrap();
                assert_eq!(msg.into_text().unwrap().as_str(), "late news");
                ws.close(None).unwrap();
                while ws.read().is_ok() {}
                server.join().unwrap();
                (took, ticked)
            })
        });
        eprintln!("{name}: WouldBlock after {took:?}, the ticker ticked {ticked} times");
        assert!(took >= TIMEOUT, "{name}: {took:?}");
        assert!(took < Duration::from_secs(5), "{name}: {took:?}");
        assert!(ticked >= 10, "{name}: the ticker ticked {ticked} times");
    }
}
