//! An unmodified blocking Redis client crate (`redis`, its synchronous API on `std::net`) in
//! coroutines under the hook, against a small server written here that speaks the Redis
//! protocol (RESP2).
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

mod common;

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{Ticker, backends, runtime, watchdog};
use redis::Commands;
use spindle_rt::IoBackend;

/// The data of the test server: strings and lists.
#[derive(Default)]
struct Data {
    strings: HashMap<Vec<u8>, Vec<u8>>,
    lists: HashMap<Vec<u8>, VecDeque<Vec<u8>>>,
}

/// A Redis-protocol server on plain threads (one per connection): `PING`, `SET`, `GET`,
/// `INCR`, `INCRBY`, `RPUSH`, `BLPOP` (waits for a push), `DEBUG SLEEP <seconds>` (answers after that
/// long), and `+OK` to `CLIENT ...` (the client's greeting); `-ERR` to anything else.
struct MiniRedis {
    addr: SocketAddr,
}

type Shared = Arc<(Mutex<Data>, Condvar)>;

impl MiniRedis {
    fn start() -> MiniRedis {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared: Shared = Arc::default();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let shared = shared.clone();
                std::thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn(move || serve(conn, &shared))
                    .unwrap();
            }
        });
        MiniRedis { addr }
    }

    fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://{}/", self.addr)).unwrap()
    }
}

/// Reads one command (an array of bulk strings); `None` at the end of the connection.
fn read_command(r: &mut impl BufRead) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0u8; len + 2];
        r.read_exact(&mut arg).ok()?;
        arg.truncate(len);
        args.push(arg);
    }
    Some(args)
}

fn bulk(v: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", v.len()).into_bytes();
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
    out
}

fn serve(conn: TcpStream, shared: &Shared) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    while let Some(args) = read_command(&mut reader) {
        let reply = execute(&args, shared);
        if conn.write_all(&reply).is_err() {
            return;
        }
    }
}

fn execute(args: &[Vec<u8>], shared: &Shared) -> Vec<u8> {
    let (lock, pushed) = &**shared;
    let name = args
        .first()
        .map(|a| String::from_utf8_lossy(a).to_uppercase())
        .unwrap_or_default();
    match (name.as_str(), &args[1.min(args.len())..]) {
        ("PING", []) => b"+PONG\r\n".to_vec(),
        ("CLIENT", _) => b"+OK\r\n".to_vec(),
        ("SET", [k, v]) => {
            lock.lock().unwrap().strings.insert(k.clone(), v.clone());
            b"+OK\r\n".to_vec()
        }
        ("GET", [k]) => match lock.lock().unwrap().strings.get(k) {
            Some(v) => bulk(v),
            None => b"$-1\r\n".to_vec(),
        },
        ("INCR", [k]) => execute(&[b"INCRBY".to_vec(), k.clone(), b"1".to_vec()], shared),
        ("INCRBY", [k, by]) => {
            let by: i64 = String::from_utf8_lossy(by).parse().unwrap_or(0);
            let mut data = lock.lock().unwrap();
            let v = data
                .strings
                .entry(k.clone())
                .or_insert_with(|| b"0".to_vec());
            let n = String::from_utf8_lossy(v).parse::<i64>().unwrap_or(0) + by;
            *v = n.to_string().into_bytes();
            format!(":{n}\r\n").into_bytes()
        }
        ("RPUSH", [k, vs @ ..]) if !vs.is_empty() => {
            let mut data = lock.lock().unwrap();
            let list = data.lists.entry(k.clone()).or_default();
            list.extend(vs.iter().cloned());
            let len = list.len();
            drop(data);
            pushed.notify_all();
            format!(":{len}\r\n").into_bytes()
        }
        ("BLPOP", [k, timeout]) => {
            let secs: f64 = String::from_utf8_lossy(timeout).parse().unwrap_or(0.0);
            let deadline = Instant::now() + Duration::from_secs_f64(secs);
            let mut data = lock.lock().unwrap();
            loop {
                if let Some(v) = data.lists.get_mut(k).and_then(VecDeque::pop_front) {
                    let mut out = b"*2\r\n".to_vec();
                    out.extend(bulk(k));
                    out.extend(bulk(&v));
                    return out;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return b"*-1\r\n".to_vec();
                }
                data = pushed.wait_timeout(data, left).unwrap().0;
            }
        }
        ("DEBUG", [sub, secs]) if sub.eq_ignore_ascii_case(b"SLEEP") => {
            let secs: f64 = String::from_utf8_lossy(secs).parse().unwrap_or(0.0);
            std::thread::sleep(Duration::from_secs_f64(secs));
            b"+OK\r\n".to_vec()
        }
        _ => format!("-ERR unknown command '{name}'\r\n").into_bytes(),
    }
}

