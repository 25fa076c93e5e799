#!/usr/bin/env bash
# bench/acme.sh — certificates ordered by espalier itself ([server.acme]), against Debian's
# pebble on loopback.
#
# Part 1, issuance: NAMES sites (default 20) with no certificate, pebble validating HTTP-01
# on their http port without its random sleeps (PEBBLE_VA_NOSLEEP): the time from the
# server's start to every name issued (the log's lines), per certificate and in all, with
# espalier's 4 orders at once.
#
# Part 2, start-up with a full store: STORED sites (default 10000) on one https address,
# each with its pair in the store, served with and without [server.acme] (the directory
# unreachable: every pair is valid, nothing is ordered), interleaved RUNS times: the time
# from the start to "serving", the time until ACME's first look at every name is done (its
# summary line), and the master's RSS then (VmRSS of /proc/<pid>/status). Target: within
# 10 % of the store without ACME.
#
# Installs pebble, curl and python3-cryptography from Debian when missing.
# Part 3, on demand: DEMAND (default 100) first handshakes at once, each for a new name under
# one wildcard site with on_demand = true (in-flight bound DEMAND), each held while its
# certificate is ordered: the server's RSS (master + worker) before and at its peak while the
# names are in flight (sampled every 50 ms), the time until every one is issued, and how many
# of those first handshakes were answered.
#
#   bench/acme.sh                      # NAMES=20 STORED=10000 RUNS=3 DEMAND=100 PARTS=123
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAMES=${NAMES:-20}
STORED=${STORED:-10000}
RUNS=${RUNS:-3}
PARTS=${PARTS:-123}
DEMAND=${DEMAND:-100}

. "$ROOT/bench/common.sh"
need_tools pebble:pebble curl:curl python3:python3 -:python3-cryptography
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-acme-bench

# Milliseconds since the epoch.
now_ms() { date +%s%3N; }
# Waits (at most 600 s) for a line with $2 in the file $1.
wait_line() {
  for _ in $(seq 6000); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "no line \"$2\" in $1" >&2; return 1
}

# Starts pebble (and its DNS) in $1 validating HTTP-01 on port $2, without its random
# validation sleeps; sets API to its directory's port. ca.pem (in $1) signs its API's certificate.
pebble_up() {
  local dir=$1 http=$2 mgmt dns dnsm
  API=$(free_port); mgmt=$(free_port); dns=$(free_port); dnsm=$(free_port)
  (cd "$dir" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3 \
    -keyout ca.key -out ca.pem -subj '/CN=bench authority' 2>/dev/null &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout api.key -out api.csr -subj /CN=localhost 2>/dev/null &&
    printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n' >api.ext &&
    openssl x509 -req -in api.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3 -extfile api.ext -out api.pem 2>/dev/null)
  cat >"$dir/pebble.json" <<JSON
{"pebble": {"listenAddress": "127.0.0.1:$API", "managementListenAddress": "127.0.0.1:$mgmt",
 "certificate": "$dir/api.pem", "privateKey": "$dir/api.key", "httpPort": $http, "tlsPort": $(free_port),
 "ocspResponderURL": "", "externalAccountBindingRequired": false}}
JSON
  pebble-challtestsrv -defaultIPv4 127.0.0.1 -defaultIPv6 "" -dns01 "127.0.0.1:$dns" -http01 "" -https01 "" \
    -tlsalpn01 "" -management "127.0.0.1:$dnsm" >"$dir/dns.log" 2>&1 & PIDS+=($!)
  PEBBLE_VA_NOSLEEP=1 pebble -config "$dir/pebble.json" -dnsserver "127.0.0.1:$dns" -strict=false >"$dir/pebble.log" 2>&1 & PIDS+=($!)
  wait_port "$dnsm"; wait_port "$API"
}

