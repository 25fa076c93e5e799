#!/usr/bin/env bash
# bench/soak.sh — a long mixed soak: does anything fail, leak or panic over time?
#
# Six pools, each a site on its own port, all under keep-alive load from `espalier bench` for
# DURATION seconds (default 1800 = 30 minutes). HTTP/1.1 loads run with `--no-retry`: a
# request on a connection the server closed is a failure, never sent again. The HTTP/2 load
# sends again only a stream the server provably did not take (opened after its GOAWAY, or
# refused with REFUSED_STREAM), as RFC 9113 §8.7 allows and every HTTP/2 client does; any
# other broken stream counts. Meanwhile:
#   - pool `steady` is left alone: its worker lives the whole run, so its descriptors and
#     memory over time show any leak;
#   - pools `recycled` (static and dynamic, HTTP/1.1), `tls` (HTTPS, HTTP/2 and HTTP/1.1),
#     `proxy` (a Python app behind the proxy) and `php` (php-fpm behind FastCGI) are
#     recycled every RECYCLE_EVERY seconds (overlapped) and changed by a config reload every
#     RELOAD_EVERY seconds (their workers and apps replaced on their sockets);
#   - pool `victim`'s worker is SIGKILLed every KILL_EVERY seconds (the only failed requests
#     allowed are that worker's own connections, cut by the kill);
#   - slow and hostile clients (bench/soak_clients.py) keep slowloris heads, slow bodies,
#     chunk-extension floods and the crafted requests of the hardening issue coming at
#     `steady` and `recycled`.
# Every SAMPLE_EVERY seconds it records each worker's and the master's descriptors and
# resident memory. At the end it prints failed requests per pool, descriptor and memory growth
# per long-lived process, and any panic in the logs — and exits non-zero when `steady` or
# `recycled` lost a request, a panic was logged, or a long-lived process grew.
#
#   bench/soak.sh                  # 30 minutes
#   DURATION=120 bench/soak.sh     # a short run
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-1800}
RECYCLE_EVERY=${RECYCLE_EVERY:-60}
RELOAD_EVERY=${RELOAD_EVERY:-120}
KILL_EVERY=${KILL_EVERY:-90}
SAMPLE_EVERY=${SAMPLE_EVERY:-30}

. "$ROOT/bench/common.sh"
need_tools python3:python3 openssl:openssl -:php-fpm
PHP_FPM=$(ls /usr/sbin/php-fpm* | sort | tail -n 1)

ESPALIER=$(espalier_binary "$ROOT")

bench_workdir espalier-soak

mkdir -p "$WORK/www"
python3 - "$WORK/www" <<'PY'
import sys, os
d = sys.argv[1]
open(os.path.join(d, "index.html"), "w").write("<h1>soak</h1>\n")
open(os.path.join(d, "100.html"), "w").write("x" * 99 + "\n")
open(os.path.join(d, "big.bin"), "wb").write(bytes(i % 251 for i in range(1 << 20)))
PY
mkdir -p "$WORK/php/www"
cat > "$WORK/php/www/index.php" <<'PHP'
<?php echo "php ", getmypid(), " ", str_repeat("p", 200), "\n";
PHP
sed 's/pm.max_children = 4/pm.max_children = 8/' "$ROOT/examples/apps/php/php-fpm.conf" > "$WORK/php/php-fpm.conf"
cat > "$WORK/app.py" <<'PY'
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"app %d %s\n" % (os.getpid(), b"a" * 200)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
PY
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout "$WORK/tls.key" -out "$WORK/tls.pem" -subj /CN=soak.test \
  -addext subjectAltName=DNS:soak.test 2>/dev/null
STEADY=$(free_port); RECYCLED=$(free_port); VICTIM=$(free_port); ADMIN=$(free_port)
TLS=$(free_port); PROXY=$(free_port); PHP=$(free_port)

