#!/usr/bin/env bash
# bench/upstream.sh — espalier in front of servers it did not start (`[[upstream]]`), against
# nginx's `proxy_pass` to the same servers, in one run.
#
# Part 1, the proxy tier's cost: two Node servers (a few lines each, answering "ok"), reached
# through an upstream group of the two by espalier (balance least_time, the default, and
# round_robin) and by nginx (`upstream` with `keepalive 64`, round robin). Keep-alive load from
# wrk pinned to CLIENT_CPU, every proxy on SERVER_CPU, the runs interleaved. Prints
# requests/s, p99 and the proxy tier's CPU time per request (user + system of every process
# and thread of the proxy, from /proc/<pid>/stat, summed over all runs) with the ratio
# against nginx, and the proxy's user-space instructions per request (callgrind; user space
# only, not the whole cost).
#
# Part 2, a slow server: the same two servers, one answering 20 ms late. Its share of the
# requests and the p99, by least_time, by round_robin, and by nginx's round robin.
#
# Part 3, gRPC: a Python gRPC server (tests/apps/grpc_backend.py, Debian's python3-grpcio)
# called directly, through espalier (a group with protocol = "http2") and through nginx
# (`grpc_pass`), over h2c. Unary calls from h2load (-c4 -m8, a gRPC frame as the body; the
# proxies' CPU per call from /proc, as in part 1) and a bidirectional stream in lockstep
# (tests/apps/grpc_client.py: each message waits for the answer to the one before — the
# added latency of a hop).
#
# Part 4, faults: two more Node servers behind each of espalier (least_time, no health
# check) and nginx (round robin, its defaults). One server of each pair is killed under a
# sequential client, then started again on its port: the seconds until a request reaches it
# again (bounded at 60). Then one is frozen (SIGSTOP: its kernel still takes connections)
# — the one that took most of the 10 GETs before, the balancer's choice then — while a client
# sends FROZEN_GETS sequential GETs, each given up after CLIENT_WAIT seconds:
# how many went unanswered, and the frozen server's share of the requests after the first.
#
# Installs nginx, wrk, nodejs, valgrind, nghttp2-client and python3-grpcio from Debian when
# missing.
#   bench/upstream.sh                 # DURATION=5 RUNS=3 PARTS=1234
#   ESPALIER_BIN=/path/to/espalier PARTS=1 bench/upstream.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-5}
RUNS=${RUNS:-3}
CONNS=${CONNS:-32}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PARTS=${PARTS:-1234}
FROZEN_GETS=${FROZEN_GETS:-20}
CLIENT_WAIT=${CLIENT_WAIT:-3}
SLOW_MS=${SLOW_MS:-20}

. "$ROOT/bench/common.sh"
need_tools nginx:nginx-light wrk:wrk node:nodejs valgrind:valgrind python3:python3 \
  h2load:nghttp2-client -:python3-grpcio
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-upstream-bench
mkdir -p "$WORK/nginx"

# A server that answers "ok" (after DELAY_MS, when set) and counts what it answered: GET
# /count on its own port says how many.
cat > "$WORK/server.js" <<'JS'
const http = require('http');
const delay = parseInt(process.env.DELAY_MS || '0', 10);
let answered = 0;
http.createServer((req, res) => {
  if (req.url === '/count') { res.end(String(answered)); return; }
  const done = () => { answered++; res.writeHead(200, {'Content-Type': 'text/plain', 'Content-Length': '3'}); res.end('ok\n'); };
  if (delay) setTimeout(done, delay); else done();
}).listen(parseInt(process.env.PORT, 10), '127.0.0.1');
JS

A=$(free_port); B=$(free_port); SLOW=$(free_port)
LT=$(free_port); RR=$(free_port); NG=$(free_port)
SLT=$(free_port); SRR=$(free_port); SNG=$(free_port)

