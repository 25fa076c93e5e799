#!/usr/bin/env bash
# bench/hosting.sh — the case study's hosting configuration (N sites, one pool of one worker
# each) on one port by host name, against the same N sites on N ports, and against nginx with N
# `server` blocks on one port.
#
# In one run, interleaved, every server on CPU $SERVER_CPU and the load on CPU $CLIENT_CPU: N
# wrk processes at once, one per site (each -t1 -c$((CONNS / N)) with its site's Host header),
# against
#   (a) espalier, N sites on N ports (each port served by its own pool: today's path);
#   (b) espalier, N sites on one port by host (a connection accepted by a thread of any pool is
#       handed to its site's pool, then served there);
#   (c) nginx, N server blocks on one port (server_name), N worker processes.
# Each in two modes: keep-alive (browsers keep a connection per host: a hand-off once per
# connection), and a new connection per request (`Connection: close`: a hand-off for nearly
# every request — the worst case).
#
# Prints requests/s (best of the runs), CPU time per request (user + system of every server
# process and thread, master included, from /proc/<pid>/stat, summed over all runs), and the
# ratios shared/dedicated (target ≤ 1.15 in CPU time per request, keep-alive) and
# espalier/nginx. Then user-space instructions per request from callgrind (keep-alive, the
# kernel's part is not in it). Installs nginx, wrk and valgrind from Debian when missing.
#
#   bench/hosting.sh                  # SITES=4 DURATION=5 RUNS=3 CONNS=48
#   SITES=2 RUNS=2 bench/hosting.sh
#   ESPALIER_BIN=/path/to/espalier bench/hosting.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SITES=${SITES:-4}
DURATION=${DURATION:-5}
RUNS=${RUNS:-3}
CONNS=${CONNS:-48}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk valgrind:valgrind python3:python3
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")

bench_workdir espalier-hosting

mkdir -p "$WORK/www" "$WORK/nginx"
python3 -c 'open("'"$WORK"'/www/100.html","w").write("x"*99+"\n")'
SHARED_PORT=$(free_port)
NGINX_PORT=$(free_port)
DEDICATED=()
for i in $(seq "$SITES"); do DEDICATED+=("$(free_port)"); done

# espalier_config shared|dedicated — N pools of one worker on the server CPU, one site each.
espalier_config() {
  local i port
  for i in $(seq "$SITES"); do
    printf '[[pool]]\nname = "site%s"\nprocesses = 1\ncpus = "%s"\naffinity = "hard"\nmemory_policy = "default"\n' "$i" "$SERVER_CPU"
  done
  for i in $(seq "$SITES"); do
    if [ "$1" = shared ]; then port="$SHARED_PORT:site$i.example"; else port=${DEDICATED[$((i - 1))]}; fi
    printf '[[site]]\nname = "site%s"\nbindings = ["http://127.0.0.1:%s"]\nroot = "www"\n[[site.app]]\npool = "site%s"\n' "$i" "$port" "$i"
  done
}
espalier_config dedicated >"$WORK/dedicated.toml"
espalier_config shared >"$WORK/shared.toml"
sed -i "1i [server]\nadmin = \"127.0.0.1:$(free_port)\"" "$WORK/dedicated.toml"
sed -i "1i [server]\nadmin = \"127.0.0.1:$(free_port)\"" "$WORK/shared.toml"

{
  echo "worker_processes $SITES;"
  echo "worker_cpu_affinity $(python3 -c "print(' '.join([format(1<<$SERVER_CPU,'b')]*$SITES))");"
  echo "daemon off; error_log $WORK/nginx/error.log; pid $WORK/nginx/nginx.pid;"
  echo "events { worker_connections 4096; }"
  echo "http { access_log off; sendfile on; keepalive_requests 1000000; open_file_cache max=1000; default_type text/html;"
  for i in $(seq "$SITES"); do echo "  server { listen 127.0.0.1:$NGINX_PORT; server_name site$i.example; root $WORK/www; }"; done
  echo "}"
} >"$WORK/nginx/nginx.conf"

