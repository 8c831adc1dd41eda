//! Behaviour of the context switch, run against whichever backend is compiled in
//! (`cargo xtask ci` runs this file once per backend).

use std::cell::Cell;
use std::ptr::NonNull;

use spindle_context::{Context, Link, Transfer, suspend};
use spindle_stack::Stack;

/// A stack for tests: a guarded mapping from spindle-stack (registered with valgrind, so the
/// valgrind leg of `cargo xtask ci` can follow the switches).
struct TestStack(spindle_stack::FixedStack);

impl TestStack {
    fn new(bytes: usize) -> TestStack {
        TestStack(spindle_stack::FixedStack::new(bytes).expect("map a test stack"))
    }
    fn top(&mut self) -> NonNull<u8> {
        self.0.top()
    }
    fn size(&self) -> usize {
        self.0.usable_size()
    }
    fn contains(&self, addr: usize) -> bool {
        let lo = self.0.limit().as_ptr() as usize;
        (lo..lo + self.size()).contains(&addr)
    }
    /// A context on this stack running `entry`.
    fn context(&mut self, entry: spindle_context::Entry) -> Context {
        let (top, size) = (self.top(), self.size());
        // SAFETY: the stack is unused and outlives the contexts made on it in each test.
        unsafe { Context::new(top, size, entry) }
    }
    fn link(&mut self) -> Link {
        // SAFETY: the stack was prepared by `context` at this top.
        unsafe { Link::for_stack(self.top()) }
    }
}

/// The caller's stack pointer (as seen by a call from it): equal for two calls from the same
/// frame unless that frame's stack moved.
#[inline(never)]
fn stack_pointer() -> usize {
    let marker = 0u8;
    std::hint::black_box(std::ptr::addr_of!(marker)) as usize
}

#[test]
fn jump_passes_words_both_ways() {
    extern "C" fn doubler(mut t: Transfer, _link: Link) -> ! {
        loop {
            // SAFETY: `t.context` is the test, suspended in `jump`.
            t = unsafe { t.context.jump(t.data * 2) };
        }
    }
    let mut stack = TestStack::new(64 * 1024);
    let mut ctx = stack.context(doubler);
    for i in 0..1000usize {
        // SAFETY: `ctx` is suspended in its loop.
        let t = unsafe { ctx.jump(i) };
        assert_eq!(t.data, i * 2);
        ctx = t.context;
    }
}

#[test]
fn entry_receives_the_jumping_context_and_word() {
    extern "C" fn echo_first(t: Transfer, _link: Link) -> ! {
        let word = t.data;
        // SAFETY: `t.context` is the test, suspended in `jump`.
        unsafe { t.context.jump(word ^ 0xA5A5) };
        unreachable!("never resumed again");
    }
    let mut stack = TestStack::new(16 * 1024);
    let ctx = stack.context(echo_first);
    // SAFETY: fresh context.
    let t = unsafe { ctx.jump(0x1234) };
    assert_eq!(t.data, 0x1234 ^ 0xA5A5);
    assert!(stack.contains(t.context.as_ptr().as_ptr() as usize));
}

#[test]
fn the_entry_receives_its_own_stacks_link() {
    extern "C" fn report_link(t: Transfer, link: Link) -> ! {
        // SAFETY: the test, suspended in `jump`.
        unsafe { t.context.jump(link.as_ptr() as usize) };
        unreachable!();
    }
    let mut stack = TestStack::new(16 * 1024);
    let ctx = stack.context(report_link);
    let expected = stack.link().as_ptr() as usize;
    // SAFETY: fresh context.
    let t = unsafe { ctx.jump(0) };
    assert_eq!(t.data, expected);
}

#[test]
fn resume_and_suspend_round_trip_through_the_link() {
    // The context counts the words it receives and suspends back with the running sum.
    extern "C" fn summer(t: Transfer, _link: Link) -> ! {
        // SAFETY: the data word of the first resume is the link (see the test).
        let link: Link = unsafe { *(t.data as *const Link) };
        let mut sum = 0usize;
        let mut word = 0usize;
        loop {
            sum += word;
            // SAFETY: we were entered by `resume` with this link.
            word = unsafe { suspend(link, sum) };
        }
    }
    let mut stack = TestStack::new(64 * 1024);
    let mut ctx = stack.context(summer);
    let link = stack.link();
    // First resume: hand the context its link.
    // SAFETY: fresh context; `link` belongs to its stack and outlives the first resume.
    let t = unsafe { ctx.resume(&link as *const Link as usize, link) };
    assert_eq!(t.data, 0);
    ctx = t.context;
    let mut expected = 0;
    for i in 1..=100usize {
        expected += i;
        // SAFETY: `ctx` is suspended in `suspend`.
        let t = unsafe { ctx.resume(i, link) };
        assert_eq!(t.data, expected);
        ctx = t.context;
    }
}

