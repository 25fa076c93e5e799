#!/bin/sh
# bench/ktls-measure.sh — the measurement of bench/ktls.sh, run where the kernel has kTLS (this
# machine, or the guest bench/ktls.sh boots when this machine's kernel has none). POSIX sh:
# the guest has busybox alone.
#
#   ktls-measure.sh ESPALIER NGINX WORKDIR ROUNDS SECONDS [SERVERS]
#
# Serves a 1 MiB file and a 100-byte page over HTTPS/1.1 (TLS 1.3, keep-alive, ECDSA P-256)
# from four servers in turn, each one process on CPU 0: espalier with `ktls = "auto"` (a
# connection goes to the kernel before its first file of 256 KiB or more, so the page stays
# with rustls), espalier with `ktls = "off"`, nginx with kTLS (`ssl_conf_command Options
# KTLS`, `sendfile on`: every connection) and nginx without. The
# client (`espalier bench`, 8 connections) runs on CPU 1. Rounds interleave the servers (or
# only SERVERS, a list of those four names). Prints
# one line per server and workload:
#   KTLS-RESULT <server> <workload> <requests> <cpu ticks> <connections the kernel took>
set -eu
ESP=$1 NGINX=$2 W=$3 ROUNDS=$4 SECS=$5
SERVERS=${6:-espalier-ktls espalier-rustls nginx-ktls nginx-openssl}
mkdir -p "$W/www" "$W/nginx"
head -c 1048576 /dev/urandom > "$W/www/1m.bin"
head -c 100 /dev/zero | tr '\0' x > "$W/www/small.html"
[ -f "$W/cert.pem" ] || openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=ktls.example -addext subjectAltName=DNS:ktls.example -keyout "$W/key.pem" -out "$W/cert.pem" 2>/dev/null
ESP_PORT=18471
NGINX_PORT=18472

for mode in auto off; do
  cat > "$W/espalier-$mode.toml" <<CONF
[server]
admin = "127.0.0.1:18473"
ktls = "$mode"
[[pool]]
name = "bench"
processes = 1
cpus = "0"
[[site]]
bindings = ["https://127.0.0.1:$ESP_PORT:ktls.example"]
root = "$W/www"
tls = { cert = "$W/cert.pem", key = "$W/key.pem" }
[[site.app]]
pool = "bench"
CONF
done
for mode in on off; do
  ktls_line=""
  [ $mode = on ] && ktls_line="ssl_conf_command Options KTLS;"
  cat > "$W/nginx/nginx-$mode.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
error_log $W/nginx/error.log;
pid $W/nginx/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  client_body_temp_path $W/nginx/body;
  proxy_temp_path $W/nginx/proxy;
  fastcgi_temp_path $W/nginx/fastcgi;
  uwsgi_temp_path $W/nginx/uwsgi;
  scgi_temp_path $W/nginx/scgi;
  types { text/html html; application/octet-stream bin; }
  server {
    listen 127.0.0.1:$NGINX_PORT ssl;
    ssl_certificate $W/cert.pem;
    ssl_certificate_key $W/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    $ktls_line
    root $W/www;
  }
}
CONF
done

# Ticks of CPU time (user + system) of a process and its children, threads included.
tree_ticks() {
  total=0
  for stat in /proc/[0-9]*/stat; do
    rest=$(sed 's/.*) //' "$stat" 2>/dev/null) || continue
    # shellcheck disable=SC2086
    set -- $rest
    pid=${stat#/proc/}; pid=${pid%/stat}
    if [ "$pid" = "$ROOT_PID" ] || [ "$2" = "$ROOT_PID" ]; then
      total=$((total + ${12} + ${13}))
    fi
  done
  echo $total
}
taken() { awk '$1 == "TlsTxSw" {print $2}' /proc/net/tls_stat 2>/dev/null || echo 0; }
wait_https() {
  i=0
  until "$ESP" bench -k -n 1 -c 1 -H "Host: ktls.example" "https://127.0.0.1:$1/small.html" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 300 ] && { echo "port $1 never served" >&2; return 1; }; sleep 0.1
  done
}

start() { # server → ROOT_PID, PORT
  case $1 in
    espalier-ktls) taskset -c 0 "$ESP" serve -c "$W/espalier-auto.toml" > "$W/esp.log" 2>&1 & ROOT_PID=$!; PORT=$ESP_PORT ;;
    espalier-rustls) taskset -c 0 "$ESP" serve -c "$W/espalier-off.toml" > "$W/esp.log" 2>&1 & ROOT_PID=$!; PORT=$ESP_PORT ;;
    nginx-ktls) taskset -c 0 "$NGINX" -c "$W/nginx/nginx-on.conf" -p "$W/nginx" > "$W/nginx.log" 2>&1 & ROOT_PID=$!; PORT=$NGINX_PORT ;;
    nginx-openssl) taskset -c 0 "$NGINX" -c "$W/nginx/nginx-off.conf" -p "$W/nginx" > "$W/nginx.log" 2>&1 & ROOT_PID=$!; PORT=$NGINX_PORT ;;
  esac
  wait_https "$PORT"
}

round=0
while [ $round -lt "$ROUNDS" ]; do
  round=$((round + 1))
  for server in $SERVERS; do
    start $server
    for workload in 1m.bin small.html; do
      url="https://127.0.0.1:$PORT/$workload"
      # Warm: connections made and the file in the page cache before the window.
      "$ESP" bench -k -c 8 -d 1s --cpus 1 -H 'Host: ktls.example' "$url" >/dev/null 2>&1
      k0=$(taken); t0=$(tree_ticks)
      out=$("$ESP" bench -k -c 8 -d "${SECS}s" --cpus 1 -H 'Host: ktls.example' "$url" 2>&1)
      t1=$(tree_ticks); k1=$(taken)
      n=$(echo "$out" | awk '/ requests in / {print $1; exit}')
      errors=$(echo "$out" | awk '/^errors:/ {print $2; exit}')
      [ "${errors:-1}" = 0 ] || echo "KTLS-WARNING $server $workload: $(echo "$out" | tail -2 | tr '\n' ' ')"
      echo "KTLS-RESULT $server $workload ${n:-0} $((t1 - t0)) $((k1 - k0))"
    done
    kill $ROOT_PID; wait $ROOT_PID 2>/dev/null || true
  done
done
