//! Valgrind client requests, so that Valgrind knows our mappings are stacks.
//!
//! Without `VALGRIND_STACK_REGISTER`, Valgrind takes a switch of the stack pointer into an
//! unknown region for a huge stack frame, and Memcheck reports spurious errors. The client
//! request is a magic instruction sequence that is a no-op on real hardware (four rotations
//! of `rdi` by a total of 128 bits, then `xchg rbx, rbx`) and that Valgrind's JIT recognizes.
//! Written here as inline assembly instead of compiling `valgrind.h`, so the crate needs no
//! C toolchain.

/// `RUNNING_ON_VALGRIND`: → number of Valgrind layers (0 natively).
const RUNNING_ON_VALGRIND: usize = 0x1001;
/// `VALGRIND_STACK_REGISTER`: args (start, end) → stack id.
const STACK_REGISTER: usize = 0x1501;
/// `VALGRIND_STACK_DEREGISTER`: args (id).
const STACK_DEREGISTER: usize = 0x1502;

/// Memcheck's `VALGRIND_MAKE_MEM_UNDEFINED`: args (start, len). (`VG_USERREQ_TOOL_BASE('M','C')`
/// + 1.)
const MAKE_MEM_UNDEFINED: usize = 0x4D43_0001;

/// Valgrind's id for a registered stack (0 when not running under Valgrind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StackId(usize);

/// Whether this process runs under Valgrind (asked once, then cached).
pub(crate) fn running_on_valgrind() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    const UNKNOWN: u8 = 0;
    const NATIVE: u8 = 1;
    const VALGRIND: u8 = 2;
    static ANSWER: AtomicU8 = AtomicU8::new(UNKNOWN);
    match ANSWER.load(Ordering::Relaxed) {
        NATIVE => false,
        VALGRIND => true,
        _ => {
            let under_valgrind = client_request(0, [RUNNING_ON_VALGRIND, 0, 0, 0, 0, 0]) != 0;
            ANSWER.store(
                if under_valgrind { VALGRIND } else { NATIVE },
                Ordering::Relaxed,
            );
            under_valgrind
        }
    }
}

/// Tells Valgrind that `[low, high)` is a stack.
pub(crate) fn register_stack(low: usize, high: usize) -> StackId {
    StackId(client_request(0, [STACK_REGISTER, low, high, 0, 0, 0]))
}

/// Tells Valgrind that a stack registered with [`register_stack`] is gone.
pub(crate) fn deregister_stack(id: StackId) {
    client_request(0, [STACK_DEREGISTER, id.0, 0, 0, 0, 0]);
}

/// Tells Memcheck that `[start, start + len)` may be written (its contents are undefined).
///
/// A shared region's memory below the last stack pointer of whoever ran there is "no access"
/// to Memcheck (it tracks stack pointer moves); restoring another coroutine's bytes there is a
/// legitimate write that it would otherwise report.
pub(crate) fn make_mem_undefined(start: usize, len: usize) {
    client_request(0, [MAKE_MEM_UNDEFINED, start, len, 0, 0, 0]);
}

/// Issues a client request; returns `default` when not running under Valgrind.
#[cfg(all(target_arch = "x86_64", not(windows), not(miri)))]
fn client_request(default: usize, args: [usize; 6]) -> usize {
    let result;
    // SAFETY: natively the sequence rotates rdi by 3+13+61+51 = 128 bits (a no-op on its
    // value; declared clobbered anyway), exchanges rbx with itself, and touches flags (not
    // declared `preserves_flags`). It only reads `args`, which lives across the asm block.
    // Under Valgrind it performs the request, which reads `args` and writes rdx only; the
    // requests we issue only update Valgrind's own bookkeeping.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") args.as_ptr(),
            inout("rdx") default => result,
            inout("rdi") 0usize => _,
            options(nostack, readonly),
        );
    }
    result
}

/// Valgrind client requests are only implemented for x86_64 here: elsewhere a no-op. Also
/// under Miri, which cannot run inline assembly (and is not Valgrind).
#[cfg(not(all(target_arch = "x86_64", not(windows), not(miri))))]
fn client_request(default: usize, _args: [usize; 6]) -> usize {
    default
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_harmless_outside_valgrind() {
        let running_under_valgrind = std::env::var_os("LD_PRELOAD")
            .is_some_and(|p| p.to_string_lossy().contains("vgpreload"));
        let buffer = vec![0u8; 4096];
        let low = buffer.as_ptr() as usize;
        let id = register_stack(low, low + buffer.len());
        assert_eq!(running_on_valgrind(), running_under_valgrind);
        if !running_under_valgrind {
            assert_eq!(id, StackId(0));
        }
        deregister_stack(id);
    }
}
