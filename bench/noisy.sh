#!/usr/bin/env bash
# bench/noisy.sh — a noisy neighbour: four tenants' apps (tests/apps/isolation_app.py) on one
# machine, each in its pool with memory_limit = 256MiB, pids_limit = 128 (and CPU_LIMIT's
# cpu_limit when set) and a private /tmp
# of 256 MiB, its own folder its only writable path. Tenants 2–4 answer a steady load from
# `espalier bench` (fixed rate) while tenant 1 in turn does nothing (the quiet run), then:
#   (a) allocates 2× its memory limit, again and again (the kernel kills it each time);
#   (b) starts processes without end (each burst stops at pids_limit);
#   (c) writes 1 GiB to /tmp (its own, which fills at 256 MiB);
#   (d) writes through the page cache into its folder flat out.
# Prints, per run, the others' p50/p99 and errors, tenant 1's OOM kills in it (its private
# /tmp and its page cache are charged to its memory too), and p99 against the
# quiet run (the issue's goal: within 1.5×, 0 errors), and whether the master and the other
# pools' apps kept their pids.
#   bench/noisy.sh                 # DURATION=20 RATE=200 (requests/s over tenants 2–4)
#   CPU_LIMIT=50% bench/noisy.sh   # each tenant's CPU capped as well
#   ESPALIER_BIN=/path/to/espalier bench/noisy.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-20}
RATE=${RATE:-200}
# CPU_LIMIT=50% caps each tenant's CPU too (the one resource the other limits leave shared).
CPU_LIMIT=${CPU_LIMIT:-}
CPU_LINE=${CPU_LIMIT:+cpu_limit = \"$CPU_LIMIT\"}

. "$ROOT/bench/common.sh"
need_tools python3:python3 curl:curl
ESPALIER=$(espalier_binary "$ROOT")
if [ "$(id -u)" != 0 ]; then
  echo "bench/noisy.sh needs root (control groups and mount namespaces)" >&2
  exit 2
fi
bench_workdir espalier-noisy-bench
# The tenants' folders, and their app, under neither /tmp nor /var/tmp: their private ones
# would hide them (the repository itself may be under /tmp).
TENANTS=$(mktemp -d /run/espalier-noisy.XXXXXX)
trap 'bench_cleanup; rm -rf "$TENANTS"' EXIT
APP="$TENANTS/isolation_app.py"
cp "$ROOT/tests/apps/isolation_app.py" "$APP"
ADMIN=$(free_port)
{
  echo "[server]"
  echo "admin = \"127.0.0.1:$ADMIN\""
  for t in 1 2 3 4; do
    mkdir -p "$TENANTS/t$t"
    PORT[$t]=$(free_port)
    cat <<CONF
[[pool]]
name = "t$t"
command = ["python3", "$APP"]
directory = "$TENANTS/t$t"
health = "/healthz"
memory_limit = "256MiB"
pids_limit = 128
$CPU_LINE
[pool.isolation]
tmp = "private"
system = "read-only"
paths = { "$TENANTS/t$t" = "read-write" }
[[site]]
name = "t$t"
bindings = ["http://127.0.0.1:${PORT[$t]}"]
[[site.app]]
pool = "t$t"
CONF
  done
} > "$WORK/espalier.toml"
(cd "$WORK" && exec "$ESPALIER" serve -c espalier.toml) >"$WORK/espalier.out" 2>&1 &
MASTER=$!
PIDS+=("$MASTER")
for t in 1 2 3 4; do wait_port "${PORT[$t]}"; done
status() { curl -s "http://127.0.0.1:$ADMIN/status"; }
app_pids() { # the apps of tenants 2–4, by pool
  status | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(p["name"] + "=" + str(w["pid"]) for p in d["pools"] if p["name"]!="t1" for w in p["workers"] if w["role"]=="app"))'
}
for _ in $(seq 100); do [ "$(app_pids | wc -w)" = 3 ] && break; sleep 0.1; done
BEFORE=$(app_pids)

noise() { # KIND — tenant 1's noise, until killed
  local url="http://127.0.0.1:${PORT[1]}"
  while :; do
    case $1 in
      a) curl -s -m 20 -X POST "$url/alloc?512" >/dev/null || true ;;
      b) curl -s -m 20 "$url/spawn?1000" >/dev/null || true ;;
      c) curl -s -m 20 "$url/fill?1024" >/dev/null || true ;;
      d) curl -s -m 60 "$url/io?512" >/dev/null || true ;;
      *) sleep 1 ;;
    esac
  done
}
t1_kills() { status | python3 -c 'import json,sys; d=json.load(sys.stdin); print(next(p["oom_kills"] for p in d["pools"] if p["name"]=="t1"))'; }
measure() { # KIND → "p50 p99 errors oom_kills" (tenant 1's OOM kills during the run)
  local before
  before=$(t1_kills)
  noise "$1" & local n=$!
  sleep 1
  local out
  out=$("$ESPALIER" bench -d "${DURATION}s" -c 12 --rate "$RATE" --json \
    "http://127.0.0.1:${PORT[2]}/healthz" "http://127.0.0.1:${PORT[3]}/healthz" "http://127.0.0.1:${PORT[4]}/healthz")
  kill "$n" 2>/dev/null; wait "$n" 2>/dev/null || true
  local kills=$(( $(t1_kills) - before ))
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); l=d["latency_ms"]; print(l["p50"], l["p99"], d["errors"], sys.argv[2])' "$out" "$kills"
}

printf '%-34s %8s %8s %7s %10s %12s\n' "tenant 1 does" "p50 ms" "p99 ms" "errors" "t1 OOMs" "p99 / quiet"
read -r q50 q99 qerr qk < <(measure quiet)
printf '%-34s %8s %8s %7s %10s %12s\n' "nothing (quiet)" "$q50" "$q99" "$qerr" "$qk" "1.00"
for k in a b c d; do
  case $k in
    a) what="(a) allocates 2× its limit" ;;
    b) what="(b) forks without end" ;;
    c) what="(c) writes 1 GiB to /tmp" ;;
    d) what="(d) buffered writes flat out" ;;
  esac
  read -r p50 p99 err kills < <(measure "$k")
  printf '%-34s %8s %8s %7s %10s %12s\n' "$what" "$p50" "$p99" "$err" "$kills" "$(ratio "$p99" "$q99")"
done
AFTER=$(app_pids)
alive=no; kill -0 "$MASTER" 2>/dev/null && alive=yes
echo
echo "master alive: $alive; tenants 2–4's apps kept their pids: $([ "$BEFORE" = "$AFTER" ] && echo yes || echo "no ($BEFORE → $AFTER)")"
