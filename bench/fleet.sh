#!/usr/bin/env bash
# bench/fleet.sh — a fleet of three members on one etcd cluster of three (#59), each member
# and the etcd cluster in network namespaces of their own: the time from a `/config` write on
# one member to the change answering on all three (p50/p99 over CHANGES writes), beside the
# same write on one machine without a fleet (its answer waits until the change serves there),
# measured in the same run; TLS sessions made on one member resumed on the others
# (RESUMES handshakes, with the fleet's key: goal ≥ 99 %); and NAMES certificates ordered from
# Debian's pebble for sites added to the fleet at once — how many orders (goal: NAMES, not 3 ×
# NAMES) and the time until all three members serve every name, beside one machine ordering
# the same names alone. pebble validates every name at the third member only: the others'
# orders are answered there through etcd. Needs root (namespaces).
#
#   bench/fleet.sh                      # CHANGES=100 RESUMES=200 NAMES=30
#   CHANGES=20 RESUMES=50 NAMES=10 bench/fleet.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHANGES=${CHANGES:-100}
RESUMES=${RESUMES:-200}
NAMES=${NAMES:-30}

. "$ROOT/bench/common.sh"
need_tools etcd:etcd-server etcdctl:etcd-client curl:curl openssl:openssl nsenter:util-linux python3:python3 pebble:pebble
ESPALIER=$(espalier_binary "$ROOT")
bench_workdir espalier-fleet
TOKEN=fleet-bench-token-0123456789
TAG=$$
NS=(fbe$TAG fb1$TAG fb2$TAG fb3$TAG)
cleanup_ns() { for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done; }
trap 'bench_cleanup; cleanup_ns' EXIT
for n in "${NS[@]}"; do ip netns add "$n"; ip -n "$n" link set lo up; done
E=${NS[0]}
for k in 1 2 3; do
  M=${NS[$k]}
  ip link add "to-$k" netns "$E" type veth peer name eth0 netns "$M"
  ip -n "$E" addr add "10.80.$k.1/24" dev "to-$k" && ip -n "$E" link set "to-$k" up
  ip -n "$M" addr add "10.80.$k.2/24" dev eth0 && ip -n "$M" link set eth0 up
  # Every address of the etcd namespace reached through its own link (pebble on 10.80.1.1).
  ip -n "$M" route add 10.80.0.0/16 via "10.80.$k.1"
done
inns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

# etcd: three members in one namespace, each its own ports, every member's client address
# reachable from each espalier namespace.
CLUSTER="e1=http://127.0.0.1:2380,e2=http://127.0.0.1:2480,e3=http://127.0.0.1:2580"
for k in 1 2 3; do
  c=$((2279 + 100 * k)) p=$((2280 + 100 * k))
  inns "$E" etcd --name "e$k" --data-dir "$WORK/etcd$k" \
    --listen-client-urls "http://127.0.0.1:$c,http://10.80.1.1:$c,http://10.80.2.1:$c,http://10.80.3.1:$c" \
    --advertise-client-urls "http://127.0.0.1:$c" \
    --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
    --initial-cluster "$CLUSTER" --initial-cluster-state new >"$WORK/etcd$k.log" 2>&1 &
  PIDS+=($!)
done
for _ in $(seq 300); do
  inns "$E" etcdctl --endpoints http://127.0.0.1:2379 endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done

# pebble beside etcd: its directory at https://10.80.1.1:14000 for every member, every name
# resolved by pebble-challtestsrv to the third member, validated there on 8080.
(cd "$WORK" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -keyout pebble-ca.key -out pebble-ca.pem -subj /CN=bench-authority 2>/dev/null &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout pebble-api.key \
    -out pebble-api.csr -subj /CN=pebble 2>/dev/null &&
  printf 'subjectAltName=IP:10.80.1.1\n' >pebble-api.ext &&
  openssl x509 -req -in pebble-api.csr -CA pebble-ca.pem -CAkey pebble-ca.key -CAcreateserial \
    -days 2 -extfile pebble-api.ext -out pebble-api.pem 2>/dev/null)
