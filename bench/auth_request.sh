#!/usr/bin/env bash
# bench/auth_request.sh — the sign-in step by another service (#62 item 1): what asking a
# verifier adds to a request, through espalier (`auth = { request }`) and through nginx
# (`auth_request` to an upstream with keep-alive), side by side in one run.
#
# The verifier is a Node server of a few lines on CLIENT_CPU (200 with X-User for the cookie
# `session=alice`, else 401); each server answers a 100-byte static file on SERVER_CPU, once
# without sign-in and once asking the verifier on every request (no let-in remembered, as
# nginx remembers none). Keep-alive load from wrk (CONNS connections, the cookie on every
# request) pinned to CLIENT_CPU; the four servers interleaved RUNS times. Prints, per server,
# the median over runs of the server's CPU time per request (user + system of every process
# and thread, from /proc) with and without the step, what the step adds, and p50/p99
# latency; then espalier's added cost and latency against nginx's. CPU per request is the
# whole cost; no instruction counts are taken here.
#
# Installs nginx, wrk and nodejs from Debian when missing.
#   bench/auth_request.sh               # DURATION=5 RUNS=5 CONNS=32
#   ESPALIER_BIN=/path/to/espalier bench/auth_request.sh
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
bench_workdir espalier-auth-request-bench
mkdir -p "$WORK/nginx" "$WORK/www"
head -c 100 /dev/zero | tr '\0' 'a' >"$WORK/www/100.html"

cat >"$WORK/verifier.js" <<'JS'
const http = require('http');
http.createServer((req, res) => {
  if ((req.headers.cookie || '').includes('session=alice')) {
    res.writeHead(200, { 'X-User': 'alice', 'Content-Length': '0' });
  } else {
    res.writeHead(401, { 'WWW-Authenticate': 'Bearer', 'Content-Length': '0' });
  }
  res.end();
}).listen(Number(process.env.PORT), '127.0.0.1');
JS
V=$(free_port)
(cd "$WORK" && exec taskset -c "$CLIENT_CPU" env PORT="$V" node verifier.js) >"$WORK/verifier.out" 2>&1 &
PIDS+=($!)

ESP=$(free_port) ESPAUTH=$(free_port) NG=$(free_port) NGAUTH=$(free_port)
espalier_conf() { # file port auth-line
  cat >"$WORK/$1" <<CONF
[server]
admin = "127.0.0.1:$(free_port)"
[[site]]
name = "s"
bindings = ["http://127.0.0.1:$2"]
root = "www"
$3
CONF
}
espalier_conf plain.toml "$ESP" ""
espalier_conf auth.toml "$ESPAUTH" "auth = { request = \"http://127.0.0.1:$V/verify\", copy = [\"X-User\"] }"
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
error_log $WORK/nginx/error.log;
pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  upstream verifier { server 127.0.0.1:$V; keepalive 64; }
  server {
    listen 127.0.0.1:$NG;
    root $WORK/www;
  }
  server {
    listen 127.0.0.1:$NGAUTH;
    root $WORK/www;
    location / { auth_request /auth; auth_request_set \$user \$upstream_http_x_user; }
    location = /auth {
      internal;
      proxy_pass http://verifier/verify;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Original-URI \$request_uri;
    }
  }
}
CONF

start nginx "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
start esp "$ESPALIER" serve -c plain.toml
start espauth "$ESPALIER" serve -c auth.toml
for p in "$V" "$ESP" "$ESPAUTH" "$NG" "$NGAUTH"; do wait_port "$p"; done

port_of() { case $1 in esp) echo "$ESP" ;; espauth) echo "$ESPAUTH" ;; ng) echo "$NG" ;; ngauth) echo "$NGAUTH" ;; esac; }
pid_of() { case $1 in ng | ngauth) echo nginx ;; *) echo "$1" ;; esac; }

# The step works before it is measured: a let-in, and a refusal without the cookie.
for t in espauth ngauth; do
  ok=$(curl -s -o /dev/null -w '%{http_code}' -H 'Cookie: session=alice' "http://127.0.0.1:$(port_of "$t")/100.html")
  no=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(port_of "$t")/100.html")
  [ "$ok $no" = "200 401" ] || { echo "$t answered $ok with the cookie and $no without, not 200 and 401" >&2; exit 1; }
done

# One measured load: "requests p50_ms p99_ms µs_per_request".
measure() {
  local t=$1 out before reqs
  mapfile -t tier < <(tier_pids "$(pid_of "$t")")
  before=$(proc_ticks "${tier[@]}")
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency \
    -H 'Cookie: session=alice' "http://127.0.0.1:$(port_of "$t")/100.html")
  local ms='function ms(v){ if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }'
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  if grep -q "Non-2xx" <<<"$out"; then echo "$t: $(grep Non-2xx <<<"$out")" >&2; exit 1; fi
  echo "$reqs $(awk "$ms"' $1=="50%" {print ms($2)}' <<<"$out") $(awk "$ms"' $1=="99%" {print ms($2)}' <<<"$out") \
$(us_per $(($(proc_ticks "${tier[@]}") - before)) "$reqs")"
}

targets=(esp espauth ng ngauth)
for t in "${targets[@]}"; do measure "$t" >/dev/null; done # warm
declare -A ROWS
echo "$RUNS interleaved runs of ${DURATION}s, $CONNS connections, the verifier asked on every request…" >&2
for _ in $(seq "$RUNS"); do
  for t in "${targets[@]}"; do ROWS[$t]+="$(measure "$t")"$'\n'; done
done

python3 - "${ROWS[esp]}" "${ROWS[espauth]}" "${ROWS[ng]}" "${ROWS[ngauth]}" <<'PY'
import statistics as st, sys
rows = [[list(map(float, l.split())) for l in block.strip().splitlines()] for block in sys.argv[1:]]
esp, espauth, ng, ngauth = rows
med = lambda runs, k: st.median(r[k] for r in runs)
# What the step adds, per run (the pairs were measured side by side), then the median.
added = lambda a, b: st.median(y[3] - x[3] for x, y in zip(a, b))
added_p50 = lambda a, b: st.median(y[1] - x[1] for x, y in zip(a, b))
print(f"{'server':<10} {'plain µs/req':>13} {'asking µs/req':>14} {'added µs':>9} {'plain p50/p99 ms':>17} {'asking p50/p99 ms':>18}")
for name, a, b in (("espalier", esp, espauth), ("nginx", ng, ngauth)):
    print(f"{name:<10} {med(a, 3):>13.1f} {med(b, 3):>14.1f} {added(a, b):>9.1f} "
          f"{med(a, 1):>8.2f}/{med(a, 2):<8.2f} {med(b, 1):>8.2f}/{med(b, 2):<8.2f}")
e, n = added(esp, espauth), added(ng, ngauth)
print(f"the step's added CPU per request, espalier/nginx: {e / n:.2f}" if n > 0 else "nginx's added cost was not positive: no ratio")
print(f"with the step, CPU per request espalier/nginx: {med(espauth, 3) / med(ngauth, 3):.2f}")
print(f"with the step, p50 espalier/nginx: {med(espauth, 1) / med(ngauth, 1):.2f}; added p50 espalier {added_p50(esp, espauth):.2f} ms, nginx {added_p50(ng, ngauth):.2f} ms")
PY
