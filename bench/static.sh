#!/usr/bin/env bash
# bench/static.sh — espalier against nginx on the static-benchmark seed's 100-byte page.
#
# In one run, interleaved: keep-alive load from wrk (50 connections, pinned to CPU 1) against
# nginx (one worker pinned to CPU 0) and espalier (one worker pinned to CPU 0) on each I/O
# path (`io = "auto"`, which is io_uring where the kernel allows it, and a second espalier
# with `io = "epoll"`), against espalier's dynamic page on each, with a new connection per
# request (`Connection: close`: the accept's and close's cost) on each and on nginx, and
# against the same static page on a site with an access log
# (combined format) — logging's cost — and on a site with ten rules (none of which matches the
# page, so all are tried) and three headers — their cost; on a site with an allow list (four
# networks, two denied), a rate and concurrency limit no client reaches and metrics — their
# cost; and a 20 KB HTML page compressed:
# espalier's gzip and brotli (each made once per thread, then served from memory) against
# nginx's `gzip on` (level 6, per request) and `gzip_static on` (a .gz made by gzip -9)
# — compression's cost. Prints, per server: best requests/s of several runs, CPU time per
# request (user + system of every server process and thread, from /proc/<pid>/stat, over all
# the measured runs), syscalls per request, instructions per request, and espalier/nginx
# ratios.
#
# Instructions: `perf stat -e instructions` over the server's processes when the machine
# exposes hardware counters (kernel + user); otherwise valgrind's callgrind, which counts user
# space exactly (the kernel's share then shows in syscalls per request). The method used is
# printed. Installs nginx, wrk, linux-perf and valgrind from Debian if they are missing.
#
#   bench/static.sh                 # DURATION=10 RUNS=3 by default
#   DURATION=5 RUNS=2 bench/static.sh
#   ESPALIER_BIN=/path/to/other/espalier bench/static.sh   # measure another build
#   BASELINE_BIN=/path/to/older/espalier bench/static.sh   # and an older build beside it,
#                                   # interleaved in the same runs: before/after ratios
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-10}
RUNS=${RUNS:-3}
CONNS=${CONNS:-50}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk perf:linux-perf valgrind:valgrind python3:python3
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

ESPALIER=$(espalier_binary "$ROOT")
BASELINE=${BASELINE_BIN:-}
if [ -n "$BASELINE" ] && [ ! -x "$BASELINE" ]; then
  echo "BASELINE_BIN=$BASELINE is not an executable espalier; build one (git worktree add, cargo build --release)" >&2
  exit 2
fi

bench_workdir espalier-bench


mkdir -p "$WORK/www" "$WORK/nginx" "$WORK/www-gz"
python3 -c 'open("'"$WORK"'/www/100.html","w").write("x"*99+"\n")'
# A 20 KB page of varied HTML (as a real page compresses: about 4:1, not 100:1).
python3 - "$WORK" <<'PY'
import random, sys
random.seed(7)
words = "espalier node worker pool site page cache thread memory request answer order shop".split()
rows = []
while sum(map(len, rows)) < 20000:
    rows.append("<tr><td>%d</td><td>%s</td><td class=\"n\">%.2f</td></tr>\n" % (
        len(rows), " ".join(random.choice(words) for _ in range(6)), random.random() * 1000))
page = "<!doctype html><title>orders</title><table>\n" + "".join(rows) + "</table>\n"
for d in ("www", "www-gz"):
    open(sys.argv[1] + "/" + d + "/page.html", "w").write(page[:20480])
PY
gzip -9 -k "$WORK/www-gz/page.html"
NGINX_PORT=$(free_port)
ESP_PORT=$(free_port)
LOG_PORT=$(free_port)
RULE_PORT=$(free_port)
GUARD_PORT=$(free_port)
CMP_PORT=$(free_port)
NGINX_GZ_PORT=$(free_port)
NGINX_GZS_PORT=$(free_port)
mkdir -p "$WORK/logs"

cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(format(1<<$SERVER_CPU,'b'))");
daemon off;
error_log $WORK/nginx/error.log;
pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  open_file_cache max=1000;
  default_type text/html;
  server { listen 127.0.0.1:$NGINX_PORT; root $WORK/www; }
  server { listen 127.0.0.1:$NGINX_GZ_PORT; root $WORK/www; gzip on; gzip_comp_level 6; gzip_vary on; }
  server { listen 127.0.0.1:$NGINX_GZS_PORT; root $WORK/www-gz; gzip_static on; gzip_vary on; }
}
CONF

cat > "$WORK/espalier.toml" <<CONF
[[pool]]
name = "bench"
processes = 1
cpus = "$SERVER_CPU"
affinity = "hard"
memory_policy = "default"   # valgrind does not model set_mempolicy; on one node it changes nothing
[[site]]
bindings = ["http://127.0.0.1:$ESP_PORT"]
root = "www"
[[site.app]]
path = "/"
pool = "bench"
[[site.app]]
path = "/dynamic"
pool = "bench"
handler = "dynamic"
[[site]]
name = "logged"
bindings = ["http://127.0.0.1:$LOG_PORT"]
root = "www"
access_log = { path = "logs/access.log", format = "combined" }
[[site.app]]
path = "/"
pool = "bench"
[[site]]
name = "ruled"
bindings = ["http://127.0.0.1:$RULE_PORT"]
root = "www"
headers = { X-Frame-Options = "DENY", X-Content-Type-Options = "nosniff", Referrer-Policy = "same-origin" }
[[site.app]]
path = "/"
pool = "bench"
[[site.rule]]
host = "www.bench.example"
redirect = "https://bench.example{uri}"
[[site.rule]]
match = "^/old/(.*)\$"
redirect = "/new/\$1"
[[site.rule]]
match = "^/blog/(\\\\d+)/(.*)\$"
rewrite = "/articles/\$2?id=\$1"
[[site.rule]]
match = "^/\\\\.(git|env|svn)"
answer = 404
[[site.rule]]
method = ["PUT", "DELETE"]
answer = 405
[[site.rule]]
match = "^/wp-admin"
answer = 404
[[site.rule]]
match = "^/catalog/(.*)\$"
redirect = "/shop/\$1"
status = 308
[[site.rule]]
match = "\\\\.php\$"
answer = 404
[[site.rule]]
match = "^/feed/?\$"
rewrite = "/rss.xml"
[[site.rule]]
match = "^/api/v1/(.*)\$"
rewrite = "/api/\$1"
[[site]]
name = "guarded"
bindings = ["http://127.0.0.1:$GUARD_PORT"]
root = "www"
allow = ["127.0.0.0/8", "::1", "10.0.0.0/8", "192.168.0.0/16"]
deny = ["127.0.0.66", "10.6.6.0/24"]
limit = { rate = "10000000/s", concurrent = 1000 }
metrics = true
[[site.app]]
path = "/"
pool = "bench"
[[site]]
name = "compressed"
bindings = ["http://127.0.0.1:$CMP_PORT"]
root = "www"
compress = ["br", "gzip"]
[[site.app]]
path = "/"
pool = "bench"
CONF

# The same static and dynamic pages from a second espalier on the other I/O path: the first
# takes `io = "auto"` (io_uring where the kernel allows it), this one `io = "epoll"`. A copy of
# the binary of its own, so that its processes are told apart by their command line.
EPOLL_PORT=$(free_port)
cp "$ESPALIER" "$WORK/espalier-epoll"
cat > "$WORK/espalier-epoll.toml" <<CONF
[server]
io = "epoll"
admin = "127.0.0.1:$(free_port)"
[[pool]]
name = "epoll"
processes = 1
cpus = "$SERVER_CPU"
affinity = "hard"
memory_policy = "default"
[[site]]
bindings = ["http://127.0.0.1:$EPOLL_PORT"]
root = "www"
[[site.app]]
path = "/"
pool = "epoll"
[[site.app]]
path = "/dynamic"
pool = "epoll"
handler = "dynamic"
CONF
start_epoll() { (cd "$WORK" && exec taskset -c "$SERVER_CPU" $1 "$WORK/espalier-epoll" serve -c espalier-epoll.toml) >"$WORK/epoll.out" 2>&1 & PIDS+=($!); wait_port "$EPOLL_PORT"; }