cat >"$WORK/pebble.json" <<JSON
{"pebble": {"listenAddress": "10.80.1.1:14000", "managementListenAddress": "127.0.0.1:15000",
  "certificate": "$WORK/pebble-api.pem", "privateKey": "$WORK/pebble-api.key",
  "httpPort": 8080, "tlsPort": 8443, "ocspResponderURL": "", "externalAccountBindingRequired": false}}
JSON
inns "$E" pebble-challtestsrv -defaultIPv4 10.80.3.2 -defaultIPv6 "" -dns01 127.0.0.1:8053 \
  -management 127.0.0.1:8055 -http01 "" -https01 "" -tlsalpn01 "" >/dev/null 2>&1 &
PIDS+=($!)
PEBBLE_VA_NOSLEEP=1 inns "$E" pebble -config "$WORK/pebble.json" -dnsserver 127.0.0.1:8053 \
  -strict=false >"$WORK/pebble.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do
  inns "$E" curl -sf --cacert "$WORK/pebble-ca.pem" https://10.80.1.1:14000/dir >/dev/null && break
  sleep 0.1
done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -keyout "$WORK/shop.key" -out "$WORK/shop.pem" -subj /CN=shop.test \
  -addext subjectAltName=DNS:shop.test 2>/dev/null
openssl rand -hex 32 >"$WORK/fleet.key"
# Each member its own admin port: the challenges' folder is named by it, and the three
# members share this one machine's /run.
for k in 1 2 3; do
  D="$WORK/m$k"
  mkdir -p "$D/www1" "$D/www2" "$D/store"
  echo one >"$D/www1/index.html"
  echo two >"$D/www2/index.html"
  cp "$WORK/shop.pem" "$WORK/shop.key" "$WORK/fleet.key" "$WORK/pebble-ca.pem" "$D/"
  cat >"$D/espalier.toml" <<EOF
[server]
admin = "127.0.0.1:918$k"
admin_token = "$TOKEN"
certificates = "store"
[server.acme]
directory = "https://10.80.1.1:14000/dir"
ca = "pebble-ca.pem"
[server.cluster]
etcd = ["http://10.80.$k.1:2379", "http://10.80.$k.1:2479", "http://10.80.$k.1:2579"]
prefix = "/espalier/bench"
node = "m$k"
secret_file = "fleet.key"
EOF
done
cat >"$WORK/m1/shared.toml" <<'EOF'
[[pool]]
name = "web"
processes = 1
[[site]]
name = "shop"
bindings = ["http://*:8080", "https://*:8443"]
root = "www1"
tls = { cert = "shop.pem", key = "shop.key" }
[[site.app]]
path = "/"
pool = "web"
EOF
(cd "$WORK/m1" && inns "${NS[1]}" "$ESPALIER" cluster import shared.toml -c espalier.toml)
MEMBER=()
for k in 1 2 3; do
  (cd "$WORK/m$k" && exec nsenter --net="/run/netns/${NS[$k]}" "$ESPALIER" serve -c espalier.toml) \
    >"$WORK/m$k.out" 2>&1 &
  PIDS+=($!)
  MEMBER[$k]=$!
done
# One machine without a fleet, in the first member's namespace: the same site and change.
mkdir -p "$WORK/solo/www1" "$WORK/solo/www2"
echo one >"$WORK/solo/www1/index.html"
echo two >"$WORK/solo/www2/index.html"
cat >"$WORK/solo/espalier.toml" <<EOF
[server]
admin = "127.0.0.1:9190"
admin_token = "$TOKEN"
[[pool]]
name = "web"
processes = 1
[[site]]
name = "shop"
bindings = ["http://127.0.0.1:8090"]
root = "www1"
[[site.app]]
path = "/"
pool = "web"
EOF
(cd "$WORK/solo" && exec nsenter --net="/run/netns/${NS[1]}" "$ESPALIER" serve -c espalier.toml) \
  >"$WORK/solo.out" 2>&1 &
