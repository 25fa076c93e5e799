#!/usr/bin/env bash
# bench/app.sh — the user's application in an espalier pool, measured.
#
# Part 1, a small app (the Node example, examples/apps/node/server.js, `/who`), in one run,
# interleaved, keep-alive load from wrk pinned to CPU 1, every server on CPU 0:
#   (a) the app alone, on its own port;
#   (b) behind espalier with transport = "activation" (the app accepts on espalier's socket);
#   (c) behind espalier with transport = "proxy" (a front worker forwards to the app);
#   (d) behind nginx as a reverse proxy with upstream keep-alive;
#   (e) as (c), with max_requests_per_process = 16 (half the connections wait in espalier's
#       queue at any time): what the cap and its queue cost;
#   (f) as (c), the app reached on a unix socket (`upstream = "unix"`) instead of loopback TCP;
#   (c') as (c), on the epoll path (`io = "epoll"`; (c) takes `auto`: io_uring where the
#       kernel allows it).
# Prints requests/s, latency p50/p99 and, for (c), (c') and (d), the proxy tier's CPU time per
# request (user + system of every process of the proxy — master and workers — from
# /proc/<pid>/stat, summed over all runs), its syscalls per request (perf's raw_syscalls
# tracepoint, a run of its own), its user-space instructions per request (callgrind, the
# proxy started again under it) and the app's CPU time per request.
#
# Part 2, the web-gardening seed for real: the CPU-heavy Python app (examples/apps/audio, pure
# Python audio synthesis and encoding) under gunicorn by activation, `processes = 1` against a
# web garden of one process per CPU: throughput ratio.
#
# Part 3, isolation: the audio app in pool A (gunicorn with one worker per CPU) saturated by 32
# connections beside pool B (the same app, short requests at a fixed 20/s): B's p99 when both
# pools share every CPU, and when B has a CPU of its own.
#
# Installs nginx, wrk, gunicorn, nodejs, linux-perf, valgrind and curl from Debian when missing.
#   bench/app.sh                     # DURATION=5 RUNS=3 PARTS=123
#   PARTS=1 bench/app.sh             # only part 1
#   ESPALIER_BIN=/path/to/espalier bench/app.sh
#   BASELINE_BIN=/path/to/older/espalier PARTS=1 bench/app.sh   # (c) by an older build too,
#                                    # interleaved in the same runs: before/after ratios
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-5}
RUNS=${RUNS:-3}
CONNS=${CONNS:-32}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PARTS=${PARTS:-123}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk gunicorn:gunicorn node:nodejs python3:python3 perf:linux-perf valgrind:valgrind curl:curl
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")
BASELINE=${BASELINE_BIN:-}
if [ -n "$BASELINE" ] && [ ! -x "$BASELINE" ]; then
  echo "BASELINE_BIN=$BASELINE is not an executable espalier; build one (git worktree add, cargo build --release)" >&2
  exit 2
fi

bench_workdir espalier-app-bench
cp -r "$ROOT/examples/apps/node" "$ROOT/examples/apps/audio" "$WORK/"
mkdir -p "$WORK/nginx"

ALONE=$(free_port); NGINX_APP=$(free_port); NGINX_PORT=$(free_port)
ACT=$(free_port); PROXY=$(free_port); CAPPED=$(free_port); EPOLL=$(free_port)
ADMIN1=$(free_port); ADMIN2=$(free_port); ADMIN3=$(free_port); ADMIN4=$(free_port)
BEFORE=$(free_port); ADMIN5=$(free_port)
UNIXP=$(free_port); ADMIN6=$(free_port)

pool() { # name port admin transport [extra pool keys] [extra server keys]
  cat <<CONF
[server]
admin = "127.0.0.1:$3"
${6:-}
[[pool]]
name = "$1"
processes = 1
cpus = "$SERVER_CPU"
affinity = "hard"
command = ["node", "server.js"]
directory = "node"
transport = "$4"
health = "/healthz"
${5:-}
[[site]]
name = "$1"
bindings = ["http://127.0.0.1:$2"]
[[site.app]]
pool = "$1"
CONF
}
pool act "$ACT" "$ADMIN1" activation >"$WORK/act.toml"
pool proxy "$PROXY" "$ADMIN2" proxy >"$WORK/proxy.toml"
pool capped "$CAPPED" "$ADMIN3" proxy "max_requests_per_process = 16" >"$WORK/capped.toml"
# (c) on each I/O path: proxy.toml takes io = "auto" (io_uring where the kernel allows it),
# epoll.toml the epoll path.
pool epoll "$EPOLL" "$ADMIN4" proxy "" 'io = "epoll"' >"$WORK/epoll.toml"
# (f) the app on a unix socket.
pool unix "$UNIXP" "$ADMIN6" proxy 'upstream = "unix"' >"$WORK/unix.toml"
# (c) by the older build, with BASELINE_BIN.
pool before "$BEFORE" "$ADMIN5" proxy >"$WORK/before.toml"
binary_of() { [ "$1" = before ] && echo "$BASELINE" || echo "$ESPALIER"; }

cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(format(1<<$SERVER_CPU,'b'))");
daemon off;
error_log $WORK/nginx/error.log;
pid $WORK/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  upstream app { server 127.0.0.1:$NGINX_APP; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
    }
  }
}
CONF

start() { # name command… — started in the background, on the server CPU
  (cd "$WORK" && exec taskset -c "$SERVER_CPU" "${@:2}") >"$WORK/$1.out" 2>&1 &
  PIDS+=($!)
  eval "PID_$1=$!"
}
start alone env PORT="$ALONE" node node/server.js
start nginxapp env PORT="$NGINX_APP" node node/server.js
start nginx "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
start act "$ESPALIER" serve -c act.toml
start proxy "$ESPALIER" serve -c proxy.toml
start capped "$ESPALIER" serve -c capped.toml
start epoll "$ESPALIER" serve -c epoll.toml
start unix "$ESPALIER" serve -c unix.toml
[ -n "$BASELINE" ] && start before "$BASELINE" serve -c before.toml
for p in "$ALONE" "$NGINX_APP" "$NGINX_PORT" "$ACT" "$PROXY" "$CAPPED" "$EPOLL" "$UNIXP" ${BASELINE:+"$BEFORE"}; do wait_port "$p"; done
PROXY_IO=$(grep -o "connections' I/O: .*" "$WORK/proxy.out" | head -1 | sed "s/connections' I\/O: //")
PROXY_PATH=$(case $PROXY_IO in io_uring*) echo io_uring ;; *) echo epoll ;; esac)
sleep 1.5   # the apps behind espalier become ready (health probe)

descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
ticks() { proc_ticks "$@"; }
user_ticks() { proc_ticks --user "$@"; }
# The proxy tier: the proxy's own processes. The app: the node processes serving the target.
tier_pids() {
  case $1 in
    # The proxy's processes by their command name, the binary's file name (ESPALIER_BIN or
    # BASELINE_BIN may be named otherwise; the kernel keeps 15 characters of it).
    proxy|capped|epoll|unix|before) local root comm; root=$(eval echo "\$PID_$1"); comm=$(basename "$(binary_of "$1")" | cut -c1-15); echo "$root"; for p in $(descendants "$root"); do [ "$(cat /proc/$p/comm)" = "$comm" ] && echo "$p"; done ;;
    nginx) echo "$PID_nginx"; descendants "$PID_nginx" ;;
    *) ;;
  esac
}
app_pids() {
  case $1 in
    alone) echo "$PID_alone" ;;
    nginx) echo "$PID_nginxapp" ;;
    act|proxy|capped|epoll|unix|before) for p in $(descendants "$(eval echo "\$PID_$1")"); do [ "$(cat /proc/$p/comm)" = node ] && echo "$p"; done ;;
  esac
}
port_of() { case $1 in alone) echo "$ALONE" ;; act) echo "$ACT" ;; proxy) echo "$PROXY" ;; capped) echo "$CAPPED" ;; epoll) echo "$EPOLL" ;; unix) echo "$UNIXP" ;; nginx) echo "$NGINX_PORT" ;; before) echo "$BEFORE" ;; esac; }