part1() {
  local dir="$WORK/issue" http https
  mkdir -p "$dir/store" "$dir/www"
  echo ok >"$dir/www/index.html"
  http=$(free_port); https=$(free_port)
  pebble_up "$dir" "$http"
  local api=$API
  {
    printf '[server]\nadmin = "127.0.0.1:%s"\ncertificates = "store"\n[server.acme]\ndirectory = "https://localhost:%s/dir"\nca = "ca.pem"\n[[pool]]\nname = "p"\n' "$(free_port)" "$api"
    for i in $(seq "$NAMES"); do
      printf '[[site]]\nname = "s%s"\nbindings = ["http://127.0.0.1:%s:n%s.test", "https://127.0.0.1:%s:n%s.test"]\nroot = "www"\n[[site.app]]\npool = "p"\n' "$i" "$http" "$i" "$https" "$i"
    done
  } >"$dir/espalier.toml"
  echo "part 1: $NAMES names ordered from pebble…" >&2
  local start; start=$(now_ms)
  (cd "$dir" && exec "$ESPALIER" serve -c espalier.toml) >"$dir/espalier.log" 2>&1 & PIDS+=($!)
  local pid=$!
  for i in $(seq "$NAMES"); do wait_line "$dir/espalier.log" "acme: n$i.test: certificate issued"; done
  local took=$(( $(now_ms) - start ))
  local failed; failed=$(grep -c "order failed" "$dir/espalier.log" || true)
  kill "$pid" 2>/dev/null || true
  echo
  echo "part 1 — issuance against pebble (HTTP-01, no VA sleeps), $NAMES names, 4 orders at once"
  printf '%-34s %12s\n' "all issued, from the start (ms)" "$took"
  printf '%-34s %12s\n' "per certificate (ms)" "$(python3 -c "print(round($took / $NAMES, 1))")"
  printf '%-34s %12s\n' "orders that failed and were retried" "$failed"
}

part2() {
  local dir="$WORK/stored" port
  mkdir -p "$dir/store" "$dir/www"
  echo ok >"$dir/www/index.html"
  port=$(free_port)
  echo "part 2: writing $STORED pairs into the store…" >&2
  python3 - "$dir/store" "$STORED" <<'PY'
import datetime, sys
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
store, n = sys.argv[1], int(sys.argv[2])
key = ec.generate_private_key(ec.SECP256R1())
pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
now = datetime.datetime.now(datetime.timezone.utc)
for i in range(1, n + 1):
    host = f"h{i}.test"
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=90))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .sign(key, hashes.SHA256()))
    open(f"{store}/{host}.pem", "wb").write(cert.public_bytes(serialization.Encoding.PEM))
    open(f"{store}/{host}.key", "wb").write(pem_key)
PY
  write_conf() { # file acme(0|1) admin
    {
      printf '[server]\nadmin = "127.0.0.1:%s"\ncertificates = "store"\n' "$3"
      [ "$2" = 1 ] && printf '[server.acme]\ndirectory = "https://127.0.0.1:1/dir"\n'
      printf '[[pool]]\nname = "p"\n'
      for i in $(seq "$STORED"); do
        printf '[[site]]\nname = "s%s"\nbindings = ["https://127.0.0.1:%s:h%s.test"]\nroot = "www"\n[[site.app]]\npool = "p"\n' "$i" "$port" "$i"
      done
    } >"$dir/$1"
  }
  write_conf plain.toml 0 "$(free_port)"
  write_conf acme.toml 1 "$(free_port)"
  declare -A READY LOOKED RSS
  for t in plain acme; do READY[$t]=0; LOOKED[$t]=0; RSS[$t]=0; done
  echo "part 2: $RUNS interleaved starts with and without [server.acme]…" >&2
  for _ in $(seq "$RUNS"); do
    for t in plain acme; do
      : >"$dir/$t.log"
      local start; start=$(now_ms)
      (cd "$dir" && exec "$ESPALIER" serve -c "$t.toml") >"$dir/$t.log" 2>&1 &
      local pid=$!
      wait_line "$dir/$t.log" "serving"
      local ready=$(( $(now_ms) - start )) looked=0
      if [ "$t" = acme ]; then
        wait_line "$dir/$t.log" "with a certificate in the store"
        looked=$(( $(now_ms) - start ))
      fi
      local rss; rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
      kill "$pid"; wait "$pid" 2>/dev/null || true
      READY[$t]=$(( READY[$t] + ready )); LOOKED[$t]=$(( LOOKED[$t] + looked )); RSS[$t]=$(( RSS[$t] + rss ))
    done
  done
  echo
  echo "part 2 — start-up with $STORED pairs in the store, mean of $RUNS interleaved starts"
  printf '%-22s %12s %22s %16s\n' "" "serving_ms" "acme_first_look_ms" "master_rss_MiB"
  for t in plain acme; do
    printf '%-22s %12s %22s %16s\n' "$t" "$(( READY[$t] / RUNS ))" \
      "$( [ "$t" = acme ] && echo $(( LOOKED[$t] / RUNS )) || echo -)" \
      "$(python3 -c "print(round(${RSS[$t]} / $RUNS / 1024, 1))")"
  done
  echo "with / without: serving $(ratio "${READY[acme]}" "${READY[plain]}")×, master RSS $(ratio "${RSS[acme]}" "${RSS[plain]}")×"
}


