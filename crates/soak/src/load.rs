//! The load generator: starts the server process, drives it, checks it, prints the summary.
//!
//! The mix, all plain threads with `std::net` sockets over loopback:
//!
//! * **idle**: `--idle` (10,000) echo connections opened before the load and held through it;
//!   at the end each must still echo a byte.
//! * **ping-pong** (6 threads): echo requests of 1..4096 random bytes, each answer compared;
//!   every 50..1000 requests the client disconnects and connects again.
//! * **chat talkers** (4 threads, one of them sending 4 KiB lines): lines whose broadcast must
//!   come back to the sender, `/ping` → `pong`, `/quit` → `* bye` at the end. A talker that
//!   the room drops is a violation ("others unaffected").
//! * **random clients** (3 threads): connect and close at once; a few echo requests then
//!   close; chat join and leave; half-closes (write, `shutdown(Write)`, the whole answer then
//!   end-of-file); peer resets (`SO_LINGER` 0, on echo mid-answer and on chat); over-long chat
//!   lines (cleanly refused: `* line too long`, then end-of-file); echo clients that time out
//!   waiting 1..20 ms for the silent server, then leave or send a request after all.
//! * **slow readers** (2 threads): chat members with a 4 KiB receive buffer that stop reading
//!   (they keep sending `/ping` so that the heartbeat does not end them) until the room
//!   announces that they left (at most 20 s; the server's send buffer autotunes up to 4 MiB on
//!   loopback, which the flooding talker fills in seconds); then they must read what was
//!   buffered and find their connection closed by the room.
//! * **heartbeat** (1 thread): chat members that say nothing must be told `* heartbeat
//!   timeout` and disconnected (the room's heartbeat is 3 s under soak).
//!
//! Every request is counted as answered, cleanly refused, abandoned by a fault the client
//! injected (a peer reset), or failed; failed must stay 0.
//!
//! Bounds: RSS at the end of the load at most max(10 %, 8 MiB) above RSS at the end of the
//! warm-up (a quarter of the run, 10..30 s); descriptors and live coroutines back to their
//! values before the first client, within 20 s of the last client leaving; no stuck-coroutine
//! report (threshold `--stuck-ms`, 100 ms by default); within 5 s of that, the idle workers
//! have given back the closed connections' stacks (at most 768 left pooled: `spindle-rt`'s
//! idle workers keep 256 each and 256 shared); then the server's CPU time over one quiet
//! second under 5 % of one core.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::ops::{Deref, DerefMut};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::{Opts, server, sys};

/// RSS may grow by this many percent after warm-up...
const RSS_GROWTH_PCT: u64 = 10;
/// ...or by this much, whichever is larger.
const RSS_GROWTH_FLOOR_KIB: u64 = 8 * 1024;
/// Pooled stacks an idle server keeps: `spindle-rt` workers that have idled a second keep 256
/// in their cache each and 256 in the shared pool (2 workers).
const IDLE_POOLED_MAX: u64 = 3 * 256;

/// How long the soak waits for the idle workers to give back the idle connections' stacks.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// The server's CPU over one quiet second must stay under this (percent of one core).
const IDLE_CPU_PCT: f64 = 5.0;
/// How long the server may take to close everything after the last client left.
const SETTLE: Duration = Duration::from_secs(20);
/// No answer within this is an error.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a slow reader stops reading (it stops until the room announces it left).
const SLOW_STALL: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Counting

#[derive(Default)]
struct Tally {
    connects: AtomicU64,
    open: AtomicU64,
    peak_open: AtomicU64,
    requests: AtomicU64,
    answered: AtomicU64,
    refused: AtomicU64,
    abandoned: AtomicU64,
    failed: AtomicU64,
    resets: AtomicU64,
    half_closes: AtomicU64,
    slow_dropped: AtomicU64,
    too_slow_announced: AtomicU64,
    heartbeat_timeouts: AtomicU64,
    client_timeouts: AtomicU64,
    disconnects: AtomicU64,
    max_talker_ms: AtomicU64,
    /// Members announced as gone (`* userN left...`), as seen by talker 1.
    left: Mutex<std::collections::HashSet<String>>,
    /// Errors by "what: kind".
    errors: Mutex<BTreeMap<String, u64>>,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Relaxed)
}

impl Tally {
    fn error(&self, what: &str, detail: impl std::fmt::Display) {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        *errors.entry(format!("{what}: {detail}")).or_default() += 1;
    }

    /// A request that got neither an answer nor a clean refusal.
    fn failed(&self, what: &str, e: &io::Error) {
        bump(&self.failed);
        self.error(what, kind(e));
    }

    /// A request abandoned by a peer reset (`r`: setting it up), or failed.
    fn reset(&self, what: &str, r: io::Result<()>) {
        match r {
            Ok(()) => {
                bump(&self.abandoned);
                bump(&self.resets);
            }
            Err(e) => self.failed(what, &e),
        }
    }

