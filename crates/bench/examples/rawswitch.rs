use spindle_context::{Context, Link, Transfer, suspend};
use std::hint::black_box;
use std::time::Instant;

fn time(n: u64, mut f: impl FnMut()) -> f64 {
    let t0 = Instant::now();
    for _ in 0..n {
        f();
    }
    t0.elapsed().as_nanos() as f64 / n as f64 / 2.0
}

fn main() {
    let mut stack = vec![0u128; 8192];
    let top = std::ptr::NonNull::new(unsafe { stack.as_mut_ptr().add(stack.len()) })
        .unwrap()
        .cast::<u8>();
    extern "C" fn body(t: Transfer, link: Link) -> ! {
        let _ = t;
        loop {
            unsafe {
                suspend(link, black_box(1));
            }
        }
    }
    let ctx = unsafe { Context::new(top, 8192 * 16, body) };
    let link = unsafe { Link::for_stack(top) };
    let mut ctx = Some(unsafe { ctx.resume(0, link) }.context);
    let mut co = corosensei::Coroutine::new(|y: &corosensei::Yielder<(), usize>, ()| {
        loop {
            y.suspend(black_box(1));
        }
    });
    let mut sp = spindle_coro::Coroutine::new(|y: &spindle_coro::Yielder<(), usize>, ()| {
        loop {
            y.suspend(black_box(1));
        }
    })
    .unwrap();
    let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let rounds: usize = if n < 1_000_000 { 1 } else { 15 };
    if std::env::var_os("ONLY_RAW").is_some() {
        for _ in 0..rounds {
            let v = time(n, || {
                let t = unsafe { ctx.take().unwrap().resume(0, link) };
                ctx = Some(t.context);
            });
            println!("raw {v:.2}");
        }
        return;
    }
    for _ in 0..rounds {
        a.push(time(n, || {
            let t = unsafe { ctx.take().unwrap().resume(0, link) };
            ctx = Some(t.context);
        }));
        b.push(time(n, || {
            black_box(co.resume(()));
        }));
        c.push(time(n, || {
            black_box(sp.resume(()));
        }));
    }
    for v in [&mut a, &mut b, &mut c] {
        v.sort_by(|x, y| x.partial_cmp(y).unwrap());
    }
    println!(
        "min/median: raw {:.2}/{:.2}  corosensei {:.2}/{:.2}  spindle-coro {:.2}/{:.2}",
        a[0],
        a[a.len() / 2],
        b[0],
        b[b.len() / 2],
        c[0],
        c[c.len() / 2]
    );
}
