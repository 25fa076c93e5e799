#!/usr/bin/env bash
# bench/hosting-scale.sh — a hoster's machine: SITES sites, each its own pool (on demand, the
# default from 100 pools on), all on one port by host name; ACTIVE_PCT % of them visited.
# Side by side in the same run, nginx with SITES `server` blocks on one port.
#
# Prints, for espalier and nginx: time from start to serving; the master's (nginx: all of its
# processes') resident memory and every process's PSS; the master's descriptors. For espalier
# also: the first request to a cold site (its pool has no process yet: the request waits for
# the process it starts), p50 and p99 over COLD sites; requests/s and CPU per request of
# the active sites under keep-alive load (one wrk thread per site, each with its site's Host),
# against a config of only the active sites (always running) and against nginx; and the
# memory given back when the visited pools go idle (idle_timeout). CPU per request is user +
# system of every server process and thread, from /proc/<pid>/stat. Installs nginx and wrk
# from Debian if missing.
#
#   bench/hosting-scale.sh                      # SITES=10000 (fewer when descriptors are short)
#   SITES=2000 ACTIVE_PCT=1 DURATION=5 bench/hosting-scale.sh
#   ESPALIER_BIN=/path/to/espalier bench/hosting-scale.sh
#
# Every pool takes, on the shared port, one socket per listening CPU and one hand-off socket,
# and the master watches a copy of each while the pool sleeps: about 4 descriptors per
# one-CPU pool. Root raises the limit as needed; where it cannot (a container without
# CAP_SYS_RESOURCE), SITES is lowered to fit and the script says so.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SITES=${SITES:-10000}
ACTIVE_PCT=${ACTIVE_PCT:-1}
COLD=${COLD:-40}
DURATION=${DURATION:-5}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk python3:python3 curl:curl
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")

HARD=$(ulimit -Hn)
NEEDED=$((SITES * 4 + 8192))
if [ "$NEEDED" -gt "$HARD" ] && ! (ulimit -Hn "$NEEDED" 2>/dev/null); then
  FIT=$(((HARD - 8192) / 4))
  if [ "$FIT" -lt "$SITES" ]; then
    echo "NOTE: the descriptor limit here is $HARD and cannot be raised (no CAP_SYS_RESOURCE): $SITES sites would need about $NEEDED; measuring $FIT sites" >&2
    SITES=$FIT
  fi
fi
ACTIVE=$(python3 -c "print(max(2, round($SITES * $ACTIVE_PCT / 100)))")
LOADED=$((ACTIVE < 4 ? ACTIVE : 4))

bench_workdir espalier-hosting-scale
mkdir -p "$WORK/www" "$WORK/nginx" "$WORK/small"
python3 -c 'open("'"$WORK"'/www/100.html","w").write("x"*99+"\n")'
PORT=$(free_port)
SMALL_PORT=$(free_port)
NGINX_PORT=$(free_port)

# The active sites: spread over the range.
ACTIVE_IDS=$(python3 -c "n,a=$SITES,$ACTIVE; print(' '.join(str(i*n//a) for i in range(a)))")

# config PORT START IDS… — a pool of one worker on the server CPU per site, one static site
# each, named by the ids.
config() {
  python3 - "$1" "$2" "$SERVER_CPU" "$(free_port)" "${@:3}" <<'EOF'
import sys
port, start, cpu, admin, ids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
out = [f'[server]\nadmin = "127.0.0.1:{admin}"\nworker_header = true\n']
for i in ids:
    out.append(f'[[pool]]\nname = "p{i}"\ncpus = "{cpu}"\nstart = "{start}"\n')
    if start == "on-demand":
        out.append('idle_timeout = "10s"\n')
for i in ids:
    out.append(f'[[site]]\nname = "s{i}"\nbindings = ["http://127.0.0.1:{port}:s{i}.example"]\nroot = "www"\n[[site.app]]\npool = "p{i}"\n')
print("".join(out))
EOF
}
config "$PORT" on-demand $(seq 0 $((SITES - 1))) >"$WORK/espalier.toml"
config "$SMALL_PORT" always $ACTIVE_IDS >"$WORK/small.toml"
python3 - "$SITES" "$NGINX_PORT" "$WORK" "$SERVER_CPU" >"$WORK/nginx/nginx.conf" <<'EOF'
import sys
n, port, work, cpu = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
print(f"""worker_processes 1;
worker_cpu_affinity {format(1 << cpu, 'b')};
worker_rlimit_nofile 8192;
daemon off;
error_log {work}/nginx/error.log;
pid {work}/nginx/nginx.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  server_names_hash_max_size {2 * n};
  server_names_hash_bucket_size 128;
  keepalive_requests 1000000;
  open_file_cache max=1000;
  default_type text/html;""")