start_espalier() { # $1 config, $2 port to wait for, $3 wrapper
  (cd "$WORK" && exec taskset -c "$SERVER_CPU" ${3:-} "$ESPALIER" serve -c "$1") >"$WORK/espalier.out" 2>&1 &
  PIDS+=($!)
  wait_port "$2"
  sleep 0.5
}
start_nginx() { taskset -c "$SERVER_CPU" ${1:-} "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" "${@:2}" >"$WORK/nginx.out" 2>&1 & PIDS+=($!); wait_port "$NGINX_PORT"; }

server_pids() {
  case $1 in
    nginx*) pgrep -f "nginx: (master|worker)" ;;
    *) pgrep -f "$ESPALIER (serve|worker)" ;;
  esac
}
url_of() { # target site-number → URL
  case $1 in
    dedicated*) echo "http://127.0.0.1:${DEDICATED[$(($2 - 1))]}/100.html" ;;
    shared*) echo "http://127.0.0.1:$SHARED_PORT/100.html" ;;
    nginx*) echo "http://127.0.0.1:$NGINX_PORT/100.html" ;;
  esac
}
# load TARGET SECONDS [close] → "requests rps": one wrk per site at once, summed.
load() {
  local i per=$((CONNS / SITES)) extra=() outs=()
  [ "${3:-}" = close ] && extra=(-H "Connection: close")
  for i in $(seq "$SITES"); do
    taskset -c "$CLIENT_CPU" wrk -t1 -c"$per" -d"${2}s" -H "Host: site$i.example" "${extra[@]}" "$(url_of "$1" "$i")" >"$WORK/wrk.$i" 2>&1 &
    outs+=($!)
  done
  wait "${outs[@]}"
  local errors
  errors=$(cat "$WORK"/wrk.* | awk '/Non-2xx|Socket errors/ {print}' | head -1)
  # A run that measured errors measured the wrong thing.
  # (load runs in a subshell: the main loop checks the mark, see no_errors.)
  [ -z "$errors" ] || { echo "$1: wrk saw errors, the figures would be wrong: $errors" >&2; touch "$WORK/failed"; }
  cat "$WORK"/wrk.* | awk '/requests in/ {r+=$1} /Requests\/sec/ {s+=$2} END {print r, s}'
}

no_errors() { [ ! -e "$WORK/failed" ] || exit 1; }
MODES=(keepalive close)
TARGETS=(dedicated shared nginx)
declare -A BEST TICKS REQS CPU_US USER_INSNS
HZ=$(getconf CLK_TCK)

echo "phase 1: requests/s and CPU time ($RUNS interleaved runs of ${DURATION}s, $SITES sites, $CONNS connections)…" >&2
for mode in "${MODES[@]}"; do
  for t in "${TARGETS[@]}"; do BEST[$t.$mode]=0; TICKS[$t.$mode]=0; REQS[$t.$mode]=0; done
done
for run in $(seq "$RUNS"); do
  for t in "${TARGETS[@]}"; do
    case $t in
      dedicated) start_espalier dedicated.toml "${DEDICATED[0]}" ;;
      shared) start_espalier shared.toml "$SHARED_PORT" ;;
      nginx) start_nginx ;;
    esac
    [ "$run" = 1 ] && load "$t" 1 >/dev/null # warm-up
    for mode in "${MODES[@]}"; do
      before=$(proc_ticks $(server_pids "$t"))
      read -r reqs rps < <(load "$t" "$DURATION" "$([ "$mode" = close ] && echo close)")
      TICKS[$t.$mode]=$((TICKS[$t.$mode] + $(proc_ticks $(server_pids "$t")) - before))
      REQS[$t.$mode]=$((REQS[$t.$mode] + reqs))
      no_errors
      BEST[$t.$mode]=$(python3 -c "print(max(${BEST[$t.$mode]}, $rps))")
    done
    stop_all
  done
