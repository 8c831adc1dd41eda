//! The `http_hello_c50` servers: a minimal HTTP/1.1 "hello" server written blocking-style over
//! `spindle_io::net::TcpStream` (the bench's copy of the example), and hyper's HTTP/1 server on
//! tokio's current-thread runtime.
//!
//! Both answer every request with the same 13-byte body and the same headers, those
//! TechEmpower's plaintext test requires (`server`, `content-type`, `content-length`, `date`:
//! hyper adds `date` itself and caches it per second; the Spindle server does the same), and
//! both parse each request in full (method, target, version, every header field; the Spindle
//! server with `httparse`, which hyper uses too).
//!
//! The Spindle server keeps connections alive (HTTP/1.1's default; `Connection: close` or
//! HTTP/1.0 without `keep-alive` closes after the response) and handles pipelining: it answers
//! every complete request in what one `read` returned with a single `write_all`. Request
//! bodies with `Content-Length` are skipped; chunked bodies, malformed requests and heads over
//! 8 KiB get an error response and the connection is closed.

use std::cell::Cell;
use std::convert::Infallible;
use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::time::{SystemTime, UNIX_EPOCH};

/// The response body.
pub const BODY: &[u8] = b"Hello, world!";
/// The largest request head accepted; the read buffer is twice that.
pub const MAX_HEAD: usize = 8 * 1024;
const BUF: usize = 2 * MAX_HEAD;

/// What the start of a buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a whole request yet.
    Incomplete,
    /// A whole request of `len` bytes (head and body); `close`: the connection ends after it.
    Request { len: usize, close: bool },
    /// Not a request this server accepts: answer with this status line and close.
    Bad(&'static str),
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

/// The most header fields a request may have.
const MAX_HEADERS: usize = 32;

/// Parses the request at the start of `buf` in full (`httparse`: method, target, version and
/// every header field), as TechEmpower's rules ask of a server.
pub fn parse(buf: &[u8]) -> Parsed {
    // Uninitialised slots: httparse writes those it fills, and zeroing all 32 (1 KiB) for a
    // request of a field or two costs about a tenth of the parse.
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Parsed::Bad("431 Request Header Fields Too Large");
        }
        Ok(httparse::Status::Partial) => return Parsed::Incomplete,
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Bad("431 Request Header Fields Too Large");
        }
        Err(httparse::Error::Version) => return Parsed::Bad("505 HTTP Version Not Supported"),
        Err(_) => return Parsed::Bad("400 Bad Request"),
    };
    if head_len > MAX_HEAD {
        return Parsed::Bad("431 Request Header Fields Too Large");
    }
    let (Some(_method), Some(_target), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Bad("400 Bad Request");
    };
    // httparse accepts HTTP/1.0 and HTTP/1.1 only.
    let mut close = version == 0;
    let mut body = 0usize;
    for h in req.headers.iter() {
        let (name, value) = (h.name.as_bytes(), trim(h.value));
        if name.eq_ignore_ascii_case(b"content-length") {
            match std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                Some(n) => body = n,
                None => return Parsed::Bad("400 Bad Request"),
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Parsed::Bad("501 Not Implemented");
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    close = false;
                }
            }
        }
    }
    let len = match head_len.checked_add(body) {
        Some(len) if len <= BUF => len,
        _ => return Parsed::Bad("413 Content Too Large"),
    };
    if buf.len() < len {
        Parsed::Incomplete
    } else {
        Parsed::Request { len, close }
    }
}