part1() {
TARGETS=(alone act proxy epoll unix nginx capped)
[ -n "$BASELINE" ] && TARGETS+=(before)
MEASURED=(proxy epoll unix nginx); [ -n "$BASELINE" ] && MEASURED+=(before)
declare -A BEST P50 P99 REQS TIER TIER_USER APP SYSCALLS INSNS
for t in "${TARGETS[@]}"; do wrk_load "http://127.0.0.1:$(port_of "$t")/who" 1 >/dev/null; BEST[$t]=0; REQS[$t]=0; TIER[$t]=0; TIER_USER[$t]=0; APP[$t]=0; P50[$t]=; P99[$t]=; done
echo "part 1: a small Node app alone and behind espalier and nginx ($RUNS interleaved runs of ${DURATION}s)…" >&2
for run in $(seq "$RUNS"); do
  for t in "${TARGETS[@]}"; do
    mapfile -t tier < <(tier_pids "$t"); mapfile -t app < <(app_pids "$t")
    tb=$(ticks "${tier[@]}"); tub=$(user_ticks "${tier[@]}"); ab=$(ticks "${app[@]}")
    read -r reqs rps p50 p99 < <(wrk_load "http://127.0.0.1:$(port_of "$t")/who" "$DURATION")
    TIER[$t]=$((TIER[$t] + $(ticks "${tier[@]}") - tb)); APP[$t]=$((APP[$t] + $(ticks "${app[@]}") - ab))
    TIER_USER[$t]=$((TIER_USER[$t] + $(user_ticks "${tier[@]}") - tub))
    REQS[$t]=$((REQS[$t] + reqs))
    if python3 -c "import sys; sys.exit(0 if $rps > ${BEST[$t]} else 1)"; then BEST[$t]=$rps; P50[$t]=$p50; P99[$t]=$p99; fi
  done
done

# The proxy tier's syscalls per request, in a run of their own (the tracepoint costs a little
# per call).
for t in "${MEASURED[@]}"; do
  mapfile -t tp < <(tier_pids "$t")
  pids=$(IFS=,; echo "${tp[*]}")
  perf stat -x, -e raw_syscalls:sys_enter -p "$pids" -o "$WORK/sys.$t" -- sleep $((DURATION + 1)) &
  perfpid=$!
  sleep 0.3
  read -r reqs _ _ _ < <(wrk_load "http://127.0.0.1:$(port_of "$t")/who" "$DURATION")
  wait $perfpid
  SYSCALLS[$t]=$(per_request "$(awk -F, '/raw_syscalls/ {print $1}' "$WORK/sys.$t")" "$reqs")
done

# The proxy tier's user-space instructions per request, by callgrind (no hardware counters
# here; user space only — the kernel's share is in the CPU time and the syscalls above): each
# proxy started again under callgrind (for espalier its worker, the app it starts not traced),
# zeroed, loaded, dumped and summed.
for t in "${MEASURED[@]}"; do kill "$(eval echo "\$PID_$t")"; wait "$(eval echo "\$PID_$t")" 2>/dev/null || true; done
sleep 0.5
CG="valgrind --tool=callgrind --trace-children=yes --trace-children-skip=*node* --callgrind-out-file=$WORK/cg.%p"
for t in "${MEASURED[@]}"; do
  if [ "$t" = nginx ]; then
    start cg_$t $CG "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" -g "master_process off;"
  else
    start cg_$t $CG "$(binary_of "$t")" serve -c "$t.toml"
  fi
  wait_port "$(port_of "$t")"
  # The app behind it ready (health probe), the proxy answering.
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$(port_of "$t")/who" && break; sleep 0.2; done
  root=$(eval echo "\$PID_cg_$t")
  if [ "$t" = nginx ]; then measured=$root; else measured=$(pgrep -f "callgrind.*$(binary_of "$t") worker" | head -1); fi
  cg_zero "$measured"
  read -r reqs _ _ _ < <(wrk_load "http://127.0.0.1:$(port_of "$t")/who" "$DURATION")
  INSNS[$t]=$(python3 -c "print(round($(cg_dump_sum "$WORK" "$measured")/$reqs))")
  kill "$root"; wait "$root" 2>/dev/null || true
  rm -f "$WORK"/cg.*
done

echo
echo "espalier $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') — $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), node $(node --version), $("$NGINX" -v 2>&1 | sed 's/.*: //'); servers on CPU $SERVER_CPU, wrk -t1 -c$CONNS on CPU $CLIENT_CPU"
printf '%-32s %12s %9s %9s %18s %14s %16s %18s\n' "" "requests/s" "p50 ms" "p99 ms" "proxy CPU µs/req" "syscalls/req" "app CPU µs/req" "proxy user insns"
for t in "${TARGETS[@]}"; do
  case $t in alone) name="(a) app alone" ;; act) name="(b) espalier activation" ;; proxy) name="(c) espalier proxy, $PROXY_PATH" ;; epoll) name="(c') espalier proxy, epoll" ;; unix) name="(f) proxy, app on a unix socket" ;; nginx) name="(d) nginx proxy_pass" ;; capped) name="(e) proxy, 16 per process" ;; before) name="(c) by BASELINE_BIN" ;; esac
  tier=-; case $t in proxy|epoll|unix|nginx|capped|before) tier=$(us_per "${TIER[$t]}" "${REQS[$t]}") ;; esac
  printf '%-32s %12.0f %9s %9s %18s %14s %16s %18s\n' "$name" "${BEST[$t]}" "${P50[$t]}" "${P99[$t]}" "$tier" "${SYSCALLS[$t]:--}" "$(us_per "${APP[$t]}" "${REQS[$t]}")" "${INSNS[$t]:--}"