    fn errors(&self) -> BTreeMap<String, u64> {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// An error's kind, or its message for the ones std files under `Other`.
fn kind(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::Other | io::ErrorKind::InvalidData => e.to_string(),
        k => format!("{k:?}"),
    }
}

/// A connection, counted while it is open.
struct Conn {
    stream: TcpStream,
    tally: Arc<Tally>,
}

impl Deref for Conn {
    type Target = TcpStream;
    fn deref(&self) -> &TcpStream {
        &self.stream
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.tally.open.fetch_sub(1, Relaxed);
    }
}

/// A tiny xorshift generator: the mix is random but needs no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// In `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
    /// `lo..hi` random bytes.
    fn some_bytes(&mut self, lo: u64, hi: u64) -> Vec<u8> {
        let len = self.range(lo, hi) as usize;
        self.bytes(len)
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

// ---------------------------------------------------------------------------------------------
// The load's shared state

struct Ctx {
    echo: SocketAddr,
    chat: SocketAddr,
    tally: Arc<Tally>,
    stop: AtomicBool,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Relaxed)
    }

    fn connect(&self, addr: SocketAddr) -> io::Result<Conn> {
        self.connect_with(addr, None)
    }

    /// Connects, with a small receive buffer if `recv_buffer` is given.
    fn connect_with(&self, addr: SocketAddr, recv_buffer: Option<i32>) -> io::Result<Conn> {
        let stream = match recv_buffer {
            Some(bytes) => sys::connect_with_recv_buffer(addr, bytes)?,
            None => TcpStream::connect(addr)?,
        };
        stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        stream.set_write_timeout(Some(ANSWER_TIMEOUT))?;
        stream.set_nodelay(true)?;
        bump(&self.tally.connects);
        let open = self.tally.open.fetch_add(1, Relaxed) + 1;
        self.tally.peak_open.fetch_max(open, Relaxed);
        Ok(Conn {
            stream,
            tally: self.tally.clone(),
        })
    }

    /// Connects, or counts the error and pauses.
    fn try_connect(&self, addr: SocketAddr, what: &str) -> Option<Conn> {
        self.try_connect_with(addr, what, None)
    }

    fn try_connect_with(
        &self,
        addr: SocketAddr,
        what: &str,
        recv_buffer: Option<i32>,
    ) -> Option<Conn> {
        match self.connect_with(addr, recv_buffer) {
            Ok(c) => Some(c),
            Err(e) => {
                self.tally.error(&format!("{what}: connect"), kind(&e));
                thread::sleep(Duration::from_millis(100));
                None
            }
        }
    }
}

fn mismatch(what: &str) -> io::Error {
    io::Error::other(format!("{what}: the answer differs from the request"))
}

/// Writes `msg` and reads the echo back; checks it.
fn echo_roundtrip(s: &mut TcpStream, msg: &[u8]) -> io::Result<()> {
    s.write_all(msg)?;
    let mut back = vec![0; msg.len()];
    s.read_exact(&mut back)?;
    if back != msg {
        return Err(mismatch("echo"));
    }
    Ok(())
}

/// A chat connection: the stream and a line reader over a clone of it.
struct Chat {
    conn: Conn,
    lines: BufReader<TcpStream>,
    /// `userN`, from the greeting.
    me: String,
}

impl Chat {
    fn join(ctx: &Ctx, what: &str) -> Option<Chat> {
        Chat::join_with(ctx, what, None)
    }

    fn join_with(ctx: &Ctx, what: &str, recv_buffer: Option<i32>) -> Option<Chat> {
        let conn = ctx.try_connect_with(ctx.chat, what, recv_buffer)?;
        let result = conn.try_clone().and_then(|clone| {
            let mut chat = Chat {
                conn,
                lines: BufReader::new(clone),
                me: String::new(),
            };
            let greeting = chat.line()?.unwrap_or_default();
            chat.me = greeting
                .strip_prefix("* welcome ")
                .ok_or_else(|| io::Error::other(format!("greeting {greeting:?}")))?
                .to_string();
            Ok(chat)
        });
        match result {
            Ok(chat) => Some(chat),
            Err(e) => {
                ctx.tally.error(&format!("{what}: join"), kind(&e));
                None
            }
        }
    }