#[test]
fn nested_resume_chain() {
    // Context k resumes context k + 1; the innermost answers. Each level adds its depth.
    const DEPTH: usize = 16;
    struct Level {
        stacks: Vec<TestStack>,
        contexts: Vec<Option<Context>>,
        links: Vec<Link>,
    }
    thread_local! {
        static LEVELS: Cell<*mut Level> = const { Cell::new(std::ptr::null_mut()) };
    }
    extern "C" fn level(t: Transfer, _link: Link) -> ! {
        let mut depth = t.data;
        loop {
            let levels = LEVELS.with(|l| l.get());
            // SAFETY: the test keeps `Level` alive while contexts run; only one runs at a time.
            let lv = unsafe { &mut *levels };
            let answer = if depth + 1 < DEPTH {
                let next = lv.contexts[depth + 1].take().unwrap();
                let link = lv.links[depth + 1];
                // SAFETY: `next` is suspended (fresh or in `suspend`) and `link` is its stack's.
                let t = unsafe { next.resume(depth + 1, link) };
                // SAFETY: as above.
                let lv = unsafe { &mut *levels };
                lv.contexts[depth + 1] = Some(t.context);
                t.data + depth
            } else {
                depth
            };
            // SAFETY: we were entered by `resume` with our own link.
            let link = unsafe { &*levels }.links[depth];
            // SAFETY: as above.
            depth = unsafe { suspend(link, answer) };
        }
    }
    let mut lv = Level {
        stacks: Vec::new(),
        contexts: Vec::new(),
        links: Vec::new(),
    };
    for _ in 0..DEPTH {
        let mut stack = TestStack::new(64 * 1024);
        lv.contexts.push(Some(stack.context(level)));
        lv.links.push(stack.link());
        lv.stacks.push(stack);
    }
    LEVELS.with(|l| l.set(&mut lv));
    let expected: usize = (0..DEPTH).sum();
    for _ in 0..3 {
        let ctx = lv.contexts[0].take().unwrap();
        // SAFETY: `ctx` is suspended; the link is its stack's.
        let t = unsafe { ctx.resume(0, lv.links[0]) };
        assert_eq!(t.data, expected);
        lv.contexts[0] = Some(t.context);
    }
    LEVELS.with(|l| l.set(std::ptr::null_mut()));
}

#[test]
fn ontop_runs_on_the_target_stack_and_maps_the_transfer() {
    thread_local! {
        static ONTOP_SP: Cell<usize> = const { Cell::new(0) };
    }
    extern "C" fn add_ten(t: Transfer) -> Transfer {
        ONTOP_SP.with(|s| s.set(stack_pointer()));
        Transfer {
            context: t.context,
            data: t.data + 10,
        }
    }
    extern "C" fn echo(mut t: Transfer, _link: Link) -> ! {
        loop {
            // SAFETY: `t.context` is the test, suspended.
            t = unsafe { t.context.jump(t.data) };
        }
    }
    let mut stack = TestStack::new(64 * 1024);
    let ctx = stack.context(echo);
    // On a fresh context: the entry receives what `f` returned.
    // SAFETY: fresh context; `add_ten` is sound anywhere.
    let t = unsafe { ctx.jump_ontop(1, add_ten) };
    assert_eq!(t.data, 11);
    assert!(
        stack.contains(ONTOP_SP.with(|s| s.get())),
        "f ran on the target's stack"
    );
    // On a suspended one: its pending `jump` returns what `f` returned.
    // SAFETY: suspended in `echo`'s loop.
    let t = unsafe { t.context.jump_ontop(5, add_ten) };
    assert_eq!(t.data, 15);
    assert!(stack.contains(ONTOP_SP.with(|s| s.get())));
}