done
echo "  (c)'s I/O path: $PROXY_IO"
echo "  espalier / nginx, proxy CPU per request, per I/O path: $PROXY_PATH $(ratio "$(us_per "${TIER[proxy]}" "${REQS[proxy]}")" "$(us_per "${TIER[nginx]}" "${REQS[nginx]}")"), epoll $(ratio "$(us_per "${TIER[epoll]}" "${REQS[epoll]}")" "$(us_per "${TIER[nginx]}" "${REQS[nginx]}")")   (target ≤ 0.6)"
echo "  activation / alone, requests/s:         $(ratio "${BEST[act]}" "${BEST[alone]}")   (target ≥ 0.95)"
echo "  app on a unix socket / on loopback TCP:  proxy CPU per request $(ratio "$(us_per "${TIER[unix]}" "${REQS[unix]}")" "$(us_per "${TIER[proxy]}" "${REQS[proxy]}")"), app CPU per request $(ratio "$(us_per "${APP[unix]}" "${REQS[unix]}")" "$(us_per "${APP[proxy]}" "${REQS[proxy]}")"), requests/s $(ratio "${BEST[unix]}" "${BEST[proxy]}"); espalier (unix) / nginx, proxy CPU per request $(ratio "$(us_per "${TIER[unix]}" "${REQS[unix]}")" "$(us_per "${TIER[nginx]}" "${REQS[nginx]}")")"
echo "  espalier / nginx, proxy CPU per request: $(ratio "$(us_per "${TIER[proxy]}" "${REQS[proxy]}")" "$(us_per "${TIER[nginx]}" "${REQS[nginx]}")")   (target ≤ 0.6)"
echo "  espalier / nginx, requests/s:            $(ratio "${BEST[proxy]}" "${BEST[nginx]}")"
echo "  max_requests_per_process = 16 / unset:  proxy CPU per request $(ratio "$(us_per "${TIER[capped]}" "${REQS[capped]}")" "$(us_per "${TIER[proxy]}" "${REQS[proxy]}")"), requests/s $(ratio "${BEST[capped]}" "${BEST[proxy]}")"
echo "  espalier / nginx, proxy user-space instructions per request (callgrind): $PROXY_PATH $(ratio "${INSNS[proxy]}" "${INSNS[nginx]}"), epoll $(ratio "${INSNS[epoll]}" "${INSNS[nginx]}")   (user space only: not the whole cost)"
echo "  proxy CPU split, user + system µs/req:   espalier $(us_per "${TIER_USER[proxy]}" "${REQS[proxy]}") + $(us_per "$((TIER[proxy] - TIER_USER[proxy]))" "${REQS[proxy]}"), nginx $(us_per "${TIER_USER[nginx]}" "${REQS[nginx]}") + $(us_per "$((TIER[nginx] - TIER_USER[nginx]))" "${REQS[nginx]}")"
if [ -n "$BASELINE" ]; then
  echo "  this build / BASELINE_BIN, (c): proxy CPU per request $(ratio "$(us_per "${TIER[proxy]}" "${REQS[proxy]}")" "$(us_per "${TIER[before]}" "${REQS[before]}")"), user insns $(ratio "${INSNS[proxy]}" "${INSNS[before]}"), requests/s $(ratio "${BEST[proxy]}" "${BEST[before]}")"
fi
}
[[ $PARTS == *1* ]] && part1
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
PIDS=()

