#!/usr/bin/env bash
# bench/buffering.sh — slow clients against a sync app (issue #61, item 2): a gunicorn pool of
# 4 sync workers (tests/apps/buffer_app.py) answers SLOW clients that each ask for BIG_MB MiB and
# read 1 KB a second, while one normal client asks for a 2-byte page RATE times a second.
# The normal client's p50, p99 and errors, through espalier with `buffer` on (the default of
# max_requests_per_process = 1), through espalier with buffer = false, and through nginx
# (proxy_buffering on, its default) in front of the same app, in one run; the ratio is
# espalier's (buffered) p99 to nginx's.
# Installs nginx and gunicorn from Debian when missing.
#   bench/buffering.sh                 # SLOW=200 BIG_MB=8 RATE=50 DURATION=15
#   ESPALIER_BIN=/path/to/espalier bench/buffering.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SLOW=${SLOW:-200}
# 1 MiB answers do not show it on loopback: the kernel holds up to tcp_wmem (4 MiB) of each.
BIG_MB=${BIG_MB:-8}
RATE=${RATE:-50}
DURATION=${DURATION:-15}
SERVER_CPU=${SERVER_CPU:-0}
NGINX=${NGINX:-nginx}

. "$ROOT/bench/common.sh"
need_tools python3:python3 gunicorn:gunicorn nginx:nginx-light
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-buffering-bench
cp "$ROOT/tests/apps/buffer_app.py" "$WORK/"

espalier_run() { # KEYS — one measured run through espalier with the pool's extra KEYS
  ESP_PORT=$(free_port)
  cat >"$WORK/espalier.toml" <<CONF
[server]
admin = "127.0.0.1:$(free_port)"
[[pool]]
name = "sync"
processes = 4
command = ["gunicorn", "--bind", "127.0.0.1:{port}", "--workers", "1", "buffer_app:app"]
max_requests_per_process = 1
$1
[[site]]
name = "s"
bindings = ["http://127.0.0.1:$ESP_PORT"]
[[site.app]]
pool = "sync"
CONF
  start_espalier ""
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$ESP_PORT/small" && break; sleep 0.2; done
  python3 "$ROOT/bench/slow_clients.py" "$ESP_PORT" "$SLOW" "/big?mb=$BIG_MB" "$RATE" "$DURATION"
  stop_all
}

nginx_run() {
  local app_port; app_port=$(free_port); NGINX_PORT=$(free_port)
  (cd "$WORK" && exec gunicorn --bind "127.0.0.1:$app_port" --workers 4 buffer_app:app) >"$WORK/gunicorn.out" 2>&1 &
  PIDS+=($!)
  wait_port "$app_port"
  mkdir -p "$WORK/nginx/logs"
  cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  upstream app { server 127.0.0.1:$app_port; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / { proxy_pass http://app; proxy_http_version 1.1; }
  }
}
CONF
  start_nginx "" -g "daemon off;"
  python3 "$ROOT/bench/slow_clients.py" "$NGINX_PORT" "$SLOW" "/big?mb=$BIG_MB" "$RATE" "$DURATION"
  stop_all
}

echo "slow clients: $SLOW reading $BIG_MB MiB at 1 KB/s; a normal client at $RATE/s for ${DURATION}s (p50 ms, p99 ms, errors of requests)"
read -r on50 on99 onerr n <<<"$(espalier_run "")"
echo "espalier, buffer on (default): p50 $on50  p99 $on99  errors $onerr of $n"
read -r off50 off99 offerr n <<<"$(espalier_run "buffer = false")"
echo "espalier, buffer = false:      p50 $off50  p99 $off99  errors $offerr of $n"
read -r ng50 ng99 ngerr n <<<"$(nginx_run)"
echo "nginx, proxy_buffering on:     p50 $ng50  p99 $ng99  errors $ngerr of $n"
echo "p99 espalier (buffered) / nginx: $(ratio "$on99" "$ng99")"
