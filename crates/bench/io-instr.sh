#!/usr/bin/env bash
# User-space instructions per request of an `io` suite echo server, counted by callgrind.
#
#   crates/bench/io-instr.sh <impl> [rate] [size] [short_secs] [long_secs]
#
# Starts `spindle-bench serve <impl> --cpu 0` under `valgrind --tool=callgrind` twice, drives
# each with `spindle-bench load` (50 connections, `rate` req/s, `size`-byte echo) for
# `short_secs` and `long_secs` seconds, and prints (Ir_long - Ir_short) / (req_long - req_short):
# one steady-state request, without start-up, accepts and warm-up. The profile of the long run
# is kept in target/io-instr/<impl>.long.out (`callgrind_annotate --inclusive=yes` splits it by
# function). Defaults: 8000 req/s, 1024 B, 2 s and 6 s (see docs/benchmarks.md, io section).
# Needs a release build: `cargo build --release -p spindle-bench`.
set -euo pipefail

imp=${1:?usage: io-instr.sh <impl> [rate] [size] [short_secs] [long_secs]}
rate=${2:-8000}
size=${3:-1024}
short=${4:-2}
long=${5:-6}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SPINDLE_BENCH:-$root/target/release/spindle-bench}
out=$root/target/io-instr
mkdir -p "$out"

# How many times the server went to sleep in its driver (or in mio's `epoll_wait`): the calls
# of the driver's `park` as callgrind counted them in profile $1.
sleeps() {
    python3 - "$1" <<'PY'
import re, sys
names, calls, cur = {}, {}, None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
    if m:
        kind, ident, name = m.groups()
        if name:
            names[ident] = name
        if kind == "cfn":
            cur = ident
        continue
    m = re.match(r"calls=(\d+)", line)
    if m and cur:
        calls[cur] = calls.get(cur, 0) + int(m.group(1))
pat = re.compile(r"(as spindle_io::driver::Driver>::park$)|(^epoll_wait$)")
print(sum(c for i, c in calls.items() if pat.search(names.get(i, ""))))
PY
}

# One run: prints "<instructions> <requests> <sleeps>".
run() {
    local secs=$1 tag=$2
    local log=$out/$imp.$tag.log
    valgrind --tool=callgrind --callgrind-out-file="$out/$imp.$tag.out" \
        "$bin" serve "$imp" --cpu 0 >"$out/$imp.$tag.stdout" 2>"$log" &
    local pid=$!
    local port=""
    for _ in $(seq 1 600); do
        port=$(sed -n 's/^port=//p' "$out/$imp.$tag.stdout" 2>/dev/null || true)
        [ -n "$port" ] && break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        kill "$pid" 2>/dev/null || true
        echo "io-instr: $imp did not print its port" >&2
        exit 1
    fi
    local line
    line=$("$bin" load "127.0.0.1:$port" --rate "$rate" --size "$size" --secs "$secs")
    # callgrind writes its counts when the process ends on SIGTERM (SIGINT is ignored by a background job).
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    local ir req
    ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log")
    # The load client counts requests of the measured window; the server also served the
    # warm-up's, the same in both runs, so the difference is the window's.
    req=${line%% requests*}
    echo "$ir $req $(sleeps "$out/$imp.$tag.out")"
}

read -r ir1 req1 sl1 < <(run "$short" short)
read -r ir2 req2 sl2 < <(run "$long" long)
# Totals move with how often the server sleeps (each sleep is the idle protocol and a driver
# wait): compare totals only at similar sleeps per request.
awk -v a="$ir1" -v b="$ir2" -v r1="$req1" -v r2="$req2" -v s1="$sl1" -v s2="$sl2" -v imp="$imp" 'BEGIN {
    printf "%s: %d requests more, %.0f Ir per request, %.2f sleeps per request (runs: %d Ir / %d req / %d sleeps, %d Ir / %d req / %d sleeps)\n",
        imp, r2 - r1, (b - a) / (r2 - r1), (s2 - s1) / (r2 - r1), a, r1, s1, b, r2, s2
}'