for i in range(n):
    print(f"  server {{ listen 127.0.0.1:{port}; server_name s{i}.example; root {work}/www; }}")
print("}")
EOF

# The cold sites: others never visited before.
COLD_IDS=$(python3 -c "n,a,c=$SITES,$ACTIVE,$COLD
act={i*n//a for i in range(a)}
print(' '.join(str(i) for i in [i for i in range(1,n,max(1,n//(c+1))) if i not in act][:c]))")

now() { date +%s.%N; }
# serve CONFIG OUT — starts espalier (its pid last in PIDS); sets SERVED_IN to the seconds
# until its "serving" line (no connection is made to check: one would wake a pool).
serve() {
  local t0 i
  t0=$(now)
  (cd "$WORK" && exec taskset -c "$SERVER_CPU" "$ESPALIER" serve -c "$1") >"$WORK/$2" 2>&1 &
  PIDS+=($!)
  for i in $(seq 1200); do
    grep -q "serving" "$WORK/$2" && break
    if ! kill -0 "${PIDS[-1]}" 2>/dev/null; then echo "espalier did not start: $(tail -2 "$WORK/$2")" >&2; exit 1; fi
    sleep 0.05
  done
  SERVED_IN=$(python3 -c "print(round($(now) - $t0, 2))")
}
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
pss_kib() { local t=0 p v; for p in "$@"; do v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0); t=$((t + ${v:-0})); done; echo "$t"; }
tree_of() { echo "$1"; pgrep -P "$1" || true; }
get() { curl -s -o /dev/null -w "%{http_code} %{time_total}\n" -H "Host: s$2.example" "http://127.0.0.1:$1/100.html"; }
# load PORT PIDS… — keep-alive load, one wrk thread per loaded site (its Host): "requests cpu_us"
load() {
  local port=$1 script; shift
  script="$WORK/hosts.lua"
  python3 -c "ids='$ACTIVE_IDS'.split()[:$LOADED]; print('local hosts = {' + ','.join(f'\"s{i}.example\"' for i in ids) + '}\nlocal n = 0\nfunction setup(thread) n = n + 1; thread:set(\"host\", hosts[n]) end\nfunction init(args) wrk.headers[\"Host\"] = host end')" >"$script"
  local before after out
  before=$(proc_ticks "$@")
  out=$(taskset -c "$CLIENT_CPU" wrk -t"$LOADED" -c$((LOADED * 12)) -d"${DURATION}s" -s "$script" "http://127.0.0.1:$port/100.html")
  after=$(proc_ticks "$@")
  grep -qE "Non-2xx|Socket errors" <<<"$out" && { echo "wrk saw errors on port $port: $(grep -E 'Non-2xx|Socket errors' <<<"$out")" >&2; exit 1; }
  local reqs; reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  python3 -c "print($reqs, round(($after - $before) / $(getconf CLK_TCK) * 1e6 / $reqs, 2), $(awk '/Requests\/sec/ {print $2}' <<<"$out"))"
}
percentile() { python3 -c "import sys; v=sorted(float(x) for x in sys.argv[2:]); print(round(v[min(len(v)-1, int(len(v)*$1/100))]*1000, 1))" "$@"; }

echo "espalier: $SITES sites in $SITES on-demand pools on one port; nginx: $SITES server blocks" >&2
serve espalier.toml espalier.out
READY=$SERVED_IN
MASTER=${PIDS[-1]}
E_RSS=$(rss_kib "$MASTER")
E_FDS=$(ls "/proc/$MASTER/fd" | wc -l)
E_PSS=$(pss_kib $(tree_of "$MASTER"))
# Cold sites: each first request starts its pool's process.
COLD_T=()
for i in $COLD_IDS; do
  read -r code t < <(get "$PORT" "$i")
  [ "$code" = 200 ] || { echo "cold site s$i answered $code" >&2; exit 1; }
  COLD_T+=("$t")
done
# The active sites: woken, then loaded.
for i in $ACTIVE_IDS; do get "$PORT" "$i" >/dev/null; done
read -r E_REQS E_CPU E_RPS < <(load "$PORT" $(tree_of "$MASTER"))
E_PSS_BUSY=$(pss_kib $(tree_of "$MASTER"))
E_PROCS=$(($(tree_of "$MASTER" | wc -l) - 1))
# Idle: the visited pools sleep again after idle_timeout (10 s).
for _ in $(seq 60); do
  [ "$(pgrep -P "$MASTER" | wc -l)" = 0 ] && break
  sleep 1
done
E_PSS_IDLE=$(pss_kib $(tree_of "$MASTER"))
stop_all

serve small.toml small.out
SMALL_READY=$SERVED_IN
SMALL=${PIDS[-1]}
read -r S_REQS S_CPU S_RPS < <(load "$SMALL_PORT" $(tree_of "$SMALL"))
stop_all

T0=$(now)
start_nginx ""
N_READY=$(python3 -c "print(round($(now) - $T0, 2))")
N_MASTER=$(pgrep -f "nginx: master" | head -1)
N_PIDS=$(pgrep -f "nginx: (master|worker)" | tr '\n' ' ')
N_RSS=0; for p in $N_PIDS; do N_RSS=$((N_RSS + $(rss_kib "$p"))); done
N_PSS=$(pss_kib $N_PIDS)
N_FDS=$(ls "/proc/$N_MASTER/fd" | wc -l)
read -r N_REQS N_CPU N_RPS < <(load "$NGINX_PORT" $N_PIDS)
stop_all

ratio() { python3 -c "a,b=$1,$2; print(f'{a/b:.2f}' if b else '-')"; }
mib() { python3 -c "print(round($1/1024, 1))"; }
echo
echo "espalier $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') vs $("$NGINX" -v 2>&1 | sed 's/.*: //') — $(date -u +%Y-%m-%d), $(nproc) CPUs, $SITES sites on one port, $ACTIVE active ($LOADED under load), servers on CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU"
printf '%-44s %14s %14s %8s\n' "" "espalier" "nginx" "ratio"
printf '%-44s %14s %14s %8s\n' "ready (s)" "$READY" "$N_READY" "$(ratio "$READY" "$N_READY")"
printf '%-44s %14s %14s %8s\n' "master RSS (MiB; nginx: all processes)" "$(mib "$E_RSS")" "$(mib "$N_RSS")" "$(ratio "$E_RSS" "$N_RSS")"
printf '%-44s %14s %14s %8s\n' "PSS of every process at start (MiB)" "$(mib "$E_PSS")" "$(mib "$N_PSS")" "$(ratio "$E_PSS" "$N_PSS")"
printf '%-44s %14s %14s\n' "master's descriptors" "$E_FDS" "$N_FDS"
printf '%-44s %14s %14s %8s\n' "active sites: requests/s" "$E_RPS" "$N_RPS" "$(ratio "$E_RPS" "$N_RPS")"
printf '%-44s %14s %14s %8s\n' "active sites: CPU µs per request" "$E_CPU" "$N_CPU" "$(ratio "$E_CPU" "$N_CPU")"
echo
echo "espalier alone:"
echo "  processes running at start: 0 of $SITES pools; after visiting $ACTIVE + $COLD sites: $E_PROCS"
echo "  first request to a cold site (its process starts): p50 $(percentile 50 "${COLD_T[@]}") ms, p99 $(percentile 99 "${COLD_T[@]}") ms over $COLD sites"
echo "  active sites vs a config of only them ($ACTIVE pools, always running, ready in ${SMALL_READY}s): requests/s $(ratio "$E_RPS" "$S_RPS"), CPU per request $(ratio "$E_CPU" "$S_CPU")"
echo "  PSS: $(mib "$E_PSS") MiB at start, $(mib "$E_PSS_BUSY") MiB with the visited pools running, $(mib "$E_PSS_IDLE") MiB once they slept again (idle_timeout 10 s): $(mib $((E_PSS_BUSY - E_PSS_IDLE))) MiB given back"