    /// The next line without its newline; `None` at end-of-file.
    fn line(&mut self) -> io::Result<Option<String>> {
        let mut buf = Vec::new();
        if self.lines.read_until(b'\n', &mut buf)? == 0 {
            return Ok(None);
        }
        if buf.pop() != Some(b'\n') {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "chat: a line cut short",
            ));
        }
        Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
    }

    fn send(&mut self, line: &str) -> io::Result<()> {
        self.conn.write_all(format!("{line}\n").as_bytes())
    }

    /// Reads lines until `want`; notes the leaving members on the way if `watch`.
    fn wait_for(&mut self, want: &str, watch: Option<&Tally>) -> io::Result<()> {
        loop {
            match self.line()? {
                None => return Err(io::Error::other("dropped by the room (end-of-file)")),
                Some(l) if l == want => return Ok(()),
                Some(l) => {
                    if let Some(t) = watch
                        && let Some(rest) = l.strip_prefix("* ")
                        && let Some((who, how)) = rest.split_once(' ')
                        && how.starts_with("left")
                    {
                        if how == "left (too slow)" {
                            bump(&t.too_slow_announced);
                        }
                        t.left
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(who.to_string());
                    }
                }
            }
        }
    }

    /// Reads until end-of-file (or a reset); says whether `want` was among the lines. Gives up
    /// (`TimedOut`) at `deadline`.
    fn drain_for(&mut self, want: &str, deadline: Option<Instant>) -> io::Result<bool> {
        let mut seen = false;
        loop {
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                self.conn.set_read_timeout(Some(left.min(ANSWER_TIMEOUT)))?;
            }
            match self.line() {
                Ok(None) => return Ok(seen),
                Ok(Some(l)) => seen |= l == want,
                // A member dropped mid-write gets a last line cut short; a reset ends it too.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
                    ) =>
                {
                    return Ok(seen);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The actors

fn ping_pong(ctx: &Ctx, id: u64) {
    let t = &*ctx.tally;
    let mut rng = Rng::new(id);
    while !ctx.stopped() {
        let Some(mut s) = ctx.try_connect(ctx.echo, "echo ping-pong") else {
            continue;
        };
        let n = rng.range(50, 1000);
        for _ in 0..n {
            if ctx.stopped() {
                return;
            }
            let msg = rng.some_bytes(1, 4097);
            bump(&t.requests);
            match echo_roundtrip(&mut s, &msg) {
                Ok(()) => bump(&t.answered),
                Err(e) => {
                    t.failed("echo ping-pong", &e);
                    break;
                }
            }
            if rng.range(0, 2) == 0 {
                thread::sleep(Duration::from_millis(1));
            }
        }
        bump(&t.disconnects);
    }
}

fn talker(ctx: &Ctx, id: u64) {
    let t = &*ctx.tally;
    let mut rng = Rng::new(100 + id);
    // Talker 0 floods: 4 KiB lines, so that slow readers' buffers fill within seconds.
    let (lo, hi) = if id == 0 { (3000, 4000) } else { (10, 400) };
    while !ctx.stopped() {
        let Some(mut chat) = Chat::join(ctx, "chat talker") else {
            continue;
        };
        let watch = (id == 1).then_some(t);
        let mut seq = 0u64;
        let result = loop {
            if ctx.stopped() {
                bump(&t.requests);
                let r = chat
                    .send("/quit")
                    .and_then(|()| chat.wait_for("* bye", None));
                break r.map(|()| bump(&t.answered));
            }
            seq += 1;
            let (line, want) = if seq.is_multiple_of(20) {
                ("/ping".to_string(), "pong".to_string())
            } else {
                let pad = "x".repeat(rng.range(lo, hi) as usize);
                let line = format!("t{id}-{seq} {pad}");
                let want = format!("{}: {line}", chat.me);
                (line, want)
            };
            bump(&t.requests);
            let start = Instant::now();
            if let Err(e) = chat.send(&line).and_then(|()| chat.wait_for(&want, watch)) {
                break Err(e);
            }
            bump(&t.answered);
            let ms = start.elapsed().as_millis() as u64;
            t.max_talker_ms.fetch_max(ms, Relaxed);
            thread::sleep(if id == 0 {
                rng.millis(0, 3)
            } else {
                rng.millis(5, 15)
            });
        };
        if let Err(e) = result {
            t.failed("chat talker", &e);
        }
    }
}

/// One random client; `kind` picks which.
fn random_client(ctx: &Ctx, rng: &mut Rng) {
    let t = &*ctx.tally;
    match rng.range(0, 10) {
        // Connect and close at once.
        0 => {
            if ctx.try_connect(ctx.echo, "echo churn").is_some() {
                bump(&t.disconnects);
            }
        }
        // A few requests, then close.
        1 => {
            let Some(mut s) = ctx.try_connect(ctx.echo, "echo churn") else {
                return;
            };
            for _ in 0..rng.range(1, 4) {
                let msg = rng.some_bytes(1, 2048);
                bump(&t.requests);
                match echo_roundtrip(&mut s, &msg) {
                    Ok(()) => bump(&t.answered),
                    Err(e) => return t.failed("echo churn", &e),
                }
            }
            bump(&t.disconnects);
        }
        // Half-close: the whole answer, then end-of-file.
        2 => {
            let Some(mut s) = ctx.try_connect(ctx.echo, "echo half-close") else {
                return;
            };
            let msg = rng.some_bytes(1, 16 * 1024);
            bump(&t.requests);
            let r = s
                .write_all(&msg)
                .and_then(|()| s.shutdown(Shutdown::Write))
                .and_then(|()| {
                    let mut back = Vec::new();
                    s.read_to_end(&mut back)?;
                    if back == msg {
                        Ok(())
                    } else {
                        Err(mismatch("echo half-close"))
                    }
                });
            match r {
                Ok(()) => {
                    bump(&t.answered);
                    bump(&t.half_closes);
                }
                Err(e) => t.failed("echo half-close", &e),
            }
        }
        // Peer reset on echo, before or in the middle of the answer.
        3 => {
            let Some(mut s) = ctx.try_connect(ctx.echo, "echo reset") else {
                return;
            };
            let msg = rng.some_bytes(1, 32 * 1024);
            bump(&t.requests);
            let r = s.write_all(&msg).and_then(|()| {
                if rng.range(0, 2) == 0 {
                    let mut some = vec![0; msg.len().div_ceil(2)];
                    s.read_exact(&mut some)?;
                }
                sys::set_linger_zero(&*s)
            });
            t.reset("echo reset", r);
        }
        // Peer reset on chat, after a line.
        4 => {
            let Some(mut chat) = Chat::join(ctx, "chat reset") else {
                return;
            };
            bump(&t.requests);
            let r = chat
                .send("about to vanish")
                .and_then(|()| sys::set_linger_zero(&*chat.conn));
            t.reset("chat reset", r);
        }
        // Chat: join, /ping, /quit.
        5 => {
            let Some(mut chat) = Chat::join(ctx, "chat churn") else {
                return;
            };
            for (line, want) in [("/ping", "pong"), ("/quit", "* bye")] {
                bump(&t.requests);
                match chat.send(line).and_then(|()| chat.wait_for(want, None)) {
                    Ok(()) => bump(&t.answered),
                    Err(e) => return t.failed("chat churn", &e),
                }
            }
            bump(&t.disconnects);
        }
        // Chat: join and leave without a word.
        6 => {
            if Chat::join(ctx, "chat churn").is_some() {
                bump(&t.disconnects);
            }
        }
        // Chat: an over-long line is cleanly refused. Exactly MAX_LINE + 1 bytes, so that
        // nothing is left unread when the server closes (which would make it a reset).
        7 => {
            let Some(mut chat) = Chat::join(ctx, "chat over-long") else {
                return;
            };
            bump(&t.requests);
            let line = vec![b'x'; crate::chat::MAX_LINE + 1];
            match chat
                .conn
                .write_all(&line)
                .and_then(|()| chat.drain_for("* line too long", None))
            {
                Ok(true) => bump(&t.refused),
                Ok(false) => t.failed(
                    "chat over-long",
                    &io::Error::other("closed without `* line too long`"),
                ),
                Err(e) => t.failed("chat over-long", &e),
            }
        }
        // A client that times out: it waits 1..20 ms for the (silent) server, gives up, then
        // either leaves or sends a request after all, which must still be answered.
        _ => {
            let Some(mut s) = ctx.try_connect(ctx.echo, "echo timeout") else {
                return;
            };
            let patience = rng.millis(1, 20);
            let mut b = [0u8; 1];
            let waited = s
                .set_read_timeout(Some(patience))
                .and_then(|()| s.read(&mut b));
            match waited {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    bump(&t.client_timeouts);
                }
                Ok(_) => return t.error("echo timeout", "the server spoke first"),
                Err(e) => return t.error("echo timeout", kind(&e)),
            }
            if rng.range(0, 2) == 0 {
                return bump(&t.disconnects);
            }
            let msg = rng.some_bytes(1, 4096);
            bump(&t.requests);
            match s
                .set_read_timeout(Some(ANSWER_TIMEOUT))
                .and_then(|()| echo_roundtrip(&mut s, &msg))
            {
                Ok(()) => bump(&t.answered),
                Err(e) => t.failed("echo timeout", &e),
            }
        }
    }
}

fn random_clients(ctx: &Ctx, id: u64) {
    let mut rng = Rng::new(200 + id);
    while !ctx.stopped() {
        random_client(ctx, &mut rng);
        thread::sleep(rng.millis(5, 25));
    }
}

fn slow_reader(ctx: &Ctx, id: u64) {
    let t = &*ctx.tally;
    let mut rng = Rng::new(300 + id);
    thread::sleep(Duration::from_millis(1500 * id));
    while !ctx.stopped() {
        let Some(mut chat) = Chat::join_with(ctx, "chat slow reader", Some(4096)) else {
            continue;
        };
        // Stop reading, keeping the heartbeat alive, until the room says this member left.
        let stalled = Instant::now();
        while stalled.elapsed() < SLOW_STALL {
            let gone = t
                .left
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&chat.me);
            if gone {
                break;
            }
            if ctx.stopped() {
                let _ = sys::set_linger_zero(&*chat.conn);
                return;
            }
            if chat.send("/ping").is_err() {
                break; // already shut down
            }
            thread::sleep(Duration::from_millis(300));
        }
        // Dropped by now: what is buffered, then end-of-file, within seconds.
        let deadline = Instant::now() + Duration::from_secs(5);
        match chat.drain_for("* heartbeat timeout", Some(deadline)) {
            Ok(false) => bump(&t.slow_dropped),
            Ok(true) => t.error(
                "chat slow reader",
                "timed out by the heartbeat, not dropped",
            ),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                t.error("chat slow reader", "not dropped by the room")
            }
            Err(e) => t.error("chat slow reader", kind(&e)),
        }
        thread::sleep(rng.millis(100, 1000));
    }
}