espalier_conf() { # file port admin balance server… — with $PROTOCOL, the group's protocol
  local file=$1 port=$2 admin=$3 balance=$4; shift 4
  local list; list=$(printf '"127.0.0.1:%s", ' "$@"); list=${list%, }
  cat >"$WORK/$file" <<CONF
[server]
admin = "127.0.0.1:$admin"
[[pool]]
name = "front"
processes = 1
cpus = "$SERVER_CPU"
affinity = "hard"
[[upstream]]
name = "api"
servers = [$list]
balance = "$balance"
${PROTOCOL:+protocol = \"$PROTOCOL\"}
[[site]]
name = "front"
bindings = ["http://127.0.0.1:$port"]
[[site.app]]
path = "/"
upstream = "api"
CONF
}
espalier_conf lt.toml "$LT" "$(free_port)" least_time "$A" "$B"
espalier_conf rr.toml "$RR" "$(free_port)" round_robin "$A" "$B"
espalier_conf slt.toml "$SLT" "$(free_port)" least_time "$A" "$SLOW"
espalier_conf srr.toml "$SRR" "$(free_port)" round_robin "$A" "$SLOW"

nginx_conf() { # file port_two port_slow pidfile
  cat > "$1" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(format(1<<$SERVER_CPU,'b'))");
daemon off;
error_log $WORK/nginx/error.log;
pid $4;
events { worker_connections 4096; }
http {
  access_log off;
  upstream two { server 127.0.0.1:$A; server 127.0.0.1:$B; keepalive 64; }
  upstream slow { server 127.0.0.1:$A; server 127.0.0.1:$SLOW; keepalive 64; }
  server {
    listen 127.0.0.1:$2;
    location / { proxy_pass http://two; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; }
  }
  server {
    listen 127.0.0.1:$3;
    location / { proxy_pass http://slow; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; }
  }
}
CONF
}
nginx_conf "$WORK/nginx/nginx.conf" "$NG" "$SNG" "$WORK/nginx/nginx.pid"

# The servers on the client's CPU: the proxies alone share theirs.
(cd "$WORK" && exec taskset -c "$CLIENT_CPU" env PORT="$A" node server.js) >"$WORK/a.out" 2>&1 & PIDS+=($!)
(cd "$WORK" && exec taskset -c "$CLIENT_CPU" env PORT="$B" node server.js) >"$WORK/b.out" 2>&1 & PIDS+=($!)
(cd "$WORK" && exec taskset -c "$CLIENT_CPU" env PORT="$SLOW" DELAY_MS="$SLOW_MS" node server.js) >"$WORK/slow.out" 2>&1 & PIDS+=($!)
start nginx "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
for t in lt rr slt srr; do start "$t" "$ESPALIER" serve -c "$t.toml"; done
for p in "$A" "$B" "$SLOW" "$NG" "$SNG" "$LT" "$RR" "$SLT" "$SRR"; do wait_port "$p"; done

port_of() { case $1 in lt) echo "$LT" ;; rr) echo "$RR" ;; nginx) echo "$NG" ;; slt) echo "$SLT" ;; srr) echo "$SRR" ;; snginx) echo "$SNG" ;; esac; }
pid_name() { case $1 in snginx) echo nginx ;; *) echo "$1" ;; esac; }

count() { curl -s "http://127.0.0.1:$1/count"; }

