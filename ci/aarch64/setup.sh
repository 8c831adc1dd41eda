#!/usr/bin/env bash
# Prepares this machine to run aarch64-unknown-linux-gnu executables under qemu-user, for the
# `aarch64` leg of `cargo xtask ci`: checks for the cross compiler and qemu, and registers
# qemu-aarch64 with binfmt_misc so that the tests' child processes (re-executions of the test
# binary) run too. Idempotent; as root it mounts binfmt_misc and registers the interpreter if
# needed, otherwise it only checks. Prints the qemu-aarch64 executable on success.
set -euo pipefail

say() { printf 'ci/aarch64/setup.sh: %s\n' "$*" >&2; }

for tool in aarch64-linux-gnu-gcc qemu-aarch64; do
    command -v "$tool" >/dev/null || {
        say "$tool not found: apt-get install gcc-aarch64-linux-gnu qemu-user qemu-user-binfmt"
        exit 1
    }
done

misc=/proc/sys/fs/binfmt_misc
conf=/usr/lib/binfmt.d/qemu-aarch64.conf
if [ ! -e "$misc/register" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        mount -t binfmt_misc binfmt_misc "$misc"
    else
        say "binfmt_misc is not mounted and we are not root: mount -t binfmt_misc binfmt_misc $misc"
        exit 1
    fi
fi
if [ ! -e "$misc/qemu-aarch64" ]; then
    [ -r "$conf" ] || { say "$conf missing: apt-get install qemu-user-binfmt"; exit 1; }
    if [ "$(id -u)" -eq 0 ]; then
        grep -v '^#' "$conf" | head -n 1 > "$misc/register"
    else
        say "qemu-aarch64 is not registered with binfmt_misc and we are not root: as root, write the line of $conf into $misc/register"
        exit 1
    fi
fi
grep -qx enabled "$misc/qemu-aarch64" || { say "binfmt entry qemu-aarch64 is disabled"; exit 1; }
command -v qemu-aarch64