fn heartbeat(ctx: &Ctx, _id: u64) {
    let t = &*ctx.tally;
    while !ctx.stopped() {
        let Some(mut chat) = Chat::join(ctx, "chat heartbeat") else {
            continue;
        };
        let _ = chat
            .conn
            .set_read_timeout(Some(server::CHAT.heartbeat + Duration::from_secs(5)));
        match chat.drain_for("* heartbeat timeout", None) {
            Ok(true) => bump(&t.heartbeat_timeouts),
            Ok(false) => t.error("chat heartbeat", "closed without `* heartbeat timeout`"),
            Err(e) => t.error("chat heartbeat", kind(&e)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The server process

/// One `stats` line.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    fds: u64,
    rss_kib: u64,
    cpu_us: u64,
    live: u64,
    members: u64,
    resumes: u64,
    maps: u64,
    stacks_mapped: u64,
    stacks_pooled: u64,
}

impl Stats {
    fn parse(line: &str) -> Result<Stats, String> {
        let mut s = Stats::default();
        let rest = line
            .strip_prefix("stats ")
            .ok_or_else(|| format!("the server said {line:?}, not stats"))?;
        for field in rest.split_whitespace() {
            let (k, v) = field
                .split_once('=')
                .ok_or_else(|| format!("stats field {field:?}"))?;
            let v: u64 = v.parse().map_err(|_| format!("stats field {field:?}"))?;
            match k {
                "fds" => s.fds = v,
                "rss_kib" => s.rss_kib = v,
                "cpu_us" => s.cpu_us = v,
                "live" => s.live = v,
                "members" => s.members = v,
                "resumes" => s.resumes = v,
                "maps" => s.maps = v,
                "stacks_mapped" => s.stacks_mapped = v,
                "stacks_pooled" => s.stacks_pooled = v,
                _ => {}
            }
        }
        Ok(s)
    }
}

/// What the server wrote on stderr, sorted.
#[derive(Default)]
struct ServerLog {
    /// The runtime's stuck-coroutine reports.
    stuck: Vec<String>,
    /// The echo example's `connection ended: ...` lines, by message.
    ended: BTreeMap<String, u64>,
    /// Anything else.
    other: Vec<String>,
}

/// `connection ended` messages that the faults cause (resets, clients gone mid-answer).
fn expected_end(msg: &str) -> bool {
    msg.contains("Connection reset by peer") || msg.contains("Broken pipe")
}

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    log: Arc<Mutex<ServerLog>>,
    log_thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(opts: &Opts) -> Result<(Server, String), String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["server", "--backend", &opts.backend])
            .args(["--stuck-ms", &opts.stuck_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(what) = &opts.inject {
            cmd.args(["--inject", what]);
        }
        if opts.default_pool {
            cmd.arg("--default-pool");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting the server: {e}"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the server's pipes are missing".into());
        };
        let log = Arc::new(Mutex::new(ServerLog::default()));
        let log2 = log.clone();
        let log_thread = thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut log = log2.lock().unwrap_or_else(|p| p.into_inner());
                if line.contains("without suspending") {
                    log.stuck.push(line);
                } else if let Some(msg) = line.strip_prefix("connection ended: ") {
                    *log.ended.entry(msg.to_string()).or_default() += 1;
                } else {
                    log.other.push(line);
                }
            }
        });
        let mut server = Server {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            log,
            log_thread: Some(log_thread),
        };
        let ready = server.read_line()?;
        if !ready.starts_with("ready ") {
            return Err(format!("the server said {ready:?}"));
        }
        Ok((server, ready))
    }

    fn read_line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => {
                // Give its stderr a moment to arrive, then show it.
                let _ = self.child.wait();
                if let Some(t) = self.log_thread.take() {
                    let _ = t.join();
                }
                let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
                Err(format!(
                    "the server exited; its stderr: {}",
                    log.other.join(" / ")
                ))
            }
            Ok(_) => Ok(line.trim_end().to_string()),
            Err(e) => Err(format!("reading from the server: {e}")),
        }
    }

    fn command(&mut self, cmd: &str) -> Result<String, String> {
        writeln!(self.stdin, "{cmd}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("writing to the server: {e}"))?;
        self.read_line()
    }

    fn stats(&mut self) -> Result<Stats, String> {
        Stats::parse(&self.command("stats")?)
    }

    /// `quit`, then waits for the process; says whether it said `bye` and exited with 0, and
    /// returns all it wrote on stderr.
    fn quit(mut self) -> (bool, ServerLog) {
        let bye = self.command("quit").is_ok_and(|l| l == "bye");
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        if let Some(t) = self.log_thread.take() {
            let _ = t.join();
        }
        let log = std::mem::take(&mut *self.log.lock().unwrap_or_else(|p| p.into_inner()));
        (bye && status.is_some_and(|s| s.success()), log)
    }
}

