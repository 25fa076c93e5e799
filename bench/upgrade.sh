#!/usr/bin/env bash
# bench/upgrade.sh — a new binary installed under load (#57), side by side with nginx's own
# binary upgrade (USR2, then QUIT to the old master) in the same run.
#
# espalier: a static page over HTTP/1.1 (keep-alive), HTTP/2 and HTTP/3 (https, one
# self-signed certificate), each loaded by `espalier bench --no-retry` at a fixed rate
# (RATE requests/s each, open loop: latency corrected for coordinated omission) for DURATION;
# after a third of it, the binary is replaced on disk (copied beside and renamed over, as a
# package does) and `espalier upgrade` run. nginx: the same page over HTTP/1.1 under the same
# load, its binary upgraded by USR2 + QUIT at the same moment. Prints per load: requests,
# failed requests (every request left unanswered counts: --no-retry), p99 and the longest
# wait (the longest pause in answers), and how long the old master took to exit after the
# new one served; then nginx's, and the ratio of the longest waits.
#
#   bench/upgrade.sh                          # RATE=500 DURATION=12s
#   RATE=2000 DURATION=20s bench/upgrade.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RATE=${RATE:-500}
DURATION=${DURATION:-12}
CONNS=${CONNS:-20}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light openssl:openssl python3:python3 curl:curl
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-upgrade

mkdir -p "$WORK/www" "$WORK/nginx" "$WORK/bin"
python3 -c 'open("'"$WORK"'/www/index.html","w").write("x"*99+"\n")'
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test,IP:127.0.0.1 2>/dev/null
chmod 644 "$WORK/key.pem"
cp "$ESPALIER" "$WORK/bin/espalier"
HTTP=$(free_port)
HTTPS=$(free_port)
ADMIN=$(free_port)
NGINX_PORT=$(free_port)

cat >"$WORK/espalier.toml" <<CONF
[server]
admin = "127.0.0.1:$ADMIN"
http3 = true
[[pool]]
name = "web"
[[site]]
name = "web"
bindings = ["http://127.0.0.1:$HTTP", "https://127.0.0.1:$HTTPS"]
tls = { cert = "cert.pem", key = "key.pem" }
root = "www"
[[site.app]]
pool = "web"
CONF
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
error_log $WORK/nginx/error.log;
pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  default_type text/html;
  server { listen 127.0.0.1:$NGINX_PORT; root $WORK/www; }
}
CONF

# load NAME ARGS… — espalier bench at RATE for DURATION into $WORK/NAME.json, in the background.
load() {
  local name=$1
  shift
  "$ESPALIER" bench --no-retry --rate "$RATE" -c "$CONNS" -d "${DURATION}s" --json "$@" \
    >"$WORK/$name.json" 2>"$WORK/$name.err" &
  LOADS+=($!)
}

# report NAME — requests, failed, p99 and longest wait of a load.
report() {
  python3 - "$WORK/$1.json" "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
l = r["latency_ms"]
print(f"{sys.argv[2]:<22} {r['requests']:>9} {r['errors']:>7} {l['p99']:>9.1f} {l['max']:>10.1f}")
PY
}

longest() { python3 -c "import json; print(json.load(open('$WORK/$1.json'))['latency_ms']['max'])"; }

# espalier: start, load, upgrade a third of the way in.
(cd "$WORK" && exec "$WORK/bin/espalier" serve -c espalier.toml) >"$WORK/espalier.out" 2>&1 &
OLD=$!
PIDS+=("$OLD")
for _ in $(seq 200); do grep -q "serving" "$WORK/espalier.out" && break; sleep 0.1; done
LOADS=()
load h1 "http://127.0.0.1:$HTTP/"
load h2 --h2 -k "https://127.0.0.1:$HTTPS/"
load h3 --h3 -k "https://127.0.0.1:$HTTPS/"
sleep $((DURATION / 3))
cp "$ESPALIER" "$WORK/bin/espalier.new" && mv "$WORK/bin/espalier.new" "$WORK/bin/espalier"
said=$("$WORK/bin/espalier" upgrade --admin "127.0.0.1:$ADMIN" --token "$(cat "/run/espalier/admin-$ADMIN.token")")
served=$(date +%s.%N)
NEW=$(echo "$said" | sed -n 's/.*(pid \([0-9]*\)).*/\1/p')
PIDS+=("$NEW")
while kill -0 "$OLD" 2>/dev/null; do sleep 0.05; done
old_exit=$(python3 -c "print(f'{$(date +%s.%N) - $served:.2f}')")
for p in "${LOADS[@]}"; do wait "$p"; done

# nginx: the same HTTP/1.1 load, its own binary upgrade at the same moment.
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" >"$WORK/nginx.out" 2>&1
wait_port "$NGINX_PORT"
PIDS+=("$(cat "$WORK/nginx/nginx.pid")")
LOADS=()
load nginx "http://127.0.0.1:$NGINX_PORT/"
sleep $((DURATION / 3))
kill -USR2 "$(cat "$WORK/nginx/nginx.pid")"
for _ in $(seq 200); do [ -s "$WORK/nginx/nginx.pid.oldbin" ] && break; sleep 0.05; done
sleep 1
PIDS+=("$(cat "$WORK/nginx/nginx.pid")")
kill -QUIT "$(cat "$WORK/nginx/nginx.pid.oldbin")"
for p in "${LOADS[@]}"; do wait "$p"; done
kill -QUIT "$(cat "$WORK/nginx/nginx.pid")" 2>/dev/null || true

echo "an upgrade under $RATE requests/s per load, $CONNS connections each, ${DURATION}s"
printf '%-22s %9s %7s %9s %10s\n' load requests failed "p99 ms" "longest ms"
for l in h1 h2 h3; do report "$l"; done
report nginx
echo "espalier's old master exited ${old_exit}s after the new one served: $said"
echo "longest wait, espalier HTTP/1.1 / nginx: $(ratio "$(longest h1)" "$(longest nginx)")"
