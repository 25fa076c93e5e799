#!/usr/bin/env bash
# bench/loadgen.sh — is `espalier bench` cheap enough never to be the bottleneck?
#
# In one run, against the same nginx (one worker pinned to CPU 0), with both clients pinned to
# CPU 1 and the same load (one thread, 50 keep-alive connections, the 100-byte page):
# requests/s of `espalier bench` and of wrk (best of RUNS), and the client's instructions per
# request — `perf stat -e instructions` where the machine has hardware counters, otherwise
# callgrind's exact user-space count, with start-up cost cancelled by differencing a short and a
# long run. Target: espalier bench ≤ 0.7 × wrk's instructions per request.
# Installs nginx, wrk, linux-perf and valgrind from Debian if they are missing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-5}
RUNS=${RUNS:-3}
. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk perf:linux-perf valgrind:valgrind python3:python3
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")

WORK=$(mktemp -d /tmp/espalier-loadgen.XXXXXX)
NGINX_PID=
cleanup() { [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
PORT=$(free_port)
mkdir -p "$WORK/www"
python3 -c 'open("'"$WORK"'/www/100.html","w").write("x"*99+"\n")'
cat > "$WORK/nginx.conf" <<CONF
worker_processes 1;
worker_cpu_affinity 01;
daemon off;
error_log $WORK/error.log;
pid $WORK/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 10000000; open_file_cache max=100; default_type text/html;
       server { listen 127.0.0.1:$PORT; root $WORK/www; } }
CONF
taskset -c 0 "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" >/dev/null 2>&1 &
NGINX_PID=$!
wait_port "$PORT"
URL="http://127.0.0.1:$PORT/100.html"

# client NAME SECONDS [wrapper…] → "requests rps"
client() {
  local name=$1 secs=$2; shift 2
  case $name in
    wrk) out=$(taskset -c 1 "$@" wrk -t1 -c50 -d"${secs}s" "$URL" 2>&1)
         echo "$(awk '/requests in/ {print $1}' <<<"$out") $(awk '/Requests\/sec/ {print $2}' <<<"$out")" ;;
    espalier) out=$(taskset -c 1 "$@" "$ESPALIER" bench -t1 -c50 -d"${secs}s" --json "$URL" 2>/dev/null)
         python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print(j["requests"], j["rps"])' <<<"$out" ;;
  esac
}
declare -A BEST INSNS
for c in wrk espalier; do BEST[$c]=0; done
for _ in $(seq "$RUNS"); do
  for c in wrk espalier; do
    read -r _ rps < <(client "$c" "$DURATION")
    BEST[$c]=$(python3 -c "print(max(${BEST[$c]}, $rps))")
  done
done
if perf stat -e instructions true 2>&1 | grep -q "not supported"; then
  METHOD="user-space instructions (callgrind), start-up cancelled by differencing a 1 s and a $((DURATION + 1)) s run"
  for c in wrk espalier; do
    declare -a IR=() REQ=()
    for secs in 1 $((DURATION + 1)); do
      read -r reqs _ < <(client "$c" "$secs" valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$c.$secs")
      IR+=("$(grep -h '^summary:' "$WORK/cg.$c.$secs"* | awk '{s+=$2} END {print s}')")
      REQ+=("$reqs")
    done
    INSNS[$c]=$(python3 -c "print(round((${IR[1]}-${IR[0]})/(${REQ[1]}-${REQ[0]})))")
  done
else
  METHOD="instructions (perf stat, kernel + user)"
  for c in wrk espalier; do
    read -r reqs _ < <(client "$c" "$DURATION" perf stat -x, -e instructions -o "$WORK/perf.$c" --)
    INSNS[$c]=$(python3 -c "print(round($(awk -F, '/instructions/ {print $1}' "$WORK/perf.$c")/$reqs))")
  done
fi
echo
echo "load generators against nginx $("$NGINX" -v 2>&1 | sed 's/.*\///') on CPU 0; clients on CPU 1, 1 thread, 50 connections — $(date -u +%Y-%m-%d), $(nproc) CPUs"
printf '%-16s %12s %16s\n' client requests/s insns/request
for c in wrk espalier; do printf '%-16s %12.0f %16s\n' "$([ $c = espalier ] && echo 'espalier bench' || echo wrk)" "${BEST[$c]}" "${INSNS[$c]}"; done
echo "espalier bench / wrk: requests/s $(python3 -c "print(f'{${BEST[espalier]}/${BEST[wrk]}:.2f}')"), instructions per request $(python3 -c "print(f'{${INSNS[espalier]}/${INSNS[wrk]}:.2f}')") (target ≤ 0.70)"
echo "method: $METHOD"
