#!/usr/bin/env bash
# bench/tls.sh — espalier against nginx over TLS, with the same ECDSA P-256 certificate, one
# worker each pinned to CPU 0, the clients on CPU 1, interleaved in one run:
#
#   - full handshakes: `openssl s_time -new` (a new TLS session per connection, one small page
#     each); figures: connections/s reached, and server CPU per connection, from which the
#     handshakes one core can do per second follow (the client, also on one core, may limit
#     the rate: the per-core figure is the server's own);
#   - resumed handshakes: `openssl s_time -reuse` (the session of the first connection);
#   - keep-alive requests over TLS: wrk -t1 -c50 on the 100-byte page (HTTPS/1.1), and h2load
#     -c10 -m10 over HTTP/2 (100 streams in flight): requests/s and server CPU per request.
#
# CPU time is user + system of every server process and thread, from /proc/<pid>/stat, over
# the measured runs. Then, each server again under valgrind's callgrind: user-space
# instructions per request for HTTPS/1.1 and HTTP/2 (exact, where CPU time on a shared VM
# is not). Installs nginx, wrk, h2load, openssl and valgrind from Debian if they are missing.
#
#   bench/tls.sh                    # DURATION=8 RUNS=3 by default
#   ESPALIER_BIN=/path/to/espalier bench/tls.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-8}
RUNS=${RUNS:-3}
CONNS=${CONNS:-50}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk h2load:nghttp2-client openssl:openssl python3:python3
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-tls

mkdir -p "$WORK/www" "$WORK/nginx"
python3 -c 'open("'"$WORK"'/www/100.html","w").write("x"*99+"\n")'
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test,IP:127.0.0.1 2>/dev/null
chmod 644 "$WORK/key.pem"
NGINX_PORT=$(free_port)
ESP_PORT=$(free_port)

cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(format(1<<$SERVER_CPU,'b'))");
daemon off;
error_log $WORK/nginx/error.log;
pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  open_file_cache max=1000;
  default_type text/html;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache shared:SSL:10m;
  ssl_session_tickets on;
  server {
    listen 127.0.0.1:$NGINX_PORT ssl http2;
    http2_max_concurrent_streams 128;
    ssl_certificate $WORK/cert.pem;
    ssl_certificate_key $WORK/key.pem;
    root $WORK/www;
  }
}
CONF

cat > "$WORK/espalier.toml" <<CONF
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

start_nginx ""
start_espalier ""

port_of() { case $1 in nginx) echo "$NGINX_PORT" ;; espalier) echo "$ESP_PORT" ;; esac; }
cpu_ticks() {
  case $1 in
    nginx) proc_ticks $(pgrep -f "nginx: (master|worker)") ;;
    espalier) proc_ticks $(pgrep -f "$ESPALIER (serve|worker)") ;;
  esac
}

# s_time MODE SERVER → connections made in DURATION seconds (MODE: -new or -reuse)
s_time() {
  local out
  out=$(taskset -c "$CLIENT_CPU" openssl s_time -connect "127.0.0.1:$(port_of "$2")" "$1" \
    -www /100.html -time "$DURATION" 2>&1)
  awk '/connections in/ && /real seconds/ {n=$1} END {print n+0}' <<<"$out"
}
# wrk over TLS → "requests rps"; a run with errors stops the script.
wrk_tls() {
  local out
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" "https://127.0.0.1:$(port_of "$1")/100.html")
  if grep -qE "Non-2xx|Socket errors" <<<"$out"; then
    echo "$1: wrk saw errors, the figures would be wrong: $(grep -E 'Non-2xx|Socket errors' <<<"$out")" >&2
    exit 1
  fi
  echo "$(awk '/requests in/ {print $1}' <<<"$out") $(awk '/Requests\/sec/ {print $2}' <<<"$out")"
}

# h2load over HTTP/2 → requests done; a run with failures stops the script.
h2load_tls() {
  local out
  out=$(taskset -c "$CLIENT_CPU" h2load -c 10 -m 10 -D "$DURATION" "https://127.0.0.1:$(port_of "$1")/100.html" 2>&1)
  if ! grep -q "Application protocol: h2" <<<"$out" || ! grep -qE " 0 failed, 0 errored" <<<"$out"; then
    echo "$1: h2load failed or did not speak h2, the figures would be wrong: $(grep -E 'requests:|protocol' <<<"$out")" >&2
    exit 1
  fi
  awk '/^requests:/ {print $8}' <<<"$out"
}

declare -A N TICKS
MEASURES=(full resumed keepalive h2)
for m in "${MEASURES[@]}"; do for s in nginx espalier; do N[$m.$s]=0; TICKS[$m.$s]=0; done; done
echo "warming up…" >&2
for s in nginx espalier; do DURATION=1 wrk_tls "$s" >/dev/null; done
for run in $(seq "$RUNS"); do
  echo "run $run of $RUNS (${DURATION}s per measure and server)…" >&2
  for m in "${MEASURES[@]}"; do
    for s in nginx espalier; do
      before=$(cpu_ticks "$s")
      case $m in
        full) n=$(s_time -new "$s") ;;
        resumed) n=$(s_time -reuse "$s") ;;
        keepalive) read -r n _ < <(wrk_tls "$s") ;;
        h2) n=$(h2load_tls "$s") ;;
      esac
      TICKS[$m.$s]=$((TICKS[$m.$s] + $(cpu_ticks "$s") - before))
      N[$m.$s]=$((N[$m.$s] + n))
    done
  done
