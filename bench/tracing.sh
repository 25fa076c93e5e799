#!/usr/bin/env bash
# bench/tracing.sh — what tracing costs (#62 item 2): espalier in front of a pool's Node app
# (a few lines answering "ok"), its CPU time per request with tracing off, at 1 % sampling
# and at 100 % — every request then a server span and a hop span posted over OTLP/HTTP —
# against the same build without `[server.tracing]` and, when ESPALIER_BEFORE names it, a
# build from before tracing existed (the "off costs nothing" check), with nginx's
# `proxy_pass` to the same kind of app as the peer, all interleaved in one run.
#
# The collector is nginx answering 200 to every POST (a sink: what is measured is
# espalier's side of the export, not a collector's decoding). Keep-alive load from wrk (CONNS
# connections) pinned to CLIENT_CPU, the servers and apps on SERVER_CPU; CPU per request is
# the user + system time of every process and thread of the server (its app's included)
# from /proc, the median of RUNS runs; the proxy's alone (its app left out) beside it — the
# `traceparent` every request now carries costs the app its parsing too. No instruction
# counts are taken here.
#
# Installs nginx, wrk and nodejs from Debian when missing.
#   bench/tracing.sh                    # DURATION=5 RUNS=5 CONNS=32
#   ESPALIER_BEFORE=/tmp/espalier-pre ESPALIER_BIN=target/release/espalier bench/tracing.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-5}
RUNS=${RUNS:-5}
CONNS=${CONNS:-32}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk node:nodejs python3:python3 curl:curl
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-tracing-bench
mkdir -p "$WORK/nginx"

cat >"$WORK/app.js" <<'JS'
const http = require('http');
http.createServer((req, res) => {
  res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': '3' });
  res.end('ok\n');
}).listen(Number(process.env.PORT), '127.0.0.1');
JS

COLLECTOR=$(free_port) NG=$(free_port) APP=$(free_port)
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
error_log $WORK/nginx/error.log;
pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  upstream app { server 127.0.0.1:$APP; keepalive 64; }
  server {
    listen 127.0.0.1:$NG;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
cat >"$WORK/nginx/sink.conf" <<CONF
worker_processes 1;
daemon off;
error_log $WORK/nginx/sink-error.log;
pid $WORK/nginx/sink.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_buffer_size 1m;
  server { listen 127.0.0.1:$COLLECTOR; location / { return 200; } }
}
CONF

declare -A PORT
espalier_conf() { # name tracing-lines
  PORT[$1]=$(free_port)
  cat >"$WORK/$1.toml" <<CONF
[server]
admin = "127.0.0.1:$(free_port)"
$2
[[pool]]
name = "app"
processes = 1
command = ["node", "$WORK/app.js"]
[[site]]
name = "s"
bindings = ["http://127.0.0.1:${PORT[$1]}"]
[[site.app]]
pool = "app"
CONF
}
espalier_conf off ""
espalier_conf one "[server.tracing]
otlp = \"http://127.0.0.1:$COLLECTOR\"
sample = 0.01"
espalier_conf all "[server.tracing]
otlp = \"http://127.0.0.1:$COLLECTOR\"
sample = 1.0"
PORT[nginx]=$NG

(cd "$WORK" && exec taskset -c "$CLIENT_CPU" "$NGINX" -c "$WORK/nginx/sink.conf" -p "$WORK/nginx") >"$WORK/sink.out" 2>&1 &
PIDS+=($!)
# nginx's app, on the server CPU as espalier's pools' are.
(cd "$WORK" && exec taskset -c "$SERVER_CPU" env PORT="$APP" node app.js) >"$WORK/app.out" 2>&1 &
PIDS+=($!)
PID_nodeapp=$!
start nginx "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
targets=(off one all nginx)
for t in off one all; do start "$t" "$ESPALIER" serve -c "$t.toml"; done
if [ -n "${ESPALIER_BEFORE:-}" ]; then
  espalier_conf before ""
  start before "$ESPALIER_BEFORE" serve -c before.toml
  targets=(before "${targets[@]}")
fi
for t in "${targets[@]}"; do wait_port "${PORT[$t]}"; done
wait_port "$COLLECTOR"
for t in "${targets[@]}"; do
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:${PORT[$t]}/" && break; sleep 0.2; done
done

# nginx's tier: nginx and its app, which is not its child.
server_tier() { tier_pids "$1"; if [ "$1" = nginx ]; then echo "$PID_nodeapp"; fi; }

# The tier without its app (the processes not named `node`): the proxy's own cost.
proxy_only() { local p; for p in "$@"; do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = node ] || echo "$p"; done; }

# One measured load: "requests µs_per_request p99_ms proxy_µs_per_request".
measure() {
  local t=$1 out before reqs proxy_before
  mapfile -t tier < <(server_tier "$t")
  mapfile -t proxy < <(proxy_only "${tier[@]}")
  before=$(proc_ticks "${tier[@]}")
  proxy_before=$(proc_ticks "${proxy[@]}")
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:${PORT[$t]}/")
  local ms='function ms(v){ if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }'
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  if grep -q "Non-2xx\|Socket errors" <<<"$out"; then echo "$t: $(grep -E 'Non-2xx|Socket errors' <<<"$out")" >&2; fi
  echo "$reqs $(us_per $(($(proc_ticks "${tier[@]}") - before)) "$reqs") $(awk "$ms"' $1=="99%" {print ms($2)}' <<<"$out") \
$(us_per $(($(proc_ticks "${proxy[@]}") - proxy_before)) "$reqs")"
}

for t in "${targets[@]}"; do measure "$t" >/dev/null; done # warm
declare -A ROWS
echo "$RUNS interleaved runs of ${DURATION}s, $CONNS connections: ${targets[*]}…" >&2
for _ in $(seq "$RUNS"); do
  for t in "${targets[@]}"; do ROWS[$t]+="$(measure "$t")"$'\n'; done
done
dropped=$(cat "$WORK"/all.out "$WORK"/one.out | grep -c "spans dropped" || true)

args=()
for t in "${targets[@]}"; do args+=("$t" "${ROWS[$t]}"); done
python3 - "$DURATION" "${args[@]}" <<'PY'
import statistics as st, sys
duration = float(sys.argv[1])
names, blocks = sys.argv[2::2], sys.argv[3::2]
rows = {n: [list(map(float, l.split())) for l in b.strip().splitlines()] for n, b in zip(names, blocks)}
med = lambda n, k: st.median(r[k] for r in rows[n])
# Each run's pair, side by side, then the median of the ratios.
pair = lambda a, b: st.median(x[1] / y[1] for x, y in zip(rows[a], rows[b]))
label = {"before": "before tracing existed", "off": "tracing off", "one": "sample = 0.01",
         "all": "sample = 1.0", "nginx": "nginx proxy_pass"}
proxy_pair = lambda a, b: st.median(x[3] / y[3] for x, y in zip(rows[a], rows[b]))
print(f"{'server':<24} {'requests/s':>11} {'µs/request':>11} {'p99 ms':>8} {'/ off':>7} {'/ nginx':>8} {'proxy µs':>9} {'proxy / off':>12}")
for n in names:
    print(f"{label[n]:<24} {med(n, 0) / duration:>11.0f} {med(n, 1):>11.1f} {med(n, 2):>8.2f} "
          f"{pair(n, 'off'):>7.3f} {pair(n, 'nginx'):>8.2f} {med(n, 3):>9.1f} {proxy_pair(n, 'off'):>12.3f}")
PY
echo "lines saying spans were dropped: $dropped"