part1() {
  local targets=(lt rr nginx)
  declare -A REQS TICKS RPS P99 INSNS
  for t in "${targets[@]}"; do wrk_load "http://127.0.0.1:$(port_of "$t")/" 1 >/dev/null; REQS[$t]=0; TICKS[$t]=0; RPS[$t]=0; done
  echo "part 1: two servers behind espalier and nginx ($RUNS interleaved runs of ${DURATION}s)…" >&2
  for _ in $(seq "$RUNS"); do
    for t in "${targets[@]}"; do
      mapfile -t tier < <(tier_pids "$(pid_name "$t")")
      before=$(proc_ticks "${tier[@]}")
      read -r reqs rps _ p99 < <(wrk_load "http://127.0.0.1:$(port_of "$t")/" "$DURATION")
      TICKS[$t]=$((TICKS[$t] + $(proc_ticks "${tier[@]}") - before))
      REQS[$t]=$((REQS[$t] + reqs))
      if python3 -c "import sys; sys.exit(0 if $rps > ${RPS[$t]} else 1)"; then RPS[$t]=$rps; P99[$t]=$p99; fi
    done
  done
  # User-space instructions per request: espalier (least_time) and nginx again under callgrind.
  local cgport cgadmin
  cgport=$(free_port); cgadmin=$(free_port)
  espalier_conf cg.toml "$cgport" "$cgadmin" least_time "$A" "$B"
  (cd "$WORK" && exec taskset -c "$SERVER_CPU" valgrind --tool=callgrind --trace-children=yes "--callgrind-out-file=$WORK/cg.%p" "$ESPALIER" serve -c cg.toml) >"$WORK/cg.out" 2>&1 &
  local cgpid=$!; PIDS+=($cgpid)
  for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$cgport") 2>/dev/null && break; sleep 0.1; done
  wrk_load "http://127.0.0.1:$cgport/" 2 >/dev/null
  # The worker alone: the master waits in its loop (and callgrind's control cannot reach a
  # process asleep in a signal wait).
  local cgw; cgw=$(pgrep -f "callgrind.*$ESPALIER worker" | head -1)
  cg_zero "$cgw"
  read -r reqs _ _ _ < <(wrk_load "http://127.0.0.1:$cgport/" "$DURATION")
  INSNS[lt]=$(per_request "$(cg_dump_sum "$WORK" "$cgw")" "$reqs")
  kill "$cgpid" 2>/dev/null || true
  local ngcg; ngcg=$(free_port)
  nginx_conf "$WORK/nginx/cg.conf" "$ngcg" "$(free_port)" "$WORK/nginx/cg.pid"
  # One process (master_process off), as bench/static.sh measures nginx.
  (exec taskset -c "$SERVER_CPU" valgrind --tool=callgrind "--callgrind-out-file=$WORK/cg.%p" "$NGINX" -c "$WORK/nginx/cg.conf" -p "$WORK/nginx" -g "master_process off;") >"$WORK/ngcg.out" 2>&1 &
  local ngpid=$!; PIDS+=($ngpid)
  for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$ngcg") 2>/dev/null && break; sleep 0.1; done
  wrk_load "http://127.0.0.1:$ngcg/" 2 >/dev/null
  cg_zero "$ngpid"
  read -r reqs _ _ _ < <(wrk_load "http://127.0.0.1:$ngcg/" "$DURATION")
  INSNS[nginx]=$(per_request "$(cg_dump_sum "$WORK" "$ngpid")" "$reqs")
  kill "$ngpid" 2>/dev/null || true

  echo
  echo "part 1 — proxy tier, two upstream servers, keep-alive both sides (wrk -t1 -c$CONNS, $RUNS×${DURATION}s)"
  printf '%-28s %10s %8s %14s %10s %16s\n' target req/s p99_ms cpu_us/req vs_nginx user_insns/req
  local nginx_us; nginx_us=$(us_per "${TICKS[nginx]}" "${REQS[nginx]}")
  for t in "${targets[@]}"; do
    local name; name=$(case $t in lt) echo "espalier least_time" ;; rr) echo "espalier round_robin" ;; nginx) echo "nginx proxy_pass" ;; esac)
    local cpu; cpu=$(us_per "${TICKS[$t]}" "${REQS[$t]}")
    printf '%-28s %10s %8s %14s %10s %16s\n' "$name" "${RPS[$t]}" "${P99[$t]}" "$cpu" "$(ratio "$cpu" "$nginx_us")" "${INSNS[$t]:--}"
  done
  echo "(CPU: user+system of every proxy process and thread, /proc/<pid>/stat; instructions: callgrind, user space only)"
}

part2() {
  echo "part 2: one of two servers answering ${SLOW_MS} ms late…" >&2
  echo
  echo "part 2 — one server ${SLOW_MS} ms late (wrk -t1 -c$CONNS, ${DURATION}s each)"
  printf '%-28s %10s %8s %8s %12s\n' balancer req/s p50_ms p99_ms slow_share
  for t in slt srr snginx; do
    wrk_load "http://127.0.0.1:$(port_of "$t")/" 1 >/dev/null
    local fast0 slow0; fast0=$(count "$A"); slow0=$(count "$SLOW")
    read -r _ rps p50 p99 < <(wrk_load "http://127.0.0.1:$(port_of "$t")/" "$DURATION")
    local fast slow; fast=$(($(count "$A") - fast0)); slow=$(($(count "$SLOW") - slow0))
    local name; name=$(case $t in slt) echo "espalier least_time" ;; srr) echo "espalier round_robin" ;; snginx) echo "nginx round robin" ;; esac)
    printf '%-28s %10s %8s %8s %12s\n' "$name" "$rps" "$p50" "$p99" "$(python3 -c "print(f'{$slow / max($fast + $slow, 1):.3f}')")"
  done
}