done
stop_all

# Phase 2: user-space instructions per request, counted exactly by callgrind (this VM has no
# hardware counters; CPU time above varies with its neighbours, instructions do not). h2load
# sends a fixed number of requests: HTTP/1.1 over TLS (--h1, $CONNS connections) and HTTP/2
# (-c10 -m10), after a warm-up of 2 000.
declare -A INSNS
# cg_measure SERVER PID h1|h2 → INSNS[h1|h2.SERVER]
cg_measure() {
  local flags=(-c 10 -m 10) url out total
  [ "$3" = h1 ] && flags=(--h1 -c "$CONNS")
  url="https://127.0.0.1:$(port_of "$1")/100.html"
  taskset -c "$CLIENT_CPU" h2load "${flags[@]}" -n 2000 "$url" >/dev/null 2>&1
  cg_zero "$2"
  out=$(taskset -c "$CLIENT_CPU" h2load "${flags[@]}" -n "$CG_REQUESTS" "$url" 2>&1)
  total=$(cg_dump_sum "$WORK" "$2")
  if ! grep -qE " $CG_REQUESTS succeeded, 0 failed, 0 errored" <<<"$out"; then
    echo "$1 under callgrind: h2load did not get every answer, the count would be wrong: $(grep -E '^requests:' <<<"$out")" >&2
    exit 1
  fi
  INSNS[$3.$1]=$(python3 -c "print(round($total/$CG_REQUESTS))")
}
CG_REQUESTS=${CG_REQUESTS:-20000}
need_tools valgrind:valgrind
echo "phase 2: user-space instructions per request (callgrind)…" >&2
start_nginx "valgrind --tool=callgrind --callgrind-out-file=$WORK/cg.%p" -g "master_process off;"
sleep 1
for p in h1 h2; do cg_measure nginx "${PIDS[0]}" "$p"; done
stop_all
start_espalier "valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$WORK/cg.%p"
sleep 2
wpid=$(pgrep -f "callgrind.*$ESPALIER worker" | head -1)
for p in h1 h2; do cg_measure espalier "$wpid" "$p"; done
stop_all

HZ=$(getconf CLK_TCK)
python3 - "$HZ" "$DURATION" "$RUNS" <<PY
import sys
hz, duration, runs = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
n = {$(for m in "${MEASURES[@]}"; do for s in nginx espalier; do printf '"%s": %s, ' "$m.$s" "${N[$m.$s]}"; done; done)}
ticks = {$(for m in "${MEASURES[@]}"; do for s in nginx espalier; do printf '"%s": %s, ' "$m.$s" "${TICKS[$m.$s]}"; done; done)}
def us(k): return ticks[k] / hz * 1e6 / max(n[k], 1)
def rate(k): return n[k] / (duration * runs)
print()
print("espalier $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') vs $("$NGINX" -v 2>&1 | sed 's/.*: //') over TLS — $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), server on CPU $SERVER_CPU, clients on CPU $CLIENT_CPU, ECDSA P-256")
print(f"{'measure':<34} {'nginx':>12} {'espalier':>12} {'espalier/nginx':>15}")
rows = [
  ("full handshakes/s (reached)", rate("full.nginx"), rate("full.espalier"), "{:.0f}"),
  ("server CPU µs per full handshake", us("full.nginx"), us("full.espalier"), "{:.1f}"),
  ("full handshakes/s per core", 1e6 / max(us("full.nginx"), 1e-9), 1e6 / max(us("full.espalier"), 1e-9), "{:.0f}"),
  ("resumed handshakes/s (reached)", rate("resumed.nginx"), rate("resumed.espalier"), "{:.0f}"),
  ("server CPU µs per resumed handshake", us("resumed.nginx"), us("resumed.espalier"), "{:.1f}"),
  ("resumed handshakes/s per core", 1e6 / max(us("resumed.nginx"), 1e-9), 1e6 / max(us("resumed.espalier"), 1e-9), "{:.0f}"),
  ("keep-alive HTTPS/1.1 requests/s", rate("keepalive.nginx"), rate("keepalive.espalier"), "{:.0f}"),
  ("server CPU µs per HTTPS/1.1 request", us("keepalive.nginx"), us("keepalive.espalier"), "{:.2f}"),
  ("HTTP/2 requests/s (h2load -c10 -m10)", rate("h2.nginx"), rate("h2.espalier"), "{:.0f}"),
  ("server CPU µs per HTTP/2 request", us("h2.nginx"), us("h2.espalier"), "{:.2f}"),
  ("user insns per HTTPS/1.1 request", ${INSNS[h1.nginx]}, ${INSNS[h1.espalier]}, "{:.0f}"),
  ("user insns per HTTP/2 request", ${INSNS[h2.nginx]}, ${INSNS[h2.espalier]}, "{:.0f}"),
]
for name, a, b, f in rows:
    print(f"{name:<34} {f.format(a):>12} {f.format(b):>12} {b / a if a else 0:>15.2f}")
print("targets: handshakes/s per core ≥ nginx's (ratio ≥ 1); CPU per request over TLS ≤ 0.7 × nginx's")
print("(CPU time: user + system of every server process and thread, from /proc; instructions: callgrind's")
print(" user-space count over $CG_REQUESTS h2load requests, since there are no hardware counters here)")
PY