#[test]
fn a_long_chain_of_finished_contexts_frees_each_stack_off_itself_without_growing_any_stack() {
    // Each context, when it is done, jumps on top of a fresh successor with a function that
    // frees the finished context's stack from the successor's stack. 10_000 hops; the test's
    // stack pointer must not move and every stack must be freed exactly once.
    const HOPS: usize = 10_000;
    thread_local! {
        static FREED: Cell<usize> = const { Cell::new(0) };
        static MAIN: Cell<Option<Context>> = const { Cell::new(None) };
        // Depth of each hop's frame below its own stack's top: must be the same for every hop.
        static DEPTH_RANGE: Cell<(usize, usize)> = const { Cell::new((usize::MAX, 0)) };
    }
    /// What a hop receives: the stack to free (its predecessor's), its own stack, hops left.
    struct Handoff {
        free: Option<Box<TestStack>>,
        own: Box<TestStack>,
        remaining: usize,
    }
    /// Runs on the successor's stack: frees the finished stack, passes the handoff on.
    extern "C" fn free_finished(t: Transfer) -> Transfer {
        // SAFETY: the word is a `Box<Handoff>` made by the finished hop (or the test).
        let mut handoff = unsafe { Box::from_raw(t.data as *mut Handoff) };
        if handoff.free.take().is_some() {
            FREED.with(|f| f.set(f.get() + 1));
        }
        Transfer {
            context: t.context,
            data: Box::into_raw(handoff) as usize,
        }
    }
    /// Runs on the test's stack at the end: frees the last stack.
    extern "C" fn free_last(t: Transfer) -> Transfer {
        // SAFETY: the word is the last hop's `Box<TestStack>`; that hop never runs again.
        drop(unsafe { Box::from_raw(t.data as *mut TestStack) });
        FREED.with(|f| f.set(f.get() + 1));
        Transfer {
            context: t.context,
            data: 0,
        }
    }
    extern "C" fn hop(t: Transfer, _link: Link) -> ! {
        // SAFETY: `free_finished` passed us our `Box<Handoff>`.
        let handoff = unsafe { Box::from_raw(t.data as *mut Handoff) };
        let Handoff {
            mut own, remaining, ..
        } = *handoff;
        let depth = own.top().as_ptr() as usize - stack_pointer();
        DEPTH_RANGE.with(|d| d.set((d.get().0.min(depth), d.get().1.max(depth))));
        if remaining == 0 {
            let main = MAIN.with(|m| m.take()).unwrap();
            let own = Box::into_raw(own) as usize;
            // SAFETY: `main` is the test, suspended; our stack is freed on its stack.
            unsafe { main.jump_ontop(own, free_last) };
        } else {
            let mut next_stack = Box::new(TestStack::new(16 * 1024));
            let next = next_stack.context(hop);
            let handoff = Box::new(Handoff {
                free: Some(own),
                own: next_stack,
                remaining: remaining - 1,
            });
            // Nothing with a destructor is left on this stack: it is freed on the next one.
            // SAFETY: `next` is fresh; `free_finished` runs after we have left for good.
            unsafe { next.jump_ontop(Box::into_raw(handoff) as usize, free_finished) };
        }
        unreachable!("a finished hop is never resumed");
    }
    /// Runs on the first hop's stack: publishes the test's context for the last hop.
    extern "C" fn publish_main(t: Transfer) -> Transfer {
        let main = t.context.as_ptr();
        // SAFETY: moving the test's context; only the last hop resumes it, once.
        MAIN.with(|m| m.set(Some(unsafe { Context::from_ptr(main) })));
        free_finished(t)
    }

    let before = stack_pointer();
    let mut first_stack = Box::new(TestStack::new(16 * 1024));
    let first = first_stack.context(hop);
    let handoff = Box::new(Handoff {
        free: None,
        own: first_stack,
        remaining: HOPS - 1,
    });
    // SAFETY: fresh context; `publish_main` only records our context.
    let t = unsafe { first.jump_ontop(Box::into_raw(handoff) as usize, publish_main) };
    assert_eq!(t.data, 0);
    assert_eq!(
        FREED.with(|f| f.get()),
        HOPS,
        "every stack freed exactly once"
    );
    assert_eq!(before, stack_pointer(), "the test's stack did not move");
    let (shallowest, deepest) = DEPTH_RANGE.with(|d| d.get());
    assert_eq!(
        shallowest, deepest,
        "no hop runs deeper than the first: nothing accumulates"
    );
}

