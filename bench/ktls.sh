#!/usr/bin/env bash
# bench/ktls.sh — does handing HTTPS/1.1 connections to the kernel's TLS (kTLS) pay? Server CPU
# time per request for a 1 MiB file (sendfile) and a 100-byte page, over TLS 1.3 keep-alive,
# for espalier with and without kTLS and nginx with and without it (OpenSSL's KTLS option),
# measured in one run, rounds interleaved (bench/ktls-measure.sh does the measuring).
#
# Where: on this machine when its kernel has the `tls` module; otherwise in a guest of
# tests/qemu/run.sh (Debian's kernel and its tls module, espalier, nginx), said in one loud
# line. The guest runs under QEMU's TCG, so its CPU times are those of emulated CPUs: they
# compare the four servers with each other, not with any real machine.
#
#   bench/ktls.sh [ROUNDS] [SECONDS]      (default 2 rounds of 5 s per server and workload)
#
# Installs nginx and openssl from Debian if they are missing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/common.sh"
ROUNDS=${1:-2} SECS=${2:-5}
need_tools nginx:nginx-light openssl:openssl python3:python3
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
bench_workdir espalier-ktls
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=ktls.example \
  -addext subjectAltName=DNS:ktls.example -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

modprobe tls 2>/dev/null || true
if grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp; then
  where="this machine ($(uname -r))"
  hz=$(getconf CLK_TCK)
  ESP=$(espalier_binary "$ROOT")
  sh "$ROOT/bench/ktls-measure.sh" "$ESP" "$NGINX" "$WORK" "$ROUNDS" "$SECS" | tee "$WORK/results"
else
  echo "THIS KERNEL HAS NO kTLS (no tls module): measuring in a QEMU guest under TCG — emulated CPU times, for comparing the servers with each other only" >&2
  where="a QEMU TCG guest (Debian's kernel, -cpu max)"
  hz=100
  CACHE=${ESPALIER_QEMU_CACHE:-$ROOT/target/qemu}
  echo "$ROUNDS $SECS" > "$WORK/ktls-params"
  GUEST_INIT="$ROOT/bench/ktls-guest-init.sh" GUEST_BINARIES="$NGINX" \
    GUEST_FILES="$ROOT/bench/ktls-measure.sh $WORK/cert.pem $WORK/key.pem $WORK/ktls-params" \
    QEMU_CPU=max TIMEOUT=$((300 + ROUNDS * SECS * 8 * 3)) bash "$ROOT/tests/qemu/run.sh" >/dev/null
  tr -d '\r' < "$CACHE/serial.log" | grep -aE "^KTLS-" | tee "$WORK/results"
  # The two user-space servers natively too: how far emulation moves their costs.
  echo "the user-space servers natively on this machine, for scale:" >&2
  ESP=$(espalier_binary "$ROOT")
  sh "$ROOT/bench/ktls-measure.sh" "$ESP" "$NGINX" "$WORK" "$ROUNDS" "$SECS" "espalier-rustls nginx-openssl" |
    sed 's/^KTLS-RESULT/KTLS-NATIVE/' | tee -a "$WORK/results"
fi

python3 - "$WORK/results" "$hz" "$where" "$(getconf CLK_TCK)" <<'PY'
import sys
from collections import defaultdict
path, hz, where, native_hz = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
n, ticks, taken = defaultdict(int), defaultdict(int), defaultdict(int)
native_n, native_ticks = defaultdict(int), defaultdict(int)
for line in open(path):
    f = line.split()
    if f[0] == "KTLS-RESULT":
        key = (f[1], f[2])
        n[key] += int(f[3]); ticks[key] += int(f[4]); taken[key] += int(f[5])
    elif f[0] == "KTLS-NATIVE":
        native_n[(f[1], f[2])] += int(f[3]); native_ticks[(f[1], f[2])] += int(f[4])
servers = ["espalier-ktls", "espalier-rustls", "nginx-ktls", "nginx-openssl"]
def us(s, w):
    return ticks[(s, w)] / hz * 1e6 / max(n[(s, w)], 1)
print(f"\nserver CPU per HTTPS/1.1 request (user + system, /proc), on {where}")
print(f"{'server':<17} {'1 MiB file µs':>14} {'100 B page µs':>14} {'requests':>16} {'kTLS conns':>11}")
for s in servers:
    print(f"{s:<17} {us(s, '1m.bin'):>14.0f} {us(s, 'small.html'):>14.1f} "
          f"{n[(s, '1m.bin')]:>7}/{n[(s, 'small.html')]:<8} {taken[(s, '1m.bin')] + taken[(s, 'small.html')]:>11}")
def ratio(a, b, w):
    return us(a, w) / max(us(b, w), 1e-9)
print()
for w, name in (("1m.bin", "1 MiB file"), ("small.html", "100 B page")):
    print(f"{name}: espalier kTLS/rustls {ratio('espalier-ktls', 'espalier-rustls', w):.2f}; "
          f"nginx kTLS/OpenSSL {ratio('nginx-ktls', 'nginx-openssl', w):.2f}; "
          f"espalier kTLS/nginx kTLS {ratio('espalier-ktls', 'nginx-ktls', w):.2f}")
if native_n:
    def nus(s, w):
        return native_ticks[(s, w)] / native_hz * 1e6 / max(native_n[(s, w)], 1)
    print("\nnatively on this machine (no kTLS here), the user-space servers, for scale:")
    for w, name in (("1m.bin", "1 MiB file"), ("small.html", "100 B page")):
        print(f"{name}: espalier rustls {nus('espalier-rustls', w):.1f} µs, nginx OpenSSL {nus('nginx-openssl', w):.1f} µs "
              f"(espalier/nginx {nus('espalier-rustls', w) / max(nus('nginx-openssl', w), 1e-9):.2f} natively, "
              f"{ratio('espalier-rustls', 'nginx-openssl', w):.2f} in the guest)")
PY
