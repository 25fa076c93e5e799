#!/usr/bin/env bash
# bench/h2_proxy.sh — HTTP/2 clients through to an HTTP/1.1 server: espalier (an upstream group
# of one Node server) against nginx (`listen … http2`, `proxy_pass` with keepalive) in front of
# the same server, in one run.
#
# Load: h2load over h2c (prior knowledge), -c10 -m10, pinned to CLIENT_CPU with the Node server;
# each proxy one process (espalier: one worker) on SERVER_CPU. Prints requests/s and the proxy's
# CPU time per request (user + system of every process and thread of its tier, from
# /proc/<pid>/stat, over RUNS interleaved runs of DURATION seconds) with the ratio against
# nginx, and the proxy worker's user-space instructions per request (callgrind; user space
# only, not the whole cost). With BASELINE_BIN, an older espalier is measured beside it in the
# same runs: the before/after of a change to the stream's path (#56: the answer's head made
# the stream's response from its index, no longer parsed back).
#
# Installs nginx, nodejs, valgrind and nghttp2-client from Debian when missing.
#   bench/h2_proxy.sh                                  # DURATION=5 RUNS=3 REQUESTS=3000
#   BASELINE_BIN=/path/to/older/espalier bench/h2_proxy.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-5}
RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-3000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light node:nodejs valgrind:valgrind h2load:nghttp2-client python3:python3
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-h2-proxy-bench
mkdir -p "$WORK/nginx"

cat > "$WORK/server.js" <<'JS'
const http = require('http');
http.createServer((req, res) => {
  res.writeHead(200, {'Content-Type': 'text/plain', 'Content-Length': '3'});
  res.end('ok\n');
}).listen(parseInt(process.env.PORT, 10), '127.0.0.1');
JS

