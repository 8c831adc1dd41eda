//! What cannot be polled, under the hook, through std's own types: files, `open`, child
//! processes' pipes and name resolution. In a coroutine the calls on files, `open` and
//! `getaddrinfo` run on the blocking pool while only the coroutine waits.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

mod common;

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, IoSliceMut, Read, Seek, SeekFrom, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Ticker, backends, runtime, watchdog};

/// A file name of this test's own in the temporary directory, removed when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> TempPath {
        TempPath(std::env::temp_dir().join(format!("spindle-hook-{name}-{}", std::process::id())))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Bytes that differ by position and by `seed`.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 8) as u8 ^ seed)
        .collect()
}

/// `std::fs::File` in coroutines: create, write, fsync, read back, positioned and vectored
/// reads and writes, each with the results a thread gets, while another coroutine of the one
/// worker keeps ticking.
#[test]
fn std_file_reads_writes_and_syncs_in_coroutines() {
    for io in backends() {
        let path = TempPath::new(&format!("file-{io:?}"));
        let rt = runtime(1, io);
        let p = path.0.clone();
        watchdog(Duration::from_secs(60), move || {
            rt.block_on(move || {
                let ticker = Ticker::start();
                let data = pattern(3 << 20, 1);
                let mut f = File::create(&p).unwrap();
                f.write_all(&data).unwrap();
                f.sync_all().unwrap();
                f.sync_data().unwrap();
                drop(f);

                let mut back = Vec::new();
                File::open(&p).unwrap().read_to_end(&mut back).unwrap();
                assert!(back == data, "read back differs");

                let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
                f.write_at(b"positioned", 1000).unwrap();
                let mut buf = [0u8; 10];
                f.read_exact_at(&mut buf, 1000).unwrap();
                assert_eq!(&buf, b"positioned");
                // Past the end: 0, as a thread's pread returns.
                assert_eq!(f.read_at(&mut buf, 10 << 20).unwrap(), 0);

                let mut f = f;
                f.seek(SeekFrom::Start(0)).unwrap();
                let n = f
                    .write_vectored(&[IoSlice::new(b"abc"), IoSlice::new(b"defg")])
                    .unwrap();
                assert_eq!(n, 7);
                f.seek(SeekFrom::Start(0)).unwrap();
                let (mut a, mut b) = ([0u8; 2], [0u8; 5]);
                let n = f
                    .read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)])
                    .unwrap();
                assert_eq!((n, &a, &b), (7, b"ab", b"cdefg"));

                // A read-only file refuses writes with the kernel's EBADF.
                let ro = File::open(&p).unwrap();
                let e = (&ro).write(b"x").unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EBADF));
                // Opening what is not there fails as it does on a thread.
                let e = File::open(p.with_extension("missing")).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
                assert!(ticker.count() > 0, "the ticker never ran");
            })
        });
    }
}

/// Opening a FIFO waits for its other end: in a coroutine the open runs on the blocking pool,
/// so another coroutine of the same single worker can open the other end (without the pool
/// the two would deadlock), and the data then flows through the FIFO.
#[test]
fn opening_a_fifo_waits_in_the_coroutine() {
    for io in backends() {
        let path = TempPath::new(&format!("fifo-{io:?}"));
        let rt = runtime(1, io);
        let c = CString::new(path.0.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let p = path.0.clone();
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(move || {
                let ticker = Ticker::start();
                let p2 = p.clone();
                let writer = spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(50));
                    let mut w = OpenOptions::new().write(true).open(&p2).unwrap();
                    w.write_all(b"through the fifo").unwrap();
                });
                let mut r = File::open(&p).unwrap();
                let mut s = String::new();
                r.read_to_string(&mut s).unwrap();
                writer.join().unwrap();
                assert_eq!(s, "through the fifo");
                assert!(ticker.count() >= 10, "ticks: {}", ticker.count());
            })
        });
    }
}

