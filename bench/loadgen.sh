#!/usr/bin/env bash
# bench/loadgen.sh — is `espalier bench` cheap enough never to be the bottleneck?
#
# In one run, against the same nginx (one worker pinned to CPU 0), with the clients pinned to
# CPU 1 and the same load (one thread, 50 keep-alive connections, the 100-byte page): wrk, and
# `espalier bench` on each I/O path (`--io uring`, `--io epoll`): requests/s (best of RUNS),
# the client's CPU time per request (user + system from its rusage, over all runs), syscalls
# per request (perf's raw_syscalls tracepoint, a run of its own), and instructions per
# request — `perf stat -e instructions` where the machine has hardware counters, otherwise
# callgrind's exact user-space count, with start-up cost cancelled by differencing a short and
# a long run. Target: espalier bench ≤ 0.7 × wrk's client CPU per request.
# Then over TLS: espalier bench against wrk (HTTPS/1.1) and `espalier bench --h2` against
# h2load (HTTP/2), requests/s and the client's CPU time per request.
# Installs nginx, wrk, h2load, openssl, linux-perf and valgrind from Debian if missing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-5}
RUNS=${RUNS:-3}
. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk perf:linux-perf valgrind:valgrind python3:python3 h2load:nghttp2-client openssl:openssl
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")

WORK=$(mktemp -d /tmp/espalier-loadgen.XXXXXX)
# nginx's workers run as nobody: they must be able to read the page (mktemp makes it 0700,
# and every answer was a 403 before this).
chmod 755 "$WORK"
NGINX_PID=
cleanup() { [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
PORT=$(free_port)
TLS_PORT=$(free_port)
mkdir -p "$WORK/www"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -subj /CN=bench.test \
  -addext subjectAltName=IP:127.0.0.1 2>/dev/null
python3 -c 'open("'"$WORK"'/www/100.html","w").write("x"*99+"\n")'
cat > "$WORK/nginx.conf" <<CONF
worker_processes 1;
worker_cpu_affinity 01;
daemon off;
error_log $WORK/error.log;
pid $WORK/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 10000000; open_file_cache max=100; default_type text/html;
       server { listen 127.0.0.1:$PORT; root $WORK/www; }
       server { listen 127.0.0.1:$TLS_PORT ssl http2; http2_max_concurrent_streams 128; root $WORK/www;
                ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem; } }
CONF
taskset -c 0 "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" >/dev/null 2>&1 &
NGINX_PID=$!
wait_port "$PORT"
URL="http://127.0.0.1:$PORT/100.html"

# The clients of the cleartext part: wrk, and `espalier bench` on each I/O path (`--io`;
# `uring` is left out where the kernel refuses io_uring).
CLIENTS=(wrk epoll)
if "$ESPALIER" bench --io uring -n 1 -c 1 --json "$URL" >/dev/null 2>&1; then
  CLIENTS=(wrk uring epoll)
else
  echo "io_uring is not usable here: espalier bench is measured on epoll only" >&2
fi
client_cmd() { # NAME SECONDS → the command line
  case $1 in
    wrk) echo wrk -t1 -c50 -d"${2}s" "$URL" ;;
    uring|epoll) echo "$ESPALIER" bench --io "$1" -t1 -c50 -d"${2}s" --json "$URL" ;;
  esac
}
# client NAME SECONDS [wrapper…] → "requests rps client_cpu_seconds" (user + system of the
# client and everything it ran, from its rusage)
client() {
  local name=$1 secs=$2; shift 2
  # shellcheck disable=SC2046
  taskset -c 1 python3 - "$name" "$@" $(client_cmd "$name" "$secs") <<'PY'
import json, re, resource, subprocess, sys
name, cmd = sys.argv[1], sys.argv[2:]
out = subprocess.run(cmd, capture_output=True, text=True).stdout
r = resource.getrusage(resource.RUSAGE_CHILDREN)
if name == "wrk":
    if "Non-2xx" in out or "Socket errors" in out:
        sys.exit("wrk saw errors, the figures would be wrong: " + out)
    n = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
else:
    j = json.loads(out)
    assert j["errors"] == 0, j["errors_by_kind"]
    n, rps = j["requests"], j["rps"]
print(n, rps, r.ru_utime + r.ru_stime)
PY
}
declare -A BEST INSNS CPU_SEC REQS SYSCALLS CPU_US
for c in "${CLIENTS[@]}"; do BEST[$c]=0; CPU_SEC[$c]=0; REQS[$c]=0; done
for _ in $(seq "$RUNS"); do
  for c in "${CLIENTS[@]}"; do
    read -r n rps cpu < <(client "$c" "$DURATION")
    BEST[$c]=$(python3 -c "print(max(${BEST[$c]}, $rps))")
    CPU_SEC[$c]=$(python3 -c "print(${CPU_SEC[$c]} + $cpu)")
    REQS[$c]=$((REQS[$c] + n))
  done