PIDS+=($!)
for f in m1 m2 m3 solo; do
  for _ in $(seq 300); do grep -q "serving" "$WORK/$f.out" && break; sleep 0.1; done
done

python3 - "$CHANGES" "$RESUMES" "$TOKEN" "$WORK" "${NS[@]}" <<'PY'
import subprocess, sys, time
changes, resumes, token, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
e, members = sys.argv[5], sys.argv[6:9]

def inns(ns, *args, data=None):
    return subprocess.run(["nsenter", f"--net=/run/netns/{ns}", *args], capture_output=True, input=data)

def page(ns, port=8080):
    return inns(ns, "curl", "-s", "--max-time", "2", f"http://127.0.0.1:{port}/").stdout

def patch(ns, admin, root):
    out = inns(ns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PATCH",
               "-H", f"Authorization: Bearer {token}", "-d", f'{{"root": "{root}"}}',
               f"http://127.0.0.1:{admin}/config/sites/shop")
    assert out.stdout == b"200", out.stdout

for ns in members:
    deadline = time.time() + 60
    while page(ns) != b"one\n":
        assert time.time() < deadline, f"{ns} never served the shared site"
        time.sleep(0.1)

def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] * 1000

fleet, solo = [], []
for i in range(changes):
    root, want = ("www2", b"two\n") if i % 2 == 0 else ("www1", b"one\n")
    t = time.perf_counter()
    patch(members[0], 9181, root)
    waiting = set(members)
    while waiting:
        waiting = {ns for ns in waiting if page(ns) != want}
    fleet.append(time.perf_counter() - t)
    t = time.perf_counter()
    patch(members[0], 9190, root)
    assert page(members[0], 8090) == want
    solo.append(time.perf_counter() - t)

reused = 0
for i in range(resumes):
    other = members[1 + i % 2]
    first = inns(e, "openssl", "s_client", "-ign_eof", "-connect", "10.80.1.2:8443", "-servername", "shop.test",
                 "-sess_out", f"{work}/sess.pem", data=b"GET / HTTP/1.0\r\n\r\n")
    assert b"New, " in first.stdout
    host = "10.80.%d.2:8443" % (2 + i % 2)
    second = inns(e, "openssl", "s_client", "-ign_eof", "-connect", host, "-servername", "shop.test",
                  "-sess_in", f"{work}/sess.pem", data=b"GET / HTTP/1.0\r\n\r\n")
    reused += b"Reused, " in second.stdout

# One etcd member killed: writes go on, every member applies them.
subprocess.run(["pkill", "-f", f"etcd --name e3 --data-dir {work}/etcd3"])
down, kept = 20, 0
for i in range(down):
    root, want = ("www2", b"two\n") if i % 2 == 0 else ("www1", b"one\n")
    try:
        patch(members[0], 9181, root)
    except AssertionError:
        continue
    deadline = time.time() + 10
    waiting = set(members)
    while waiting and time.time() < deadline:
        waiting = {ns for ns in waiting if page(ns) != want}
    kept += not waiting

print(f"{'change on member 1 until':<44} {'p50 ms':>8} {'p99 ms':>8}")
print(f"{'  all 3 members serve it (fleet, etcd x3)':<44} {q(fleet, .5):8.1f} {q(fleet, .99):8.1f}")
print(f"{'  one machine serves it (no fleet)':<44} {q(solo, .5):8.1f} {q(solo, .99):8.1f}")
print(f"ratio fleet / one machine (p50): {q(fleet, .5) / q(solo, .5):.2f}")
print(f"TLS sessions made on member 1 resumed on members 2 and 3: {reused} of {resumes} ({100 * reused / resumes:.1f} %)")
print(f"with one of the three etcd members killed: {kept} of {down} writes applied on all three members")
PY

