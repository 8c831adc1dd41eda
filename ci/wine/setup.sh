#!/usr/bin/env bash
# Prepares a Wine prefix in which Rust test executables for x86_64-pc-windows-gnu run, and
# prints the Wine executable to use as cargo's runner on stdout. Idempotent: what exists is
# kept. `cargo xtask ci --only test-windows-wine` runs it with DIR = <cargo target dir>/wine.
#
#   ci/wine/setup.sh DIR
#
# * DIR/bcryptprimitives.dll: a stub built from bcryptprimitives.c with MinGW (Wine 8 lacks
#   that DLL, which Rust 1.78+ std loads for ProcessPrng); rebuilt when the source is newer.
# * DIR/prefix: the Wine prefix (made with `wineboot --init`, ~20 s, once), with the stub in
#   its system32.
#
# Needs: wine64 (Debian: apt-get install wine64; its wine64 is /usr/lib/wine/wine64, not on
# PATH) and x86_64-w64-mingw32-gcc (apt-get install gcc-mingw-w64-x86-64). $WINE overrides the
# Wine executable. Use the prefix with WINEPREFIX=DIR/prefix WINEDEBUG=-all.
set -euo pipefail

say() { printf 'ci/wine/setup.sh: %s\n' "$*" >&2; }

dir=${1:?usage: ci/wine/setup.sh DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

wine=${WINE:-}
if [ -z "$wine" ]; then
    for candidate in wine64 /usr/lib/wine/wine64 wine; do
        if command -v "$candidate" >/dev/null 2>&1; then
            wine=$(command -v "$candidate")
            break
        fi
    done
fi
if [ -z "$wine" ]; then
    say "Wine not found: install it (apt-get install wine64) or set WINE"
    exit 1
fi

cc=x86_64-w64-mingw32-gcc
dll="$dir/bcryptprimitives.dll"
if [ ! -e "$dll" ] || [ "$here/bcryptprimitives.c" -nt "$dll" ]; then
    if ! command -v "$cc" >/dev/null 2>&1; then
        say "$cc not found: apt-get install gcc-mingw-w64-x86-64"
        exit 1
    fi
    say "building $dll"
    "$cc" -O2 -s -shared -o "$dll.tmp" "$here/bcryptprimitives.c" -ladvapi32
    mv "$dll.tmp" "$dll"
fi

export WINEPREFIX="$dir/prefix" WINEDEBUG=-all
system32="$WINEPREFIX/drive_c/windows/system32"
if [ ! -e "$WINEPREFIX/system.reg" ] || [ ! -d "$system32" ]; then
    say "making the Wine prefix $WINEPREFIX (wineboot --init)"
    # No Mono or Gecko installers: nothing here needs .NET or HTML.
    WINEDLLOVERRIDES="mscoree,mshtml=" "$wine" wineboot --init >/dev/null 2>&1 || true
    # Let the server finish writing the prefix.
    server="$(dirname "$wine")/wineserver"
    [ -x "$server" ] || server=$(command -v wineserver 2>/dev/null || true)
    if [ -n "$server" ]; then
        "$server" -w || true
    fi
    if [ ! -d "$system32" ]; then
        say "wineboot did not make $system32"
        exit 1
    fi
fi
if ! cmp -s "$dll" "$system32/bcryptprimitives.dll"; then
    say "installing the stub bcryptprimitives.dll into the prefix"
    cp "$dll" "$system32/bcryptprimitives.dll"
fi

printf '%s\n' "$wine"
