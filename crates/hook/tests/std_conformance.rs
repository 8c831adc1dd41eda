//! std's own types under the hook give a coroutine what they give a thread: end of stream after
//! the peer's half-close, connection resets, a pipe whose writer closed, a socket shut down
//! under a parked reader. Each sequence runs once on plain threads (no runtime: the calls pass
//! straight through, so these are the kernel's answers) and then in coroutines of a one-worker
//! runtime on every backend; the outcomes must be the same.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

mod common;

use std::fmt::Debug;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{backends, runtime, watchdog};

/// How long a peer waits before it acts, so that the other side is parked in its call by then.
const PAUSE: Duration = Duration::from_millis(30);

/// A call's outcome as compared: the value, or the error's kind and OS code.
fn outcome<T: Debug>(r: io::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {:?} {:?}", e.kind(), e.raw_os_error()),
    }
}

/// Runs `f` concurrently with the caller: a coroutine when `co`, else a thread. The returned
/// closure joins it.
fn concurrently<T: Send + 'static>(
    co: bool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Box<dyn FnOnce() -> T> {
    if co {
        let h = spindle_rt::spawn(f);
        Box::new(move || h.join().expect("the peer coroutine panicked"))
    } else {
        let h = std::thread::spawn(f);
        Box::new(move || h.join().expect("the peer thread panicked"))
    }
}

/// Runs `scenario` on plain threads, then in a coroutine on each backend (with a watchdog),
/// and asserts that every run saw what the threads saw.
fn same_as_threads(scenario: fn(bool) -> Vec<String>) {
    let expected = watchdog(Duration::from_secs(5), move || scenario(false));
    for io in backends() {
        let name = format!("{io:?}");
        let rt = runtime(1, io);
        let got = watchdog(Duration::from_secs(5), move || {
            rt.block_on(move || scenario(true))
        });
        assert_eq!(got, expected, "{name}");
    }
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

/// The two stream types, behind what the sequences need (std's own methods each).
trait Stream: Read + Write + Send + Sync + Sized + 'static {
    fn pair() -> (Self, Self);
    fn shut(&self, how: Shutdown) -> io::Result<()>;
    /// A read through a shared reference (std's `Read for &TcpStream`, `&UnixStream`).
    fn read_shared(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_shared(&self, buf: &[u8]) -> io::Result<usize>;
}

impl Stream for TcpStream {
    fn pair() -> (Self, Self) {
        tcp_pair()
    }
    fn shut(&self, how: Shutdown) -> io::Result<()> {
        self.shutdown(how)
    }
    fn read_shared(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut s: &TcpStream = self;
        s.read(buf)
    }
    fn write_shared(&self, buf: &[u8]) -> io::Result<usize> {
        let mut s: &TcpStream = self;
        s.write(buf)
    }
}

impl Stream for UnixStream {
    fn pair() -> (Self, Self) {
        UnixStream::pair().unwrap()
    }
    fn shut(&self, how: Shutdown) -> io::Result<()> {
        self.shutdown(how)
    }
    fn read_shared(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut s: &UnixStream = self;
        s.read(buf)
    }
    fn write_shared(&self, buf: &[u8]) -> io::Result<usize> {
        let mut s: &UnixStream = self;
        s.write(buf)
    }
}

/// The peer sends a request and shuts its writing half; this side, parked in `read` meanwhile,
/// reads the request and then end of stream (again on a second read), and answers on the
/// direction still open; the peer reads the answer to its end, and a write on its shut half
/// fails.
fn half_close<S: Stream>(co: bool) -> Vec<String> {
    let (mut a, mut b) = S::pair();
    let peer = concurrently(co, move || {
        std::thread::sleep(PAUSE);
        let mut seen = vec![outcome(b.write_all(b"request"))];
        seen.push(outcome(b.shut(Shutdown::Write)));
        let mut answer = Vec::new();
        seen.push(outcome(b.read_to_end(&mut answer).map(|_| answer)));
        seen.push(outcome(b.write(b"late")));
        seen
    });
    let mut seen = Vec::new();
    let mut request = Vec::new();
    seen.push(outcome(a.read_to_end(&mut request).map(|_| request)));
    seen.push(outcome(a.read(&mut [0u8; 16])));
    seen.push(outcome(a.write_all(b"answer")));
    seen.push(outcome(a.shut(Shutdown::Write)));
    seen.extend(peer());
    seen
}

#[test]
fn tcp_half_close_reads_end_of_stream_and_the_other_direction_works() {
    same_as_threads(half_close::<TcpStream>);
}

#[test]
fn unix_stream_half_close_reads_end_of_stream_and_the_other_direction_works() {
    same_as_threads(half_close::<UnixStream>);
}

/// Makes closing `s` reset the connection (`SO_LINGER` on with a zero time).
fn linger_zero(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid linger struct of the size given, on an open socket.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const l).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "{}", io::Error::last_os_error());
}

