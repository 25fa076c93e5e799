#!/usr/bin/env bash
# bench/cache.sh — the response cache (`cache_responses`, #61) against the same answer served
# as a static file by espalier and against nginx's `proxy_cache` in front of the same app, in
# one run.
#
# Part 1, a cached 2 KB answer: a Node server answers every path with 2 KB and
# `Cache-Control: public, max-age=600`. Keep-alive load from wrk (one thread, CONNS
# connections) on one URL — every request after the first a hit — against espalier's
# upstream group with cache_responses, against espalier serving the same 2 KB as a file, and
# against nginx with proxy_cache in front of the same server; the runs interleaved, every
# server on SERVER_CPU, wrk and the app on CLIENT_CPU. Prints requests/s, p99 and the server
# tier's CPU time per request (user + system of every process and thread, /proc/<pid>/stat,
# summed over the runs), with the ratios cached ÷ static and cached ÷ nginx.
#
# Part 1b: the user-space instructions per hit of espalier's worker and of nginx (callgrind:
# user space only, not the whole cost).
#
# Part 2, a Zipf load: 10,000 URLs of the same app asked by wrk with a Zipf distribution
# (s = 1, a Lua script), through espalier's cache (64 MiB) and nginx's: the requests the
# app got, and the hit ratio each implies.
#
# Installs nginx, wrk, nodejs and valgrind from Debian when missing.
#   bench/cache.sh                      # DURATION=5 RUNS=3
#   ESPALIER_BIN=/path/to/espalier DURATION=3 RUNS=2 bench/cache.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-5}
RUNS=${RUNS:-3}
CONNS=${CONNS:-32}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
KEYS=${KEYS:-10000}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk node:nodejs python3:python3 curl:curl valgrind:valgrind
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-cache-bench
mkdir -p "$WORK/nginx/cache" "$WORK/www"

# The app: 2 KB for every path, cacheable for 10 minutes; GET /count says how many it served.
cat >"$WORK/app.js" <<'JS'
const http = require('http');
const body = 'x'.repeat(2047) + '\n';
let answered = 0;
http.createServer((req, res) => {
  if (req.url === '/count') { res.end(String(answered)); return; }
  answered++;
  res.writeHead(200, {'Content-Type': 'text/plain', 'Content-Length': String(body.length),
    'Cache-Control': 'public, max-age=600'});
  res.end(body);
}).listen(parseInt(process.env.PORT, 10), '127.0.0.1');
JS
python3 -c "import sys; open(sys.argv[1], 'w').write('x' * 2047 + '\n')" "$WORK/www/page.txt"

APP=$(free_port); CACHED=$(free_port); STATIC=$(free_port); NG=$(free_port)
CACHED_ADMIN=$(free_port)

cat >"$WORK/cached.toml" <<CONF
[server]
admin = "127.0.0.1:$CACHED_ADMIN"
[[pool]]
name = "front"
processes = 1
cpus = "$SERVER_CPU"
affinity = "hard"
[[upstream]]
name = "app"
servers = ["127.0.0.1:$APP"]
cache_responses = { size = "64MiB", entry = "64KiB" }
[[site]]
name = "front"
bindings = ["http://127.0.0.1:$CACHED"]
[[site.app]]
upstream = "app"
CONF
cat >"$WORK/static.toml" <<CONF
[server]
admin = "127.0.0.1:$(free_port)"
[[pool]]
name = "front"
processes = 1
cpus = "$SERVER_CPU"
affinity = "hard"
[[site]]
name = "front"
bindings = ["http://127.0.0.1:$STATIC"]
root = "www"
CONF
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(format(1<<$SERVER_CPU,'b'))");
daemon off;
error_log $WORK/nginx/error.log;
pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  proxy_cache_path $WORK/nginx/cache keys_zone=answers:64m max_size=1g;
  upstream app { server 127.0.0.1:$APP; keepalive 64; }
  server {
    listen 127.0.0.1:$NG;
    location / { proxy_cache answers; proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF

(cd "$WORK" && exec taskset -c "$CLIENT_CPU" env PORT="$APP" node app.js) >"$WORK/app.out" 2>&1 & PIDS+=($!)
start nginx "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
start cached "$ESPALIER" serve -c cached.toml
start static "$ESPALIER" serve -c static.toml
for p in "$APP" "$NG" "$CACHED" "$STATIC"; do wait_port "$p"; done

url_of() { case $1 in cached) echo "http://127.0.0.1:$CACHED/page.txt" ;; static) echo "http://127.0.0.1:$STATIC/page.txt" ;; nginx) echo "http://127.0.0.1:$NG/page.txt" ;; esac; }
served() { curl -s "http://127.0.0.1:$APP/count"; }

