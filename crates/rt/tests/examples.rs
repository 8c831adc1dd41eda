//! The examples, exercised: each example's `serve` runs in a runtime while plain threads act
//! as clients; the tour runs at a small scale.

#[allow(dead_code)]
#[path = "../examples/chat.rs"]
mod chat;
#[allow(dead_code)]
#[path = "../examples/http_hello.rs"]
mod http_hello;
#[allow(dead_code)]
#[path = "../examples/tour.rs"]
mod tour;

use tour::echo; // the tour includes the echo example

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use std::time::Instant;

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

// ---- chat ----

/// Starts a chat room on a fresh loopback listener in its own 2-worker runtime.
fn start_chat(config: chat::Config) -> (SocketAddr, Arc<chat::Room>, spindle_rt::Runtime) {
    let rt = spindle_rt::Runtime::builder().workers(2).build().unwrap();
    let listener = spindle_io::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let room = chat::Room::new(config);
    let serving = room.clone();
    rt.spawn(move || serving.serve(listener));
    (addr, room, rt)
}

/// A chat client: reads lines (10 s timeout each), writes lines.
struct ChatClient {
    reader: BufReader<std::net::TcpStream>,
    writer: std::net::TcpStream,
    /// `userN`, from the greeting.
    name: String,
}

impl ChatClient {
    fn connect(addr: SocketAddr) -> ChatClient {
        let s = client(addr);
        let writer = s.try_clone().unwrap();
        let mut reader = BufReader::new(s);
        let mut greeting = String::new();
        reader.read_line(&mut greeting).unwrap();
        let name = greeting
            .strip_prefix("* welcome ")
            .unwrap_or_else(|| panic!("greeting: {greeting:?}"))
            .trim_end()
            .to_string();
        ChatClient {
            reader,
            writer,
            name,
        }
    }

    fn send(&mut self, line: &str) {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
    }

    /// The next line, without its newline; `None` at end of file.
    fn line(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line).unwrap() {
            0 => None,
            _ => Some(line.trim_end_matches('\n').to_string()),
        }
    }

    /// The next line that a member said (skips announcements).
    fn said(&mut self) -> String {
        loop {
            let line = self
                .line()
                .expect("end of file while waiting for a message");
            if !line.starts_with("* ") {
                return line;
            }
        }
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn chat_delivers_every_line_to_every_member_in_one_order() {
    let (addr, room, _rt) = start_chat(chat::Config::default());
    let clients: Vec<ChatClient> = (0..3).map(|_| ChatClient::connect(addr)).collect();
    wait_for("3 members", || room.members() == 3);
    const LINES: usize = 100;
    let threads: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                for i in 0..LINES {
                    c.send(&format!("m{i}"));
                }
                let heard: Vec<String> = (0..3 * LINES).map(|_| c.said()).collect();
                (c.name.clone(), heard)
            })
        })
        .collect();
    let heard: Vec<(String, Vec<String>)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    // One order for everyone.
    for (_, lines) in &heard[1..] {
        assert_eq!(lines, &heard[0].1);
    }
    // Each sender's lines, complete and in the order sent.
    for (name, _) in &heard {
        let mine: Vec<&String> = heard[0]
            .1
            .iter()
            .filter(|l| l.starts_with(&format!("{name}: ")))
            .collect();
        let expected: Vec<String> = (0..LINES).map(|i| format!("{name}: m{i}")).collect();
        assert_eq!(mine.len(), LINES, "{name}");
        assert!(mine.iter().zip(&expected).all(|(a, b)| *a == b), "{name}");
    }
}