/// Coroutines on a copying stack read and write files through buffers on their stacks while
/// the others run on the same stack region: the pool thread never writes into a stack whose
/// bytes are moved out (each coroutine checks every byte it reads), and transfers larger than
/// what one call bounces through the heap come out whole through `read_exact`/`write_all`.
#[test]
fn file_io_on_copying_stacks_keeps_each_coroutines_bytes() {
    let rt = runtime(1, spindle_rt::IoBackend::Epoll);
    let path = TempPath::new("shared-stack");
    let p = path.0.clone();
    watchdog(Duration::from_secs(60), move || {
        rt.block_on(move || {
            let data = pattern(3 << 20, 7);
            std::fs::write(&p, &data).unwrap();
            let handles: Vec<_> = (0..4u64)
                .map(|i| {
                    let p = p.clone();
                    let data = data.clone();
                    // SAFETY: the coroutine lends no pointer into its stack to anything that
                    // runs while it is suspended (the hook bounces its buffers).
                    let b = unsafe { spindle_rt::Builder::new().shared_stack() };
                    b.spawn(move || {
                        let f = File::open(&p).unwrap();
                        let mut buf = [0u8; 8192];
                        for round in 0..64u64 {
                            let at = ((i * 64 + round) * 4099) % (data.len() as u64 - 8192);
                            buf.fill(0xee);
                            f.read_exact_at(&mut buf, at).unwrap();
                            assert!(
                                buf[..] == data[at as usize..at as usize + 8192],
                                "coroutine {i}, round {round}: bytes differ"
                            );
                        }
                        // Larger than one bounce: whole through read_to_end and write_all.
                        let mut all = Vec::new();
                        (&f).read_to_end(&mut all).unwrap();
                        assert!(all == data);
                        let out = p.with_extension(format!("out{i}"));
                        let mut w = File::create(&out).unwrap();
                        let mine = pattern(3 << 20, i as u8);
                        w.write_all(&mine).unwrap();
                        // Vectored, from the stack.
                        let (x, y) = ([1u8; 300], [2u8; 500]);
                        let n = w
                            .write_vectored(&[IoSlice::new(&x), IoSlice::new(&y)])
                            .unwrap();
                        assert_eq!(n, 800);
                        drop(w);
                        let mut r = File::open(&out).unwrap();
                        r.seek(SeekFrom::Start(3 << 20)).unwrap();
                        let (mut a, mut b) = ([0u8; 300], [0u8; 500]);
                        let n = r
                            .read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)])
                            .unwrap();
                        assert_eq!(n, 800);
                        assert!(a == x && b == y);
                        let back = std::fs::read(&out).unwrap();
                        std::fs::remove_file(&out).unwrap();
                        assert!(back[..3 << 20] == mine[..]);
                    })
                    .unwrap()
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        })
    });
}

/// A child process through std's `Command` with piped stdin and stdout: one coroutine writes
/// more than a pipe holds while another reads the echo, both on one worker (blocking calls
/// would deadlock: `cat` stops reading when its output pipe is full), then `wait`.
#[test]
fn child_process_pipes_wait_in_coroutines() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(60), move || {
            rt.block_on(|| {
                let mut child = Command::new("cat")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                let mut stdin = child.stdin.take().unwrap();
                let mut stdout = child.stdout.take().unwrap();
                let data = pattern(1 << 20, 3);
                let d = data.clone();
                let writer = spindle_rt::spawn(move || {
                    stdin.write_all(&d).unwrap();
                    // Dropped: cat sees the end of its input.
                });
                let mut back = Vec::new();
                stdout.read_to_end(&mut back).unwrap();
                writer.join().unwrap();
                assert!(child.wait().unwrap().success());
                assert!(back == data, "echo differs");

                let out = Command::new("sh")
                    .args(["-c", "echo out; echo err >&2; exit 3"])
                    .output()
                    .unwrap();
                assert_eq!(out.stdout, b"out\n");
                assert_eq!(out.stderr, b"err\n");
                assert_eq!(out.status.code(), Some(3));
            })
        });
    }
}

