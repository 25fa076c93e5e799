#!/usr/bin/env bash
# bench/hosting-scale.sh — a hoster's machine: SITES sites, each its own pool (on demand, the
# default from 100 pools on) in its own file (`include = ["sites.d/*.toml"]`), all on one http
# port and one https port by host name, each https name's self-signed certificate in the
# certificate store; ACTIVE_PCT % of them visited, GUNICORN of them gunicorn apps suspended
# when idle. Side by side in the same run, nginx with SITES `server` blocks on one port.
#
# Prints, for espalier and nginx: time from start to serving; the master's (nginx: all of its
# processes') resident memory and every process's PSS; the master's descriptors; the listening
# sockets on the port (`ss -tln`). For espalier also: the master's memory per idle site (its
# RSS with SITES sites less with SITES/5, per site between); the routing hop's cost — a new
# connection per request to one site, through the dispatcher on the shared port against the
# same site alone on a port of its own (no hop), and against BASELINE_BIN's design when given
# (before the dispatcher, every pool thread accepted on the shared port and handed on); the
# first request to a cold site (its pool has no process yet: the request waits for the
# process it starts), p50 and p99 over COLD sites; requests/s and CPU per request of
# the active sites under keep-alive load (one wrk thread per site, each with its site's Host),
# against a config of only the active sites (always running) and against nginx; and the
# memory given back when the visited pools go idle (idle_timeout: stopped) and when the
# gunicorn pools are suspended (idle_action = "suspend"); the first https request to a cold
# site (handshake with a certificate the master reads from the store as the pool starts); a
# cold gunicorn site's first answer less gunicorn's own start (measured alone, same app);
# and one site's file changed and reloaded under the load: the reload's time and the failed
# requests of the other sites. CPU per request is user + system of every server process and
# thread, from /proc/<pid>/stat. Installs nginx, wrk and gunicorn from Debian if missing.
#
#   bench/hosting-scale.sh                      # SITES=10000
#   SITES=2000 ACTIVE_PCT=1 DURATION=5 bench/hosting-scale.sh
#   ESPALIER_BIN=/path/to/espalier BASELINE_BIN=/path/to/older/espalier bench/hosting-scale.sh
#
# A shared port costs one listening socket per CPU (the dispatcher's), and an idle pool no
# descriptor: 10,000 sites fit any descriptor limit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SITES=${SITES:-10000}
ACTIVE_PCT=${ACTIVE_PCT:-1}
COLD=${COLD:-40}
GUNICORN=${GUNICORN:-3}
DURATION=${DURATION:-5}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk python3:python3 curl:curl ss:iproute2 gunicorn:gunicorn -:python3-cryptography
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")

BASELINE=${BASELINE_BIN:-}
if [ -n "$BASELINE" ] && [ ! -x "$BASELINE" ]; then
  echo "BASELINE_BIN=$BASELINE is not an executable espalier; build one (git worktree add, cargo build --release)" >&2
  exit 1
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

