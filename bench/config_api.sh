#!/usr/bin/env bash
# bench/config_api.sh — one site changed at hosting scale (#57): SITES sites (each its own
# on-demand pool in its own file, `include = ["sites.d/*.toml"]`, all on one port by host
# name), one site's root changed CHANGES times through the configuration API (`PATCH
# /config/sites/NAME`, answered once the change serves), and the same change made RELOADS
# times the old way — the site's file edited, then `espalier reload` — side by side in one
# run. Prints p50 and p99 of each, per size, and their ratio; and the master's CPU time per
# change. Then ADDS sites are added through the API as a panel adds one — its pool (`PUT
# /config/pools/NAME`), then the site (`PUT /config/sites/NAME`) — with the p50 and p99 of
# each. Every change and add is checked: the site answers its page after it.
#
#   bench/config_api.sh                     # SIZES="100 2000 10000"
#   SIZES=2000 CHANGES=50 bench/config_api.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZES=${SIZES:-100 2000 10000}
CHANGES=${CHANGES:-200}
RELOADS=${RELOADS:-20}
ADDS=${ADDS:-50}

. "$ROOT/bench/common.sh"
need_tools python3:python3 curl:curl
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-config-api

# quantiles FILE — p50 and p99 of the numbers in FILE (seconds), in ms.
quantiles() {
  python3 - "$1" <<'PY'
import sys
v = sorted(float(x) for x in open(sys.argv[1]) if x.strip())
q = lambda p: v[min(len(v) - 1, int(p * len(v)))] * 1000
print(f"{q(0.5):.0f} {q(0.99):.0f}")
PY
}

printf '%-7s %-22s %9s %9s %12s\n' sites "way" "p50 ms" "p99 ms" "master CPU ms"
for SITES in $SIZES; do
  D="$WORK/$SITES"
  mkdir -p "$D/sites.d" "$D/www1" "$D/www2"
  echo one >"$D/www1/index.html"
  echo two >"$D/www2/index.html"
  PORT=$(free_port)
  ADMIN=$(free_port)
  python3 - "$D" "$SITES" "$PORT" "$ADMIN" <<'PY'
import sys
d, n, port, admin = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
open(f"{d}/espalier.toml", "w").write(
    f'include = ["sites.d/*.toml"]\n[server]\nadmin = "127.0.0.1:{admin}"\n')
for i in range(n):
    open(f"{d}/sites.d/s{i}.toml", "w").write(
        f'[[pool]]\nname = "p{i}"\nstart = "on-demand"\n'
        f'[[site]]\nname = "s{i}"\nbindings = ["http://127.0.0.1:{port}:s{i}.example"]\n'
        f'root = "www1"\n[[site.app]]\npool = "p{i}"\n')