/// Name resolution through std's `ToSocketAddrs` and the C call itself, in coroutines (many at
/// once on one worker), on a copying stack, and on a plain thread: the C library's answers.
#[test]
fn dns_through_to_socket_addrs() {
    let localhost = |addrs: Vec<SocketAddr>| {
        assert!(!addrs.is_empty());
        assert!(
            addrs.iter().all(|a| a.ip().is_loopback() && a.port() == 80),
            "{addrs:?}"
        );
    };
    let on_thread: Vec<SocketAddr> = "localhost:80".to_socket_addrs().unwrap().collect();
    localhost(on_thread.clone());
    for io in backends() {
        let rt = runtime(1, io);
        let expected = on_thread.clone();
        watchdog(Duration::from_secs(60), move || {
            rt.block_on(move || {
                let got: Vec<_> = "localhost:80".to_socket_addrs().unwrap().collect();
                assert_eq!(got, expected);
                let got: Vec<_> = ("localhost", 80).to_socket_addrs().unwrap().collect();
                assert_eq!(got, expected);
                let many: Vec<_> = (0..16)
                    .map(|_| {
                        spindle_rt::spawn(|| {
                            "localhost:80"
                                .to_socket_addrs()
                                .unwrap()
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                for h in many {
                    assert_eq!(h.join().unwrap(), expected);
                }
                // SAFETY: the coroutine lends nothing on its stack (the hook copies the
                // arguments of getaddrinfo).
                let b = unsafe { spindle_rt::Builder::new().shared_stack() };
                let got = b
                    .spawn(|| {
                        "localhost:80"
                            .to_socket_addrs()
                            .unwrap()
                            .collect::<Vec<_>>()
                    })
                    .unwrap()
                    .join()
                    .unwrap();
                assert_eq!(got, expected);
            })
        });
    }
}

/// `getaddrinfo` itself in a coroutine: hints are honoured, a numeric host with a passive
/// request gives the wildcard, and errors are the C library's codes.
#[test]
fn getaddrinfo_hints_and_errors_match_a_threads() {
    fn lookup(node: Option<&str>, service: &str, flags: i32) -> Result<Vec<SocketAddr>, i32> {
        let node = node.map(|n| CString::new(n).unwrap());
        let service = CString::new(service).unwrap();
        // SAFETY: all-zero is a valid addrinfo.
        let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
        hints.ai_family = libc::AF_INET;
        hints.ai_socktype = libc::SOCK_STREAM;
        hints.ai_flags = flags;
        let mut res = std::ptr::null_mut();
        // SAFETY: valid strings, hints and result pointer.
        let rc = unsafe {
            libc::getaddrinfo(
                node.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
                service.as_ptr(),
                &hints,
                &mut res,
            )
        };
        if rc != 0 {
            return Err(rc);
        }
        let mut out = Vec::new();
        let mut at = res;
        while !at.is_null() {
            // SAFETY: a list the C library made; AF_INET entries hold sockaddr_in.
            unsafe {
                let sin = &*(*at).ai_addr.cast::<libc::sockaddr_in>();
                out.push(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                    u16::from_be(sin.sin_port),
                ));
                at = (*at).ai_next;
            }
        }
        // SAFETY: the list from getaddrinfo, freed once.
        unsafe { libc::freeaddrinfo(res) };
        Ok(out)
    }
    let check = || {
        let local = lookup(Some("localhost"), "80", 0).unwrap();
        assert!(
            local.contains(&"127.0.0.1:80".parse().unwrap()),
            "{local:?}"
        );
        let wildcard = lookup(None, "8080", libc::AI_PASSIVE).unwrap();
        assert_eq!(wildcard, ["0.0.0.0:8080".parse().unwrap()]);
        // A host name where only numbers are allowed.
        assert_eq!(
            lookup(Some("localhost"), "80", libc::AI_NUMERICHOST),
            Err(libc::EAI_NONAME)
        );
    };
    check();
    let rt = runtime(1, spindle_rt::IoBackend::Epoll);
    watchdog(Duration::from_secs(30), move || rt.block_on(check));
}

/// The blocking pool's own threads pass the calls straight through: with a pool of one
/// thread, a file read, an `open` and a name look-up made on it finish (had the hook sent
/// them to the pool again, the one thread would wait for itself).
#[test]
fn blocking_pool_threads_pass_file_calls_through() {
    let path = TempPath::new("pool");
    std::fs::write(&path.0, b"pool thread").unwrap();
    let p = path.0.clone();
    common::enable();
    let rt = spindle_rt::Runtime::builder()
        .workers(1)
        .blocking_threads(1)
        .build()
        .unwrap();
    watchdog(Duration::from_secs(30), move || {
        rt.block_on(move || {
            let (s, addrs) = spindle_rt::blocking(move || {
                assert!(!spindle_park::in_task());
                let s = std::fs::read_to_string(&p).unwrap();
                let addrs: Vec<_> = "localhost:80".to_socket_addrs().unwrap().collect();
                (s, addrs)
            });
            assert_eq!(s, "pool thread");
            assert!(!addrs.is_empty());
        })
    });
}

/// A coroutine cancelled while its `open` of a FIFO runs on the blocking pool: the open
/// completes first (the pool thread holds the coroutine's path until the FIFO's writer
/// comes), returns its descriptor, and the coroutine ends cancelled at its next cancellation
/// point.
#[test]
fn a_cancelled_offloaded_call_finishes_before_the_coroutine_ends() {
    let path = TempPath::new("fifo-cancel");
    let c = CString::new(path.0.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let rt = runtime(1, spindle_rt::IoBackend::Epoll);
    let p = path.0.clone();
    watchdog(Duration::from_secs(30), move || {
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = p.clone();
        let h = rt.spawn(move || {
            let r = File::open(&reader).map_err(|e| e.raw_os_error());
            tx.send(r.is_ok()).unwrap();
            spindle_rt::yield_now();
            unreachable!("cancelled at the yield");
        });
        std::thread::sleep(Duration::from_millis(50));
        h.cancel();
        // The open is still waiting for a writer: the coroutine has not ended.
        std::thread::sleep(Duration::from_millis(100));
        assert!(!h.is_finished(), "ended while its open was still running");
        assert!(rx.try_recv().is_err());
        let _w = OpenOptions::new().write(true).open(&p).unwrap();
        assert!(h.join().unwrap_err().is_cancelled());
        assert!(rx.recv().unwrap(), "the open failed");
    });
}