/// The peer resets the connection while this side is parked in `read`: the read fails with
/// `ConnectionReset`; the next read and the writes after it get what a thread gets.
fn reset_while_reading(co: bool) -> Vec<String> {
    let (mut a, b) = tcp_pair();
    let peer = concurrently(co, move || {
        std::thread::sleep(PAUSE);
        linger_zero(&b);
        drop(b);
    });
    let mut seen = vec![outcome(a.read(&mut [0u8; 16]))];
    peer();
    seen.push(outcome(a.read(&mut [0u8; 16])));
    seen.push(outcome(a.write(b"after")));
    seen.push(outcome(a.write(b"again")));
    seen
}

#[test]
fn a_reset_ends_a_parked_read_with_connection_reset() {
    same_as_threads(reset_while_reading);
}

/// The peer resets the connection while this side does not read: its next write reports the
/// reset, the write after it and a read get what a thread gets.
fn reset_then_write(co: bool) -> Vec<String> {
    let (mut a, b) = tcp_pair();
    // Managed (in a coroutine) before the reset arrives.
    let mut seen = vec![outcome(a.write(b"before"))];
    linger_zero(&b);
    drop(b);
    std::thread::sleep(PAUSE);
    let _ = co;
    seen.push(outcome(a.write(b"after")));
    seen.push(outcome(a.write(b"again")));
    seen.push(outcome(a.read(&mut [0u8; 16])));
    seen
}

#[test]
fn writes_after_a_reset_fail_as_on_a_thread() {
    same_as_threads(reset_then_write);
}

/// A pipe (`pipe2`) whose writer writes and closes while the reader is parked: the reader
/// gets the bytes, then end of stream; a write to a pipe whose reader is gone fails with
/// `BrokenPipe` (SIGPIPE is ignored in Rust programs).
fn pipe_writer_closes(co: bool) -> Vec<String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: just made, owned by these files from now on.
    let (mut r, mut w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    let writer = concurrently(co, move || {
        std::thread::sleep(PAUSE);
        let done = outcome(w.write_all(b"tail"));
        drop(w);
        done
    });
    let mut seen = Vec::new();
    let mut got = Vec::new();
    seen.push(outcome(r.read_to_end(&mut got).map(|_| got)));
    seen.push(outcome(r.read(&mut [0u8; 8])));
    seen.push(writer());

    let mut fds = [0; 2];
    // SAFETY: as above.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: as above.
    let (r, mut w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    drop(r);
    seen.push(outcome(w.write(b"nobody")));
    seen
}

#[test]
fn a_pipe_reads_end_of_stream_after_its_writer_closed() {
    same_as_threads(pipe_writer_closes);
}

/// A child process's stdout (std's `Command` pipe): the parent, parked in `read`, gets what
/// the child wrote, then end of stream when the child exits.
fn child_stdout_closes(co: bool) -> Vec<String> {
    let _ = co;
    let mut child = Command::new("sh")
        .args(["-c", "sleep 0.03; printf out"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut got = Vec::new();
    let mut seen = vec![outcome(stdout.read_to_end(&mut got).map(|_| got))];
    seen.push(outcome(stdout.read(&mut [0u8; 8])));
    seen.push(outcome(child.wait().map(|s| s.code())));
    seen
}

#[test]
fn a_child_process_pipe_reads_end_of_stream_when_the_child_exits() {
    same_as_threads(child_stdout_closes);
}

/// One side parked in `read` while another coroutine (or thread) shuts the same socket down
/// (`how`): the reader wakes with what a thread gets; a write afterwards too.
fn shut_under_reader<S: Stream>(co: bool, how: Shutdown) -> Vec<String> {
    let (a, _b) = S::pair();
    let a = Arc::new(a);
    let a2 = a.clone();
    let shutter = concurrently(co, move || {
        std::thread::sleep(PAUSE);
        outcome(a2.shut(how))
    });
    let mut seen = Vec::new();
    let mut buf = [0u8; 16];
    seen.push(outcome(a.read_shared(&mut buf)));
    seen.push(shutter());
    seen.push(outcome(a.read_shared(&mut buf)));
    seen.push(outcome(a.write_shared(b"x")));
    seen
}

#[test]
fn tcp_shutdown_read_under_a_parked_reader_wakes_it_as_a_thread() {
    same_as_threads(|co| shut_under_reader::<TcpStream>(co, Shutdown::Read));
}

#[test]
fn tcp_shutdown_both_under_a_parked_reader_wakes_it_as_a_thread() {
    same_as_threads(|co| shut_under_reader::<TcpStream>(co, Shutdown::Both));
}

#[test]
fn unix_shutdown_read_under_a_parked_reader_wakes_it_as_a_thread() {
    same_as_threads(|co| shut_under_reader::<UnixStream>(co, Shutdown::Read));
}

#[test]
fn unix_shutdown_both_under_a_parked_reader_wakes_it_as_a_thread() {
    same_as_threads(|co| shut_under_reader::<UnixStream>(co, Shutdown::Both));
}
