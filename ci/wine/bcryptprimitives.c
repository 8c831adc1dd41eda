/*
 * A stand-in for Windows' bcryptprimitives.dll, for running Rust test binaries under Wine.
 *
 * Rust's std (1.78 and later) takes its randomness (HashMap keys) from ProcessPrng, which
 * Windows 10+ exports from bcryptprimitives.dll. Wine 8 (Debian 12) has no such DLL, so every
 * Rust executable fails to load there. This DLL exports ProcessPrng and forwards it to
 * advapi32's SystemFunction036 (RtlGenRandom), which Wine implements.
 *
 * Built and installed into the Wine prefix by `cargo xtask ci --only test-windows-wine`
 * (see ci/wine/setup.sh). Not part of any shipped crate.
 */
#include <windows.h>

/* advapi32's RtlGenRandom; exported under this name. */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

/* BOOL ProcessPrng(PBYTE pbData, SIZE_T cbData): fills the buffer; documented to always succeed. */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x40000000 ? 0x40000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