/// 100 coroutines on 2 workers, each with its own `redis` connection: each sets and reads back
/// its own key, increments a shared counter 10 times and makes the server sleep 200 ms
/// (`DEBUG SLEEP`). Every reply is right, the counter ends at 1,000, and the sleeps overlap:
/// the run takes a small fraction of the 10 s it takes when each one holds its worker.
#[test]
fn redis_connections_in_many_coroutines() {
    const CONNS: usize = 100;
    const WORKERS: usize = 2;
    const SLEEP: f64 = 0.2;
    for io in backends() {
        if matches!(io, IoBackend::None) {
            continue;
        }
        let name = format!("{io:?}");
        let server = MiniRedis::start();
        let client = server.client();
        let rt = runtime(WORKERS, io);
        let (took, counter) = watchdog(Duration::from_secs(60), move || {
            let start = Instant::now();
            let handles: Vec<_> = (0..CONNS)
                .map(|i| {
                    let client = client.clone();
                    rt.spawn(move || -> redis::RedisResult<()> {
                        let mut con = client.get_connection()?;
                        let pong: String = redis::cmd("PING").query(&mut con)?;
                        assert_eq!(pong, "PONG");
                        let key = format!("user:{i}");
                        let () = con.set(&key, format!("value of {i}"))?;
                        let back: String = con.get(&key)?;
                        assert_eq!(back, format!("value of {i}"));
                        let missing: Option<String> = con.get(format!("absent:{i}"))?;
                        assert_eq!(missing, None);
                        for _ in 0..10 {
                            let _: i64 = con.incr("counter", 1)?;
                        }
                        let () = redis::cmd("DEBUG")
                            .arg("SLEEP")
                            .arg(SLEEP)
                            .query(&mut con)?;
                        Ok(())
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap().unwrap();
            }
            let took = start.elapsed();
            let counter: i64 = rt.block_on(move || client.get_connection()?.get("counter"))?;
            Ok::<_, redis::RedisError>((took, counter))
        })
        .unwrap();
        let serial = Duration::from_secs_f64(SLEEP * (CONNS / WORKERS) as f64);
        eprintln!("{name}: {CONNS} connections in {took:?}");
        assert_eq!(counter, (CONNS * 10) as i64, "{name}");
        assert!(took < serial / 4, "{name}: {took:?} (serial: {serial:?})");
    }
}

/// On a runtime with one worker, a coroutine waits in `BLPOP` for a job that another
/// coroutine pushes 100 ms later (after a blocking `std::thread::sleep`), over its own
/// connection: the pop returns that job at once. Were the worker blocked in the first
/// coroutine's read, the pusher could never run and the pop would time out after 10 s.
#[test]
fn a_blocking_pop_waits_for_a_push_from_the_same_worker() {
    for io in backends() {
        if matches!(io, IoBackend::None) {
            continue;
        }
        let name = format!("{io:?}");
        let server = MiniRedis::start();
        let client = server.client();
        let rt = runtime(1, io);
        let (job, took, ticked) = watchdog(Duration::from_secs(60), move || {
            rt.block_on(move || {
                let ticker = Ticker::start();
                let before = ticker.count();
                let pusher_client = client.clone();
                let start = Instant::now();
                let pusher = spindle_rt::spawn(move || -> redis::RedisResult<usize> {
                    let mut con = pusher_client.get_connection()?;
                    std::thread::sleep(Duration::from_millis(100));
                    con.rpush("jobs", "resize image 7")
                });
                let mut con = client.get_connection().unwrap();
                let job: Option<(String, String)> = con.blpop("jobs", 10.0).unwrap();
                let took = start.elapsed();
                assert_eq!(pusher.join().unwrap().unwrap(), 1);
                let ticked = ticker.count() - before;
                (job, took, ticked)
            })
        });
        eprintln!("{name}: popped after {took:?}, the ticker ticked {ticked} times");
        assert_eq!(
            job,
            Some(("jobs".to_string(), "resize image 7".to_string())),
            "{name}"
        );
        assert!(took >= Duration::from_millis(100), "{name}: {took:?}");
        assert!(took < Duration::from_secs(5), "{name}: {took:?}");
        assert!(ticked >= 10, "{name}: the ticker ticked {ticked} times");
    }
}