/// `secs` since the Unix epoch as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn http_date(secs: u64) -> [u8; 29] {
    const DAYS: [&[u8; 3]; 7] = [b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // 1970-01-01 was a Thursday.
    let weekday = ((days + 4) % 7) as usize;
    // Civil date from days (H. Hinnant's algorithm), for days >= 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let mut out = [0u8; 29];
    let mut w = &mut out[..];
    let _ = write!(
        w,
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        std::str::from_utf8(DAYS[weekday]).unwrap_or("???"),
        day,
        std::str::from_utf8(MONTHS[(month - 1) as usize]).unwrap_or("???"),
        year % 10_000,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    out
}

thread_local! {
    /// The date header of the current second, formatted once per second per thread.
    static DATE: Cell<(u64, [u8; 29])> = const { Cell::new((u64::MAX, [0; 29])) };
}

fn date_now() -> [u8; 29] {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with(|d| {
        let (cached, date) = d.get();
        if cached == secs {
            date
        } else {
            let date = http_date(secs);
            d.set((secs, date));
            date
        }
    })
}

/// The head of every `200 OK` up to the date (its length is `BODY`'s, checked below).
const OK_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nserver: spindle\r\ncontent-type: text/plain\r\ncontent-length: 13\r\ndate: ";
const _: () = assert!(BODY.len() == 13);

/// Appends the `200 OK` response with `BODY` (the common case of [`respond`], with its head
/// written in one piece).
fn respond_ok(out: &mut Vec<u8>, close: bool, date: &[u8; 29]) {
    out.extend_from_slice(OK_HEAD);
    out.extend_from_slice(date);
    if close {
        out.extend_from_slice(b"\r\nconnection: close");
    }
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(BODY);
}

/// Appends a response; `date`: the `Date` header's value (read once for all the requests of
/// one read, so that the clock is not asked for each of a pipelined batch).
fn respond(out: &mut Vec<u8>, status: &str, body: &[u8], close: bool, date: &[u8; 29]) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_bytes());
    out.extend_from_slice(b"\r\nserver: spindle\r\ncontent-type: text/plain\r\ncontent-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    out.extend_from_slice(b"\r\ndate: ");
    out.extend_from_slice(date);
    if close {
        out.extend_from_slice(b"\r\nconnection: close");
    }
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// Serves one connection until the peer closes it, an error, or a request that ends it.
pub fn serve_conn<S: Read + Write>(mut s: S) {
    let mut buf = vec![0u8; BUF];
    let mut filled = 0;
    let mut out = Vec::with_capacity(1024);
    loop {
        let n = match s.read(&mut buf[filled..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        filled += n;
        let mut start = 0;
        let mut close = false;
        let date = date_now();
        while !close {
            match parse(&buf[start..filled]) {
                Parsed::Incomplete => break,
                Parsed::Request { len, close: c } => {
                    respond_ok(&mut out, c, &date);
                    start += len;
                    close = c;
                }
                Parsed::Bad(status) => {
                    respond(&mut out, status, status.as_bytes(), true, &date);
                    close = true;
                }
            }
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
        if !out.is_empty() {
            if s.write_all(&out).is_err() {
                return;
            }
            out.clear();
        }
        if close {
            return;
        }
    }
}

/// A connection of the Spindle server.
pub fn spindle_conn(s: spindle_io::net::TcpStream) {
    serve_conn(s);
}

async fn hello(
    _req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<http_body_util::Full<hyper::body::Bytes>>, Infallible> {
    let mut resp = hyper::Response::new(http_body_util::Full::new(
        hyper::body::Bytes::from_static(BODY),
    ));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    resp.headers_mut().insert(
        hyper::header::SERVER,
        hyper::header::HeaderValue::from_static("hyper"),
    );
    Ok(resp)
}

/// The hello service of may_minihttp: the shape of its own TechEmpower plaintext example
/// (`Content-Type` and the body; it writes `Server`, `Date` and `Content-Length` itself).
#[derive(Clone)]
struct MayHello;

impl may_minihttp::HttpService for MayHello {
    fn call(
        &mut self,
        _req: may_minihttp::Request<'_, '_, '_>,
        rsp: &mut may_minihttp::Response<'_>,
    ) -> std::io::Result<()> {
        rsp.header("Content-Type: text/plain").body("Hello, world!");
        Ok(())
    }
}

struct MayHelloFactory;

impl may_minihttp::HttpServiceFactory for MayHelloFactory {
    type Service = MayHello;

    fn new_service(&self, _id: usize) -> MayHello {
        MayHello
    }
}

/// may_minihttp's server on may with one worker (its own core pinning off: the process is
/// pinned already).
pub fn may_minihttp_server(ready: impl FnOnce(u16)) -> Result<(), String> {
    use may_minihttp::HttpServiceFactory as _;
    may::config().set_workers(1);
    may::config().set_worker_pin(false);
    // It binds an address it is given and does not tell the port: take a free one first.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port: {e}"))?
        .port();
    let server = MayHelloFactory
        .start(("127.0.0.1", port))
        .map_err(|e| format!("may_minihttp: {e}"))?;
    ready(port);
    server
        .join()
        .map_err(|_| "may_minihttp's accept loop panicked".to_string())
}

/// hyper's HTTP/1 server on tokio's current-thread runtime, one task per connection, with
/// `pipeline_flush` on (the responses to pipelined requests go out in one write, as the
/// Spindle server's do).
pub fn hyper_server(ready: impl FnOnce(u16)) -> Result<(), String> {
    super::servers::tokio_ct()?.block_on(async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        ready(l.local_addr().map_err(|e| e.to_string())?.port());
        loop {
            let s = match l.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    eprintln!("accept: {e}");
                    tokio::task::yield_now().await;
                    continue;
                }
            };
            if let Err(e) = s.set_nodelay(true) {
                eprintln!("set_nodelay: {e}");
            }
            tokio::spawn(async move {
                // A connection error (the client went away) ends only that connection.
                let _ = hyper::server::conn::http1::Builder::new()
                    .pipeline_flush(true)
                    .serve_connection(
                        hyper_util::rt::TokioIo::new(s),
                        hyper::service::service_fn(hello),
                    )
                    .await;
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, TcpStream};
    use std::time::Duration;

    #[test]
    fn parses_requests() {
        let get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(
            parse(get),
            Parsed::Request {
                len: get.len(),
                close: false
            }
        );
        assert_eq!(parse(&get[..get.len() - 1]), Parsed::Incomplete);
        let close = b"GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n";
        assert!(matches!(parse(close), Parsed::Request { close: true, .. }));
        let old = b"GET / HTTP/1.0\r\n\r\n";
        assert!(matches!(parse(old), Parsed::Request { close: true, .. }));
        let old_ka = b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n";
        assert!(matches!(
            parse(old_ka),
            Parsed::Request { close: false, .. }
        ));
        let post = b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(
            parse(post),
            Parsed::Request {
                len: post.len(),
                close: false
            }
        );
        assert_eq!(parse(&post[..post.len() - 2]), Parsed::Incomplete);
        assert!(matches!(
            parse(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Parsed::Bad(s) if s.starts_with("501")
        ));
        assert!(matches!(parse(b"GET /\r\n\r\n"), Parsed::Bad(s) if s.starts_with("400")));
        assert!(matches!(
            parse(b"GET / HTTP/2.0\r\n\r\n"),
            Parsed::Bad(s) if s.starts_with("505")
        ));
        assert!(matches!(
            parse(&vec![b'a'; MAX_HEAD]),
            Parsed::Bad(s) if s.starts_with("431")
        ));
        assert!(matches!(
            parse(b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"),
            Parsed::Bad(s) if s.starts_with("413")
        ));
    }

    #[test]
    fn dates() {
        assert_eq!(&http_date(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&http_date(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&http_date(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(&http_date(1_767_225_599), b"Wed, 31 Dec 2025 23:59:59 GMT");
    }

    /// Sends two pipelined requests and a third with `Connection: close` in one write, then
    /// reads until the server closes: three responses with the body.
    fn check_pipelining(addr: SocketAddr) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n\
              GET /y HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        let text = String::from_utf8(all).unwrap();
        assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 3, "{text}");
        assert_eq!(text.matches("Hello, world!").count(), 3, "{text}");
        assert!(text.to_ascii_lowercase().contains("content-length: 13"));
        assert!(text.contains(" GMT\r\n"));
        assert!(text.to_ascii_lowercase().contains("\r\nserver: "), "{text}");
    }

    fn start(kind: &'static str) -> SocketAddr {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let tx2 = tx.clone();
            if let Err(e) = super::super::servers::run_server(kind, move |p| drop(tx2.send(Ok(p))))
            {
                let _ = tx.send(Err(e));
            }
        });
        let port = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn spindle_http_pipelines_and_closes() {
        check_pipelining(start("http-spindle-epoll"));
    }

    #[test]
    fn hyper_http_pipelines_and_closes() {
        check_pipelining(start("http-hyper-tokio-ct"));
    }

    #[test]
    fn may_minihttp_answers_pipelined_requests() {
        let mut s = TcpStream::connect(start("http-may-minihttp")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while String::from_utf8_lossy(&all)
            .matches("Hello, world!")
            .count()
            < 2
        {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&all));
            all.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8(all).unwrap().to_ascii_lowercase();
        assert!(
            text.contains("\r\nserver: ") && text.contains("\r\ndate: "),
            "{text}"
        );
    }
}