done
for mode in "${MODES[@]}"; do
  for t in "${TARGETS[@]}"; do
    CPU_US[$t.$mode]=$(python3 -c "print(round(${TICKS[$t.$mode]} / $HZ * 1e6 / max(${REQS[$t.$mode]}, 1), 2))")
  done
done

echo "phase 2: user-space instructions per request (callgrind, keep-alive)…" >&2
cg_measure() { # $1 target; every process under callgrind is zeroed, loaded, dumped and summed
  local pids reqs total
  pids=$(pgrep -f "valgrind.*(worker|nginx)" || true)
  # shellcheck disable=SC2086 # one pid per word
  cg_zero $pids
  read -r reqs _ < <(load "$1" 5)
  no_errors
  # shellcheck disable=SC2086
  total=$(cg_dump_sum "$WORK" $pids)
  USER_INSNS[$1]=$(python3 -c "print(round($total / max($reqs, 1)))")
}
CG="valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$WORK/cg.%p"
start_espalier dedicated.toml "${DEDICATED[0]}" "$CG"; sleep 2; cg_measure dedicated; stop_all
start_espalier shared.toml "$SHARED_PORT" "$CG"; sleep 2; cg_measure shared; stop_all
# nginx in one process (master_process off): the same work as its workers', measurable alone.
start_nginx "valgrind --tool=callgrind --callgrind-out-file=$WORK/cg.%p" -g "master_process off;"; sleep 1; cg_measure nginx; stop_all

echo
echo "espalier $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') vs $("$NGINX" -v 2>&1 | sed 's/.*: //') — $(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), $SITES sites, servers on CPU $SERVER_CPU, $SITES × wrk -t1 on CPU $CLIENT_CPU, $CONNS connections in all"
printf '%-34s %12s %12s %14s %14s\n' "configuration" "keep-alive" "CPU µs/req" "conn/request" "CPU µs/req"
printf '%-34s %12s %12s %14s %14s\n' "" "requests/s" "" "requests/s" ""
for t in "${TARGETS[@]}"; do
  case $t in
    dedicated) name="espalier, $SITES sites on $SITES ports" ;;
    shared) name="espalier, $SITES sites on 1 port" ;;
    nginx) name="nginx, $SITES server blocks, 1 port" ;;
  esac
  printf '%-34s %12.0f %12s %14.0f %14s\n' "$name" "${BEST[$t.keepalive]}" "${CPU_US[$t.keepalive]}" "${BEST[$t.close]}" "${CPU_US[$t.close]}"
done
echo
echo "user-space instructions per request (callgrind, keep-alive): dedicated ${USER_INSNS[dedicated]}, shared ${USER_INSNS[shared]}, nginx ${USER_INSNS[nginx]}"
echo
echo "ratios:"
echo "  shared / dedicated, CPU per request, keep-alive:     $(ratio "${CPU_US[shared.keepalive]}" "${CPU_US[dedicated.keepalive]}")   (target ≤ 1.15)"
echo "  shared / dedicated, CPU per request, conn/request:   $(ratio "${CPU_US[shared.close]}" "${CPU_US[dedicated.close]}")"
echo "  shared / dedicated, user instructions, keep-alive:   $(ratio "${USER_INSNS[shared]}" "${USER_INSNS[dedicated]}")"
echo "  shared / nginx, CPU per request, keep-alive:         $(ratio "${CPU_US[shared.keepalive]}" "${CPU_US[nginx.keepalive]}")"
echo "  shared / nginx, CPU per request, conn/request:       $(ratio "${CPU_US[shared.close]}" "${CPU_US[nginx.close]}")"
echo "  shared / nginx, requests/s, keep-alive:              $(ratio "${BEST[shared.keepalive]}" "${BEST[nginx.keepalive]}")"