# The gunicorn sites: among the others, never visited before their cold start.
GUNI_IDS=$(python3 -c "n,a,g=$SITES,$ACTIVE,$GUNICORN
act={i*n//a for i in range(a)}
print(' '.join(str(i) for i in [i for i in range(n-2,0,-7) if i not in act][:g]))")
TLS_PORT=$(free_port)

# config DIR PORT TLS_PORT START IDS… — in DIR: espalier.toml including sites.d/*.toml, one
# file per site: a pool of one worker on the server CPU (a gunicorn app, suspended when idle,
# for the GUNI_IDS) and its site, on the http port and (TLS_PORT not 0) the https one.
config() {
  python3 - "$@" "$SERVER_CPU" "$(free_port)" "$GUNI_IDS" "$ROOT" <<'EOF'
import os, sys
d, port, tls, start, *rest = sys.argv[1:]
ids, cpu, admin, guni, root = rest[:-4], rest[-4], rest[-3], set(rest[-2].split()), rest[-1]
os.makedirs(f"{d}/sites.d", exist_ok=True)
store = '\ncertificates = "certs"' if tls != "0" else ""
open(f"{d}/espalier.toml", "w").write(f'include = ["sites.d/*.toml"]\n[server]\nadmin = "127.0.0.1:{admin}"\nworker_header = true{store}\n')
for i in ids:
    pool = f'[[pool]]\nname = "p{i}"\ncpus = "{cpu}"\nstart = "{start}"\n'
    if start == "on-demand":
        pool += 'idle_timeout = "10s"\n'
    if i in guni:
        pool += f'idle_action = "suspend"\ncommand = ["gunicorn", "--workers", "1", "--bind", "127.0.0.1:{{port}}", "app:app"]\ndirectory = "{root}/examples/apps/wsgi"\n'
    binds = f'"http://127.0.0.1:{port}:s{i}.example"' + (f', "https://127.0.0.1:{tls}:s{i}.example"' if tls != "0" else "")
    site = f'[[site]]\nname = "s{i}"\nbindings = [{binds}]\nroot = "www"\n[[site.app]]\npool = "p{i}"\n'
    open(f"{d}/sites.d/s{i}.toml", "w").write(pool + site)
EOF
}
echo "making $SITES site files and certificates…" >&2
config "$WORK" "$PORT" "$TLS_PORT" on-demand $(seq 0 $((SITES - 1)))
config "$WORK/small" "$SMALL_PORT" 0 always $ACTIVE_IDS
ln -s "$WORK/www" "$WORK/small/www"
# A fifth of the sites (for the master's memory per idle site), and the first active site
# alone on a port of its own (the routing hop's cost: no dispatcher in front of it).
FIFTH_PORT=$(free_port)
ALONE_PORT=$(free_port)
config "$WORK/fifth" "$FIFTH_PORT" 0 on-demand $(seq 0 $((SITES / 5 - 1)))
ln -s "$WORK/www" "$WORK/fifth/www"
FIRST_ACTIVE=${ACTIVE_IDS%% *}
config "$WORK/alone" "$ALONE_PORT" 0 always "$FIRST_ACTIVE"
ln -s "$WORK/www" "$WORK/alone/www"
mkdir -p "$WORK/certs" "$WORK/www2"
cp "$WORK/www/100.html" "$WORK/www2/"
python3 - "$WORK/certs" "$SITES" <<'EOF'
import datetime, sys
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
d, n = sys.argv[1], int(sys.argv[2])
# One key for all (its generation is not what is measured); a certificate per name.
key = ec.generate_private_key(ec.SECP256R1())
pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
now = datetime.datetime.now(datetime.timezone.utc)
for i in range(n):
    host = f"s{i}.example"
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False).sign(key, hashes.SHA256()))
    open(f"{d}/{host}.pem", "wb").write(cert.public_bytes(serialization.Encoding.PEM))
    open(f"{d}/{host}.key", "wb").write(pem_key)
EOF
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