TARGETS=(nginx espalier epoll dynamic epoll_dynamic logged ruled guarded nginx_gzip nginx_gzip_static gzip br nginx_close close epoll_close)
if [ -n "$BASELINE" ]; then
  # The older build: the same sites on ports of its own, its log in a folder of its own.
  BASE_PORT=$(free_port)
  BASE_LOG_PORT=$(free_port)
  BASE_RULE_PORT=$(free_port)
  mkdir -p "$WORK/logs-before"
  # Every port of this build's sites gets one of its own (the static, logged and ruled sites'
  # are measured; the others only must not clash).
  remap="s/127.0.0.1:$ESP_PORT\"/127.0.0.1:$BASE_PORT\"/; s/127.0.0.1:$LOG_PORT\"/127.0.0.1:$BASE_LOG_PORT\"/; s/127.0.0.1:$RULE_PORT\"/127.0.0.1:$BASE_RULE_PORT\"/"
  for p in $(grep -o '127.0.0.1:[0-9]*"' "$WORK/espalier.toml" | tr -d '"' | cut -d: -f2 | sort -u); do
    case $p in "$ESP_PORT"|"$LOG_PORT"|"$RULE_PORT") ;; *) remap="$remap; s/127.0.0.1:$p\"/127.0.0.1:$(free_port)\"/" ;; esac
  done
  sed -e "$remap" \
      -e 's#logs/access.log#logs-before/access.log#; s/name = "bench"/name = "before"/; s/pool = "bench"/pool = "before"/' \
      "$WORK/espalier.toml" >"$WORK/espalier-before.body"
  # Its own admin address too (the default one is this build's).
  { printf '[server]\nadmin = "127.0.0.1:%s"\n' "$(free_port)"; cat "$WORK/espalier-before.body"; } >"$WORK/espalier-before.toml"
  TARGETS+=(before before_logged before_ruled)
fi
start_baseline() { [ -z "$BASELINE" ] || { (cd "$WORK" && exec taskset -c "$SERVER_CPU" $1 "$BASELINE" serve -c espalier-before.toml) >"$WORK/before.out" 2>&1 & PIDS+=($!); wait_port "$BASE_PORT"; }; }
binary_of() { case $1 in before|before_logged|before_ruled) echo "$BASELINE" ;; epoll|epoll_dynamic|epoll_close) echo "$WORK/espalier-epoll" ;; *) echo "$ESPALIER" ;; esac; }


# wrk → "requests rps"; the target's request header, if it has one
load() {
  local out enc=()
  [ -n "${3:-}" ] && enc=(-H "$3")
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${2}s" --timeout 30s "${enc[@]}" "$1")
  # A run that measured errors measured the wrong thing.
  if grep -qE "Non-2xx|Socket errors" <<<"$out"; then
    echo "$1: wrk saw errors, the figures would be wrong: $(grep -E 'Non-2xx|Socket errors' <<<"$out")" >&2
    touch "$WORK/failed" # load runs in a subshell: the callers check the mark (no_errors)
  fi
  echo "$(awk '/requests in/ {print $1}' <<<"$out") $(awk '/Requests\/sec/ {print $2}' <<<"$out")"
}
server_pids() { # the serving processes: nginx's worker, espalier's worker
  case $1 in
    nginx*) pgrep -f "nginx: worker process" | tr '\n' ',' | sed 's/,$//' ;;
    *) pgrep -f "$(binary_of "$1") worker" | tr '\n' ',' | sed 's/,$//' ;;
  esac
}
all_server_pids() { # every process of the server, master included, for its CPU time
  case $1 in
    nginx*) pgrep -f "nginx: (master|worker)" ;;
    *) pgrep -f "$(binary_of "$1") (serve|worker)" ;;
  esac
}
cpu_ticks() { proc_ticks $(all_server_pids "$1"); } # every process (all threads) of target $1
url_of() { case $1 in nginx|nginx_close) echo "http://127.0.0.1:$NGINX_PORT/100.html" ;; espalier|close) echo "http://127.0.0.1:$ESP_PORT/100.html" ;; dynamic) echo "http://127.0.0.1:$ESP_PORT/dynamic" ;; epoll|epoll_close) echo "http://127.0.0.1:$EPOLL_PORT/100.html" ;; epoll_dynamic) echo "http://127.0.0.1:$EPOLL_PORT/dynamic" ;; logged) echo "http://127.0.0.1:$LOG_PORT/100.html" ;; ruled) echo "http://127.0.0.1:$RULE_PORT/100.html" ;; guarded) echo "http://127.0.0.1:$GUARD_PORT/100.html" ;; nginx_gzip) echo "http://127.0.0.1:$NGINX_GZ_PORT/page.html" ;; nginx_gzip_static) echo "http://127.0.0.1:$NGINX_GZS_PORT/page.html" ;; gzip|br) echo "http://127.0.0.1:$CMP_PORT/page.html" ;; before) echo "http://127.0.0.1:$BASE_PORT/100.html" ;; before_logged) echo "http://127.0.0.1:$BASE_LOG_PORT/100.html" ;; before_ruled) echo "http://127.0.0.1:$BASE_RULE_PORT/100.html" ;; esac; }
# A new connection per request: wrk reconnects after each answer to "Connection: close".
header_of() { case $1 in nginx_gzip|nginx_gzip_static|gzip) echo "Accept-Encoding: gzip" ;; br) echo "Accept-Encoding: br" ;; nginx_close|close|epoll_close) echo "Connection: close" ;; esac; }
no_errors() { [ ! -e "$WORK/failed" ] || exit 1; }
declare -A BEST SYSCALLS INSNS INSNS_USER TICKS REQS CPU_US

