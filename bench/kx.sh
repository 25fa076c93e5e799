#!/usr/bin/env bash
# bench/kx.sh — the cost of a full TLS 1.3 handshake by key exchange group: espalier on
# AWS-LC (this tree: X25519MLKEM768 first), espalier on ring (the last commit before the
# change, built once into target/bench-ring), and nginx (Debian's, on OpenSSL 3.0), each one
# worker pinned to CPU 0 with the same ECDSA P-256 certificate, the clients on CPU 1, every
# measure interleaved over the three servers in each run:
#
#   - X25519 by `openssl s_time -new` (OpenSSL 3.0 offers X25519 first; it has no ML-KEM);
#   - X25519 by `espalier bench --tls-groups X25519 --no-keepalive --no-resumption`;
#   - X25519MLKEM768 by the same client offering that group alone (ring and nginx's OpenSSL
#     3.0 cannot take it: those rows are espalier on AWS-LC alone).
#
# The figure is the server's CPU per full handshake (user + system of every server process
# and thread, from /proc/<pid>/stat, over the measured runs) and the handshakes one core can
# do per second from it; the clients, on one core too, may cap the rate reached.
#
#   bench/kx.sh                 # DURATION=6 RUNS=3
#   RING_REV=<commit> bench/kx.sh   RING_BIN=/path/to/espalier-on-ring bench/kx.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-6}
RUNS=${RUNS:-3}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
# The last commit whose TLS ran on ring.
RING_REV=${RING_REV:-5e0609c}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light openssl:openssl python3:python3 git:git
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")
if [ -z "${RING_BIN:-}" ]; then
  RING_SRC="$ROOT/target/bench-ring/src"
  if [ ! -x "$ROOT/target/bench-ring/release/espalier" ] || [ "$(cat "$ROOT/target/bench-ring/rev" 2>/dev/null)" != "$RING_REV" ]; then
    echo "building espalier at $RING_REV (ring, release)…" >&2
    rm -rf "$RING_SRC" && mkdir -p "$RING_SRC"
    git -C "$ROOT" archive "$RING_REV" | tar -x -C "$RING_SRC"
    (cd "$RING_SRC" && CARGO_TARGET_DIR="$ROOT/target/bench-ring" cargo build --release --quiet) >&2
    echo "$RING_REV" > "$ROOT/target/bench-ring/rev"
  fi
  RING_BIN="$ROOT/target/bench-ring/release/espalier"
fi
bench_workdir espalier-kx

mkdir -p "$WORK/www" "$WORK/nginx" "$WORK/aws" "$WORK/ring"
python3 -c 'open("'"$WORK"'/www/100.html","w").write("x"*99+"\n")'
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test,IP:127.0.0.1 2>/dev/null
chmod 644 "$WORK/key.pem"
declare -A PORT=([nginx]=$(free_port) [aws]=$(free_port) [ring]=$(free_port))
declare -A BIN=([aws]=$ESPALIER [ring]=$RING_BIN)

cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(format(1<<$SERVER_CPU,'b'))");
daemon off;
error_log $WORK/nginx/error.log;
pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  default_type text/html;
  ssl_protocols TLSv1.3;
  ssl_session_tickets off;
  server {
    listen 127.0.0.1:${PORT[nginx]} ssl;
    ssl_certificate $WORK/cert.pem;
    ssl_certificate_key $WORK/key.pem;
    root $WORK/www;
  }
}
CONF
NGINX_PORT=${PORT[nginx]}
start_nginx ""
for s in aws ring; do
  cat > "$WORK/$s/espalier.toml" <<CONF
[server]
admin = "127.0.0.1:$(free_port)"
[[pool]]
name = "bench"
processes = 1
cpus = "$SERVER_CPU"
affinity = "hard"
[[site]]
bindings = ["https://127.0.0.1:${PORT[$s]}"]
root = "../www"
tls = { cert = "../cert.pem", key = "../key.pem" }
[[site.app]]
pool = "bench"
CONF
  (cd "$WORK/$s" && exec taskset -c "$SERVER_CPU" "${BIN[$s]}" serve -c espalier.toml) >"$WORK/$s.out" 2>&1 &
  PIDS+=($!)
  wait_port "${PORT[$s]}"
done