# The cold sites: others never visited before (http, then as many over https).
COLD_IDS=$(python3 -c "n,a,c=$SITES,$ACTIVE,$COLD
skip={i*n//a for i in range(a)} | set(map(int, '$GUNI_IDS'.split()))
ids=[i for i in range(1,n) if i not in skip]
step=max(1,len(ids)//(2*c+1))
print(' '.join(str(i) for i in ids[::step][:2*c]))")
COLD_HTTP=$(echo $COLD_IDS | cut -d' ' -f1-"$COLD")
COLD_HTTPS=$(echo $COLD_IDS | cut -d' ' -f$((COLD + 1))-)
# The site whose file the reload changes: none of the above.
RELOADED=$(python3 -c "n=$SITES; used=set(map(int, '$ACTIVE_IDS $GUNI_IDS $COLD_IDS'.split())); print(next(i for i in range(n-1,0,-1) if i not in used))")

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
# tree_of PID — it and every descendant (an app's own children included).
tree_of() { local c; echo "$1"; for c in $(pgrep -P "$1" || true); do tree_of "$c"; done; }
get() { curl -s -o /dev/null -w "%{http_code} %{time_total}\n" -H "Host: s$2.example" "http://127.0.0.1:$1/${3:-100.html}"; }
get_tls() { curl -sk -o /dev/null -w "%{http_code} %{time_total}\n" --resolve "s$2.example:$1:127.0.0.1" "https://s$2.example:$1/100.html"; }
# status_count STATE — pools in STATE, from the admin endpoint.
status_count() { curl -s "http://$ADMIN/status?per_page=1" | python3 -c "import json,sys; print(json.load(sys.stdin)['counts']['$1'])"; }
hosts_lua() {
  python3 -c "ids='$ACTIVE_IDS'.split()[:$LOADED]; print('local hosts = {' + ','.join(f'\"s{i}.example\"' for i in ids) + '}\nlocal n = 0\nfunction setup(thread) n = n + 1; thread:set(\"host\", hosts[n]) end\nfunction init(args) wrk.headers[\"Host\"] = host end')" >"$WORK/hosts.lua"
}
# per_connection PORT SITE MASTER — a new connection per request to one site (where the
# hand-off is paid), its pool woken first: "cpu_us requests/s"
per_connection() {
  local port=$1 site=$2 master=$3 out ticks reqs
  get "$port" "$site" >/dev/null
  out=$(ticks_during "$master" taskset -c "$CLIENT_CPU" wrk -t1 -c8 -d"${DURATION}s" -H "Host: s$site.example" -H "Connection: close" "http://127.0.0.1:$port/100.html")
  ticks=$(awk '/^TICKS/ {print $2}' <<<"$out")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  python3 -c "print(round($ticks / $(getconf CLK_TCK) * 1e6 / $reqs, 2), $(awk '/Requests\/sec/ {print $2}' <<<"$out"))"
}
listening() { ss -Htln "sport = :$1" | wc -l; }
errors_of() { awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' <<<"$1"; }
# ticks_during MASTER COMMAND… — runs COMMAND (its output printed), then prints the CPU ticks
# the server's processes took meanwhile, process by process: one in the tree at both ends by
# its difference, one that started meanwhile (an on-demand pool woken) whole; one that ended
# meanwhile is not counted (its last ticks cannot be read).
ticks_during() {
  local master=$1 p total=0; shift
  declare -A before=()
  for p in $(tree_of "$master"); do before[$p]=$(proc_ticks "$p"); done
  "$@"
  for p in $(tree_of "$master"); do
    total=$((total + $(proc_ticks "$p") - ${before[$p]:-0}))
  done
  echo "TICKS $total"
}
# load PORT MASTER — keep-alive load, one wrk thread per loaded site (its Host):
# "requests cpu_us requests/s"
load() {
  local port=$1 master=$2 out ticks reqs
  hosts_lua
  out=$(ticks_during "$master" taskset -c "$CLIENT_CPU" wrk -t"$LOADED" -c$((LOADED * 12)) -d"${DURATION}s" -s "$WORK/hosts.lua" "http://127.0.0.1:$port/100.html")
  ticks=$(awk '/^TICKS/ {print $2}' <<<"$out")
  [ "$(errors_of "$out")" = 0 ] || { echo "wrk saw errors on port $port: $(grep -E 'Non-2xx|Socket errors' <<<"$out")" >&2; exit 1; }
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  python3 -c "print($reqs, round($ticks / $(getconf CLK_TCK) * 1e6 / $reqs, 2), $(awk '/Requests\/sec/ {print $2}' <<<"$out"))"
}
percentile() { python3 -c "import sys; v=sorted(float(x) for x in sys.argv[2:]); print(round(v[min(len(v)-1, int(len(v)*$1/100))]*1000, 1))" "$@"; }
ms_less() { python3 -c "print(round(($1 - $2) * 1000, 1))"; }

# gunicorn's own start, alone, the same app and command: seconds from its start to its first
# answer, polled every 2 ms (as espalier's readiness probe does). The median of three.
G_ALONE_MED=$(cd "$ROOT/examples/apps/wsgi" && python3 - "$(free_port)" "$SERVER_CPU" <<'EOF'
import socket, statistics, subprocess, sys, time
port, cpu = int(sys.argv[1]), sys.argv[2]
took = []
for _ in range(3):
    t0 = time.monotonic()
    p = subprocess.Popen(["taskset", "-c", cpu, "gunicorn", "--workers", "1", "--bind", f"127.0.0.1:{port}", "app:app"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            answer = s.recv(12)
            s.close()
            if answer.startswith(b"HTTP/1."):
                took.append(time.monotonic() - t0)
                break
        except OSError:
            time.sleep(0.002)
            continue
        time.sleep(0.002)
    p.terminate(); p.wait()
print(statistics.median(took))
EOF
)

echo "espalier: $SITES sites in $SITES on-demand pools (one file each) on one http and one https port; nginx: $SITES server blocks" >&2
serve fifth/espalier.toml fifth.out
FIFTH_RSS=$(rss_kib "${PIDS[-1]}")
stop_all
serve espalier.toml espalier.out
READY=$SERVED_IN
MASTER=${PIDS[-1]}
ADMIN=$(sed -n 's/^admin = "\(.*\)"/\1/p' "$WORK/espalier.toml")
E_RSS=$(rss_kib "$MASTER")
E_FDS=$(ls "/proc/$MASTER/fd" | wc -l)
E_PSS=$(pss_kib $(tree_of "$MASTER"))
E_LISTEN=$(listening "$PORT")
E_LISTEN_TLS=$(listening "$TLS_PORT")
PER_SITE_B=$(python3 -c "print(round(($E_RSS - $FIFTH_RSS) * 1024 / ($SITES - $SITES // 5)))")
# The active sites: woken, then loaded — the loaded ones woken again just before (with
# idle_timeout 10 s, the first of 100 may sleep again while the last are visited, and four
# waking at once would be more than on_demand_starting lets start together).
for i in $ACTIVE_IDS; do get "$PORT" "$i" >/dev/null; done
for i in $(echo $ACTIVE_IDS | cut -d' ' -f1-"$LOADED"); do get "$PORT" "$i" >/dev/null; done
read -r E_REQS E_CPU E_RPS < <(load "$PORT" "$MASTER")
read -r HOP_CPU HOP_RPS < <(per_connection "$PORT" "$FIRST_ACTIVE" "$MASTER")
# Loaded again; midway, one other site's file changes (its root) and is reloaded: the reload's
# time, the loaded sites' failures, and whether any of their processes was replaced (the
# loaded ones: the other active pools may meanwhile stop for idleness).
active_pids() {
  curl -s "http://$ADMIN/status?state=running&per_page=1000" | python3 -c "import json,sys
act={'p'+i for i in '$ACTIVE_IDS'.split()[:$LOADED]}
print(' '.join(sorted(str(w['pid']) for p in json.load(sys.stdin)['pools'] if p['name'] in act for w in p['workers'] if w['pid'])))"
}
BEFORE_PIDS=$(active_pids)
hosts_lua
taskset -c "$CLIENT_CPU" wrk -t"$LOADED" -c$((LOADED * 12)) -d"${DURATION}s" -s "$WORK/hosts.lua" "http://127.0.0.1:$PORT/100.html" >"$WORK/wrk.out" &
WRK=$!
sleep "$(python3 -c "print($DURATION / 2)")"
sed -i 's|^root = "www"|root = "www2"|' "$WORK/sites.d/s$RELOADED.toml"
t0=$(now)
"$ESPALIER" reload --admin "$ADMIN" >"$WORK/reload.out" 2>&1 || { echo "reload failed: $(cat "$WORK/reload.out")" >&2; exit 1; }
RELOAD_S=$(python3 -c "print(round($(now) - $t0, 3))")
wait "$WRK"
R_ERRORS=$(errors_of "$(cat "$WORK/wrk.out")")
R_REQS=$(awk '/requests in/ {print $1}' "$WORK/wrk.out")
AFTER_PIDS=$(active_pids)
RESTARTED=$(comm -23 <(tr ' ' '\n' <<<"$BEFORE_PIDS" | grep . | sort) <(tr ' ' '\n' <<<"$AFTER_PIDS" | grep . | sort) | wc -l)
RELOAD_LINE=$(grep -o "reloaded [^;]*" "$WORK/espalier.out" | tail -1 | sed 's/.*toml: //')
# Cold sites: each first request starts its pool's process; over https, its certificate is
# read from the store for the starting worker.
COLD_T=(); COLD_TLS_T=(); GUNI_T=()
for i in $COLD_HTTP; do
  read -r code t < <(get "$PORT" "$i")
  [ "$code" = 200 ] || { echo "cold site s$i answered $code" >&2; exit 1; }
  COLD_T+=("$t")
done
for i in $COLD_HTTPS; do
  read -r code t < <(get_tls "$TLS_PORT" "$i")
  [ "$code" = 200 ] || { echo "cold https site s$i answered $code" >&2; exit 1; }
  COLD_TLS_T+=("$t")
done
for i in $GUNI_IDS; do
  read -r code t < <(get "$PORT" "$i" "")
  [ "$code" = 200 ] || { echo "cold gunicorn site s$i answered $code" >&2; exit 1; }
  GUNI_T+=("$(ms_less "$t" "$G_ALONE_MED")")
done
GUNI_PIDS=$(tree_of "$MASTER" | while read -r p; do if grep -qs gunicorn "/proc/$p/cmdline"; then echo "$p"; fi; done)
G_PSS_RUN=$(pss_kib $GUNI_PIDS)
E_PSS_BUSY=$(pss_kib $(tree_of "$MASTER"))
E_PROCS=$(($(tree_of "$MASTER" | wc -l) - 1))
# Idle: the visited static pools stop, the gunicorn ones are suspended (idle_timeout 10 s).
for _ in $(seq 90); do
  [ "$(status_count running)" = 0 ] && break
  sleep 1
done
E_PSS_IDLE=$(pss_kib $(tree_of "$MASTER"))
G_PSS_SUSP=$(pss_kib $GUNI_PIDS)
SUSPENDED=$(status_count suspended)
SUSPEND_LINE=$(grep -o "suspended, resident memory [^;]*" "$WORK/espalier.out" | head -1 | sed 's/suspended, //')
stop_all

serve small/espalier.toml small.out
SMALL_READY=$SERVED_IN
SMALL=${PIDS[-1]}
read -r S_REQS S_CPU S_RPS < <(load "$SMALL_PORT" "$SMALL")
stop_all
serve alone/espalier.toml alone.out
read -r ALONE_CPU ALONE_RPS < <(per_connection "$ALONE_PORT" "$FIRST_ACTIVE" "${PIDS[-1]}")
stop_all
if [ -n "$BASELINE" ]; then
  # Before the dispatcher: the active sites' pools on one shared port, each pool thread with
  # its own socket there, accepting and handing on.
  ESPALIER_NOW=$ESPALIER
  ESPALIER=$BASELINE
  serve small/espalier.toml baseline.out
  read -r B_HOP_CPU B_HOP_RPS < <(per_connection "$SMALL_PORT" "$FIRST_ACTIVE" "${PIDS[-1]}")
  B_LISTEN=$(listening "$SMALL_PORT")
  stop_all
  ESPALIER=$ESPALIER_NOW
  serve small/espalier.toml small-now.out
  read -r N_HOP_CPU N_HOP_RPS < <(per_connection "$SMALL_PORT" "$FIRST_ACTIVE" "${PIDS[-1]}")
  N_LISTEN=$(listening "$SMALL_PORT")
  stop_all
fi

T0=$(now)
start_nginx ""
N_READY=$(python3 -c "print(round($(now) - $T0, 2))")
N_MASTER=$(pgrep -f "nginx: master" | head -1)
N_PIDS=$(pgrep -f "nginx: (master|worker)" | tr '\n' ' ')
N_RSS=0; for p in $N_PIDS; do N_RSS=$((N_RSS + $(rss_kib "$p"))); done
N_PSS=$(pss_kib $N_PIDS)
N_FDS=$(ls "/proc/$N_MASTER/fd" | wc -l)
N_LISTEN=$(listening "$NGINX_PORT")
read -r N_REQS N_CPU N_RPS < <(load "$NGINX_PORT" "$N_MASTER")
stop_all

mib() { python3 -c "print(round($1/1024, 1))"; }
echo
echo "espalier $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') vs $("$NGINX" -v 2>&1 | sed 's/.*: //') — $(date -u +%Y-%m-%d), $(nproc) CPUs, $SITES sites on one http and one https port, $ACTIVE active ($LOADED under load), servers on CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU"
printf '%-44s %14s %14s %8s\n' "" "espalier" "nginx" "ratio"
printf '%-44s %14s %14s %8s\n' "ready (s)" "$READY" "$N_READY" "$(ratio "$READY" "$N_READY")"
printf '%-44s %14s %14s %8s\n' "master RSS (MiB; nginx: all processes)" "$(mib "$E_RSS")" "$(mib "$N_RSS")" "$(ratio "$E_RSS" "$N_RSS")"
printf '%-44s %14s %14s %8s\n' "PSS of every process at start (MiB)" "$(mib "$E_PSS")" "$(mib "$N_PSS")" "$(ratio "$E_PSS" "$N_PSS")"
printf '%-44s %14s %14s\n' "master's descriptors" "$E_FDS" "$N_FDS"
printf '%-44s %14s %14s\n' "listening sockets on the port (ss -tln)" "$E_LISTEN" "$N_LISTEN"
printf '%-44s %14s %14s %8s\n' "active sites: requests/s" "$E_RPS" "$N_RPS" "$(ratio "$E_RPS" "$N_RPS")"
printf '%-44s %14s %14s %8s\n' "active sites: CPU µs per request" "$E_CPU" "$N_CPU" "$(ratio "$E_CPU" "$N_CPU")"
echo "(nginx serves http only, its $SITES names in one server_names hash)"
echo
echo "espalier alone:"
echo "  listening sockets: $E_LISTEN on the http port, $E_LISTEN_TLS on the https one ($(nproc) CPUs); master memory per idle site: $PER_SITE_B bytes (RSS $(mib "$E_RSS") MiB with $SITES sites, $(mib "$FIFTH_RSS") MiB with $((SITES / 5)))"
echo "  the routing hop (a new connection per request to s$FIRST_ACTIVE): CPU µs per request through the dispatcher $HOP_CPU, alone on its own port $ALONE_CPU ($(ratio "$HOP_CPU" "$ALONE_CPU")); requests/s $HOP_RPS vs $ALONE_RPS"
if [ -n "$BASELINE" ]; then
  echo "  against the design before (BASELINE_BIN; the $ACTIVE active sites' pools on one port, a new connection per request): CPU µs per request $N_HOP_CPU vs $B_HOP_CPU ($(ratio "$N_HOP_CPU" "$B_HOP_CPU")), requests/s $N_HOP_RPS vs $B_HOP_RPS; listening sockets $N_LISTEN vs $B_LISTEN"
fi
echo "  processes running at start: 0 of $SITES pools; after visiting $ACTIVE + $((2 * COLD)) + $GUNICORN sites: $E_PROCS"
echo "  first request to a cold static site (its process starts): http p50 $(percentile 50 "${COLD_T[@]}") ms, p99 $(percentile 99 "${COLD_T[@]}") ms over $COLD sites; https (certificate from the store) p50 $(percentile 50 "${COLD_TLS_T[@]}") ms, p99 $(percentile 99 "${COLD_TLS_T[@]}") ms over $COLD"
echo "  first request to a cold gunicorn site, less gunicorn's own start alone ($(python3 -c "print(round($G_ALONE_MED * 1000))") ms): $(echo "${GUNI_T[@]}" | sed 's/ / ms, /g') ms"
echo "  active sites vs a config of only them ($ACTIVE pools, always running, ready in ${SMALL_READY}s): requests/s $(ratio "$E_RPS" "$S_RPS"), CPU per request $(ratio "$E_CPU" "$S_CPU")"
echo "  one site's file changed and reloaded under load on $LOADED others: ${RELOAD_S}s ($RELOAD_LINE); their processes replaced: $RESTARTED; their failed requests: $R_ERRORS of $R_REQS"
echo "  PSS: $(mib "$E_PSS") MiB at start, $(mib "$E_PSS_BUSY") MiB with the visited pools running, $(mib "$E_PSS_IDLE") MiB once idle (idle_timeout 10 s): $(mib $((E_PSS_BUSY - E_PSS_IDLE))) MiB given back"
echo "  suspended gunicorn pools ($SUSPENDED): their processes' PSS $(mib "$G_PSS_RUN") MiB running → $(mib "$G_PSS_SUSP") MiB suspended (first: $SUSPEND_LINE; no swap here: only file-backed pages can go)"