# The RSS (KiB) of process $1.
rss_of() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# The RSS (KiB) of the children (the workers) of the master $1, summed.
workers_rss() {
  local total=0 p
  for p in $(pgrep -P "$1" || true); do total=$(( total + $(rss_of "$p") )); done
  echo "$total"
}

# DEMAND curls at once to d1…dN.od.test on 127.0.0.1:$2 (curl options $3), each writing its
# status to $1/curl.N, while the RSS of the master $4 and its workers is sampled every 50 ms:
# until $DEMAND log lines with $5 (or of a failed order) are in $1/espalier.log (none asked:
# until the curls end).
# Sets PEAK_M and PEAK_W (KiB).
burst() {
  local dir=$1 port=$2 opts=$3 pid=$4 until=$5 curls=() i r start
  PEAK_M=0; PEAK_W=0; start=$(now_ms)
  for i in $(seq "$DEMAND"); do
    # shellcheck disable=SC2086
    curl -s -o /dev/null -w '%{http_code}\n' --max-time 120 $opts \
      --resolve "d$i.od.test:$port:127.0.0.1" "https://d$i.od.test:$port/" >"$dir/curl.$i" 2>/dev/null &
    curls+=($!)
  done
  while :; do
    r=$(rss_of "$pid"); [ "$r" -gt "$PEAK_M" ] && PEAK_M=$r
    r=$(workers_rss "$pid"); [ "$r" -gt "$PEAK_W" ] && PEAK_W=$r
    if [ -n "$until" ]; then
      [ "$(grep -c -e "$until" -e "the order failed" "$dir/espalier.log" || true)" -ge "$DEMAND" ] && break
    else
      local left=0; for i in "${curls[@]}"; do kill -0 "$i" 2>/dev/null && left=1; done
      [ "$left" = 0 ] && break
    fi
    [ $(( $(now_ms) - start )) -gt 600000 ] && { echo "burst not done in 600 s" >&2; break; }
    sleep 0.05
  done
  wait "${curls[@]}" 2>/dev/null || true
}

