//! The facade's features really select: what a feature adds works, and what a build leaves out
//! is refused with an error naming the feature. Run over the feature matrix by
//! `cargo xtask matrix`; each test is compiled only where its features say it can be.
// The point of several assertions is which features this build has: constant per build.
#![allow(clippy::assertions_on_constants)]

use spindles::{Coroutine, CoroutineResult, Generator};

/// Whether this build has exactly the facade's features. Cargo unifies features over the
/// packages of one build: `cargo test --workspace` compiles spindle-rt etc. with their own
/// defaults (everything), whatever the facade asked for. So a feature the facade leaves out may
/// still be there, unless the build is of the facade alone — `cargo xtask matrix` says so with
/// `SPINDLE_FEATURES_EXACT=1`, and then the tests also check that what is left out is refused.
fn exact() -> bool {
    std::env::var_os("SPINDLE_FEATURES_EXACT").is_some()
}

#[test]
fn coroutines_and_generators_need_no_feature() {
    let mut co = Coroutine::new(|y, a: u32| a + y.suspend(a * 2)).unwrap();
    assert_eq!(co.resume(3), CoroutineResult::Yield(6));
    assert_eq!(co.resume(4), CoroutineResult::Return(7));
    let v: Vec<u32> = Generator::new(|y| (0..3).for_each(|i| y.suspend(i)))
        .unwrap()
        .collect();
    assert_eq!(v, [0, 1, 2]);
}

#[test]
fn the_context_backend_is_the_one_selected() {
    if cfg!(feature = "context-boost") {
        assert_eq!(spindles::context::BACKEND, "boost");
    } else if cfg!(any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", not(windows))
    )) {
        assert_ne!(spindles::context::BACKEND, "boost");
    }
}

#[cfg(feature = "stack-growable")]
#[test]
fn growable_stacks_with_stack_growable() {
    let stack = spindles::stack::GrowableStack::new(16 * 1024, 1024 * 1024);
    if cfg!(unix) {
        stack.unwrap();
    }
}

#[cfg(not(feature = "stack-growable"))]
#[test]
fn a_growable_pool_without_stack_growable_names_the_feature() {
    let err = spindles::stack::StackPool::new(spindles::stack::PoolConfig {
        kind: spindles::stack::PoolKind::Growable { initial: 16 * 1024 },
        ..Default::default()
    })
    .err();
    match err {
        Some(err) => assert!(err.to_string().contains("`growable` feature"), "{err}"),
        None => assert!(!exact(), "a growable pool without stack-growable"),
    }
}

#[cfg(feature = "stack-shared")]
#[test]
fn shared_stacks_with_stack_shared() {
    let region = spindles::stack::SharedStack::new(64 * 1024).unwrap();
    // SAFETY: the coroutine lends nothing on its stack to anyone.
    let mut co = unsafe {
        Coroutine::<(), u8, u8, _>::with_shared_stack(&region, |y, ()| {
            y.suspend(1);
            2
        })
    };
    assert_eq!(co.resume(()), CoroutineResult::Yield(1));
    assert_eq!(co.resume(()), CoroutineResult::Return(2));
}

#[cfg(feature = "sync")]
#[test]
fn sync_works_on_plain_threads() {
    let m = std::sync::Arc::new(spindles::sync::Mutex::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || *m.lock() += 1)
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*m.lock(), 4);
}

#[cfg(feature = "rt")]
mod rt {
    use std::time::Duration;

    use super::exact;
    use spindles::{BuildError, IoBackend, Policy, Runtime, StackKind};

    fn one_worker() -> spindles::RuntimeBuilder {
        Runtime::builder().workers(1).io(IoBackend::None)
    }

