# Shared by the bench/ scripts: installing the peers from Debian and port helpers.
# Source it; it expects nothing and defines need_tools, free_port and wait_port.

# need_tools CMD:PACKAGE… — installs the packages whose command is missing (apt-get update once).
need_tools() {
  local missing=() pair cmd pkg
  for pair in "$@"; do
    cmd=${pair%%:*} pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    echo "installing ${missing[*]} from Debian…" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "${missing[@]}" >&2
  fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() {
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2
  return 1
}