echo "phase 1: requests/s and syscalls (native, $RUNS interleaved runs of ${DURATION}s)…" >&2
start_nginx ""
start_espalier ""
start_epoll ""
start_baseline ""
# What the first espalier chose (its master's first lines say).
IO_PATH=$(grep -o "connections' I/O: .*" "$WORK/espalier.out" | head -1 | sed "s/connections' I\/O: //")
FIRST=$(case $IO_PATH in io_uring*) echo io_uring ;; *) echo epoll ;; esac)
for t in "${TARGETS[@]}"; do load "$(url_of "$t")" 1 "$(header_of "$t")" >/dev/null; BEST[$t]=0; TICKS[$t]=0; REQS[$t]=0; done   # warm-up
for run in $(seq "$RUNS"); do
  for t in "${TARGETS[@]}"; do
    before=$(cpu_ticks "$t")
    read -r reqs rps < <(load "$(url_of "$t")" "$DURATION" "$(header_of "$t")")
    no_errors
    TICKS[$t]=$((TICKS[$t] + $(cpu_ticks "$t") - before))
    REQS[$t]=$((REQS[$t] + reqs))
    BEST[$t]=$(python3 -c "print(max(${BEST[$t]}, $rps))")
  done
done
HZ=$(getconf CLK_TCK)
for t in "${TARGETS[@]}"; do
  CPU_US[$t]=$(python3 -c "print(round(${TICKS[$t]} / $HZ * 1e6 / max(${REQS[$t]}, 1), 2))")
done
HW=no
perf stat -e instructions true 2>&1 | grep -q "not supported" || HW=yes
for t in "${TARGETS[@]}"; do
  pids=$(server_pids "$t")
  events=raw_syscalls:sys_enter
  [ "$HW" = yes ] && events="$events,instructions,instructions:u"
  perf stat -x, -e "$events" -p "$pids" -o "$WORK/perf.$t" -- sleep $((DURATION + 1)) &
  perfpid=$!
  sleep 0.3
  read -r reqs _ < <(load "$(url_of "$t")" "$DURATION" "$(header_of "$t")")
  wait $perfpid
  SYSCALLS[$t]=$(per_request "$(awk -F, '/raw_syscalls/ {print $1}' "$WORK/perf.$t")" "$reqs")
  if [ "$HW" = yes ]; then
    INSNS[$t]=$(python3 -c "print(round($(awk -F, '$3=="instructions" {print $1}' "$WORK/perf.$t")/$reqs))")
    INSNS_USER[$t]=$(python3 -c "print(round($(awk -F, '$3=="instructions:u" {print $1}' "$WORK/perf.$t")/$reqs))")
  fi
done
stop_all