# Certificates: NAMES sites added to the fleet at once, every name ordered from pebble.
python3 - "$NAMES" >"$WORK/m1/names.toml" <<'PY'
import sys
print('[server]\ncertificates = "store"\n[[pool]]\nname = "names"\nprocesses = 1')
for i in range(int(sys.argv[1])):
    print(f'[[site]]\nname = "n{i}"\nbindings = ["http://*:8080:n{i}.test", "https://*:8443:n{i}.test"]\nroot = "www1"\n[[site.app]]\npool = "names"')
PY
inns "$E" curl -sk https://127.0.0.1:15000/roots/0 >"$WORK/pebble-root.pem"
START=$(date +%s.%N)
(cd "$WORK/m1" && inns "${NS[1]}" "$ESPALIER" cluster import names.toml -c espalier.toml) >/dev/null
served() { # served ADDRESS… — waits until each serves every name with pebble's chain
  python3 - "$NAMES" "$WORK/pebble-root.pem" "$E" "$@" <<'PY'
import subprocess, sys, time
names, root, e, addrs = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
deadline = time.time() + 600
for i in range(names):
    for a in addrs:
        host = f"n{i}.test"
        while subprocess.run(["nsenter", f"--net=/run/netns/{e}", "curl", "-sf", "--max-time", "3",
                              "--cacert", root, "--resolve", f"{host}:8443:{a}",
                              f"https://{host}:8443/"], capture_output=True).returncode != 0:
            assert time.time() < deadline, f"{a} never served {host}"
            time.sleep(0.1)
PY
}
served 10.80.1.2 10.80.2.2 10.80.3.2
FLEET_S=$(echo "$(date +%s.%N) - $START" | bc)
ORDERS=$(grep -c "Issued certificate serial" "$WORK/pebble.log" || true)
BY=""
for k in 1 2 3; do BY+=" m$k $(grep -c 'certificate issued' "$WORK/m$k.out" || true)"; done
# One machine alone, the same names: the third member stopped, a server without a fleet in
# its place orders every name itself (pebble validates there).
kill "${MEMBER[3]}"
wait "${MEMBER[3]}" 2>/dev/null || true
S="$WORK/alone"
mkdir -p "$S/www1" "$S/store"
echo one >"$S/www1/index.html"
cp "$WORK/pebble-ca.pem" "$S/"
{
  printf '[server]\nadmin = "127.0.0.1:9193"\nadmin_token = "%s"\ncertificates = "store"\n' "$TOKEN"
  printf '[server.acme]\ndirectory = "https://10.80.1.1:14000/dir"\nca = "pebble-ca.pem"\n'
  sed 1,2d "$WORK/m1/names.toml"
} >"$S/espalier.toml"
BEFORE=$(grep -c "Issued certificate serial" "$WORK/pebble.log" || true)
START=$(date +%s.%N)
(cd "$S" && exec nsenter --net="/run/netns/${NS[3]}" "$ESPALIER" serve -c espalier.toml) >"$S.out" 2>&1 &
PIDS+=($!)
served 10.80.3.2
ALONE_S=$(echo "$(date +%s.%N) - $START" | bc)
ALONE_ORDERS=$(($(grep -c "Issued certificate serial" "$WORK/pebble.log" || true) - BEFORE))
echo "certificates for $NAMES names added at once (pebble, validation at member 3 only):"
printf '  fleet of 3: %s orders (by member:%s), all served by all 3 after %.1f s\n' "$ORDERS" "$BY" "$FLEET_S"
printf '  one machine alone: %s orders, all served after %.1f s\n' "$ALONE_ORDERS" "$ALONE_S"
printf '  orders, fleet / three independent machines: %s / %s\n' "$ORDERS" "$((3 * ALONE_ORDERS))"
printf '  ratio of time to serve all, fleet / one machine: %.2f\n' "$(echo "$FLEET_S / $ALONE_S" | bc -l)"