part3() {
  local G E N ea
  G=$(free_port); E=$(free_port); N=$(free_port); ea=$(free_port)
  (cd "$WORK" && exec taskset -c "$CLIENT_CPU" /usr/bin/python3 "$ROOT/tests/apps/grpc_backend.py" "127.0.0.1:$G" direct) >"$WORK/grpc.out" 2>&1 & PIDS+=($!)
  PROTOCOL=http2 espalier_conf grpc.toml "$E" "$ea" least_time "$G"
  cat >"$WORK/nginx/grpc.conf" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(format(1<<$SERVER_CPU,'b'))");
daemon off;
error_log $WORK/nginx/grpc-error.log;
pid $WORK/nginx/grpc.pid;
events { worker_connections 4096; }
http {
  access_log off;
  upstream grpc { server 127.0.0.1:$G; keepalive 64; }
  server { listen 127.0.0.1:$N http2; location / { grpc_pass grpc://grpc; } }
}
CONF
  start grpce "$ESPALIER" serve -c grpc.toml
  start grpcn "$NGINX" -c "$WORK/nginx/grpc.conf" -p "$WORK/nginx"
  for p in "$G" "$E" "$N"; do wait_port "$p"; done
  # One unary call's body: a gRPC frame (not compressed, 5 bytes) holding "hello".
  printf '\x00\x00\x00\x00\x05hello' >"$WORK/unary.bin"
  h2call() { # port seconds — prints "calls calls/s"
    local out
    out=$(taskset -c "$CLIENT_CPU" h2load -c4 -m8 -D "$2" -d "$WORK/unary.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' "http://127.0.0.1:$1/test.Echo/Unary")
    echo "$(awk '/^requests:/ {print $8}' <<<"$out") $(awk '/^finished in/ {print $4}' <<<"$out")"
  }
  local targets=(direct espalier nginx)
  declare -A PORT=([direct]=$G [espalier]=$E [nginx]=$N) CALLS TICKS RATE STREAM
  echo "part 3: gRPC directly, through espalier and through nginx ($RUNS interleaved runs of ${DURATION}s)…" >&2
  for t in "${targets[@]}"; do h2call "${PORT[$t]}" 1 >/dev/null; CALLS[$t]=0; TICKS[$t]=0; RATE[$t]=0; done
  for _ in $(seq "$RUNS"); do
    for t in "${targets[@]}"; do
      local tier=()
      case $t in espalier) mapfile -t tier < <(tier_pids grpce) ;; nginx) mapfile -t tier < <(tier_pids grpcn) ;; esac
      local before; before=$(proc_ticks "${tier[@]}")
      read -r calls rate < <(h2call "${PORT[$t]}" "$DURATION")
      TICKS[$t]=$((TICKS[$t] + $(proc_ticks "${tier[@]}") - before))
      CALLS[$t]=$((CALLS[$t] + calls))
      if python3 -c "import sys; sys.exit(0 if $rate > ${RATE[$t]} else 1)"; then RATE[$t]=$rate; fi
    done
  done
  for t in "${targets[@]}"; do
    STREAM[$t]=$(taskset -c "$CLIENT_CPU" /usr/bin/python3 "$ROOT/tests/apps/grpc_client.py" "127.0.0.1:${PORT[$t]}" --calls 1 --messages 2000 |
      python3 -c "import json,sys; r=json.load(sys.stdin); print(round(r['stream_s'] / r['messages'] * 1e6))")
  done
  echo
  echo "part 3 — gRPC over h2c: unary calls (h2load -c4 -m8, $RUNS×${DURATION}s) and a lockstep bidirectional stream (2000 messages)"
  printf '%-22s %12s %14s %10s %20s\n' target calls/s proxy_us/call vs_nginx stream_us/message
  local nginx_us; nginx_us=$(us_per "${TICKS[nginx]}" "${CALLS[nginx]}")
  for t in "${targets[@]}"; do
    local cpu=- vs=-
    if [ "$t" != direct ]; then cpu=$(us_per "${TICKS[$t]}" "${CALLS[$t]}"); vs=$(ratio "$cpu" "$nginx_us"); fi
    printf '%-22s %12s %14s %10s %20s\n' "$t" "${RATE[$t]}" "$cpu" "$vs" "${STREAM[$t]}"
  done
  echo "(proxy CPU: user+system of every proxy process and thread, /proc/<pid>/stat; the server and clients on CPU $CLIENT_CPU)"
}

part4() {
  local E1 E2 N1 N2 EP NP ea
  E1=$(free_port); E2=$(free_port); N1=$(free_port); N2=$(free_port)
  EP=$(free_port); NP=$(free_port); ea=$(free_port)
  serve_count() { # port — a counting server on the client's CPU; prints its pid
    (cd "$WORK" && exec taskset -c "$CLIENT_CPU" env PORT="$1" node server.js) >>"$WORK/faults.out" 2>&1 &
    PIDS+=($!); echo $!
  }
  local pe1 pe2 pn1 pn2
  pe1=$(serve_count "$E1"); pe2=$(serve_count "$E2"); pn1=$(serve_count "$N1"); pn2=$(serve_count "$N2")
  espalier_conf faults.toml "$EP" "$ea" least_time "$E1" "$E2"
  cat >"$WORK/nginx/faults.conf" <<CONF
worker_processes 1;
daemon off;
error_log $WORK/nginx/faults-error.log;
pid $WORK/nginx/faults.pid;
events { worker_connections 1024; }
http {
  access_log off;
  upstream pair { server 127.0.0.1:$N1; server 127.0.0.1:$N2; keepalive 16; }
  server { listen 127.0.0.1:$NP; location / { proxy_pass http://pair; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
CONF
  start faultse "$ESPALIER" serve -c faults.toml
  start faultsn "$NGINX" -c "$WORK/nginx/faults.conf" -p "$WORK/nginx"
  for p in "$E1" "$E2" "$N1" "$N2" "$EP" "$NP"; do wait_port "$p"; done
  echo "part 4: a server killed and started again, then one frozen…" >&2
  # Killed under a sequential client (20 requests each), then started again.
  kill "$pe1" "$pn1"; wait "$pe1" "$pn1" 2>/dev/null || true
  for _ in $(seq 20); do curl -s -m 5 "http://127.0.0.1:$EP/" >/dev/null; curl -s -m 5 "http://127.0.0.1:$NP/" >/dev/null; done
  pe1=$(serve_count "$E1"); pn1=$(serve_count "$N1"); wait_port "$E1"; wait_port "$N1"
  local t0 back_e=">60" back_n=">60" now
  t0=$(date +%s.%N)
  while :; do
    now=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
    python3 -c "import sys; sys.exit(0 if $now < 60 else 1)" || break
    curl -s -m 5 "http://127.0.0.1:$EP/" >/dev/null; curl -s -m 5 "http://127.0.0.1:$NP/" >/dev/null
    [ "$back_e" = ">60" ] && [ "$(count "$E1")" -gt 0 ] && back_e=$now
    [ "$back_n" = ">60" ] && [ "$(count "$N1")" -gt 0 ] && back_n=$now
    [ "$back_e" != ">60" ] && [ "$back_n" != ">60" ] && break
    sleep 0.05
  done
  # Frozen: sequential GETs, each given up after CLIENT_WAIT seconds.
  frozen_run() { # proxy_port port1 pid1 port2 pid2 — freezes the server that took the most of
    # 10 GETs just before (the balancer's choice now); prints "unanswered share_after_first"
    local c1 c2 pid missed=0 k
    c1=$(count "$2"); c2=$(count "$4")
    for k in $(seq 10); do curl -s -m 5 -o /dev/null "http://127.0.0.1:$1/"; done
    if [ $(($(count "$2") - c1)) -ge $(($(count "$4") - c2)) ]; then pid=$3; else pid=$5; fi
    kill -STOP "$pid"
    for k in $(seq "$FROZEN_GETS"); do
      curl -s -m "$CLIENT_WAIT" -o /dev/null "http://127.0.0.1:$1/" || missed=$((missed + 1))
    done
    kill -CONT "$pid"
    # Each request the frozen server took is one the client gave up on.
    echo "$missed $(python3 -c "print(f'{max($missed - 1, 0) / max($FROZEN_GETS - 1, 1):.2f}')")"
  }
  local fe fn
  fe=$(frozen_run "$EP" "$E1" "$pe1" "$E2" "$pe2"); fn=$(frozen_run "$NP" "$N1" "$pn1" "$N2" "$pn2")
  echo
  echo "part 4 — faults (sequential client; a frozen server's GETs given up after ${CLIENT_WAIT}s)"
  printf '%-24s %22s %22s %26s\n' proxy recovered_server_s "unanswered_of_$FROZEN_GETS" frozen_share_after_first
  printf '%-24s %22s %22s %26s\n' "espalier least_time" "$back_e" "${fe% *}" "${fe#* }"
  printf '%-24s %22s %22s %26s\n' "nginx round robin" "$back_n" "${fn% *}" "${fn#* }"
  echo "(recovered: seconds from the restart to the first request the server answers; frozen share: requests after the first left unanswered, of the rest)"
}

case $PARTS in *1*) part1 ;; esac
case $PARTS in *2*) part2 ;; esac
case $PARTS in *3*) part3 ;; esac
case $PARTS in *4*) part4 ;; esac