write_config() { # $1: the recycled pool's request limit (changing it is a reload that replaces)
  cat > "$WORK/espalier.toml" <<CONF
[server]
admin = "127.0.0.1:$ADMIN"
[server.limits]
header_timeout = "5s"
body_timeout = "5s"
[[pool]]
name = "steady"
processes = 1
[[pool]]
name = "recycled"
processes = 2
[pool.recycle]
requests = $1
[[pool]]
name = "victim"
processes = 1
[pool.rapid_fail]
enabled = false
[[pool]]
name = "tls"
processes = 2
[pool.recycle]
requests = $1
[[pool]]
name = "proxy"
processes = 2
command = ["python3", "app.py"]
[pool.recycle]
requests = $1
[[pool]]
name = "php"
processes = 2
command = ["$PHP_FPM", "--nodaemonize", "--allow-to-run-as-root", "--fpm-config", "php-fpm.conf"]
directory = "php"
transport = "fastcgi"
[pool.recycle]
requests = $1
$(for p in steady recycled victim; do
  port=STEADY; [ $p = recycled ] && port=RECYCLED; [ $p = victim ] && port=VICTIM
  printf '[[site]]\nname = "%s"\nbindings = ["http://127.0.0.1:%s"]\nroot = "www"\n[[site.app]]\npool = "%s"\n[[site.app]]\npath = "/dyn"\npool = "%s"\nhandler = "dynamic"\n' \
    $p "${!port}" $p $p
done)
[[site]]
name = "tls"
bindings = ["https://127.0.0.1:$TLS"]
root = "www"
tls = { cert = "tls.pem", key = "tls.key" }
[[site.app]]
pool = "tls"
[[site.app]]
path = "/dyn"
pool = "tls"
handler = "dynamic"
[[site]]
name = "proxy"
bindings = ["http://127.0.0.1:$PROXY"]
[[site.app]]
pool = "proxy"
[[site]]
name = "php"
bindings = ["http://127.0.0.1:$PHP"]
root = "php/www"
[[site.app]]
pool = "php"
CONF
}
write_config 1000000000

"$ESPALIER" serve -c "$WORK/espalier.toml" 2> "$WORK/server.log" &
MASTER=$!
PIDS+=("$MASTER")
for p in $STEADY $RECYCLED $VICTIM $ADMIN $TLS $PROXY $PHP; do wait_port "$p"; done
status() { "$ESPALIER" status --json --admin "127.0.0.1:$ADMIN"; }
pids_of() { status | python3 -c 'import json,sys; s=json.load(sys.stdin); print(" ".join(str(w["pid"]) for p in s["pools"] if p["name"]==sys.argv[1] for w in p["workers"] if w["pid"]))' "$1"; }

echo "soak: $DURATION s; recycle every $RECYCLE_EVERY s, reload every $RELOAD_EVERY s, kill every $KILL_EVERY s" >&2
load() { # name connections [bench options] URL…
  local name=$1 conns=$2; shift 2
  "$ESPALIER" bench -d "${DURATION}s" -c "$conns" --timeout 20s --json "$@" \
    > "$WORK/load-$name.json" 2> "$WORK/load-$name.err" &
  PIDS+=($!)
}
static_load() { # name port connections
  load "$1" "$3" --no-retry --weights 6,3,1 \
    "http://127.0.0.1:$2/100.html" "http://127.0.0.1:$2/dyn" "http://127.0.0.1:$2/big.bin"
}
static_load steady "$STEADY" 12
static_load recycled "$RECYCLED" 12
static_load victim "$VICTIM" 4
load tls-h2 4 --h2 --streams 4 --insecure --weights 3,1 \
  "https://127.0.0.1:$TLS/100.html" "https://127.0.0.1:$TLS/big.bin"
load tls-h1 4 --no-retry --insecure --weights 3,1 "https://127.0.0.1:$TLS/dyn" "https://127.0.0.1:$TLS/100.html"
load proxy 8 --no-retry "http://127.0.0.1:$PROXY/"
load php 6 --no-retry "http://127.0.0.1:$PHP/index.php"
LOADS=("${PIDS[@]:1}")
python3 "$ROOT/bench/soak_clients.py" "$DURATION" "$STEADY" "$RECYCLED" > "$WORK/clients.txt" 2>&1 &
PIDS+=($!)
CLIENTS=$!

sample() {
  local t=$1 pool pid
  for pool in steady recycled victim tls proxy php; do
    for pid in $(pids_of $pool); do
      printf '%s,%s,%s,%s,%s\n' "$t" "$pool" "$pid" "$(ls /proc/$pid/fd 2>/dev/null | wc -l)" \
        "$(awk '/VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null || echo 0)" >> "$WORK/samples.csv"
    done
  done
  printf '%s,master,%s,%s,%s\n' "$t" "$MASTER" "$(ls /proc/$MASTER/fd | wc -l)" \
    "$(awk '/VmRSS/ {print $2}' /proc/$MASTER/status)" >> "$WORK/samples.csv"
}