APP=$(free_port)
espalier_conf() { # file port admin
  cat >"$WORK/$1" <<CONF
[server]
admin = "127.0.0.1:$3"
[[pool]]
name = "front"
processes = 1
cpus = "$SERVER_CPU"
affinity = "hard"
[[upstream]]
name = "app"
servers = ["127.0.0.1:$APP"]
[[site]]
name = "front"
bindings = ["http://127.0.0.1:$2"]
[[site.app]]
path = "/"
upstream = "app"
CONF
}
nginx_conf() { # file port pidfile
  cat > "$1" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(format(1<<$SERVER_CPU,'b'))");
daemon off;
error_log $WORK/nginx/error.log;
pid $3;
events { worker_connections 4096; }
http {
  access_log off;
  # nginx closes an HTTP/2 connection after 1 000 requests by default; h2load does not open
  # another, and espalier has no such bound.
  keepalive_requests 100000000;
  upstream app { server 127.0.0.1:$APP; keepalive 64; }
  server {
    listen 127.0.0.1:$2 http2;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
}

# h2_load PORT [N] — h2load over h2c, pinned to CLIENT_CPU: prints "requests requests/s"
# (N requests, else DURATION seconds).
h2_load() {
  local out what=(-D "$DURATION")
  [ -n "${2:-}" ] && what=(-n "$2")
  out=$(taskset -c "$CLIENT_CPU" h2load -c10 -m10 "${what[@]}" "http://127.0.0.1:$1/")
  echo "$(awk '/^requests:/ {print $8}' <<<"$out") $(awk '/^finished in/ {print $4}' <<<"$out")"
}

(cd "$WORK" && exec taskset -c "$CLIENT_CPU" env PORT="$APP" node server.js) >"$WORK/app.out" 2>&1 & PIDS+=($!)
wait_port "$APP"
declare -A PORT NAME
targets=(new nginx)
PORT[new]=$(free_port); NAME[new]="espalier"
espalier_conf new.toml "${PORT[new]}" "$(free_port)"
start new "$ESPALIER" serve -c new.toml
if [ -n "${BASELINE_BIN:-}" ]; then
  targets=(base new nginx)
  PORT[base]=$(free_port); NAME[base]="espalier (baseline)"
  espalier_conf base.toml "${PORT[base]}" "$(free_port)"
  start base "$BASELINE_BIN" serve -c base.toml
fi
PORT[nginx]=$(free_port); NAME[nginx]="nginx proxy_pass"
nginx_conf "$WORK/nginx/nginx.conf" "${PORT[nginx]}" "$WORK/nginx/nginx.pid"
start nginx "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
for t in "${targets[@]}"; do wait_port "${PORT[$t]}"; done

declare -A REQS TICKS RPS INSNS
for t in "${targets[@]}"; do h2_load "${PORT[$t]}" 1000 >/dev/null; REQS[$t]=0; TICKS[$t]=0; RPS[$t]=0; done
echo "HTTP/2 clients through to one HTTP/1.1 server ($RUNS interleaved runs of ${DURATION}s)…" >&2
for _ in $(seq "$RUNS"); do
  for t in "${targets[@]}"; do
    mapfile -t tier < <(tier_pids "$t")
    before=$(proc_ticks "${tier[@]}")
    read -r reqs rps < <(h2_load "${PORT[$t]}")
    TICKS[$t]=$((TICKS[$t] + $(proc_ticks "${tier[@]}") - before))
    REQS[$t]=$((REQS[$t] + reqs))
    if python3 -c "import sys; sys.exit(0 if $rps > ${RPS[$t]} else 1)"; then RPS[$t]=$rps; fi
  done
done

# User-space instructions per request, each espalier's worker and nginx under callgrind.
cg_espalier() { # target binary
  local port admin pid w
  port=$(free_port); admin=$(free_port)
  espalier_conf "cg-$1.toml" "$port" "$admin"
  (cd "$WORK" && exec taskset -c "$SERVER_CPU" valgrind --tool=callgrind --trace-children=yes "--callgrind-out-file=$WORK/cg.%p" "$2" serve -c "cg-$1.toml") >"$WORK/cg-$1.out" 2>&1 &
  pid=$!; PIDS+=($pid)
  for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  h2_load "$port" 500 >/dev/null
  w=$(pgrep -f "callgrind.*$2 worker" | head -1)
  cg_zero "$w"
  read -r reqs _ < <(h2_load "$port" "$REQUESTS")
  INSNS[$1]=$(per_request "$(cg_dump_sum "$WORK" "$w")" "$reqs")
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cg_espalier new "$ESPALIER"
[ -n "${BASELINE_BIN:-}" ] && cg_espalier base "$BASELINE_BIN"
ngcg=$(free_port)
nginx_conf "$WORK/nginx/cg.conf" "$ngcg" "$WORK/nginx/cg.pid"
(exec taskset -c "$SERVER_CPU" valgrind --tool=callgrind "--callgrind-out-file=$WORK/cg.%p" "$NGINX" -c "$WORK/nginx/cg.conf" -p "$WORK/nginx" -g "master_process off;") >"$WORK/ngcg.out" 2>&1 &
ngpid=$!; PIDS+=($ngpid)
for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$ngcg") 2>/dev/null && break; sleep 0.1; done
h2_load "$ngcg" 500 >/dev/null
cg_zero "$ngpid"
read -r reqs _ < <(h2_load "$ngcg" "$REQUESTS")
INSNS[nginx]=$(per_request "$(cg_dump_sum "$WORK" "$ngpid")" "$reqs")
kill "$ngpid" 2>/dev/null || true

echo
echo "HTTP/2 (h2c) clients → proxy → one HTTP/1.1 Node server (h2load -c10 -m10, $RUNS×${DURATION}s; instructions over $REQUESTS requests)"
printf '%-24s %10s %12s %10s %16s %10s\n' target req/s cpu_us/req vs_nginx user_insns/req vs_nginx
nginx_us=$(us_per "${TICKS[nginx]}" "${REQS[nginx]}")
for t in "${targets[@]}"; do
  cpu=$(us_per "${TICKS[$t]}" "${REQS[$t]}")
  printf '%-24s %10s %12s %10s %16s %10s\n' "${NAME[$t]}" "${RPS[$t]}" "$cpu" "$(ratio "$cpu" "$nginx_us")" "${INSNS[$t]}" "$(ratio "${INSNS[$t]}" "${INSNS[nginx]}")"
  [ "$t" = base ] && BASE_US=$cpu
done
if [ -n "${BASELINE_BIN:-}" ]; then
  echo "espalier against its baseline: CPU $(ratio "$(us_per "${TICKS[new]}" "${REQS[new]}")" "$BASE_US"), instructions $(ratio "${INSNS[new]}" "${INSNS[base]}")"
fi
echo "(CPU: user+system of every proxy process and thread, /proc/<pid>/stat; instructions: callgrind, user space only)"