if [ "$HW" = no ]; then
  echo "phase 2: user-space instructions per request (callgrind; no hardware counters here)…" >&2
  cg_measure() { # $1 target, $2 pid to measure
    cg_zero "$2"
    read -r reqs _ < <(load "$(url_of "$1")" 5 "$(header_of "$1")")
    local total
    total=$(cg_dump_sum "$WORK" "$2")
    INSNS_USER[$1]=$(python3 -c "print(round($total/$reqs))")
  }
  start_nginx "valgrind --tool=callgrind --callgrind-out-file=$WORK/cg.%p" -g "master_process off;"
  sleep 1
  cg_measure nginx "${PIDS[0]}"
  cg_measure nginx_gzip "${PIDS[0]}"
  cg_measure nginx_gzip_static "${PIDS[0]}"
  stop_all
  start_espalier "valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$WORK/cg.%p"
  sleep 2
  wpid=$(pgrep -f "callgrind.*$ESPALIER worker" | head -1)
  cg_measure espalier "$wpid"
  cg_measure dynamic "$wpid"
  cg_measure logged "$wpid"
  cg_measure ruled "$wpid"
  cg_measure guarded "$wpid"
  cg_measure gzip "$wpid"
  cg_measure br "$wpid"
  stop_all
  start_epoll "valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$WORK/cg.%p"
  sleep 2
  wpid=$(pgrep -f "callgrind.*$WORK/espalier-epoll worker" | head -1)
  cg_measure epoll "$wpid"
  cg_measure epoll_dynamic "$wpid"
  stop_all
  if [ -n "$BASELINE" ]; then
    start_baseline "valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$WORK/cg.%p"
    sleep 2
    wpid=$(pgrep -f "callgrind.*$BASELINE worker" | head -1)
    cg_measure before "$wpid"
    cg_measure before_logged "$wpid"
    cg_measure before_ruled "$wpid"
    stop_all
  fi
fi

echo
echo "espalier $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') vs $("$NGINX" -v 2>&1 | sed 's/.*: //') — $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), server on CPU $SERVER_CPU, wrk -t1 -c$CONNS on CPU $CLIENT_CPU"
printf '%-22s %12s %14s %14s %14s %16s\n' "server" "requests/s" "CPU µs/req" "syscalls/req" "insns/req" "user insns/req"
for t in "${TARGETS[@]}"; do
  name=$t; [ "$t" = epoll ] && name="espalier static, epoll"; [ "$t" = epoll_dynamic ] && name="espalier dynamic, epoll"; [ "$t" = before ] && name="before static"; [ "$t" = before_logged ] && name="before static+log"; [ "$t" = before_ruled ] && name="before +10 rules"; [ "$t" = espalier ] && name="espalier static, $FIRST"; [ "$t" = dynamic ] && name="espalier dynamic, $FIRST"; [ "$t" = nginx ] && name="nginx static"; [ "$t" = logged ] && name="espalier static+log"; [ "$t" = ruled ] && name="espalier +10 rules"; [ "$t" = guarded ] && name="espalier +allow+limit+metrics"; [ "$t" = nginx_gzip ] && name="nginx 20K gzip on"; [ "$t" = nginx_gzip_static ] && name="nginx 20K gzip_static"; [ "$t" = gzip ] && name="espalier 20K gzip"; [ "$t" = br ] && name="espalier 20K br"; [ "$t" = nginx_close ] && name="nginx, conn/request"; [ "$t" = close ] && name="espalier conn/req, $FIRST"; [ "$t" = epoll_close ] && name="espalier conn/req, epoll"
  printf '%-22s %12.0f %14s %14s %14s %16s\n' "$name" "${BEST[$t]}" "${CPU_US[$t]}" "${SYSCALLS[$t]}" "${INSNS[$t]:--}" "${INSNS_USER[$t]:--}"