# Part 2: the web garden.
garden() { # processes port admin → requests/s of the CPU-heavy app at ms=50
  cat > "$WORK/garden.toml" <<CONF
[server]
admin = "127.0.0.1:$3"
[[pool]]
name = "audio"
processes = $1
affinity = "hard"
command = ["gunicorn", "--workers", "1", "app:app"]
directory = "audio"
transport = "activation"
[[site]]
name = "audio"
bindings = ["http://127.0.0.1:$2"]
[[site.app]]
pool = "audio"
CONF
  (cd "$WORK" && exec "$ESPALIER" serve -c garden.toml) >"$WORK/garden.out" 2>&1 &
  local pid=$!
  wait_port "$2"; sleep 1.5
  # A client thread on every CPU: connections are steered to the process of the CPU that
  # receives them, as a NIC's receive queues spread them on a real machine.
  local clients="-t $(nproc) --cpus 0-$(( $(nproc) - 1 ))"
  "$ESPALIER" bench -d 2s -c 8 $clients "http://127.0.0.1:$2/?ms=50" >/dev/null
  "$ESPALIER" bench -d "${DURATION}s" -c 8 $clients --json "http://127.0.0.1:$2/?ms=50" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["rps"], d["errors"])'
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
if [[ $PARTS == *2* ]]; then
  echo >&2; echo "part 2: the CPU-heavy Python app, 1 process against a web garden of $(nproc)…" >&2
  read -r one one_err < <(garden 1 "$(free_port)" "$(free_port)")
  read -r many many_err < <(garden "$(nproc)" "$(free_port)" "$(free_port)")
  echo
  echo "web garden (pure-Python audio synthesis + IMA ADPCM, ms=50, gunicorn by activation, espalier bench -c 8, a client thread per CPU):"
  printf '  processes = 1:        %8.1f requests/s (%s errors)\n' "$one" "$one_err"
  printf '  processes = %-2s        %8.1f requests/s (%s errors)\n' "$(nproc):" "$many" "$many_err"
  echo "  garden / single:      $(ratio "$many" "$one")   (the seed: 2x on 4 cores)"
fi

# Part 3: isolation.
isolation() { # masked(0|1) → B's "p50 p99" while A is saturated
  local a_cpus b_cpus last=$(( $(nproc) - 1 ))
  if [ "$1" = 1 ]; then a_cpus="0-$((last - 1))"; b_cpus="$last"; else a_cpus="0-$last"; b_cpus="0-$last"; fi
  local pa pb
  pa=$(free_port); pb=$(free_port)
  cat > "$WORK/iso.toml" <<CONF
[server]
admin = "127.0.0.1:$(free_port)"
[[pool]]
name = "a"
cpus = "$a_cpus"
command = ["gunicorn", "--workers", "$(nproc)", "app:app"]
directory = "audio"
transport = "activation"
[[pool]]
name = "b"
cpus = "$b_cpus"
command = ["gunicorn", "--workers", "1", "app:app"]
directory = "audio"
transport = "activation"
[[site]]
name = "a"
bindings = ["http://127.0.0.1:$pa"]
[[site.app]]
pool = "a"
[[site]]
name = "b"
bindings = ["http://127.0.0.1:$pb"]
[[site.app]]
pool = "b"
CONF
  (cd "$WORK" && exec "$ESPALIER" serve -c iso.toml) >"$WORK/iso.out" 2>&1 &
  local pid=$!
  wait_port "$pa"; wait_port "$pb"; sleep 1.5
  "$ESPALIER" bench -d "$((DURATION + 4))s" -c 32 "http://127.0.0.1:$pa/?ms=50" >/dev/null 2>&1 &
  local heavy=$!
  sleep 2
  "$ESPALIER" bench -d "${DURATION}s" -c 4 --rate 20 --json "http://127.0.0.1:$pb/?ms=2" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); l=d["latency_ms"]; print(l["p50"], l["p99"])'
  wait "$heavy" 2>/dev/null || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
if [[ $PARTS == *3* ]] && [ "$(nproc)" -ge 2 ]; then
  echo >&2; echo "part 3: isolation — pool B's latency beside a saturated pool A…" >&2
  read -r s50 s99 < <(isolation 0)
  read -r m50 m99 < <(isolation 1)
  echo
  echo "isolation (pool A: audio app saturated by 32 connections; pool B: ms=2 at 20 requests/s):"
  echo "  B shares every CPU with A:   p50 ${s50} ms, p99 ${s99} ms"
  echo "  B has CPU $(( $(nproc) - 1 )) to itself:      p50 ${m50} ms, p99 ${m99} ms"
  echo "  p99 shared / own CPU:        $(ratio "$s99" "$m99")"
fi
