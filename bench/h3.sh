#!/usr/bin/env bash
# bench/h3.sh — espalier's HTTP/3 against its own HTTP/2, on one server (one worker pinned to
# CPU 0, [server] http3 = true, the same ECDSA P-256 certificate), the client
# (`espalier bench`, --h2 or --h3, 10 connections × 10 streams) on CPU 1, interleaved in one
# run, for a 100-byte and a 20 KB page:
#
#   - requests/s, and server CPU per request: user + system of every server process and
#     thread, from /proc/<pid>/stat, over the measured runs;
#   - HTTP/3 again with GSO off (ESPALIER_QUIC_GSO=off): what the kernel's segmentation
#     offload saves (quinn sends a burst of datagrams in one sendmsg where the kernel has it);
#   - HTTP/3 again with Ethernet-sized datagrams (ESPALIER_QUIC_PATH_MTU=off: path-MTU
#     discovery searches up to 1 452 bytes, quinn's default, instead of up to what the link
#     carries — on loopback 6 550 bytes with GSO): what an Ethernet path costs, where TCP's
#     segments would be 1 500 bytes too (TSO makes them on the NIC, where there is one);
#   - then the server under valgrind's callgrind: user-space instructions per request over
#     HTTP/2 and HTTP/3 (exact, where CPU time on a shared VM is not).
#
# The issue's target: HTTP/3's CPU per request ≤ 1.5 × HTTP/2's. Installs openssl, python3
# and valgrind from Debian if missing.
#
#   bench/h3.sh                      # DURATION=8 RUNS=3 by default
#   ESPALIER_BIN=/path/to/espalier bench/h3.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-8}
RUNS=${RUNS:-3}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
CG_REQUESTS=${CG_REQUESTS:-5000}

. "$ROOT/bench/common.sh"
need_tools openssl:openssl python3:python3
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-h3

mkdir -p "$WORK/www"
python3 -c 'open("'"$WORK"'/www/100.html","w").write("x"*99+"\n")'
python3 -c 'open("'"$WORK"'/www/20k.html","w").write("y"*20479+"\n")'
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test,IP:127.0.0.1 2>/dev/null
ESP_PORT=$(free_port)
cat > "$WORK/espalier.toml" <<CONF
[server]
http3 = true
[[pool]]
name = "bench"
processes = 1
cpus = "$SERVER_CPU"
affinity = "hard"
[[site]]
bindings = ["https://127.0.0.1:$ESP_PORT"]
root = "www"
tls = { cert = "cert.pem", key = "key.pem" }
[[site.app]]
pool = "bench"
CONF

server_ticks() { proc_ticks $(pgrep -f "$ESPALIER (serve|worker)"); }

# load PROTOCOL PAGE [-n N | -d S] → requests answered; a run with errors stops the script.
load() {
  local proto=$1 page=$2 out
  shift 2
  out=$(taskset -c "$CLIENT_CPU" "$ESPALIER" bench "--$proto" -k -c 10 --streams 10 "$@" \
    "https://127.0.0.1:$ESP_PORT/$page" 2>&1)
  if ! grep -q "^errors: 0 " <<<"$out"; then
    echo "$proto $page: the load generator saw errors, the figures would be wrong: $(grep -E '^errors' <<<"$out")" >&2
    exit 1
  fi
  awk '/requests in/ {print $1}' <<<"$out"
}

