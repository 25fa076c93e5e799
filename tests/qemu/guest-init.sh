#!/bin/busybox sh
# /init of the QEMU guest built by tests/qemu/run.sh: a 4-node machine (CPUs 0-1, 2-3, 4-5, 6-7;
# node 1 has the most memory). Runs espalier for real and prints one line per check,
#   ESPALIER-CHECK <name> PASS|FAIL <detail>
# then ESPALIER-GUEST-DONE, and powers the guest off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
ip link set lo up
cd /guest
export PATH=/bin
ulimit -n 65536

verdict() { # name ok detail — each line ends with the guest's uptime, so a slow check shows
  at="[at $(cut -d' ' -f1 /proc/uptime) s]"
  if [ "$2" = 0 ]; then echo "ESPALIER-CHECK $1 PASS $3 $at"; else echo "ESPALIER-CHECK $1 FAIL $3 $at"; fi
}
node_cpus() { cat /sys/devices/system/node/node$1/cpulist; }
# Whether cpu-list $1 (like 2-3, 2 or 3) lies within the two-CPU node list $2 (like 2-3).
within() {
  lo=${2%-*}; hi=${2#*-}
  for part in $(echo "$1" | tr ',' ' '); do
    a=${part%-*}; b=${part#*-}
    [ "$a" -ge "$lo" ] && [ "$b" -le "$hi" ] || return 1
  done
}
wait_for() { # file pattern seconds
  i=0
  while ! grep -q "$2" "$1" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt $(($3 * 10)) ] && return 1; sleep 0.1
  done
}

# 0. A cgroup v2-only host, as most distributions are: the unified hierarchy alone, and
#    espalier started inside a delegated cgroup (`svc`, as systemd's Delegate=yes gives a
#    service): the master moves itself into a leaf, the pools' groups are made beside it, caps
#    in cpu.max, hard-affinity cpusets nested in their pool. First, before any v1 hierarchy
#    takes the controllers (a v1 hierarchy keeps them as long as a removed group of it is not
#    yet freed, which can outlast a boot's worth of checks).
mount -t cgroup2 none /sys/fs/cgroup
echo "+cpu +cpuset" > /sys/fs/cgroup/cgroup.subtree_control
mkdir /sys/fs/cgroup/svc
sh -c 'echo $$ > /sys/fs/cgroup/svc/cgroup.procs; exec espalier serve -c v2.toml' > /tmp/v2.log 2>&1 &
v2=$!
if wait_for /tmp/v2.log "worker(s) serving" 60; then
  ok=0
  detail="controllers $(cat /sys/fs/cgroup/svc/cgroup.controllers);"
  master_cg=$(cat /proc/$v2/cgroup)
  [ "$master_cg" = "0::/svc/espalier-master-$v2" ] || ok=1
  detail="$detail master $master_cg;"
  group=/sys/fs/cgroup/svc/espalier-$v2
  [ "$(cat $group/capped/cpu.max)" = "50000 100000" ] || ok=1
  [ "$(cat $group/pinned/cpu.max)" = "200000 100000" ] || ok=1
  detail="$detail capped cpu.max $(cat $group/capped/cpu.max), pinned $(cat $group/pinned/cpu.max);"
  capped=$(awk '/worker capped\/0 started: pid/ {print $6; exit}' /tmp/v2.log)
  [ "$(cat /proc/$capped/cgroup)" = "0::/svc/espalier-$v2/capped" ] || ok=1
  detail="$detail capped/0 in $(cat /proc/$capped/cgroup);"
  grep "worker pinned/[0-9]* started: pid" /tmp/v2.log | while read -r _ _ name _ _ pid _ node _ cpus; do
    i=${name#pinned/}
    want="0::/svc/espalier-$v2/pinned/pinned-$i"
    eff=$(cat $group/pinned/pinned-$i/cpuset.cpus.effective)
    mems=$(cat $group/pinned/pinned-$i/cpuset.mems.effective)
    # The cpuset holds exactly the worker's planned CPUs and its home node.
    if [ "$(cat /proc/$pid/cgroup)" != "$want" ] || [ "$eff" != "$cpus" ] || [ "$mems" != "$node" ]; then
      echo "ESPALIER-CHECK cgroup-v2 FAIL $name pid $pid in $(cat /proc/$pid/cgroup), cpuset $eff mems $mems, planned node $node cpus $cpus"
    fi
  done
  detail="$detail pinned: $(grep -o 'worker pinned/[0-9]* started: pid [0-9]* node [0-9]* cpus [0-9,-]*' /tmp/v2.log | awk '{printf "%s node %s cpus %s; ", $2, $7, $9}')"
  wget -q -O /dev/null http://127.0.0.1:8097/ || ok=1
  kill $v2; wait $v2 2>/dev/null
  [ -e "$group" ] && { ok=1; detail="$detail; $group left behind"; }
  verdict cgroup-v2 $ok "$detail"
else
  verdict cgroup-v2 1 "the server did not start: $(tail -3 /tmp/v2.log)"
  kill $v2 2>/dev/null; wait $v2 2>/dev/null
fi

# Give the controllers back for the v1 checks that follow.
rmdir /sys/fs/cgroup/svc/espalier-master-* /sys/fs/cgroup/svc 2>/dev/null
echo "-cpu -cpuset" > /sys/fs/cgroup/cgroup.subtree_control
umount /sys/fs/cgroup

# The v1 hierarchies, as on machines without systemd (this project's development VMs).
mount -t tmpfs cgroup /sys/fs/cgroup
for c in cpuset cpu cpuacct; do
  mkdir -p /sys/fs/cgroup/$c
  # The unified hierarchy lets a controller go once its groups are freed: a moment's wait.
  for _ in $(seq 50); do mount -t cgroup -o $c $c /sys/fs/cgroup/$c 2>/dev/null && break; sleep 0.1; done
done

# 1. The topology espalier reads is the machine QEMU emulates.
espalier topology > /tmp/topo.txt 2>&1
ok=0; detail=""
grep -q "^machine: 4 NUMA node(s)" /tmp/topo.txt || ok=1
for n in 0 1 2 3; do
  grep -qE "^$n +$(node_cpus $n) " /tmp/topo.txt || ok=1
  want=$(awk '/MemTotal/ {print $4 * 1024}' /sys/devices/system/node/node$n/meminfo)
  espalier topology --json | tr -d ' \n' | grep -q "\"id\":$n,\"cpus\":\[[0-9,]*\],\"memory_total_bytes\":$want," || { ok=1; detail="$detail node$n-memory"; }
  detail="$detail node$n=$(node_cpus $n)"
done
verdict topology $ok "$detail"

# 2. most-free-memory: the first worker goes to the node with the most free memory.
most=$(for n in 0 1 2 3; do awk -v n=$n '/MemFree/ {print $4, n}' /sys/devices/system/node/node$n/meminfo; done | sort -n | tail -1 | cut -d' ' -f2)
first=$(espalier serve --dry-run -c garden.toml | awk 'NR == 2 {print $3}')
[ "$first" = "$most" ]; verdict most-free-memory $? "most free memory on node $most, first worker on node $first"

# 3. Hosting: four single-worker pools, one per node.
# (the placement table: the rows up to the blank line before the steering table)
nodes=$(espalier serve --dry-run -c hosting.toml | awk 'NR > 1 && NF == 0 {exit} NR > 1 {print $3}' | sort -u | wc -l)
[ "$nodes" = 4 ]; verdict hosting-spreads $? "4 pools on $nodes distinct nodes"

# 4. A hard-affinity web garden: one worker per node, every thread on its node's CPUs, memory
#    allowed and placed on its node.
espalier serve -c garden.toml > /tmp/garden.log 2>&1 &
garden=$!
if wait_for /tmp/garden.log "worker(s) serving" 60; then
  workers=$(grep -c "started: pid" /tmp/garden.log)
  [ "$workers" = 4 ]; verdict garden-workers $? "$workers workers for 4 nodes"
  grep "started: pid" /tmp/garden.log | while read -r _ _ name _ _ pid _ node _ cpus; do
    ok=0; detail="$name pid $pid node $node cpus $cpus"
    [ "$cpus" = "$(node_cpus $node)" ] || ok=1
    for t in /proc/$pid/task/*; do
      allowed=$(awk '/^Cpus_allowed_list/ {print $2}' $t/status)
      mems=$(awk '/^Mems_allowed_list/ {print $2}' $t/status)
      within "$allowed" "$(node_cpus $node)" || { ok=1; detail="$detail; thread cpus $allowed"; }
      [ "$mems" = "$node" ] || { ok=1; detail="$detail; mems $mems"; }
    done
    # Anonymous memory (heap, stacks) sits on the home node.
    pages=$(awk -v n="N$node=" '/anon=/ { for (i = 1; i <= NF; i++) if ($i ~ /^N[0-9]+=/) { split($i, kv, "="); all += kv[2]; if (index($i, n) == 1) home += kv[2] } } END { printf "%d %d", home, all }' /proc/$pid/numa_maps)
    home=${pages% *}; all=${pages#* }
    [ "$all" -gt 0 ] && [ $((home * 100 / all)) -ge 90 ] || ok=1
    verdict "garden-placement-$name" $ok "$detail; anon pages on node $node: $home of $all"
  done

  # 5. Steering: a client on CPU k is answered by the worker thread on CPU k.
  ok=0; detail=""
  for k in 0 1 2 3 4 5 6 7; do
    who=$(taskset -c $k wget -S -O /dev/null http://127.0.0.1:8080/ 2>&1 | awk -F': ' 'tolower($1) ~ /x-espalier-worker/ {print $2}' | tr -d '\r')
    case "$who" in *"/cpu$k") ;; *) ok=1 ;; esac
    detail="$detail cpu$k->$who"
  done
  verdict steering $ok "$detail"

  # 6. Under load, hard-affinity threads never leave their CPUs.
  before=$(for p in $(grep "started: pid" /tmp/garden.log | awk '{print $6}'); do cat /proc/$p/task/*/status | grep Cpus_allowed_list; done | md5sum)
  espalier bench -d 3s -c 16 -t 2 http://127.0.0.1:8080/ > /tmp/garden-bench.txt 2>&1
  after=$(for p in $(grep "started: pid" /tmp/garden.log | awk '{print $6}'); do cat /proc/$p/task/*/status | grep Cpus_allowed_list; done | md5sum)
  [ "$before" = "$after" ] && grep -q "errors: 0 " /tmp/garden-bench.txt; verdict hard-under-load $? "$(head -1 /tmp/garden-bench.txt)"
else
  verdict garden-workers 1 "the server did not start: $(tail -3 /tmp/garden.log)"
fi
kill $garden; wait $garden 2>/dev/null

# 6b. HTTP/3: a new QUIC connection from a client on CPU k is answered by a thread on k's node
#     (the QUIC steering program), and each of its requests by that one thread. One CPU of
#     each node, first and second in turn, and few requests: under TCG one client run takes
#     5-14 s whatever its count (its QUIC handshakes, in the debug build's crypto), so all
#     eight CPUs took 84 s of the guest's time.
espalier serve -c h3.toml > /tmp/h3.log 2>&1 &
h3=$!
if wait_for /tmp/h3.log "worker(s) serving" 60; then
  ok=0; detail=""
  grep -q "cannot attach" /tmp/h3.log && { ok=1; detail="$(grep 'cannot attach' /tmp/h3.log | head -1);"; }
  for k in 0 3 4 7; do
    before=$(cat /tmp/h3-access.log 2>/dev/null | wc -l)
    taskset -c $k espalier bench --h3 --insecure -n 4 -c 2 https://127.0.0.1:8445/ > /tmp/h3-bench.txt 2>&1
    grep -q "errors: 0 " /tmp/h3-bench.txt || { ok=1; detail="$detail cpu$k: $(tail -3 /tmp/h3-bench.txt | tr '\n' ' ' | tail -c 300);"; }
    i=0
    while [ "$(cat /tmp/h3-access.log | wc -l)" -lt $((before + 4)) ] && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.1; done
    node=$((k / 2))
    threads=$(tail -n +$((before + 1)) /tmp/h3-access.log | awk '{print $(NF-1)}' | sort -u | tr '\n' ' ')
    for t in $threads; do
      within "${t##*/cpu}" "$(node_cpus $node)" || ok=1
    done
    [ -n "$threads" ] || ok=1
    detail="$detail cpu$k(node$node)->$threads"
  done
  verdict quic-steering $ok "$detail"
else
  verdict quic-steering 1 "the server did not start: $(tail -3 /tmp/h3.log)"
fi
kill $h3; wait $h3 2>/dev/null

# 7. Soft affinity: a worker whose node is saturated while others idle is widened, and
#    narrowed back when the load stops.
espalier serve -c soft.toml > /tmp/soft.log 2>&1 &
soft=$!
if wait_for /tmp/soft.log "worker(s) serving" 60; then
  home=$(awk '/started: pid/ {print $8; exit}' /tmp/soft.log)
  # Each request is ~15 ms of work (ms=2000): with lighter ones (ms=200, ~1.5 ms) the home
  # node sat at 80-95% busy under emulation — the client's round trips left gaps — and crossed
  # the 90% threshold for two samples running only some of the time (the CI failed on it).
  # Emulated CPUs still get uneven time from the host, so three rounds of load are allowed.
  for attempt in 1 2 3; do
    espalier bench -d 15s -c 16 -t 2 --cpus 6-7 "http://127.0.0.1:8081/cpu?ms=2000" > /tmp/soft-bench.txt 2>&1 &
    load=$!
    wait_for /tmp/soft.log "widened to nodes" 25; widened=$?
    wait $load
    [ $widened = 0 ] && break
  done
  verdict soft-widens $widened "home node $home: $(grep -o 'widened to nodes.*' /tmp/soft.log | head -1)"
  if [ $widened != 0 ]; then
    sed 's/^/  soft.log: /' /tmp/soft.log | tail -8
  fi
  wait_for /tmp/soft.log "narrowed back to node $home" 20; verdict soft-narrows $? "$(grep -o 'narrowed back.*' /tmp/soft.log | head -1)"
else
  verdict soft-widens 1 "the server did not start: $(tail -3 /tmp/soft.log)"
fi
kill $soft; wait $soft 2>/dev/null

# 8. An application pool behind the proxy: one app process per node, placed on its node, and a
#    request received on CPU k is forwarded by the thread on CPU k to the app on k's node.
espalier serve -c app.toml > /tmp/app.log 2>&1 &
app=$!
if wait_for /tmp/app.log "worker(s) serving" 60; then
  apps=$(grep -c "app app/[0-9]* started: pid" /tmp/app.log)
  ok=0; detail="$apps app processes"
  [ "$apps" = 4 ] || ok=1
  grep "app app/[0-9]* started: pid" /tmp/app.log | while read -r _ _ name _ _ pid _ node _ cpus; do
    allowed=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/$pid/status)
    [ "$allowed" = "$(node_cpus $node)" ] || echo "ESPALIER-CHECK proxy-apps FAIL $name pid $pid node $node allowed $allowed"
  done
  verdict proxy-apps $ok "$detail"
  ok=0; detail=""
  for k in 0 1 2 3 4 5 6 7; do
    taskset -c $k wget -S -O /tmp/where http://127.0.0.1:8082/cgi-bin/where 2> /tmp/where.h
    who=$(awk -F': ' 'tolower($1) ~ /x-espalier-worker/ {print $2}' /tmp/where.h | tr -d '\r')
    where=$(cat /tmp/where)
    node=$(for n in 0 1 2 3; do within "$k" "$(node_cpus $n)" && echo $n; done)
    case "$who" in *"/cpu$k") ;; *) ok=1 ;; esac
    within "$where" "$(node_cpus $node)" || ok=1
    detail="$detail cpu$k->$who->app-on-$where"
  done
  verdict proxy-same-node $ok "$detail"

  # 8b. Its answers kept per node (cache_responses): each node's worker keeps its own, so a
  #     request on each node misses once, then is a hit there — with that node's app's
  #     answer, served by the thread on the client's CPU.
  ok=0; detail=""
  for n in 0 1 2 3; do
    k=$(node_cpus $n | cut -d, -f1 | cut -d- -f1)
    taskset -c $k wget -S -O /tmp/kept1 http://127.0.0.1:8082/cgi-bin/kept 2> /tmp/kept1.h
    taskset -c $k wget -S -O /tmp/kept2 http://127.0.0.1:8082/cgi-bin/kept 2> /tmp/kept2.h
    s1=$(awk -F': ' 'tolower($1) ~ /cache-status/ {print $2}' /tmp/kept1.h | tr -d '\r')
    s2=$(awk -F': ' 'tolower($1) ~ /cache-status/ {print $2}' /tmp/kept2.h | tr -d '\r')
    who=$(awk -F': ' 'tolower($1) ~ /x-espalier-worker/ {print $2}' /tmp/kept2.h | tr -d '\r')
    where=$(cat /tmp/kept2)
    [ "$s1" = "espalier; fwd=miss; stored" ] || ok=1
    [ "$s2" = "espalier; hit" ] || ok=1
    case "$who" in *"/cpu$k") ;; *) ok=1 ;; esac
    within "$where" "$(node_cpus $n)" || ok=1
    cmp -s /tmp/kept1 /tmp/kept2 || ok=1
    detail="$detail node$n: [$s1] then [$s2] by $who, the app on $where;"
  done
  verdict cache-per-node $ok "$detail"

  # 9. While node 3's app restarts, CPU 6's thread forwards to the nearest node and counts it.
  app3=$(awk '/app app\/[0-9]* started: pid/ && $8 == 3 {print $6; exit}' /tmp/app.log)
  kill -9 "$app3"
  wait_for /tmp/app.log "(pid $app3) exited" 10
  sleep 0.5
  taskset -c 6 wget -S -O /tmp/where http://127.0.0.1:8082/cgi-bin/where 2> /tmp/where.h
  where=$(cat /tmp/where)
  # The count reaches the master with the worker's next pong (once a second).
  for _ in $(seq 40); do
    remote=$(espalier status --admin 127.0.0.1:9182 --json | tr -d ' \n' | grep -o '"remote_forwards":[0-9]*' | cut -d: -f2 | sort -n | tail -1)
    [ "${remote:-0}" -ge 1 ] && break
    sleep 0.25
  done
  ok=0
  [ -n "$where" ] || ok=1
  within "$where" "$(node_cpus 3)" && ok=1
  [ "${remote:-0}" -ge 1 ] || ok=1
  verdict proxy-fallback $ok "node 3's app $app3 killed: cpu6 answered by the app on $where; remote forwards counted: ${remote:-0}"