part3() {
  local dir="$WORK/demand" http https
  mkdir -p "$dir/store" "$dir/www"
  echo ok >"$dir/www/index.html"
  http=$(free_port); https=$(free_port)
  pebble_up "$dir" "$http"
  printf '[server]\nadmin = "127.0.0.1:%s"\ncertificates = "store"\n[server.acme]\ndirectory = "https://localhost:%s/dir"\nca = "ca.pem"\non_demand = true\non_demand_in_flight = %s\non_demand_per_hour = %s\n[[pool]]\nname = "p"\n[[site]]\nname = "customers"\nbindings = ["http://127.0.0.1:%s", "https://127.0.0.1:%s:*.od.test"]\nroot = "www"\n[[site.app]]\npool = "p"\n' \
    "$(free_port)" "$API" "$DEMAND" "$DEMAND" "$http" "$https" >"$dir/espalier.toml"
  curl -sf --cacert "$dir/ca.pem" "https://localhost:$(python3 -c "import json;print(json.load(open('$dir/pebble.json'))['pebble']['managementListenAddress'].split(':')[1])")/roots/0" >"$dir/root.pem"
  (cd "$dir" && exec "$ESPALIER" serve -c espalier.toml) >"$dir/espalier.log" 2>&1 & PIDS+=($!)
  local pid=$!
  wait_line "$dir/espalier.log" "serving"
  sleep 1
  local idle_m idle_w; idle_m=$(rss_of "$pid"); idle_w=$(workers_rss "$pid")
  echo "part 3: $DEMAND first handshakes at once, each held for its certificate…" >&2
  local start; start=$(now_ms)
  burst "$dir" "$https" "--cacert $dir/root.pem" "$pid" "certificate issued"
  local took=$(( $(now_ms) - start )) peak_m=$PEAK_M peak_w=$PEAK_W
  local served; served=$(cat "$dir"/curl.* | grep -c '^200$' || true)
  local failed; failed=$(grep -c "the order failed" "$dir/espalier.log" || true)
  kill "$pid" 2>/dev/null || true
  # The same burst with a certificate at hand (tls = a wildcard pair): what 100 TLS
  # connections cost the worker anyway.
  (cd "$dir" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3 \
    -keyout wild.key -out wild.pem -subj '/CN=*.od.test' -addext 'subjectAltName=DNS:*.od.test' 2>/dev/null)
  local plain_port; plain_port=$(free_port)
  printf '[server]\nadmin = "127.0.0.1:%s"\n[[pool]]\nname = "p"\n[[site]]\nname = "customers"\nbindings = ["https://127.0.0.1:%s:*.od.test"]\nroot = "www"\ntls = { cert = "wild.pem", key = "wild.key" }\n[[site.app]]\npool = "p"\n' \
    "$(free_port)" "$plain_port" >"$dir/plain.toml"
  rm -f "$dir"/curl.*
  (cd "$dir" && exec "$ESPALIER" serve -c plain.toml) >"$dir/plain.log" 2>&1 & PIDS+=($!)
  local plain=$!
  wait_line "$dir/plain.log" "serving"
  sleep 1
  local base_w; base_w=$(workers_rss "$plain")
  burst "$dir" "$plain_port" "-k" "$plain" ""
  local plain_w=$PEAK_W
  kill "$plain" 2>/dev/null || true
  echo
  echo "part 3 — $DEMAND names ordered on demand at once (held first handshakes, 4 orders at once)"
  mib() { python3 -c "print(round($1 / 1024, 1))"; }
  printf '%-46s %12s %12s\n' "RSS (MiB)" "master" "worker"
  printf '%-46s %12s %12s\n' "before" "$(mib "$idle_m")" "$(mib "$idle_w")"
  printf '%-46s %12s %12s\n' "peak while the names are in flight" "$(mib "$peak_m")" "$(mib "$peak_w")"
  printf '%-46s %12s %12s\n' "per name in flight (KiB)" "$(python3 -c "print(round(($peak_m - $idle_m) / $DEMAND, 1))")" "$(python3 -c "print(round(($peak_w - $idle_w) / $DEMAND, 1))")"
  printf '%-46s %12s %12s\n' "the same burst, a certificate at hand: worker" "$(mib "$base_w")" "$(mib "$plain_w")"
  printf '%-46s %12s\n' "every name issued and served, from the first (ms)" "$took"
  printf '%-46s %12s\n' "first handshakes answered 200" "$served/$DEMAND"
  printf '%-46s %12s\n' "orders that failed (their handshakes refused)" "$failed"
}

case $PARTS in *1*) part1 ;; esac
case $PARTS in *2*) part2 ;; esac
case $PARTS in *3*) part3 ;; esac