start=$(date +%s); recycles=0; reloads=0; kills=0; limit=1000000000
next_recycle=$RECYCLE_EVERY; next_reload=$RELOAD_EVERY; next_kill=$KILL_EVERY; next_sample=0
while :; do
  t=$(( $(date +%s) - start ))
  (( t < DURATION - 5 )) || break
  if (( t >= next_sample )); then sample "$t"; next_sample=$((next_sample + SAMPLE_EVERY)); fi
  if (( t >= next_recycle )); then
    for pool in recycled tls proxy php; do
      "$ESPALIER" recycle "$pool" --admin "127.0.0.1:$ADMIN" >/dev/null && recycles=$((recycles + 1))
    done
    next_recycle=$((next_recycle + RECYCLE_EVERY))
  fi
  if (( t >= next_reload )); then
    limit=$((limit + 1)); write_config "$limit"
    "$ESPALIER" reload --admin "127.0.0.1:$ADMIN" >/dev/null && reloads=$((reloads + 1))
    next_reload=$((next_reload + RELOAD_EVERY))
  fi
  if (( t >= next_kill )); then
    for pid in $(pids_of victim); do kill -9 "$pid" && kills=$((kills + 1)); done
    next_kill=$((next_kill + KILL_EVERY))
  fi
  sleep 1
done
for p in "${LOADS[@]}" "$CLIENTS"; do wait "$p" || true; done
sample "$(( $(date +%s) - start ))"
status > "$WORK/status.json"

python3 - "$WORK" "$recycles" "$reloads" "$kills" "$DURATION" <<'PY'
import csv, json, sys, collections
work, (recycles, reloads, kills, duration) = sys.argv[1], map(int, sys.argv[2:6])
ok = True
print(f"\nsoak of {duration} s: {recycles} pool recycles, {reloads} reloads, {kills} SIGKILLs of the victim's worker\n")
print(f"{'load':10} {'requests':>10} {'req/s':>8} {'failed':>7}  by kind")
for pool in ("steady", "recycled", "victim", "tls-h2", "tls-h1", "proxy", "php"):
    j = json.load(open(f"{work}/load-{pool}.json"))
    kinds = {k: v for k, v in j["errors_by_kind"].items() if v}
    print(f"{pool:10} {j['requests']:>10} {j['rps']:>8.0f} {j['errors']:>7}  {kinds or ''}")
    if pool != "victim" and j["errors"]:
        ok = False
rows = list(csv.reader(open(f"{work}/samples.csv")))
life = collections.defaultdict(list)
for t, pool, pid, fds, rss in rows:
    life[(pool, pid)].append((int(t), int(fds), int(rss)))
print(f"\n{'process':22} {'lived s':>8} {'fds first→last':>16} {'RSS KiB first→last':>22}")
for (pool, pid), s in sorted(life.items(), key=lambda x: x[1][0][0]):
    first, last = s[0], s[-1]
    lived = last[0] - first[0]
    if lived < 300 and pool != "master":
        continue
    print(f"{pool + '/' + pid:22} {lived:>8} {first[1]:>7} → {last[1]:<6} {first[2]:>10} → {last[2]:<9}")
    # Long-lived processes: descriptors flat (±8), memory within 16 MiB of the first sample
    # taken under load (the caches fill in the first minutes).
    if lived >= 300 and (last[1] > first[1] + 8 or last[2] > max(first[2], s[1][2] if len(s) > 1 else 0) + 16 * 1024):
        ok = False
status = json.load(open(f"{work}/status.json"))
panics = sum(w.get("connection_panics", 0) for p in status["pools"] for w in p["workers"])
log = open(f"{work}/server.log", errors="replace").read()
logged = log.count("panicked") + log.count("hit a bug")
print(f"\npanics: {panics} contained (status), {logged} in the log")
print("slow and hostile clients:", open(f"{work}/clients.txt").read().strip())
if panics or logged:
    ok = False
print("\nverdict:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