else
  verdict proxy-apps 1 "the server did not start: $(tail -3 /tmp/app.log)"
fi
kill $app; wait $app 2>/dev/null

# 10. One port, two pools by host: a connection received on CPU k, accepted by the
#     dispatcher's thread on CPU k and handed on, is served by the garden's thread on CPU k,
#     or by the single-worker pool's thread on its own node (the only one it has), and on
#     CPU k itself when k is there.
espalier serve -c shared.toml > /tmp/shared.log 2>&1 &
shared=$!
if wait_for /tmp/shared.log "worker(s) serving" 60; then
  solo_node=$(awk '/worker solo\/0 started: pid/ {print $8; exit}' /tmp/shared.log)
  ok=0; detail="solo on node $solo_node:"
  for k in 0 1 2 3 4 5 6 7; do
    g=$(taskset -c $k wget -S -O /dev/null --header "Host: garden.example" http://127.0.0.1:8095/ 2>&1 | awk -F': ' 'tolower($1) ~ /x-espalier-worker/ {print $2}' | tr -d '\r')
    s=$(taskset -c $k wget -S -O /dev/null --header "Host: solo.example" http://127.0.0.1:8095/ 2>&1 | awk -F': ' 'tolower($1) ~ /x-espalier-worker/ {print $2}' | tr -d '\r')
    case "$g" in garden/*"/cpu$k") ;; *) ok=1 ;; esac
    scpu=${s##*/cpu}
    case "$s" in solo/*) ;; *) ok=1 ;; esac
    within "$scpu" "$(node_cpus $solo_node)" || ok=1
    if within "$k" "$(node_cpus $solo_node)"; then [ "$scpu" = "$k" ] || ok=1; fi
    detail="$detail cpu$k->$g,$s"
  done
  # The dispatcher in front of the port: a process on each of the 4 nodes, and one listening
  # socket per CPU (8; port 8095 is 1F9F), not one per pool thread (8 + 2).
  dnodes=$(awk '/worker espalier.dispatcher\/[0-9]+ started: pid/ {print $8}' /tmp/shared.log | sort -u | tr '\n' ' ')
  [ "$(echo $dnodes | wc -w)" = 4 ] || ok=1
  listening=$(awk '$2 ~ /:1F9F$/ && $4 == "0A"' /proc/net/tcp | wc -l)
  [ "$listening" = 8 ] || ok=1
  detail="$detail; dispatcher on nodes $dnodes; listening sockets $listening"
  verdict shared-port-locality $ok "$detail"
else
  verdict shared-port-locality 1 "the server did not start: $(tail -3 /tmp/shared.log)"
fi
kill $shared; wait $shared 2>/dev/null

# 11. kTLS: an HTTPS/1.1 connection about to send a large file is handed to the kernel's TLS,
#     and the file goes by sendfile, encrypted by the kernel; small answers before it stay
#     with rustls. /proc/net/tls_stat counts the connections the kernel took (TlsTxSw; the
#     worker's probe at start takes a few). TLS 1.2 with AES-GCM stays with rustls (its nonce
#     construction differs from the kernel's), and so does HTTP/2.
echo /bin/modprobe > /proc/sys/kernel/modprobe
depmod 2>/dev/null
if modprobe tls 2>/tmp/modprobe.err; then
  espalier serve -c ktls.toml > /tmp/ktls.log 2>&1 &
  ktls=$!
  if wait_for /tmp/ktls.log "worker(s) serving" 60; then
    want=$(sha256sum tls-www/big.bin | cut -d' ' -f1)
    site=https://ktls.example:8443
    url=$site/big.bin
    fetch() { curl -sSk --http1.1 --resolve ktls.example:8443:127.0.0.1 "$@"; }
    taken() { awk '$1 == "TlsTxSw" {print $2}' /proc/net/tls_stat; }
    sum() { sha256sum < "$1" | cut -c1-12; }
    # One keep-alive connection, TLS 1.3: a page, a file, a page, a file.
    before=$(taken)
    rm -f /tmp/k1 /tmp/k2 /tmp/p1 /tmp/p2
    fetch --tlsv1.3 "$site/" -o /tmp/p1 "$url" -o /tmp/k1 "$site/" -o /tmp/p2 "$url" -o /tmp/k2 2>/tmp/k.err
    ok=0
    [ "$(sha256sum < /tmp/k1 | cut -d' ' -f1)" = "$want" ] || ok=1
    [ "$(sha256sum < /tmp/k2 | cut -d' ' -f1)" = "$want" ] || ok=1
    [ "$(cat /tmp/p1 /tmp/p2)" = "$(printf 'hello over TLS\nhello over TLS')" ] || ok=1
    [ "$(taken)" = $((before + 1)) ] || ok=1
    verdict ktls-tls13 $ok "page, 1 MB file, page, file on one connection: files $(sum /tmp/k1) $(sum /tmp/k2) of $(echo "$want" | cut -c1-12), pages $(cat /tmp/p1 /tmp/p2 | tr '\n' '|'); connections the kernel took: $before -> $(taken); $(head -c 200 /tmp/k.err)"
    # Every suite: TLS 1.3's three and TLS 1.2 ChaCha20 are taken, TLS 1.2 AES-GCM is not; all
    # answer whole.
    ok=0; detail=""
    for c in 1.3:TLS_AES_128_GCM_SHA256:1 1.3:TLS_AES_256_GCM_SHA384:1 1.3:TLS_CHACHA20_POLY1305_SHA256:1 \
             1.2:ECDHE-ECDSA-CHACHA20-POLY1305:1 1.2:ECDHE-ECDSA-AES128-GCM-SHA256:0; do
      version=${c%%:*}; rest=${c#*:}; suite=${rest%:*}; expect=${rest#*:}
      if [ "$version" = 1.3 ]; then pick="--tlsv1.3 --tls13-ciphers $suite"; else pick="--tls-max 1.2 --ciphers $suite"; fi
      before=$(taken)
      # shellcheck disable=SC2086
      got=$(fetch $pick "$url" | sha256sum | cut -d' ' -f1)
      [ "$got" = "$want" ] || ok=1
      [ "$(taken)" = $((before + expect)) ] || ok=1
      detail="$detail $suite: $( [ "$got" = "$want" ] && echo whole || echo WRONG), kernel took $(( $(taken) - before ));"
    done
    verdict ktls-suites $ok "$detail"
    # HTTP/2 and a page alone stay with rustls; a closing answer from the kernel ends with
    # its close_notify.
    before=$(taken)
    h2=$(fetch --http2 -o /dev/null -w '%{http_version} %{size_download}' "$url")
    page=$(fetch "$site/")
    mid=$(taken)
    closing=$(fetch -v --tlsv1.3 -H 'Connection: close' -o /tmp/k3 "$url" 2>&1)
    ok=0
    [ "$h2" = "2 1000000" ] || ok=1
    [ "$page" = "hello over TLS" ] || ok=1
    [ "$mid" = "$before" ] || ok=1
    [ "$(sha256sum < /tmp/k3 | cut -d' ' -f1)" = "$want" ] || ok=1
    echo "$closing" | grep -qi "close notify" || ok=1
    [ "$(taken)" = $((before + 1)) ] || ok=1
    verdict ktls-h2-and-close $ok "h2: $h2; page: $page; kernel took $((mid - before)) for those, $(( $(taken) - mid )) for the closing file $(sum /tmp/k3); close_notify seen: $(echo "$closing" | grep -ci 'close notify')"
  else
    verdict ktls-tls13 1 "the server did not start: $(tail -3 /tmp/ktls.log)"
  fi
  kill $ktls; wait $ktls 2>/dev/null
else
  verdict ktls-tls13 1 "modprobe tls failed: $(head -c 300 /tmp/modprobe.err)"
fi

echo ESPALIER-GUEST-DONE
poweroff -f
