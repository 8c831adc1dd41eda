//! A chat room: every line a client sends goes to everyone in the room.
//!
//! ```text
//! cargo run --release -p spindle-rt --example chat -- 127.0.0.1:7001
//! nc 127.0.0.1 7001        # in two terminals; type lines
//! ```
//!
//! This is the group-chat scenario, built the way a stackful runtime makes natural:
//!
//! * **Two coroutines per connection**, both plain blocking code: the *reader* waits for the
//!   client's lines and broadcasts them; the *writer* waits on the client's send queue and
//!   writes what arrives. A coroutine waiting for input or for queue space costs its stack and
//!   nothing else; the worker runs the others.
//! * **A bounded send queue per client** (a `spindle_sync` channel). Broadcasting never waits:
//!   it `try_send`s into each member's queue. A client whose queue is full — it stopped reading
//!   and its socket buffers are full too — is **dropped from the room** and its connection shut
//!   down, so a slow client never stalls the others.
//! * **One order for everyone.** Broadcasts happen under the room's lock, so every member sees
//!   the room's messages in the same order.
//! * **Heartbeats.** A client that sends nothing (not even `/ping`, answered with `pong`) for
//!   the heartbeat interval is told so and disconnected: the reader's read timeout.
//! * **Clean teardown.** Whichever side ends first — the client closing, a read or write error,
//!   a heartbeat timeout, being dropped for slowness — the member leaves the room, its queue's
//!   sender is dropped (the writer sees the disconnection and exits), and the socket is shut
//!   down (a reader blocked in `read` sees end-of-file). Both coroutines finish and the
//!   descriptor is closed when the last handle goes.
//!
//! Protocol, one line each (at most [`MAX_LINE`] bytes): the server greets with
//! `* welcome userN`; a client's line `text` reaches every member (the sender included) as
//! `userN: text`; joins and leaves are announced as `* userN joined` / `* userN left`;
//! `/ping` answers `pong` to the sender only; `/quit` leaves.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use spindle_io::net::{TcpListener, TcpStream};
use spindle_sync::Mutex;
use spindle_sync::mpsc::{self, TrySendError};

/// The longest line a client may send, newline excluded; a longer one ends the connection.
pub const MAX_LINE: usize = 4096;

/// How a room behaves.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// A client silent for this long is disconnected.
    pub heartbeat: Duration,
    /// Lines a client's send queue holds before the client counts as too slow and is dropped
    /// (its socket's buffers come first: the queue fills only once they are full).
    pub queue: usize,
    /// The longest a single write to a client may take before the client is dropped.
    pub write_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            heartbeat: Duration::from_secs(30),
            queue: 1024,
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// One member: where its messages go, and its connection (to shut it down when it is dropped).
struct Member {
    queue: mpsc::Sender<Arc<str>>,
    stream: Arc<TcpStream>,
}

/// A chat room.
pub struct Room {
    config: Config,
    members: Mutex<HashMap<u64, Member>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("config", &self.config)
            .field("members", &self.members())
            .finish_non_exhaustive()
    }
}

impl Room {
    /// An empty room.
    pub fn new(config: Config) -> Arc<Room> {
        Arc::new(Room {
            config,
            members: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        })
    }

    /// How many clients are in the room now.
    pub fn members(&self) -> usize {
        self.members.lock().len()
    }

    /// Accepts clients on `listener` and runs each in the room, until `accept` fails for good.
    ///
    /// # Errors
    ///
    /// The error that stopped `accept` (transient ones — out of descriptors, a connection
    /// reset while in the backlog — are waited out).
    pub fn serve(self: &Arc<Room>, listener: TcpListener) -> io::Result<()> {
        loop {
            let (stream, _peer) = match listener.accept() {
                Ok(conn) => conn,
                Err(e) if is_transient(&e) => continue,
                Err(e) => return Err(e),
            };
            let room = self.clone();
            spindle_rt::spawn(move || room.run_client(stream));
        }
    }