done
for c in "${CLIENTS[@]}"; do
  CPU_US[$c]=$(python3 -c "print(round(${CPU_SEC[$c]} / ${REQS[$c]} * 1e6, 2))")
  # Syscalls in a run of their own (the tracepoint costs the client a little per call).
  read -r n _ _ < <(client "$c" "$DURATION" perf stat -x, -e raw_syscalls:sys_enter -o "$WORK/sys.$c" --)
  SYSCALLS[$c]=$(python3 -c "print(round($(awk -F, '/raw_syscalls/ {print $1}' "$WORK/sys.$c")/$n, 2))")
done
if perf stat -e instructions true 2>&1 | grep -q "not supported"; then
  METHOD="user-space instructions (callgrind), start-up cancelled by differencing a 1 s and a $((DURATION + 1)) s run"
  for c in "${CLIENTS[@]}"; do
    declare -a IR=() REQ=()
    for secs in 1 $((DURATION + 1)); do
      read -r reqs _ _ < <(client "$c" "$secs" valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$c.$secs")
      IR+=("$(grep -h '^summary:' "$WORK/cg.$c.$secs"* | awk '{s+=$2} END {print s}')")
      REQ+=("$reqs")
    done
    INSNS[$c]=$(python3 -c "print(round((${IR[1]}-${IR[0]})/(${REQ[1]}-${REQ[0]})))")
  done
else
  METHOD="instructions (perf stat, kernel + user)"
  for c in "${CLIENTS[@]}"; do
    read -r reqs _ _ < <(client "$c" "$DURATION" perf stat -x, -e instructions -o "$WORK/perf.$c" --)
    INSNS[$c]=$(python3 -c "print(round($(awk -F, '/instructions/ {print $1}' "$WORK/perf.$c")/$reqs))")
  done
fi
echo
echo "load generators against nginx $("$NGINX" -v 2>&1 | sed 's/.*\///') on CPU 0; clients on CPU 1, 1 thread, 50 connections — $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'))"
printf '%-26s %12s %18s %14s %16s\n' client requests/s "client CPU µs/req" syscalls/req insns/request
for c in "${CLIENTS[@]}"; do
  case $c in wrk) name=wrk ;; *) name="espalier bench --io $c" ;; esac
  printf '%-26s %12.0f %18s %14s %16s\n' "$name" "${BEST[$c]}" "${CPU_US[$c]}" "${SYSCALLS[$c]}" "${INSNS[$c]}"
done
for c in "${CLIENTS[@]}"; do
  [ "$c" = wrk ] && continue
  echo "espalier bench --io $c / wrk: client CPU per request $(ratio "${CPU_US[$c]}" "${CPU_US[wrk]}") (target ≤ 0.70), requests/s $(ratio "${BEST[$c]}" "${BEST[wrk]}"), syscalls per request $(ratio "${SYSCALLS[$c]}" "${SYSCALLS[wrk]}"), instructions per request $(ratio "${INSNS[$c]}" "${INSNS[wrk]}")"
