//! An unmodified blocking HTTP client crate (`ureq`, on `std::net`) in coroutines under the
//! hook, against a local server written with std that answers after a delay.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Ticker, backends, runtime, watchdog};
use spindle_rt::IoBackend;

/// A std HTTP/1.1 server on plain threads (one per connection, so that the hook passes its
/// calls through): it answers `GET /<path>` with the body `you asked for /<path>` after the
/// delay its path asks for (`/slow/...`: `slow`, anything else: `delay`), and counts how many
/// requests it holds at once.
struct SlowServer {
    addr: SocketAddr,
    /// The most requests held at once.
    peak: Arc<AtomicUsize>,
}

impl SlowServer {
    fn start(delay: Duration, slow: Duration) -> SlowServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let held = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let p = peak.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (held, peak) = (held.clone(), p.clone());
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || serve(conn, delay, slow, &held, &peak))
                    .unwrap();
            }
        });
        SlowServer { addr, peak }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// Answers the requests of one connection until the client closes it.
fn serve(
    mut conn: TcpStream,
    delay: Duration,
    slow: Duration,
    held: &AtomicUsize,
    peak: &AtomicUsize,
) {
    let mut buf = Vec::new();
    loop {
        // A GET has no body: the request ends with its headers.
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 1024];
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let now = held.fetch_add(1, Ordering::SeqCst) + 1;
        peak.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(if path.starts_with("/slow") {
            slow
        } else {
            delay
        });
        held.fetch_sub(1, Ordering::SeqCst);
        let body = format!("you asked for {path}");
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if conn.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// 200 coroutines on 2 workers each make one `ureq` GET to a server that answers after
/// 200 ms: every response is the right one, and the requests overlap — the server holds many
/// of them at once and the whole run takes a small fraction of the 20 s it takes when each
/// request holds its worker for the delay.
#[test]
fn ureq_gets_from_many_coroutines_overlap() {
    const REQUESTS: usize = 200;
    const WORKERS: usize = 2;
    const DELAY: Duration = Duration::from_millis(200);
    for io in backends() {
        if matches!(io, IoBackend::None) {
            continue;
        }
        let name = format!("{io:?}");
        let server = SlowServer::start(DELAY, DELAY);
        let urls: Vec<String> = (0..REQUESTS)
            .map(|i| server.url(&format!("/item/{i}")))
            .collect();
        let rt = runtime(WORKERS, io);
        let took = watchdog(Duration::from_secs(60), move || {
            // One agent for the application, shared by every coroutine, as ureq advises.
            let agent = ureq::Agent::new_with_defaults();
            let start = Instant::now();
            let handles: Vec<_> = urls
                .into_iter()
                .map(|url| {
                    let agent = agent.clone();
                    rt.spawn(move || -> Result<(u16, String), ureq::Error> {
                        let mut response = agent.get(&url).call()?;
                        let status = response.status().as_u16();
                        Ok((status, response.body_mut().read_to_string()?))
                    })
                })
                .collect();
            for (i, h) in handles.into_iter().enumerate() {
                let (status, body) = h.join().unwrap().unwrap();
                assert_eq!(status, 200);
                assert_eq!(body, format!("you asked for /item/{i}"));
            }
            start.elapsed()
        });
        let peak = server.peak.load(Ordering::SeqCst);
        let serial = DELAY * (REQUESTS / WORKERS) as u32;
        eprintln!("{name}: {REQUESTS} GETs in {took:?}, at most {peak} held at once");
        assert!(
            peak >= 10 * WORKERS,
            "{name}: the server never held more than {peak} requests at once"
        );
        assert!(took < serial / 4, "{name}: {took:?} (serial: {serial:?})");
    }
}

/// A `ureq` agent with a global timeout, against a server that answers too late: the call fails
/// with ureq's timeout error once the timeout has passed (the socket read timeout it sets ends
/// the read with `EAGAIN`, as on a thread), and meanwhile the only worker keeps running another
/// coroutine. A later call on the same agent to a prompt path succeeds.
#[test]
fn a_ureq_timeout_fails_the_call_and_spares_the_worker() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let server = SlowServer::start(Duration::ZERO, Duration::from_secs(10));
    let (slow, quick) = (server.url("/slow/report"), server.url("/quick"));
    for io in backends() {
        if matches!(io, IoBackend::None) {
            continue;
        }
        let name = format!("{io:?}");
        let rt = runtime(1, io);
        let (slow, quick) = (slow.clone(), quick.clone());
        let (took, ticked, body) = watchdog(Duration::from_secs(60), move || {
            rt.block_on(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .timeout_global(Some(TIMEOUT))
                    .build()
                    .into();
                let ticker = Ticker::start();
                let before = ticker.count();
                let start = Instant::now();
                let err = agent.get(&slow).call().unwrap_err();
                let took = start.elapsed();
                let ticked = ticker.count() - before;
                assert!(matches!(err, ureq::Error::Timeout(_)), "{err:?}");
                let body = agent
                    .get(&quick)
                    .call()
                    .unwrap()
                    .body_mut()
                    .read_to_string()
                    .unwrap();
                (took, ticked, body)
            })
        });
        eprintln!("{name}: timed out after {took:?}, the ticker ticked {ticked} times");
        assert!(took >= TIMEOUT, "{name}: {took:?}");
        assert!(took < Duration::from_secs(5), "{name}: {took:?}");
        assert!(ticked >= 10, "{name}: the ticker ticked {ticked} times");
        assert_eq!(body, "you asked for /quick");
    }
}