/// The `key=value` of the ready line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
}

// ---------------------------------------------------------------------------------------------
// The run

/// Opens `n` idle echo connections from 4 threads.
fn open_idle(ctx: &Arc<Ctx>, n: usize) -> Vec<Conn> {
    let threads = 4;
    let handles: Vec<_> = (0..threads)
        .map(|k| {
            let ctx = ctx.clone();
            let count = n / threads + usize::from(k < n % threads);
            thread::spawn(move || {
                let mut conns = Vec::with_capacity(count);
                while conns.len() < count {
                    match ctx.connect(ctx.echo) {
                        Ok(c) => conns.push(c),
                        Err(e) => {
                            ctx.tally.error("idle: connect", kind(&e));
                            if ctx.tally.errors().values().sum::<u64>() > 100 {
                                break;
                            }
                            thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
                conns
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap_or_default())
        .collect()
}

/// One echoed byte on each idle connection; returns how many answered.
fn check_idle(idle: Vec<Conn>) -> usize {
    let per = idle.len().div_ceil(4).max(1);
    let mut chunks: Vec<Vec<Conn>> = Vec::new();
    let mut it = idle.into_iter().peekable();
    while it.peek().is_some() {
        chunks.push(it.by_ref().take(per).collect());
    }
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            thread::spawn(move || {
                chunk
                    .into_iter()
                    .filter(|c| {
                        let mut s = &c.stream;
                        let mut b = [0u8; 1];
                        s.write_all(b"i").is_ok() && s.read_exact(&mut b).is_ok() && b == *b"i"
                    })
                    .count()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Runs the soak; `Ok(false)` when a check failed.
pub fn run(opts: &Opts) -> Result<bool, String> {
    let nofile = sys::raise_nofile().map_err(|e| format!("raising RLIMIT_NOFILE: {e}"))?;
    // The load's own connections need a few hundred more.
    let room = usize::try_from(nofile)
        .unwrap_or(usize::MAX)
        .saturating_sub(500);
    let idle_n = opts.idle.min(room);
    if idle_n < opts.idle {
        println!(
            "soak: RLIMIT_NOFILE is {nofile}: {idle_n} idle connections instead of {}",
            opts.idle
        );
    }
    let (mut server, ready) = Server::start(opts)?;
    let backend = field(&ready, "backend").unwrap_or("?").to_string();
    let echo: SocketAddr = field(&ready, "echo")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("ready line {ready:?}"))?;
    let chat: SocketAddr = field(&ready, "chat")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("ready line {ready:?}"))?;
    let duration = Duration::from_secs_f64(opts.minutes * 60.0);
    let warm_up = (duration / 4).clamp(Duration::from_secs(10), Duration::from_secs(30));
    println!(
        "soak: {backend} backend, 2 workers, {:.2} min of load ({} s warm-up), {idle_n} idle \
         connections; echo on {echo}, chat on {chat}{}",
        opts.minutes,
        warm_up.as_secs(),
        opts.inject
            .as_ref()
            .map_or(String::new(), |i| format!(", INJECTING {i}"))
    );
    let before = server.stats()?;

    let tally = Arc::new(Tally::default());
    let ctx = Arc::new(Ctx {
        echo,
        chat,
        tally: tally.clone(),
        stop: AtomicBool::new(false),
    });
    let opened = Instant::now();
    let idle = open_idle(&ctx, idle_n);
    println!(
        "soak: {} idle connections open in {:.1} s",
        idle.len(),
        opened.elapsed().as_secs_f64()
    );

    type Actor = fn(&Ctx, u64);
    let actors: [(Actor, u64); 5] = [
        (ping_pong, 6),
        (talker, 4),
        (random_clients, 3),
        (slow_reader, 2),
        (heartbeat, 1),
    ];
    let started = Instant::now();
    let mut handles = Vec::new();
    for (actor, count) in actors {
        for id in 0..count {
            let ctx = ctx.clone();
            handles.push(thread::spawn(move || actor(&ctx, id)));
        }
    }

    let mut at_warm_up: Option<Stats> = None;
    let mut peak_rss = 0;
    let mut peak_maps = 0;
    let mut loaded = before;
    let mut next_report = Duration::from_secs(10);
    while started.elapsed() < duration {
        thread::sleep(Duration::from_secs(1).min(duration.saturating_sub(started.elapsed())));
        loaded = server.stats()?;
        peak_rss = peak_rss.max(loaded.rss_kib);
        peak_maps = peak_maps.max(loaded.maps);
        if at_warm_up.is_none() && started.elapsed() >= warm_up {
            at_warm_up = Some(loaded);
        }
        if started.elapsed() >= next_report {
            next_report += Duration::from_secs(10);
            println!(
                "soak: {:>4} s  requests {:>8}  answered {:>8}  open {:>6}  rss {}  live {}  \
                 stacks {} ({} pooled)",
                started.elapsed().as_secs(),
                get(&tally.requests),
                get(&tally.answered),
                get(&tally.open),
                mib(loaded.rss_kib),
                loaded.live,
                loaded.stacks_mapped,
                loaded.stacks_pooled,
            );
        }
    }
    let at_warm_up = at_warm_up.unwrap_or(loaded);
    ctx.stop.store(true, Relaxed);
    let minutes_run = started.elapsed().as_secs_f64() / 60.0;
    for h in handles {
        let _ = h.join();
    }
    let idle_held = idle.len();
    let idle_ok = check_idle(idle);

    // Every client has gone: wait for the server to close everything.
    let left = Instant::now();
    let mut after = server.stats()?;
    while (after.fds != before.fds || after.live != before.live || after.members != 0)
        && left.elapsed() < SETTLE
    {
        thread::sleep(Duration::from_millis(100));
        after = server.stats()?;
    }
    let settle_s = left.elapsed().as_secs_f64();
    // The close left the idle connections' stacks pooled; a worker that has been idle a second
    // unmaps all but a few hundred (a one-off cost, some µs per stack): wait for that before
    // the quiet second, which is about workers that keep waking, not about that clean-up.
    let closed_pooled = after.stacks_pooled;
    let release_wait = Instant::now();
    let mut released = server.stats()?;
    while released.stacks_pooled > IDLE_POOLED_MAX && release_wait.elapsed() < RELEASE_WAIT {
        thread::sleep(Duration::from_millis(100));
        released = server.stats()?;
    }
    // One quiet second.
    thread::sleep(Duration::from_millis(200));
    let q0 = server.stats()?;
    let quiet = Instant::now();
    thread::sleep(Duration::from_secs(1));
    let q1 = server.stats()?;
    let idle_cpu =
        (q1.cpu_us - q0.cpu_us) as f64 / quiet.elapsed().as_micros().max(1) as f64 * 100.0;

    let (clean_exit, log) = server.quit();
    let t = &*tally;
    let errors = t.errors();
    let unexpected_ends: u64 = log
        .ended
        .iter()
        .filter(|(m, _)| !expected_end(m))
        .map(|(_, n)| n)
        .sum();

    // ---- the summary
    let rss_limit = (at_warm_up.rss_kib * RSS_GROWTH_PCT / 100).max(RSS_GROWTH_FLOOR_KIB);
    let rss_growth = loaded.rss_kib.saturating_sub(at_warm_up.rss_kib);
    let rows: Vec<(&str, String)> = vec![
        ("backend / workers", format!("{backend} / 2")),
        ("minutes run", format!("{minutes_run:.2}")),
        (
            "idle connections held",
            format!("{idle_held} ({idle_ok} answered at the end)"),
        ),
        ("connections opened", get(&t.connects).to_string()),
        ("peak open connections", get(&t.peak_open).to_string()),
        ("requests", get(&t.requests).to_string()),
        ("  answered", get(&t.answered).to_string()),
        ("  cleanly refused", get(&t.refused).to_string()),
        ("  abandoned (peer resets)", get(&t.abandoned).to_string()),
        ("  failed", get(&t.failed).to_string()),
        ("faults: peer resets", get(&t.resets).to_string()),
        ("faults: half-closes", get(&t.half_closes).to_string()),
        (
            "faults: slow readers dropped",
            format!(
                "{} (\"too slow\" announced {})",
                get(&t.slow_dropped),
                get(&t.too_slow_announced)
            ),
        ),
        (
            "faults: heartbeat timeouts",
            get(&t.heartbeat_timeouts).to_string(),
        ),
        (
            "faults: client timeouts",
            get(&t.client_timeouts).to_string(),
        ),
        (
            "faults: random disconnects",
            get(&t.disconnects).to_string(),
        ),
        (
            "slowest chat round trip",
            format!("{} ms", get(&t.max_talker_ms)),
        ),
        (
            "server fds before / after",
            format!(
                "{} / {} (settled in {settle_s:.1} s)",
                before.fds, after.fds
            ),
        ),
        (
            "server RSS start / warm-up / end",
            format!(
                "{} / {} / {} (peak {}, growth {}, bound {})",
                mib(before.rss_kib),
                mib(at_warm_up.rss_kib),
                mib(loaded.rss_kib),
                mib(peak_rss),
                mib(rss_growth),
                mib(rss_limit)
            ),
        ),
        ("server mappings peak", peak_maps.to_string()),
        (
            "stacks mapped (pooled) warm-up / end",
            format!(
                "{} ({}) / {} ({})",
                at_warm_up.stacks_mapped,
                at_warm_up.stacks_pooled,
                loaded.stacks_mapped,
                loaded.stacks_pooled
            ),
        ),
        (
            "live coroutines before / after",
            format!("{} / {}", before.live, after.live),
        ),
        ("chat members after", after.members.to_string()),
        ("stuck-coroutine reports", log.stuck.len().to_string()),
        (
            "server connection errors",
            log.ended
                .iter()
                .map(|(m, n)| format!("{m}: {n}"))
                .collect::<Vec<_>>()
                .join("; "),
        ),
        (
            "stacks pooled after the close / idle",
            format!(
                "{closed_pooled} / {} (given back in {:.1} s)",
                released.stacks_pooled,
                release_wait.elapsed().as_secs_f64()
            ),
        ),
        ("server CPU over 1 quiet s", format!("{idle_cpu:.1} %")),
        ("server resumes", after.resumes.to_string()),
    ];
    println!();
    println!("soak summary");
    for (k, v) in &rows {
        println!("  {k:<38} {v}");
    }

    let faults = [
        get(&t.resets),
        get(&t.half_closes),
        get(&t.slow_dropped),
        get(&t.heartbeat_timeouts),
        get(&t.client_timeouts),
        get(&t.disconnects),
    ];
    let accounted =
        get(&t.answered) + get(&t.refused) + get(&t.abandoned) + get(&t.failed) == get(&t.requests);
    let checks: Vec<(&str, bool, String)> = vec![
        (
            "every request answered or cleanly refused",
            get(&t.failed) == 0 && accounted && get(&t.answered) > 0,
            format!("{} failed", get(&t.failed)),
        ),
        (
            "no client-side error",
            errors.is_empty(),
            errors
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect::<Vec<_>>()
                .join("; "),
        ),
        (
            "idle connections all held",
            idle_ok == idle_held && idle_held == idle_n,
            format!("{idle_ok} of {idle_n}"),
        ),
        (
            "every kind of fault injected",
            faults.iter().all(|&n| n > 0),
            "resets, half-closes, slow readers, heartbeat and client timeouts, disconnects"
                .to_string(),
        ),
        (
            "fds back to the start",
            after.fds == before.fds,
            format!("{} -> {}", before.fds, after.fds),
        ),
        (
            "RSS flat after warm-up",
            rss_growth <= rss_limit,
            format!("+{} (bound {})", mib(rss_growth), mib(rss_limit)),
        ),
        (
            "no coroutine stuck",
            after.live == before.live && after.members == 0 && log.stuck.is_empty(),
            format!(
                "live {} -> {}, {} monitor reports{}",
                before.live,
                after.live,
                log.stuck.len(),
                log.stuck
                    .first()
                    .map_or(String::new(), |l| format!(": {l}"))
            ),
        ),
        (
            "idle workers gave the stacks back",
            released.stacks_pooled <= IDLE_POOLED_MAX,
            format!(
                "{closed_pooled} -> {} pooled (bound {IDLE_POOLED_MAX})",
                released.stacks_pooled
            ),
        ),
        (
            "workers idle at the end",
            idle_cpu < IDLE_CPU_PCT,
            format!("{idle_cpu:.1} % of a core (bound {IDLE_CPU_PCT} %)"),
        ),
        (
            "server output as expected",
            unexpected_ends == 0 && log.other.is_empty(),
            format!(
                "{unexpected_ends} unexpected connection errors; other lines: {}",
                log.other.join(" / ")
            ),
        ),
        (
            "server exited cleanly",
            clean_exit,
            "quit -> bye, exit 0".to_string(),
        ),
    ];
    println!();
    let mut ok = true;
    for (name, pass, detail) in &checks {
        ok &= pass;
        let verdict = if *pass { "PASS" } else { "FAIL" };
        println!("  {verdict}  {name:<44} {detail}");
    }
    println!();
    if ok {
        println!("soak: all checks passed");
    } else {
        let failed: Vec<&str> = checks
            .iter()
            .filter(|(_, pass, _)| !pass)
            .map(|(n, _, _)| *n)
            .collect();
        println!("soak: FAILED: {}", failed.join(", "));
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stats_and_fields() {
        let s =
            Stats::parse("stats fds=12 rss_kib=3000 cpu_us=5 live=2 members=0 resumes=9 maps=80")
                .unwrap();
        assert_eq!((s.fds, s.rss_kib, s.live, s.maps), (12, 3000, 2, 80));
        assert!(Stats::parse("bye").is_err());
        let ready = "ready echo=127.0.0.1:1 chat=127.0.0.1:2 backend=epoll nofile=20000";
        assert_eq!(field(ready, "backend"), Some("epoll"));
        assert_eq!(field(ready, "chat"), Some("127.0.0.1:2"));
        assert!(expected_end("Connection reset by peer (os error 104)"));
        assert!(!expected_end("Bad file descriptor (os error 9)"));
    }
}