cpu_ticks() {
  case $1 in
    nginx) proc_ticks $(pgrep -f "nginx: (master|worker)") ;;
    *) proc_ticks $(pgrep -f "${BIN[$1]} (serve|worker)") ;;
  esac
}
# s_time SERVER → full handshakes made in DURATION seconds (X25519)
s_time() {
  taskset -c "$CLIENT_CPU" openssl s_time -connect "127.0.0.1:${PORT[$1]}" -new \
    -www /100.html -time "$DURATION" 2>&1 | awk '/connections in/ && /real seconds/ {n=$1} END {print n+0}'
}
# by_bench SERVER GROUP → full handshakes made in DURATION seconds offering GROUP alone;
# a run with errors stops the script.
by_bench() {
  local out
  out=$(taskset -c "$CLIENT_CPU" "$ESPALIER" bench -k --tls-groups "$2" --no-keepalive \
    --no-resumption -c 4 -d "${DURATION}s" --json "https://127.0.0.1:${PORT[$1]}/100.html")
  python3 -c '
import json, sys
r = json.loads(sys.argv[1])
r = r[0] if isinstance(r, list) else r
errors = r.get("errors", {})
bad = sum(v for v in errors.values() if isinstance(v, int)) if isinstance(errors, dict) else errors
if bad:
    sys.exit(f"{sys.argv[2]}: espalier bench saw errors, the figures would be wrong: {errors}")
print(r["requests"])' "$out" "$1 $2"
}

MEASURES=("s_time.X25519:nginx aws ring" "bench.X25519:nginx aws ring" "bench.X25519MLKEM768:aws")
declare -A N TICKS
echo "warming up…" >&2
for s in nginx aws ring; do DURATION=1 s_time "$s" >/dev/null; done
for run in $(seq "$RUNS"); do
  echo "run $run of $RUNS (${DURATION}s per measure and server)…" >&2
  for m in "${MEASURES[@]}"; do
    name=${m%%:*} servers=${m#*:}
    for s in $servers; do
      before=$(cpu_ticks "$s")
      case $name in
        s_time.*) n=$(s_time "$s") ;;
        bench.*) n=$(by_bench "$s" "${name#bench.}") ;;
      esac
      TICKS[$name.$s]=$((${TICKS[$name.$s]:-0} + $(cpu_ticks "$s") - before))
      N[$name.$s]=$((${N[$name.$s]:-0} + n))
    done
  done
done
stop_all

HZ=$(getconf CLK_TCK)
python3 - "$HZ" "$DURATION" "$RUNS" <<PY
import sys
hz, duration, runs = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
n = {$(for k in "${!N[@]}"; do printf '"%s": %s, ' "$k" "${N[$k]}"; done)}
ticks = {$(for k in "${!TICKS[@]}"; do printf '"%s": %s, ' "$k" "${TICKS[$k]}"; done)}
def us(k): return ticks[k] / hz * 1e6 / n[k] if n.get(k) else None
print()
print("full TLS 1.3 handshakes, ECDSA P-256: espalier $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') (AWS-LC) and $RING_REV (ring) vs $("$NGINX" -v 2>&1 | sed 's/.*: //') (OpenSSL $(openssl version | awk '{print $2}')) — $(date -u +%Y-%m-%d), $(nproc) CPUs, server on CPU $SERVER_CPU, clients on CPU $CLIENT_CPU")
print(f"{'group (client)':<34} {'':>6} {'nginx':>9} {'ring':>9} {'AWS-LC':>9} {'AWS-LC/ring':>12} {'AWS-LC/nginx':>13}")
for name, label in [("s_time.X25519", "X25519 (openssl s_time)"), ("bench.X25519", "X25519 (espalier bench)"), ("bench.X25519MLKEM768", "X25519MLKEM768 (espalier bench)")]:
    row = {s: us(f"{name}.{s}") for s in ("nginx", "ring", "aws")}
    cell = lambda v, f: f.format(v) if v else "-"
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    print(f"{label:<34} {'µs':>6} {cell(row['nginx'], '{:.0f}'):>9} {cell(row['ring'], '{:.0f}'):>9} {cell(row['aws'], '{:.0f}'):>9} {ratio(row['aws'], row['ring']):>12} {ratio(row['aws'], row['nginx']):>13}")
    print(f"{'':<34} {'/core':>6} {cell(row['nginx'] and 1e6 / row['nginx'], '{:.0f}'):>9} {cell(row['ring'] and 1e6 / row['ring'], '{:.0f}'):>9} {cell(row['aws'] and 1e6 / row['aws'], '{:.0f}'):>9}")
print("(µs: server CPU per full handshake, user + system of every server process and thread from /proc;")
print(" /core: the full handshakes one core can do per second at that cost; ring and OpenSSL 3.0 have no ML-KEM)")
PY