done
echo "method: client CPU = user + system from the client's rusage over $RUNS interleaved runs of ${DURATION}s; $METHOD"

# Over TLS: the same nginx's HTTPS listener, each client on CPU 1 — HTTPS/1.1 (wrk against
# espalier bench, 50 connections) and HTTP/2 (h2load against espalier bench --h2, 10
# connections × 10 streams). Requests/s (best of RUNS) and the client's CPU time per request
# (user + system, from its rusage), since the client must not be what limits a TLS run.
TLS_URL="https://127.0.0.1:$TLS_PORT/100.html"
# tls_client NAME → "requests cpu_seconds"
tls_client() {
  local cmd
  case $1 in
    wrk) cmd=(wrk -t1 -c50 -d"${DURATION}s" "$TLS_URL") ;;
    bench) cmd=("$ESPALIER" bench -k -t1 -c50 -d"${DURATION}s" --json "$TLS_URL") ;;
    h2load) cmd=(h2load -c10 -m10 -D "$DURATION" "$TLS_URL") ;;
    bench-h2) cmd=("$ESPALIER" bench -k --h2 --streams 10 -t1 -c10 -d"${DURATION}s" --json "$TLS_URL") ;;
  esac
  taskset -c 1 python3 - "$1" "${cmd[@]}" <<'PY'
import json, re, resource, subprocess, sys
name, cmd = sys.argv[1], sys.argv[2:]
out = subprocess.run(cmd, capture_output=True, text=True).stdout
r = resource.getrusage(resource.RUSAGE_CHILDREN)
if name.startswith("bench"):
    j = json.loads(out)
    assert j["errors"] == 0, f"espalier bench saw errors: {j['errors_by_kind']}"
    n = j["requests"]
elif name == "wrk":
    assert "Non-2xx" not in out and "Socket errors" not in out, out
    n = int(re.search(r"(\d+) requests in", out).group(1))
else:
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
    assert m and m.group(2) == "0" and m.group(3) == "0", out
    n = int(m.group(1))
print(n, r.ru_utime + r.ru_stime)
PY
}
declare -A TLS_RPS TLS_CPU TLS_N TLS_SEC
for c in wrk bench h2load bench-h2; do TLS_RPS[$c]=0; TLS_N[$c]=0; TLS_SEC[$c]=0; done
for _ in $(seq "$RUNS"); do
  for c in wrk bench h2load bench-h2; do
    read -r n cpu < <(tls_client "$c")
    TLS_RPS[$c]=$(python3 -c "print(max(${TLS_RPS[$c]}, $n / $DURATION))")
    TLS_N[$c]=$((TLS_N[$c] + n))
    TLS_SEC[$c]=$(python3 -c "print(${TLS_SEC[$c]} + $cpu)")
  done
done
for c in wrk bench h2load bench-h2; do TLS_CPU[$c]=$(python3 -c "print(${TLS_SEC[$c]} / ${TLS_N[$c]} * 1e6)"); done
echo
echo "over TLS (ECDSA P-256) against the same nginx; clients on CPU 1"
printf '%-26s %12s %18s\n' client requests/s "client CPU µs/req"
for c in wrk bench h2load bench-h2; do
  case $c in wrk) name="wrk (HTTPS/1.1)" ;; bench) name="espalier bench (HTTPS/1.1)" ;; h2load) name="h2load (HTTP/2)" ;; bench-h2) name="espalier bench --h2" ;; esac
  printf '%-26s %12.0f %18.2f\n' "$name" "${TLS_RPS[$c]}" "${TLS_CPU[$c]}"
done
echo "espalier bench / wrk over TLS: client CPU per request $(python3 -c "print(f'{${TLS_CPU[bench]}/${TLS_CPU[wrk]}:.2f}')"); espalier bench --h2 / h2load: $(python3 -c "print(f'{${TLS_CPU[bench-h2]}/${TLS_CPU[h2load]}:.2f}')")"