declare -A N TICKS
KINDS=(h2 h3 h3-nogso h3-eth)
PAGES=(100.html 20k.html)
for k in "${KINDS[@]}"; do for p in "${PAGES[@]}"; do N[$k.$p]=0; TICKS[$k.$p]=0; done; done
measure_with() { # measure_with GSO PATH_MTU KIND… — the runs of KINDS against a server started with GSO and path MTU on/off
  local gso=$1 path_mtu=$2
  shift 2
  ESPALIER_QUIC_GSO=$gso ESPALIER_QUIC_PATH_MTU=$path_mtu start_espalier ""
  for p in "${PAGES[@]}"; do load h2 "$p" -d 1s >/dev/null; load h3 "$p" -d 1s >/dev/null; done
  for run in $(seq "$RUNS"); do
    echo "run $run of $RUNS (GSO $gso, path MTU $path_mtu, ${DURATION}s per measure)…" >&2
    for p in "${PAGES[@]}"; do
      for k in "$@"; do
        before=$(server_ticks)
        n=$(load "${k%-*}" "$p" -d "${DURATION}s")
        TICKS[$k.$p]=$((TICKS[$k.$p] + $(server_ticks) - before))
        N[$k.$p]=$((N[$k.$p] + n))
      done
    done
  done
  stop_all
}
udp_drops() { awk '/^Udp:/ { getline; print $6 }' /proc/net/snmp; } # RcvbufErrors, machine-wide
DROPS_BEFORE=$(udp_drops)
measure_with on on h2 h3
measure_with off on h3-nogso
measure_with on off h3-eth
DROPS=$(($(udp_drops) - DROPS_BEFORE))

# Phase 2: user-space instructions per request (callgrind), the 100-byte page.
need_tools valgrind:valgrind
declare -A INSNS
echo "phase 2: user-space instructions per request (callgrind)…" >&2
start_espalier "valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$WORK/cg.%p"
sleep 2
wpid=$(pgrep -f "callgrind.*$ESPALIER worker" | head -1)
for proto in h2 h3; do
  load "$proto" 100.html -n 1000 >/dev/null
  cg_zero "$wpid"
  got=$(load "$proto" 100.html -n "$CG_REQUESTS")
  total=$(cg_dump_sum "$WORK" "$wpid")
  INSNS[$proto]=$(python3 -c "print(round($total/max($got,1)))")
done
stop_all

HZ=$(getconf CLK_TCK)
python3 - "$HZ" "$DURATION" "$RUNS" <<PY
import sys
hz, duration, runs = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
n = {$(for k in "${KINDS[@]}"; do for p in "${PAGES[@]}"; do printf '"%s": %s, ' "$k.$p" "${N[$k.$p]}"; done; done)}
ticks = {$(for k in "${KINDS[@]}"; do for p in "${PAGES[@]}"; do printf '"%s": %s, ' "$k.$p" "${TICKS[$k.$p]}"; done; done)}
def us(k): return ticks[k] / hz * 1e6 / max(n[k], 1)
def rate(k): return n[k] / (duration * runs)
print()
print("espalier $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'): HTTP/3 vs HTTP/2 — $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), server on CPU $SERVER_CPU, client (espalier bench, 10 connections x 10 streams) on CPU $CLIENT_CPU, ECDSA P-256")
print(f"{'measure':<36} {'HTTP/2':>10} {'HTTP/3':>10} {'h3/h2':>7} {'h3 no GSO':>10} {'ratio':>7} {'h3 1452 B':>10} {'ratio':>7}")
for page in ("100.html", "20k.html"):
    for name, f, fmt in (("requests/s", rate, "{:.0f}"), ("server CPU µs per request", us, "{:.2f}")):
        a = f("h2." + page)
        row = f"{name} ({page})"
        row = f"{row:<36} {fmt.format(a):>10}"
        for k in ("h3", "h3-nogso", "h3-eth"):
            b = f(k + "." + page)
            row += f" {fmt.format(b):>10} {b / a if a else 0:>7.2f}"
        print(row)
a, b = ${INSNS[h2]}, ${INSNS[h3]}
print(f"{'user insns per request (100.html)':<36} {a:>10} {b:>10} {b / a if a else 0:>7.2f}")
print("UDP datagrams dropped for a full receive buffer during the measures: $DROPS (each one a retransmission counted in the server's CPU)")
print("target: HTTP/3's CPU per request ≤ 1.5 × HTTP/2's (ratio h3/h2 of the CPU rows)")
print("(h3 1452 B: datagrams no larger than an Ethernet frame's, as on a path through one; TCP's")
print(" segments stay loopback's 64 KiB in every column)")
print("(CPU time: user + system of every server process and thread, from /proc; instructions: callgrind's")
print(" user-space count over $CG_REQUESTS requests, since there are no hardware counters here)")
PY
