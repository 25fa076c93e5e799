#!/usr/bin/env bash
# bench/fleet.sh — a fleet of three members on one etcd cluster of three (#59), each member
# and the etcd cluster in network namespaces of their own: the time from a `/config` write on
# one member to the change answering on all three (p50/p99 over CHANGES writes), beside the
# same write on one machine without a fleet (its answer waits until the change serves there),
# measured in the same run; and TLS sessions made on one member resumed on the others
# (RESUMES handshakes, with the fleet's key: goal ≥ 99 %). Needs root (namespaces).
#
#   bench/fleet.sh                      # CHANGES=100 RESUMES=200
#   CHANGES=20 RESUMES=50 bench/fleet.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHANGES=${CHANGES:-100}
RESUMES=${RESUMES:-200}

. "$ROOT/bench/common.sh"
need_tools etcd:etcd-server etcdctl:etcd-client curl:curl openssl:openssl nsenter:util-linux python3:python3
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

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -keyout "$WORK/shop.key" -out "$WORK/shop.pem" -subj /CN=shop.test \
  -addext subjectAltName=DNS:shop.test 2>/dev/null
openssl rand -hex 32 >"$WORK/fleet.key"
for k in 1 2 3; do
  D="$WORK/m$k"
  mkdir -p "$D/www1" "$D/www2"
  echo one >"$D/www1/index.html"
  echo two >"$D/www2/index.html"
  cp "$WORK/shop.pem" "$WORK/shop.key" "$WORK/fleet.key" "$D/"
  cat >"$D/espalier.toml" <<EOF
[server]
admin = "127.0.0.1:9180"
admin_token = "$TOKEN"
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
for k in 1 2 3; do
  (cd "$WORK/m$k" && exec nsenter --net="/run/netns/${NS[$k]}" "$ESPALIER" serve -c espalier.toml) \
    >"$WORK/m$k.out" 2>&1 &
  PIDS+=($!)
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
    patch(members[0], 9180, root)
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
        patch(members[0], 9180, root)
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
