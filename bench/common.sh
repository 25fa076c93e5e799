# Shared by the bench/ scripts and the tests that need a real peer: installing the peers from
# Debian and port helpers. Source it; it expects nothing and defines need_tools, free_port,
# wait_port, proc_ticks, espalier_binary, bench_workdir, stop_all, wrk_load and us_per. Tests run it as `bash -c '. bench/common.sh; need_tools nginx:nginx-light'`.

# need_tools CMD:PACKAGE… — installs the packages whose command is missing (apt-get update once);
# a package with no command of its own (a Python module) is written `-:PACKAGE`.
# Serialized with a lock, since tests running in parallel may ask at once; says in one line
# on stderr, and with exit 3, when it cannot.
need_tools() {
  local missing=() pair cmd pkg only=()
  # --no-recommends first: the packages alone (Debian's wordpress recommends a whole Apache).
  [ "${1:-}" = --no-recommends ] && { only=(--no-install-recommends); shift; }
  for pair in "$@"; do
    cmd=${pair%%:*} pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  (
    flock 9
    local still=() p
    for p in "${missing[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || still+=("$p"); done
    ((${#still[@]})) || exit 0
    echo "installing ${still[*]} from Debian…" >&2
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq "${only[@]}" "${still[@]}"; } >&2 ||
      { echo "cannot install ${still[*]} from Debian's packages (apt-get failed)" >&2; exit 3; }
  ) 9>/tmp/espalier-need-tools.lock
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() {
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2
  return 1
}

# proc_ticks [--user] PID… — clock ticks of CPU time (user + system, or user alone) of the
# given processes, every thread included, from /proc/PID/stat (fields after the command
# name: state is the 1st, utime the 12th, stime the 13th). Gone processes count 0.
proc_ticks() {
  local user_only=0 total=0 p f
  [ "${1:-}" = --user ] && { user_only=1; shift; }
  for p in "$@"; do
    read -r -a f < <(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    total=$((total + f[11] + (user_only ? 0 : f[12])))
  done
  echo "$total"
}

# cg_zero PID… — zeroes the counts of processes running under callgrind (before a load).
# cg_dump_sum DIR PID… — dumps their counts to DIR/cg.PID.* (the processes' own
# --callgrind-out-file=DIR/cg.%p), prints the sum of the dumps' user-space instructions
# (`summary:` lines; callgrind sees no kernel work) and removes the files. Between the two,
# the caller runs its load and divides the sum by its requests.
cg_zero() {
  local p
  for p in "$@"; do callgrind_control -z "$p" >/dev/null 2>&1 || true; done
}
cg_dump_sum() {
  local dir=$1 p files=()
  shift
  for p in "$@"; do callgrind_control -d "$p" >/dev/null 2>&1 || true; done
  sleep 0.5 # the dump is written by the traced process, after callgrind_control returns
  for p in "$@"; do files+=("$dir"/cg."$p".*); done
  cat "${files[@]}" 2>/dev/null | awk '/^summary:/ {s+=$2} END {print s+0}'
  for p in "$@"; do rm -f "$dir"/cg."$p".*; done
}

# espalier_binary ROOT — prints the espalier to measure: $ESPALIER_BIN when set (another build,
# for an A/B comparison of two commits), else the release build of ROOT, built first.
espalier_binary() {
  if [ -n "${ESPALIER_BIN:-}" ]; then
    echo "$ESPALIER_BIN"
  else
    echo "building espalier (release)…" >&2
    (cd "$1" && cargo build --release --quiet) >&2
    echo "$1/target/release/espalier"
  fi
}

# bench_workdir NAME — makes $WORK (/tmp/NAME.XXXXXX, readable by nginx's workers, which run
# as another user) and an empty PIDS array; at exit every process in PIDS is stopped (TERM,
# then KILL) and $WORK removed, unless KEEP is set.
bench_workdir() {
  WORK=$(mktemp -d "/tmp/$1.XXXXXX")
  chmod 755 "$WORK"
  PIDS=()
  trap bench_cleanup EXIT
}
bench_cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}

# start_nginx WRAPPER [nginx args…] — nginx on $SERVER_CPU with $WORK/nginx/nginx.conf, its
# port $NGINX_PORT; start_espalier WRAPPER — espalier with $WORK/espalier.toml, its port
# $ESP_PORT. WRAPPER is "" or a valgrind command line. Both join PIDS.
start_nginx() { local wrap=$1; shift; taskset -c "$SERVER_CPU" $wrap "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" "$@" >"$WORK/nginx.out" 2>&1 & PIDS+=($!); wait_port "$NGINX_PORT"; }
start_espalier() { (cd "$WORK" && exec taskset -c "$SERVER_CPU" $1 "$ESPALIER" serve -c espalier.toml) >"$WORK/espalier.out" 2>&1 & PIDS+=($!); wait_port "$ESP_PORT"; }

# start NAME COMMAND… — COMMAND run in $WORK, in the background on $SERVER_CPU, its output in
# $WORK/NAME.out; its pid joins PIDS and is PID_NAME. descendants PID — every process under
# PID. tier_pids NAME — PID_NAME and every process under it (a server's whole tier).
start() {
  (cd "$WORK" && exec taskset -c "$SERVER_CPU" "${@:2}") >"$WORK/$1.out" 2>&1 &
  PIDS+=($!)
  eval "PID_$1=$!"
}
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
tier_pids() { local root; root=$(eval echo "\$PID_$1"); echo "$root"; descendants "$root"; }

# stop_all — stops the processes in PIDS and waits for them.
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
  sleep 0.3
}

# ratio A B — A/B to two places; "-" when either is not a number (a figure that could not be
# measured) or B is 0.
ratio() {
  python3 - "$1" "$2" <<'PY'
import sys
try:
    a, b = float(sys.argv[1]), float(sys.argv[2])
    print(f"{a / b:.2f}" if b else "-")
except ValueError:
    print("-")
PY
}

# per_request COUNT REQUESTS — COUNT/REQUESTS to two places; "-" when COUNT is not a number
# (perf writes "<not supported>" for a count it could not take, as when a process it counted
# went away).
per_request() {
  python3 - "$1" "$2" <<'PY'
import sys
try:
    print(round(float(sys.argv[1]) / max(int(sys.argv[2]), 1), 2))
except ValueError:
    print("-")
PY
}

# wrk_load URL SECONDS — keep-alive load from wrk (one thread, $CONNS connections) pinned to
# $CLIENT_CPU; prints "requests requests/s p50_ms p99_ms".
wrk_load() {
  local out
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${2}s" --latency "$1")
  local ms='function ms(v){ if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }'
  echo "$(awk '/requests in/ {print $1}' <<<"$out") $(awk '/Requests\/sec/ {print $2}' <<<"$out") \
$(awk "$ms"' $1=="50%" {print ms($2)}' <<<"$out") $(awk "$ms"' $1=="99%" {print ms($2)}' <<<"$out")"
}

# us_per TICKS REQUESTS — clock ticks of CPU time (proc_ticks) per request, in µs.
us_per() { python3 -c "print(round($1 / $(getconf CLK_TCK) * 1e6 / max($2, 1), 2))"; }