#[test]
fn floats_and_formatting_work_on_a_context_stack() {
    // `format!` and `parse::<f64>` use SSE with aligned spills: a misaligned stack or lost SSE
    // state shows up here.
    extern "C" fn floaty(t: Transfer, _link: Link) -> ! {
        let mut ctx = t.context;
        let mut x = 1.0f64 / 3.0;
        let mut word = t.data;
        loop {
            let text = format!("{:.3}", x * word as f64);
            let back: f64 = text.parse().unwrap();
            x += 0.25;
            let bits = back.to_bits() as usize;
            // SAFETY: `ctx` is the test, suspended.
            let t = unsafe { ctx.jump(bits) };
            ctx = t.context;
            word = t.data;
        }
    }
    let mut stack = TestStack::new(128 * 1024);
    let mut ctx = stack.context(floaty);
    let kept = 2.5f64;
    let mut x = 1.0f64 / 3.0;
    for word in 1..50usize {
        // SAFETY: suspended in its loop.
        let t = unsafe { ctx.jump(word) };
        let got = f64::from_bits(t.data as u64);
        let want: f64 = format!("{:.3}", x * word as f64).parse().unwrap();
        assert_eq!(got, want);
        assert_eq!(kept * 2.0, 5.0, "a float live across the switch survives");
        x += 0.25;
        ctx = t.context;
    }
}