PY
  # A hoster's files were not all written a moment ago, and these were. On the disk first:
  # else the kernel's writeback of 10,000 new files lands in the measured changes, whose
  # every write is fsync'd (one took 0.6 s behind such a journal commit). And 3 s old: the
  # server keeps a file's text only once its last change is that old (a change within the
  # file system's clock tick could go unseen: git's "racy" rule, config/file_memo.rs), and
  # reads the younger ones again at every change.
  sync
  sleep 3.1
  (cd "$D" && exec "$ESPALIER" serve -c espalier.toml) >"$D/espalier.out" 2>&1 &
  MASTER=$!
  PIDS+=("$MASTER")
  for _ in $(seq 1200); do grep -q "serving" "$D/espalier.out" && break; sleep 0.1; done
  grep -q "serving" "$D/espalier.out" || { tail -5 "$D/espalier.out" >&2; exit 1; }
  TOKEN=$(cat "/run/espalier/admin-$ADMIN.token")
  # The site changed: one in the middle, its root back and forth.
  SITE=s$((SITES / 2))
  : >"$D/api.times"
  before=$(proc_ticks "$MASTER")
  for k in $(seq "$CHANGES"); do
    root=www$((k % 2 + 1))
    curl -sf -o /dev/null -w '%{time_total}\n' -X PATCH -H "Authorization: Bearer $TOKEN" \
      --data "{\"root\": \"$root\"}" "http://127.0.0.1:$ADMIN/config/sites/$SITE" >>"$D/api.times"
    want=$([ "$root" = www1 ] && echo one || echo two)
    got=$(curl -s --interface "127.0.0.$((k % 200 + 2))" -H "Host: $SITE.example" "http://127.0.0.1:$PORT/")
    [ "$got" = "$want" ] || { echo "after change $k, $SITE answered '$got', not '$want'" >&2; exit 1; }
  done
  api_cpu=$(python3 -c "print(round(($(proc_ticks "$MASTER") - $before) * 1000 / $(getconf CLK_TCK) / $CHANGES, 1))")
  : >"$D/reload.times"
  before=$(proc_ticks "$MASTER")
  for k in $(seq "$RELOADS"); do
    root=www$((k % 2 + 1))
    sed -i "s/^root = .*/root = \"$root\"/" "$D/sites.d/$SITE.toml"
    start=$(date +%s.%N)
    "$ESPALIER" reload --admin "127.0.0.1:$ADMIN" --token "$TOKEN" >/dev/null
    python3 -c "print($(date +%s.%N) - $start)" >>"$D/reload.times"
  done
  reload_cpu=$(python3 -c "print(round(($(proc_ticks "$MASTER") - $before) * 1000 / $(getconf CLK_TCK) / $RELOADS, 1))")
  : >"$D/pool.times"
  : >"$D/site.times"
  before=$(proc_ticks "$MASTER")
  for k in $(seq "$ADDS"); do
    curl -sf -o /dev/null -w '%{time_total}\n' -X PUT -H "Authorization: Bearer $TOKEN" \
      --data '{"start": "on-demand"}' "http://127.0.0.1:$ADMIN/config/pools/n$k" >>"$D/pool.times"
    curl -sf -o /dev/null -w '%{time_total}\n' -X PUT -H "Authorization: Bearer $TOKEN" \
      --data "{\"bindings\": [\"http://127.0.0.1:$PORT:n$k.example\"], \"root\": \"www2\", \"app\": [{\"pool\": \"n$k\"}]}" \
      "http://127.0.0.1:$ADMIN/config/sites/n$k" >>"$D/site.times"
    got=$(curl -s --interface "127.0.0.$((k % 200 + 2))" -H "Host: n$k.example" "http://127.0.0.1:$PORT/")
    [ "$got" = two ] || { echo "added site n$k answered '$got', not 'two'" >&2; exit 1; }
  done
  add_cpu=$(python3 -c "print(round(($(proc_ticks "$MASTER") - $before) * 1000 / $(getconf CLK_TCK) / $ADDS, 1))")
  read -r p50 p99 < <(quantiles "$D/pool.times")
  read -r s50 s99 < <(quantiles "$D/site.times")
  read -r a50 a99 < <(quantiles "$D/api.times")
  read -r r50 r99 < <(quantiles "$D/reload.times")
  printf '%-7s %-22s %9s %9s %12s\n' "$SITES" "API (PATCH)" "$a50" "$a99" "$api_cpu"
  printf '%-7s %-22s %9s %9s %12s\n' "$SITES" "file + espalier reload" "$r50" "$r99" "$reload_cpu"
  printf '%-7s %-22s %9s %9s %12s\n' "$SITES" "API add: PUT pool" "$p50" "$p99" "-"
  printf '%-7s %-22s %9s %9s %12s\n' "$SITES" "API add: PUT site" "$s50" "$s99" "$add_cpu (both)"
  echo "$SITES sites: API/reload p50 $(ratio "$a50" "$r50"), p99 $(ratio "$a99" "$r99")"
  stop_all
done