echo "part 1: one 2 KB answer, cached, static and through nginx ($RUNS interleaved runs of ${DURATION}s)…" >&2
targets=(cached static nginx)
declare -A REQS TICKS RPS P99
for t in "${targets[@]}"; do wrk_load "$(url_of "$t")" 1 >/dev/null; REQS[$t]=0; TICKS[$t]=0; RPS[$t]=0; P99[$t]=-; done
app_before=$(served)
for _ in $(seq "$RUNS"); do
  for t in "${targets[@]}"; do
    mapfile -t tier < <(tier_pids "$t")
    before=$(proc_ticks "${tier[@]}")
    read -r reqs rps _ p99 < <(wrk_load "$(url_of "$t")" "$DURATION")
    TICKS[$t]=$((TICKS[$t] + $(proc_ticks "${tier[@]}") - before))
    REQS[$t]=$((REQS[$t] + reqs))
    if python3 -c "import sys; sys.exit(0 if $rps > ${RPS[$t]} else 1)"; then RPS[$t]=$rps; P99[$t]=$p99; fi
  done
done
app_during=$(( $(served) - app_before ))
status=$(curl -s "http://127.0.0.1:$CACHED_ADMIN/status")
hits=$(python3 -c "import json,sys; s=json.loads(sys.argv[1]); print(sum(w.get('cache',{}).get('hits',0) for p in s['pools'] for w in p['workers']))" "$status")

echo
echo "part 1 — a cached 2 KB answer, keep-alive (wrk -t1 -c$CONNS, $RUNS×${DURATION}s)"
printf '%-34s %10s %8s %12s\n' target req/s p99_ms cpu_us/req
for t in "${targets[@]}"; do
  name=$(case $t in cached) echo "espalier cache_responses" ;; static) echo "espalier, the same 2 KB as a file" ;; nginx) echo "nginx proxy_cache" ;; esac)
  printf '%-34s %10s %8s %12s\n' "$name" "${RPS[$t]}" "${P99[$t]}" "$(us_per "${TICKS[$t]}" "${REQS[$t]}")"
done
cached_us=$(us_per "${TICKS[cached]}" "${REQS[cached]}")
echo "cached ÷ static: $(ratio "$cached_us" "$(us_per "${TICKS[static]}" "${REQS[static]}")") (goal ≤ 1.2); cached ÷ nginx proxy_cache: $(ratio "$cached_us" "$(us_per "${TICKS[nginx]}" "${REQS[nginx]}")") (goal ≤ 0.8)"
echo "the app answered $app_during of those requests; espalier's cache counted $hits hits"
echo "(CPU: user+system of every server process and thread, /proc/<pid>/stat)"