/// The rounding mode of the floating-point unit: MXCSR's rounding-control bits (13–14: 00
/// nearest, 10 up) on x86_64, FPCR's RMode bits (22–23: 00 nearest, 01 up) on aarch64.
mod rounding {
    #[cfg(target_arch = "x86_64")]
    mod reg {
        use std::arch::asm;
        pub const MASK: usize = 0b11 << 13;
        pub const UP: usize = 0b10 << 13;
        pub fn get() -> usize {
            let mut v = 0u32;
            // SAFETY: stores MXCSR into `v`.
            unsafe { asm!("stmxcsr [{}]", in(reg) &mut v as *mut u32, options(nostack)) };
            v as usize
        }
        pub fn set(v: usize) {
            let v = v as u32;
            // SAFETY: loads a valid MXCSR value (only rounding bits changed from a read one).
            unsafe { asm!("ldmxcsr [{}]", in(reg) &v as *const u32, options(nostack)) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    mod reg {
        use std::arch::asm;
        pub const MASK: usize = 0b11 << 22;
        pub const UP: usize = 0b01 << 22;
        pub fn get() -> usize {
            let v: usize;
            // SAFETY: reads FPCR, which EL0 may read.
            unsafe { asm!("mrs {}, fpcr", out(reg) v, options(nomem, nostack)) };
            v
        }
        pub fn set(v: usize) {
            // SAFETY: writes a value read from FPCR with only the rounding bits changed.
            unsafe { asm!("msr fpcr, {}", in(reg) v, options(nomem, nostack)) };
        }
    }
    pub use reg::{MASK, UP, get, set};
}

#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn floating_point_environment_follows_the_documented_semantics() {
    use rounding as fp;
    // The context switches the rounding mode to "up" and suspends without restoring it.
    extern "C" fn round_up(t: Transfer, _link: Link) -> ! {
        fp::set((fp::get() & !fp::MASK) | fp::UP);
        let mut t = t;
        loop {
            let seen = fp::get() & fp::MASK;
            // SAFETY: the test, suspended.
            t = unsafe { t.context.jump(seen) };
        }
    }
    let original = fp::get();
    assert_eq!(original & fp::MASK, 0, "tests run in round-to-nearest");
    let mut stack = TestStack::new(64 * 1024);
    let ctx = stack.context(round_up);
    // SAFETY: fresh context.
    let t = unsafe { ctx.jump(0) };
    let in_test = fp::get() & fp::MASK;
    fp::set(original); // the test thread is back in round-to-nearest
    // SAFETY: suspended in its loop.
    let t2 = unsafe { t.context.jump(0) };
    let after_second = fp::get() & fp::MASK;
    fp::set(original); // whatever happened, leave the test thread clean
    assert_eq!(t.data, fp::UP);
    if spindle_context::SAVES_FP_ENV {
        // Per context: the change stayed inside the context, and the context kept it.
        assert_eq!(in_test, 0, "the resumer keeps its own rounding mode");
        assert_eq!(t2.data, fp::UP, "the context keeps its own rounding mode");
        assert_eq!(after_second, 0);
    } else {
        // Shared by the thread: the change is visible to the resumer.
        assert_eq!(in_test, fp::UP, "the thread's rounding mode is shared");
        // And the context sees whatever the thread has when it is resumed.
        assert_eq!(t2.data, 0, "the context sees the thread's current mode");
        assert_eq!(after_second, 0);
    }
}

#[test]
fn a_backtrace_from_inside_shows_the_context_then_the_resumer() {
    thread_local! {
        static TRACE: Cell<Option<&'static str>> = const { Cell::new(None) };
    }
    #[inline(never)]
    fn deep_inside_the_context() -> String {
        std::hint::black_box(format!("{}", std::backtrace::Backtrace::force_capture()))
    }
    extern "C" fn tracer(t: Transfer, _link: Link) -> ! {
        let text = deep_inside_the_context();
        let leaked: &'static str = Box::leak(text.into_boxed_str());
        TRACE.with(|c| c.set(Some(leaked)));
        // SAFETY: `t.data` is our link (see below); we were entered by `resume`.
        let link: Link = unsafe { *(t.data as *const Link) };
        // SAFETY: entered by `resume` with this link.
        unsafe { suspend(link, 0) };
        unreachable!();
    }
    #[inline(never)]
    fn the_resumer_function(stack: &mut TestStack) {
        let ctx = stack.context(tracer);
        let link = stack.link();
        // SAFETY: fresh context; the link is its stack's.
        let _ = unsafe { ctx.resume(&link as *const Link as usize, link) };
        std::hint::black_box(());
    }
    let mut stack = TestStack::new(256 * 1024);
    the_resumer_function(&mut stack);
    let trace = TRACE.with(|c| c.get()).expect("the context ran");
    // Frame lines look like "  12: path::to::function"; find each frame by its last segment.
    let frames: Vec<&str> = trace
        .lines()
        .filter_map(|line| line.trim_start().split_once(": ").map(|(_, f)| f.trim()))
        .collect();
    // Debug builds print paths, release builds bare names.
    let position = |name: &str| {
        frames
            .iter()
            .position(|f| *f == name || f.ends_with(&format!("::{name}")))
    };
    let inside = position("deep_inside_the_context").unwrap_or_else(|| panic!("{trace}"));
    let entry = position("tracer").unwrap_or_else(|| panic!("{trace}"));
    assert!(inside < entry, "{trace}");
    if spindle_context::BACKEND == "boost" {
        // Documented: Boost's trampoline has no CFI into the resumer; the trace must still end
        // cleanly (we got here without crashing).
        return;
    }
    if cfg!(spindle_check_aarch64_windows) {
        // The Windows backend built on Linux to check its switch: its unwind codes are
        // Windows's, left out there, so the trace ends at the trampoline (cleanly, as above).
        return;
    }
    let resumer = position("the_resumer_function").unwrap_or_else(|| panic!("{trace}"));
    assert!(entry < resumer, "context frames come first:\n{trace}");
    let test_fn = position("a_backtrace_from_inside_shows_the_context_then_the_resumer")
        .unwrap_or_else(|| panic!("{trace}"));
    assert!(resumer < test_fn, "then the resumer's callers:\n{trace}");
}

#[test]
fn a_context_without_a_resumer_ends_its_backtrace_cleanly() {
    // Entered by `jump` (no link ever written): the unwinder must stop at the bottom of the
    // context's stack instead of wandering off into garbage.
    extern "C" fn tracer(t: Transfer, _link: Link) -> ! {
        let text = format!("{}", std::backtrace::Backtrace::force_capture());
        let ok = text.contains("tracer") as usize;
        // SAFETY: the test, suspended in `jump`.
        unsafe { t.context.jump(ok) };
        unreachable!();
    }
    let mut stack = TestStack::new(256 * 1024);
    let ctx = stack.context(tracer);
    // SAFETY: fresh context.
    let t = unsafe { ctx.jump(0) };
    assert_eq!(t.data, 1);
}

#[test]
fn the_backend_is_the_documented_one() {
    let native = if cfg!(all(target_arch = "x86_64", not(windows))) {
        Some("x86_64-sysv")
    } else if cfg!(all(target_arch = "x86_64", windows)) {
        Some("x86_64-windows")
    } else if cfg!(all(
        target_arch = "aarch64",
        any(windows, spindle_check_aarch64_windows)
    )) {
        Some("aarch64-windows")
    } else if cfg!(all(target_arch = "aarch64", target_vendor = "apple")) {
        Some("aarch64-apple")
    } else if cfg!(all(target_arch = "aarch64", not(windows))) {
        Some("aarch64-aapcs")
    } else {
        None
    };
    let expected = match native {
        Some(name) if !cfg!(feature = "boost") => name,
        _ => "boost",
    };
    assert_eq!(spindle_context::BACKEND, expected);
    assert_eq!(
        spindle_context::SAVES_FP_ENV,
        expected == "boost" || cfg!(feature = "fp-env")
    );
}

/// The TEB's `NtTib.StackBase`, `NtTib.StackLimit` and `DeallocationStack` (`None` where there
/// is no TEB).
fn teb_stack_words() -> Option<[usize; 3]> {
    #[cfg(all(windows, target_arch = "x86_64"))]
    {
        let words: [usize; 3];
        // SAFETY: reads three words of the current thread's TEB, which gs addresses.
        unsafe {
            let (base, limit, deallocation): (usize, usize, usize);
            std::arch::asm!(
                "mov {base}, gs:[0x08]",
                "mov {limit}, gs:[0x10]",
                "mov {deallocation}, gs:[0x1478]",
                base = out(reg) base,
                limit = out(reg) limit,
                deallocation = out(reg) deallocation,
                options(nostack, readonly, preserves_flags),
            );
            words = [base, limit, deallocation];
        }
        Some(words)
    }
    #[cfg(all(windows, target_arch = "aarch64"))]
    {
        let words: [usize; 3];
        // SAFETY: reads three words of the current thread's TEB, which x18 addresses.
        unsafe {
            let (base, limit, deallocation): (usize, usize, usize);
            std::arch::asm!(
                "ldr {base}, [x18, #0x08]",
                "ldr {limit}, [x18, #0x10]",
                "ldr {deallocation}, [x18, #0x1478]",
                base = out(reg) base,
                limit = out(reg) limit,
                deallocation = out(reg) deallocation,
                options(nostack, readonly, preserves_flags),
            );
            words = [base, limit, deallocation];
        }
        Some(words)
    }
    #[cfg(spindle_check_aarch64_windows)]
    {
        let teb = spindle_context::stand_in_teb();
        // SAFETY: the stand-in TEB is this thread's, 0x1480 bytes long, and only switches on
        // this thread write it.
        Some(unsafe { [*teb.add(1), *teb.add(2), *teb.add(0x1478 / 8)] })
    }
    #[cfg(not(any(windows, spindle_check_aarch64_windows)))]
    None
}

#[test]
fn the_tebs_stack_words_follow_the_running_stack() {
    /// Where the context (`[0]`) and the on-top function (`[1]`) report the words they see.
    type Reports = [[usize; 3]; 2];
    extern "C" fn report_words(mut t: Transfer, _link: Link) -> ! {
        loop {
            let words = teb_stack_words().unwrap_or_default();
            // SAFETY: the test, suspended in `jump`; `data` points to its `Reports`.
            unsafe { (*(t.data as *mut Reports))[0] = words };
            // SAFETY: as above.
            t = unsafe { t.context.jump(0) };
        }
    }
    extern "C" fn report_words_ontop(t: Transfer) -> Transfer {
        let words = teb_stack_words().unwrap_or_default();
        // SAFETY: `data` points to the test's `Reports` (see below).
        unsafe { (*(t.data as *mut Reports))[1] = words };
        t
    }
    let Some(outside) = teb_stack_words() else {
        return; // no TEB on this target
    };
    if !matches!(
        spindle_context::BACKEND,
        "x86_64-windows" | "aarch64-windows"
    ) {
        return; // `boost` sets them from its own view of the stack (below the reserved words)
    }
    let mut stack = TestStack::new(64 * 1024);
    let top = stack.top().as_ptr() as usize & !15;
    let size = stack.size();
    let inside = [top, top - size, top - size];
    let mut ctx = stack.context(report_words);
    for round in 0..3 {
        let mut reports: Reports = [[0; 3]; 2];
        let at = &mut reports as *mut Reports as usize;
        // SAFETY: `ctx` is fresh or suspended in its loop; `reports` outlives the switch.
        let t = unsafe { ctx.jump(at) };
        assert_eq!(reports[0], inside, "inside the context, round {round}");
        assert_eq!(teb_stack_words(), Some(outside), "back on the test's stack");
        ctx = t.context;
        // On top of the context, before it resumes: the function runs on the context's stack.
        let mut reports: Reports = [[0; 3]; 2];
        let at = &mut reports as *mut Reports as usize;
        // SAFETY: `ctx` is suspended in its loop; the on-top function and then the context
        // write `reports`, which outlives the switch.
        let t = unsafe { ctx.jump_ontop(at, report_words_ontop) };
        assert_eq!(
            reports,
            [inside, inside],
            "on top of the context, round {round}"
        );
        assert_eq!(teb_stack_words(), Some(outside), "back again");
        ctx = t.context;
    }
}