    /// Runs one client: joins, spawns its writer, reads its lines until it leaves.
    fn run_client(self: Arc<Room>, stream: TcpStream) {
        if stream.set_nodelay(true).is_err()
            || stream
                .set_read_timeout(Some(self.config.heartbeat))
                .is_err()
            || stream
                .set_write_timeout(Some(self.config.write_timeout))
                .is_err()
        {
            return;
        }
        let stream = Arc::new(stream);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (queue, outbox) = mpsc::bounded::<Arc<str>>(self.config.queue);
        // The greeting goes first: queued before the member can receive anything else.
        if queue
            .try_send(format!("* welcome user{id}\n").into())
            .is_err()
        {
            return;
        }
        let writer = {
            let stream = stream.clone();
            spindle_rt::spawn(move || write_queue(&stream, &outbox))
        };
        {
            let mut members = self.members.lock();
            broadcast(&mut members, &format!("* user{id} joined\n"));
            members.insert(
                id,
                Member {
                    queue: queue.clone(),
                    stream: stream.clone(),
                },
            );
        }
        let farewell = self.read_lines(id, &stream, &queue);
        if let Some(farewell) = farewell {
            // Best effort: the writer sends it if the client still listens.
            let _ = queue.try_send(farewell.into());
        }
        drop(queue);
        self.leave(id);
        // The writer drains what is queued, then sees the disconnection.
        let _ = writer.join();
        let _ = stream.shutdown(Shutdown::Both);
    }

    /// Reads the client's lines until it leaves; returns a last line for it, if any.
    fn read_lines(
        &self,
        id: u64,
        stream: &TcpStream,
        queue: &mpsc::Sender<Arc<str>>,
    ) -> Option<&'static str> {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::with_capacity(128);
        loop {
            line.clear();
            let limit = MAX_LINE as u64 + 1; // the newline
            match (&mut reader).take(limit).read_until(b'\n', &mut line) {
                Ok(0) => return None,
                Ok(_) if line.last() != Some(&b'\n') => {
                    // Either over-long, or the client closed mid-line.
                    return (line.len() as u64 == limit).then_some("* line too long\n");
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    return Some("* heartbeat timeout\n");
                }
                Err(_) => return None,
            }
            let text = String::from_utf8_lossy(&line[..line.len() - 1]);
            let text = text.trim_end_matches('\r');
            match text {
                "/ping" => {
                    if let Err(TrySendError::Full(_)) = queue.try_send("pong\n".into()) {
                        return None; // too slow to take its own answers
                    }
                }
                "/quit" => return Some("* bye\n"),
                text => {
                    let mut members = self.members.lock();
                    if !members.contains_key(&id) {
                        return None; // dropped for slowness
                    }
                    broadcast(&mut members, &format!("user{id}: {text}\n"));
                }
            }
        }
    }

    /// Removes member `id` (if still there) and tells the others.
    fn leave(&self, id: u64) {
        let mut members = self.members.lock();
        if members.remove(&id).is_some() {
            broadcast(&mut members, &format!("* user{id} left\n"));
        }
    }
}

/// Queues `text` for every member, without waiting; drops the members whose queue is full
/// (and tells the rest). The caller holds the room's lock, so every member sees one order.
fn broadcast(members: &mut HashMap<u64, Member>, text: &str) {
    let mut pending: Vec<Arc<str>> = vec![text.into()];
    while let Some(text) = pending.pop() {
        let mut too_slow = Vec::new();
        for (&id, member) in members.iter() {
            match member.queue.try_send(text.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => too_slow.push(id),
                // Its writer has gone (a write failed); its reader removes it soon.
                Err(TrySendError::Disconnected(_)) => {}
            }
        }
        for id in too_slow {
            if let Some(member) = members.remove(&id) {
                // Wakes its reader (end of file) and its writer (broken pipe).
                let _ = member.stream.shutdown(Shutdown::Both);
                pending.push(format!("* user{id} left (too slow)\n").into());
            }
        }
    }
}

/// The writer coroutine: writes what the client's queue receives until every sender is gone.
fn write_queue(stream: &TcpStream, outbox: &mpsc::Receiver<Arc<str>>) {
    let mut out = stream;
    while let Ok(first) = outbox.recv() {
        // Coalesce what is already queued into one write.
        let mut batch = String::from(&*first);
        while batch.len() < 64 * 1024 {
            match outbox.try_recv() {
                Ok(next) => batch.push_str(&next),
                Err(_) => break,
            }
        }
        if out.write_all(batch.as_bytes()).is_err() {
            // Gone or too slow: wake the reader so the member leaves.
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// Errors after which the listener still works (see the echo example).
fn is_transient(e: &io::Error) -> bool {
    const EMFILE: i32 = 24;
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

#[allow(dead_code)] // `main` is unused when a test includes this file as a module
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7001".to_string());
    let rt = spindle_rt::Runtime::new()?;
    println!("chat on {addr} ({} IO)", rt.io_backend());
    let room = Room::new(Config::default());
    rt.block_on(move || room.serve(TcpListener::bind(addr.as_str())?))?;
    Ok(())
}