#[test]
fn chat_drops_a_slow_client_without_stalling_the_others() {
    let config = chat::Config {
        queue: 256, // more than the 64 lines the talker has in flight
        ..chat::Config::default()
    };
    let (addr, room, _rt) = start_chat(config);
    let mut slow = ChatClient::connect(addr); // never reads until the end
    let mut observer = ChatClient::connect(addr);
    let mut talker = ChatClient::connect(addr);
    wait_for("3 members", || room.members() == 3);
    let slow_name = slow.name.clone();
    let talker_name = talker.name.clone();
    let slow_gone = Arc::new(AtomicBool::new(false));
    // How many of the talker's lines the observer has seen.
    let observed = Arc::new(AtomicU64::new(0));
    // The observer reads everything and checks the talker's lines arrive complete, in order.
    let observing = {
        let slow_gone = slow_gone.clone();
        let observed = observed.clone();
        std::thread::spawn(move || {
            let mut next = 0u64;
            loop {
                let line = observer.line().expect("the observer was disconnected");
                if line == format!("* {slow_name} left (too slow)") {
                    slow_gone.store(true, Ordering::SeqCst);
                } else if let Some(text) = line.strip_prefix(&format!("{talker_name}: ")) {
                    if text == "end" {
                        // The client goes back with the count: it stays connected (a member)
                        // until the test is done with the room.
                        return (next, observer);
                    }
                    let n: u64 = text[..12].parse().unwrap();
                    assert_eq!(n, next, "a line was lost or reordered");
                    next += 1;
                    observed.store(next, Ordering::SeqCst);
                }
            }
        })
    };
    // Talk until the slow client has been dropped (its socket buffers and queue full); bounded.
    // Every 64 lines the talker waits for its own echo and for the observer to have read them
    // all, so the room goes at the pace of a reading client — even when the test threads get
    // little CPU (other tests run beside this one) — and only the client that never reads can
    // fall behind. A room that stalled on the slow client would stall the observer: the wait
    // below then fails.
    let pad = "x".repeat(1000);
    let mut sent = 0u64;
    while !slow_gone.load(Ordering::SeqCst) {
        assert!(sent < 200_000, "the slow client was never dropped");
        for _ in 0..64 {
            talker.send(&format!("{sent:012} {pad}"));
            sent += 1;
        }
        let last = format!("{}: {:012} {pad}", talker.name, sent - 1);
        while talker.said() != last {}
        wait_for("the observer to read the talker's lines", || {
            slow_gone.load(Ordering::SeqCst) || observed.load(Ordering::SeqCst) == sent
        });
    }
    talker.send("end");
    let (seen, _observer) = observing.join().unwrap();
    assert_eq!(seen, sent);
    assert_eq!(room.members(), 2, "only the slow client was dropped");
    // The slow client gets what was buffered for it, then end of file: its connection was shut.
    while slow.line().is_some() {}
}

#[test]
fn chat_disconnects_a_silent_client_after_the_heartbeat_interval() {
    let config = chat::Config {
        heartbeat: Duration::from_millis(300),
        ..chat::Config::default()
    };
    let (addr, room, _rt) = start_chat(config);
    let mut lively = ChatClient::connect(addr);
    let mut silent = ChatClient::connect(addr);
    wait_for("2 members", || room.members() == 2);
    let started = Instant::now();
    // The lively one pings well within the interval for three intervals.
    let mut left = false;
    while started.elapsed() < Duration::from_millis(900) {
        lively.send("/ping");
        loop {
            match lively.line().as_deref() {
                Some("pong") => break,
                Some(l) if l == format!("* {} left", silent.name) => left = true,
                Some(l) if l.ends_with(" joined") => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(silent.line().as_deref(), Some("* heartbeat timeout"));
    assert_eq!(silent.line(), None);
    assert!(started.elapsed() >= Duration::from_millis(300));
    if !left {
        assert_eq!(lively.line(), Some(format!("* {} left", silent.name)));
    }
    assert_eq!(room.members(), 1);
}

#[test]
fn chat_tears_everything_down_when_clients_leave() {
    let (addr, room, rt) = start_chat(chat::Config::default());
    let mut quitter = ChatClient::connect(addr);
    let mut closer = ChatClient::connect(addr);
    let resetter = ChatClient::connect(addr);
    wait_for("3 members", || room.members() == 3);
    assert!(rt.metrics().live_coroutines >= 7); // the acceptor, a reader and a writer each
    quitter.send("/quit");
    while quitter.line().expect("no farewell") != "* bye" {}
    assert_eq!(quitter.line(), None);
    closer.send("hello");
    closer.writer.shutdown(std::net::Shutdown::Write).unwrap();
    // Closing with unread data ("hello", announcements) in its receive buffer makes the
    // kernel send a reset instead of a FIN.
    std::thread::sleep(Duration::from_millis(100));
    drop(resetter);
    while closer.line().is_some() {} // its member leaves on end of file; then the socket shuts
    wait_for("an empty room", || room.members() == 0);
    wait_for("only the acceptor left", || {
        rt.metrics().live_coroutines == 1
    });
}

#[test]
fn tour_runs_every_part_at_a_small_scale() {
    // Each part checks its own results (sums, counts) and fails with an error otherwise.
    tour::run(&tour::Scale::tiny()).unwrap();
}