    #[test]
    fn the_default_runtime_runs_coroutines_and_says_what_it_picked() {
        let rt = Runtime::builder().workers(2).build().unwrap();
        let sum = rt.block_on(|| {
            let hs: Vec<_> = (0..8)
                .map(|i| {
                    spindles::spawn(move || {
                        spindles::sleep(Duration::from_millis(1));
                        i
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum::<u32>()
        });
        assert_eq!(sum, 28);
        let m = rt.metrics();
        assert_eq!(m.io_backend, rt.io_backend());
        let native = cfg!(any(
            all(
                target_os = "linux",
                any(feature = "io-uring", feature = "io-epoll")
            ),
            all(
                any(target_os = "macos", target_os = "freebsd"),
                feature = "io-kqueue"
            ),
            all(windows, feature = "io-iocp"),
            feature = "io-polling"
        ));
        if native && std::env::var_os("SPINDLE_IO").is_none() {
            assert_ne!(m.io_backend, "none", "a backend is compiled in");
        }
        if Policy::WorkStealing.is_compiled_in() {
            assert_eq!(m.policy, "work-stealing");
        }
    }

    #[test]
    fn every_policy_is_built_or_refused_by_name() {
        for (policy, name) in [
            (Policy::Fifo, "fifo"),
            (Policy::RoundRobin, "round-robin"),
            (Policy::WorkStealing, "work-stealing"),
        ] {
            match one_worker().policy(policy).build() {
                Ok(rt) => {
                    assert!(policy.is_compiled_in());
                    assert!(!exact() || cfg!(feature = "sched-fifo") || policy != Policy::Fifo);
                    assert!(!exact() || cfg!(feature = "sched-rr") || policy != Policy::RoundRobin);
                    assert!(
                        !exact() || cfg!(feature = "sched-ws") || policy != Policy::WorkStealing
                    );
                    assert_eq!(rt.metrics().policy, name);
                    assert_eq!(rt.block_on(|| spindles::spawn(|| 7).join().unwrap()), 7);
                }
                Err(BuildError::NotCompiled { feature, .. }) => {
                    assert!(!policy.is_compiled_in());
                    assert_eq!(feature, policy.feature());
                }
                Err(e) => panic!("{policy:?}: {e}"),
            }
        }
        // A facade feature always compiles its policy in; exactly so when built alone.
        for (on, policy) in [
            (cfg!(feature = "sched-fifo"), Policy::Fifo),
            (cfg!(feature = "sched-rr"), Policy::RoundRobin),
            (cfg!(feature = "sched-ws"), Policy::WorkStealing),
        ] {
            assert!(!on || policy.is_compiled_in(), "{policy:?}");
            assert!(!exact() || on == policy.is_compiled_in(), "{policy:?}");
        }
    }

    #[test]
    fn growable_stacks_are_built_or_refused_by_name() {
        let built = one_worker()
            .stack(StackKind::Growable {
                initial: 16 * 1024,
                max: 1024 * 1024,
            })
            .build();
        match built {
            Ok(rt) => {
                assert!(cfg!(feature = "stack-growable") || !exact());
                assert_eq!(rt.block_on(|| spindles::spawn(|| 1).join().unwrap()), 1);
            }
            Err(BuildError::NotCompiled { feature, .. }) => {
                assert!(!cfg!(feature = "stack-growable"));
                assert_eq!(feature, "stack-growable");
            }
            Err(e) => assert!(cfg!(not(unix)), "{e}"),
        }
    }

    #[test]
    fn shared_stack_spawns_run_or_fail_by_name() {
        let rt = one_worker().build().unwrap();
        let result = rt.block_on(|| {
            // SAFETY: the coroutine lends nothing on its stack to anyone.
            let b = unsafe { spindles::rt::Builder::new().shared_stack() };
            b.spawn(|| 5).map(|h| h.join().unwrap())
        });
        match result {
            Ok(v) => {
                assert!(cfg!(feature = "stack-shared") || !exact());
                assert_eq!(v, 5);
            }
            Err(e) => {
                assert!(!cfg!(feature = "stack-shared"));
                assert!(e.to_string().contains("shared"), "{e}");
            }
        }
    }

    #[test]
    fn each_io_backend_is_available_exactly_when_compiled_in_for_this_os() {
        let linux = cfg!(target_os = "linux");
        let cases = [
            (IoBackend::Epoll, linux && cfg!(feature = "io-epoll")),
            (IoBackend::Kqueue, false),
            (IoBackend::Iocp, false),
            (IoBackend::Polling, cfg!(feature = "io-polling")),
        ];
        for (backend, expected) in cases {
            if !linux {
                continue;
            }
            let what = format!("{backend:?}");
            match Runtime::builder().workers(1).io(backend).build() {
                Ok(rt) => {
                    assert!(expected || !exact(), "{what} built without its feature");
                    assert_ne!(rt.metrics().io_backend, "none");
                }
                Err(BuildError::Io(e)) => assert!(!expected, "{what}: {e}"),
                Err(e) => panic!("{what}: {e}"),
            }
        }
        // io_uring may be refused by the kernel or a container: only its absence is certain.
        if !cfg!(feature = "io-uring") && exact() {
            assert!(
                Runtime::builder()
                    .workers(1)
                    .io(IoBackend::IoUring)
                    .build()
                    .is_err()
            );
        }
    }

    #[test]
    fn tcp_in_coroutines() {
        use std::io::{Read, Write};
        let rt = Runtime::builder().workers(1).build().unwrap();
        let got = rt.block_on(|| -> std::io::Result<String> {
            let listener = spindles::net::TcpListener::bind("127.0.0.1:0")?;
            let addr = listener.local_addr()?;
            let server = spindles::spawn(move || -> std::io::Result<()> {
                let (mut conn, _) = listener.accept()?;
                let mut buf = [0; 6];
                conn.read_exact(&mut buf)?;
                conn.write_all(&buf)
            });
            let mut client = spindles::net::TcpStream::connect(&addr)?;
            client.write_all(b"facade")?;
            let mut back = String::new();
            client.read_to_string(&mut back)?;
            server.join().unwrap()?;
            Ok(back)
        });
        assert_eq!(got.unwrap(), "facade");
    }

    #[cfg(feature = "sync")]
    #[test]
    fn channels_between_coroutines() {
        let rt = Runtime::builder().workers(2).build().unwrap();
        let total = rt.block_on(|| {
            let (tx, rx) = spindles::sync::mpsc::channel::<u32>();
            let producer = spindles::spawn(move || {
                for i in 0..100 {
                    tx.send(i).unwrap();
                }
            });
            let mut total = 0;
            while let Ok(v) = rx.recv() {
                total += v;
            }
            producer.join().unwrap();
            total
        });
        assert_eq!(total, 4950);
    }

    #[cfg(unix)]
    #[test]
    fn io_types_work_in_coroutines() {
        use std::io::{Read, Write};
        let rt = Runtime::builder().workers(1).build().unwrap();
        let got = rt.block_on(|| -> std::io::Result<Vec<u8>> {
            let (mut r, mut w) = spindles::io::pipe()?;
            let writer = spindles::spawn(move || w.write_all(b"facade"));
            let mut buf = Vec::new();
            r.read_to_end(&mut buf)?;
            writer.join().unwrap()?;
            Ok(buf)
        });
        assert_eq!(got.unwrap(), b"facade");
    }
}