done
echo "(the first espalier's I/O path: $IO_PATH; the second's: epoll, by its config)"
echo
echo "per I/O path (espalier / nginx, static): CPU time per request $FIRST $(ratio "${CPU_US[espalier]}" "${CPU_US[nginx]}"), epoll $(ratio "${CPU_US[epoll]}" "${CPU_US[nginx]}") (target ≤ 0.50); syscalls per request $FIRST ${SYSCALLS[espalier]}, epoll ${SYSCALLS[epoll]}, nginx ${SYSCALLS[nginx]} (target ≤ 1 at $CONNS connections)"
echo "a new connection per request (Connection: close), espalier / nginx: CPU time per request $FIRST $(ratio "${CPU_US[close]}" "${CPU_US[nginx_close]}"), epoll $(ratio "${CPU_US[epoll_close]}" "${CPU_US[nginx_close]}"); syscalls per request $FIRST ${SYSCALLS[close]}, epoll ${SYSCALLS[epoll_close]}, nginx ${SYSCALLS[nginx_close]}"
echo "dynamic / static, user insns: $FIRST $(ratio "${INSNS_USER[dynamic]}" "${INSNS_USER[espalier]}"), epoll $(ratio "${INSNS_USER[epoll_dynamic]}" "${INSNS_USER[epoll]}") (target ≤ 1.3)"
echo
echo "ratios (espalier on $FIRST / nginx, static):"
echo "  requests/s:            $(ratio "${BEST[espalier]}" "${BEST[nginx]}")"
echo "  CPU time per request:  $(ratio "${CPU_US[espalier]}" "${CPU_US[nginx]}")   (user + system of every server process, from /proc)"
echo "  syscalls per request:  $(ratio "${SYSCALLS[espalier]}" "${SYSCALLS[nginx]}")"
[ "$HW" = yes ] && echo "  instructions/request:  $(ratio "${INSNS[espalier]}" "${INSNS[nginx]}")   (target ≤ 0.55)"
echo "  user insns/request:    $(ratio "${INSNS_USER[espalier]}" "${INSNS_USER[nginx]}")"
echo "dynamic / static (espalier, user insns/request): $(ratio "${INSNS_USER[dynamic]}" "${INSNS_USER[espalier]}")   (target ≤ 1.3)"
echo "access log on / off (espalier static, combined format): CPU time per request $(ratio "${CPU_US[logged]}" "${CPU_US[espalier]}"), user insns $(ratio "${INSNS_USER[logged]}" "${INSNS_USER[espalier]}")   (target ≤ 1.10)"
echo "allow list + rate and concurrency limit + metrics / none (espalier static): CPU time per request $(ratio "${CPU_US[guarded]}" "${CPU_US[espalier]}"), user insns $(ratio "${INSNS_USER[guarded]}" "${INSNS_USER[espalier]}")   (target ≤ 1.10)"
echo "ten rules + three headers / none (espalier static): CPU time per request $(ratio "${CPU_US[ruled]}" "${CPU_US[espalier]}"), user insns $(ratio "${INSNS_USER[ruled]}" "${INSNS_USER[espalier]}")   (target ≤ 1.10)"
echo "compressed 20 KB page, CPU time per request: espalier gzip / nginx gzip_static $(ratio "${CPU_US[gzip]}" "${CPU_US[nginx_gzip_static]}"), / nginx gzip on $(ratio "${CPU_US[gzip]}" "${CPU_US[nginx_gzip]}"); espalier br / nginx gzip_static $(ratio "${CPU_US[br]}" "${CPU_US[nginx_gzip_static]}")   (target ≤ 0.7)"
[ "$HW" = no ] && echo "(no hardware counters on this machine: instructions are callgrind's user-space counts; kernel work shows as syscalls/req)"
if [ -n "$BASELINE" ]; then
  echo "this build / BASELINE_BIN (static): CPU time per request $(ratio "${CPU_US[espalier]}" "${CPU_US[before]}"), user insns $(ratio "${INSNS_USER[espalier]}" "${INSNS_USER[before]}"), requests/s $(ratio "${BEST[espalier]}" "${BEST[before]}"); with the access log: CPU $(ratio "${CPU_US[logged]}" "${CPU_US[before_logged]}"), user insns $(ratio "${INSNS_USER[logged]}" "${INSNS_USER[before_logged]}"); ten rules + three headers: CPU $(ratio "${CPU_US[ruled]}" "${CPU_US[before_ruled]}"), user insns $(ratio "${INSNS_USER[ruled]}" "${INSNS_USER[before_ruled]}")"
fi