# User-space instructions per hit (callgrind; user space only, not the whole cost): the
# cached espalier's worker and nginx's one process, each under the same load again.
echo "part 1b: user-space instructions per request under callgrind…" >&2
CG=$(free_port); NGCG=$(free_port)
sed -e "s/127.0.0.1:$CACHED\"/127.0.0.1:$CG\"/" -e "s/^admin = .*/admin = \"127.0.0.1:$(free_port)\"/" "$WORK/cached.toml" >"$WORK/cg.toml"
(cd "$WORK" && exec taskset -c "$SERVER_CPU" valgrind --tool=callgrind --trace-children=yes "--callgrind-out-file=$WORK/cg.%p" "$ESPALIER" serve -c cg.toml) >"$WORK/cg.out" 2>&1 &
cgpid=$!; PIDS+=($cgpid)
for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$CG") 2>/dev/null && break; sleep 0.1; done
wrk_load "http://127.0.0.1:$CG/page.txt" 2 >/dev/null
cgw=$(pgrep -f "callgrind.*$ESPALIER worker" | head -1)
cg_zero "$cgw"
read -r reqs _ _ _ < <(wrk_load "http://127.0.0.1:$CG/page.txt" "$DURATION")
esp_insns=$(per_request "$(cg_dump_sum "$WORK" "$cgw")" "$reqs")
kill "$cgpid" 2>/dev/null || true
sed -e "s/listen 127.0.0.1:$NG;/listen 127.0.0.1:$NGCG;/" -e "s|keys_zone=answers|keys_zone=cganswers|" -e "s|proxy_cache answers;|proxy_cache cganswers;|" -e "s|nginx/cache |nginx/cgcache |" -e "s|nginx/nginx.pid|nginx/cg.pid|" "$WORK/nginx/nginx.conf" >"$WORK/nginx/cg.conf"
mkdir -p "$WORK/nginx/cgcache"
(exec taskset -c "$SERVER_CPU" valgrind --tool=callgrind "--callgrind-out-file=$WORK/cg.%p" "$NGINX" -c "$WORK/nginx/cg.conf" -p "$WORK/nginx" -g "master_process off;") >"$WORK/ngcg.out" 2>&1 &
ngpid=$!; PIDS+=($ngpid)
for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$NGCG") 2>/dev/null && break; sleep 0.1; done
wrk_load "http://127.0.0.1:$NGCG/page.txt" 2 >/dev/null
cg_zero "$ngpid"
read -r reqs _ _ _ < <(wrk_load "http://127.0.0.1:$NGCG/page.txt" "$DURATION")
ng_insns=$(per_request "$(cg_dump_sum "$WORK" "$ngpid")" "$reqs")
kill "$ngpid" 2>/dev/null || true
echo "user-space instructions per hit: espalier $esp_insns, nginx proxy_cache $ng_insns (ratio $(ratio "$esp_insns" "$ng_insns"); callgrind, user space only)"

# Part 2: a Zipf load over KEYS URLs; each server starts from an empty cache.
cat >"$WORK/zipf.lua" <<LUA
local n, s = $KEYS, 1.0
local cdf, total = {}, 0
for k = 1, n do total = total + 1 / k ^ s; cdf[k] = total end
for k = 1, n do cdf[k] = cdf[k] / total end
math.randomseed(42)
request = function()
  local u, lo, hi = math.random(), 1, n
  while lo < hi do local mid = math.floor((lo + hi) / 2); if cdf[mid] < u then lo = mid + 1 else hi = mid end end
  return wrk.format("GET", "/k" .. lo)
end
LUA
echo "part 2: $KEYS URLs, Zipf (s = 1), ${DURATION}s each…" >&2
echo
echo "part 2 — $KEYS URLs asked with a Zipf distribution (wrk -t1 -c$CONNS, ${DURATION}s each)"
printf '%-26s %10s %12s %10s\n' target requests app_requests hit_ratio
for t in cached nginx; do
  port=$(case $t in cached) echo "$CACHED" ;; nginx) echo "$NG" ;; esac)
  # Distinct paths from part 1's: both caches start empty for them.
  before=$(served)
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$WORK/zipf.lua" "http://127.0.0.1:$port/")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  app=$(( $(served) - before ))
  name=$(case $t in cached) echo "espalier cache_responses" ;; nginx) echo "nginx proxy_cache" ;; esac)
  printf '%-26s %10s %12s %10s\n' "$name" "$reqs" "$app" "$(python3 -c "print(f'{1 - $app / max($reqs, 1):.3f}')")"
done
stop_all
