#!/usr/bin/env bash
# tests/qemu/run.sh — proves placement on a real multi-node kernel: boots Debian's kernel
# under QEMU (TCG) as a 4-node machine (2 CPUs per node, unequal memory), runs the checks of
# guest-init.sh inside it, and prints their verdicts:
#   ESPALIER-CHECK <name> PASS|FAIL <detail>
# Exits 0 when the guest ran to the end (the verdicts say what passed), 2 when the guest did
# not finish in time, 3 when this machine cannot run the harness at all — said in one loud
# line, never silently.
#
# Fetches from Debian's packages when missing: qemu-system-x86, curl and openssl (installed), a
# kernel image and busybox-static (downloaded and unpacked into a cache folder; no kernel is
# installed on the host). Runs the espalier ESPALIER_GUEST_BIN names (the test's build, with
# the libraries it links), else builds one statically. The guest gets the kernel's tls and
# crypto modules and this machine's curl (with its libraries), for the kTLS checks this
# machine's own kernel may not allow. The guest is always powered off within TIMEOUT seconds
# (default 900: a bound for a hang, not a figure — the checks take 200-300 s under TCG on a
# two-core VM, and up to 600 s when the VM's host steals its time).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${ESPALIER_QEMU_CACHE:-$ROOT/target/qemu}
TIMEOUT=${TIMEOUT:-900}
mkdir -p "$CACHE"
cannot() { echo "QEMU-HARNESS: CANNOT RUN: $*" >&2; exit 3; }

updated=0
apt_update() { [ $updated = 1 ] || { apt-get update -qq >&2 || cannot "apt-get update failed"; updated=1; }; }
export DEBIAN_FRONTEND=noninteractive
if ! command -v qemu-system-x86_64 >/dev/null; then
  apt_update
  apt-get install -y -qq qemu-system-x86 >&2 || cannot "apt-get install qemu-system-x86 failed"
fi
command -v qemu-system-x86_64 >/dev/null || cannot "qemu-system-x86_64 is not installed"

fetch() { # package-name → unpacked into $CACHE/pkg/NAME
  local pkg=$1 dir="$CACHE/pkg/$1"
  [ -d "$dir" ] && return 0
  mkdir -p "$CACHE/deb" "$CACHE/pkg"
  (cd "$CACHE/deb" && apt-get download "$pkg" >&2) || { apt_update; (cd "$CACHE/deb" && apt-get download "$pkg" >&2) || cannot "apt-get download $pkg failed"; }
  dpkg -x "$CACHE"/deb/"${pkg}"_*.deb "$dir.tmp" && mv "$dir.tmp" "$dir"
}
if [ ! -f "$CACHE/vmlinuz" ]; then
  apt_update
  kernel=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  [ -n "$kernel" ] || cannot "no Debian kernel package found (apt-cache depends linux-image-amd64)"
  fetch "$kernel"
  cp "$CACHE/pkg/$kernel"/boot/vmlinuz-* "$CACHE/vmlinuz"
  echo "$kernel" > "$CACHE/kernel-package"
fi
KERNEL_PKG="$CACHE/pkg/$(cat "$CACHE/kernel-package" 2>/dev/null || (cd "$CACHE/pkg" && ls -d linux-image-* | head -1))"
fetch busybox-static
# The guest's HTTPS client (curl, with the libraries it links), and openssl on this side to
# make the guest's certificate.
for tool in curl:curl openssl:openssl; do
  command -v "${tool%%:*}" >/dev/null || { apt_update; apt-get install -y -qq "${tool#*:}" >&2 || cannot "apt-get install ${tool#*:} failed"; }
done

if [ -n "${ESPALIER_GUEST_BIN:-}" ]; then
  # The test passes the espalier `cargo test` has just built (debug, dynamically linked): the
  # guest's checks are placement and locality, not speed, and a second build of the whole
  # crate would cost CI a minute and a half. Its debug info is stripped (the initramfs would
  # be ten times larger); its libraries go in beside it, as curl's do.
  BIN="$CACHE/espalier-guest"
  objcopy --strip-debug "$ESPALIER_GUEST_BIN" "$BIN"
else
  echo "building espalier statically…" >&2
  # Its own target folder: the `cargo test` that runs this script may hold the main one's lock.
  (cd "$ROOT" && CARGO_TARGET_DIR="$CACHE/target" RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile guest --target x86_64-unknown-linux-gnu --quiet) >&2
  BIN="$CACHE/target/x86_64-unknown-linux-gnu/guest/espalier"
fi

GUEST="$CACHE/root"
rm -rf "$GUEST" && mkdir -p "$GUEST"/{bin,proc,sys,dev,tmp,etc,guest/www}
# The users a system has: the dispatcher of a shared port runs as `nobody` under root.
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$GUEST/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$GUEST/etc/group"
cp "$CACHE/pkg/busybox-static/bin/busybox" "$GUEST/bin/busybox"
cp "$BIN" "$GUEST/bin/espalier"
cp "$ROOT/tests/qemu/guest-init.sh" "$GUEST/init" && chmod +x "$GUEST/init"
cp "$ROOT"/tests/qemu/*.toml "$GUEST/guest/"
echo "hello from a 4-node guest" > "$GUEST/guest/www/index.html"
# The app pool's CGI: the CPUs the app process (and so this script) may run on.
mkdir -p "$GUEST/guest/app-www/cgi-bin"
printf '#!/bin/sh\necho "Content-Type: text/plain"\necho\nawk '"'"'/^Cpus_allowed_list/ {print $2}'"'"' /proc/self/status\n' > "$GUEST/guest/app-www/cgi-bin/where"
chmod +x "$GUEST/guest/app-www/cgi-bin/where"
# And one whose answer may be kept ten minutes (cache_responses), with its length.
printf '#!/bin/sh\nbody=$(awk '"'"'/^Cpus_allowed_list/ {print $2}'"'"' /proc/self/status)\necho "Content-Type: text/plain"\necho "Cache-Control: max-age=600"\necho "Content-Length: $((${#body} + 1))"\necho\necho "$body"\n' > "$GUEST/guest/app-www/cgi-bin/kept"
chmod +x "$GUEST/guest/app-www/cgi-bin/kept"
# kTLS: the kernel's tls module and the crypto modules it asks for (loaded by busybox's
# modprobe in the guest), a certificate, and a file large enough to go by sendfile.
kver=$(ls "$KERNEL_PKG/lib/modules")
for d in kernel/net/tls kernel/crypto kernel/arch/x86/crypto kernel/lib/crypto; do
  mkdir -p "$GUEST/lib/modules/$kver/$(dirname $d)"
  cp -r "$KERNEL_PKG/lib/modules/$kver/$d" "$GUEST/lib/modules/$kver/$d"
done
guest_libraries() { # copies the libraries a program of this machine links into the guest
  { ldd "$1" || true; } | { grep -oE '/[^ ]+' || true; } | while read -r lib; do
    mkdir -p "$GUEST$(dirname "$lib")" && cp -L "$lib" "$GUEST$lib"
  done
}
guest_binary() { # copies a program of this machine and the libraries it links into the guest
  cp -L "$1" "$GUEST/bin/"
  guest_libraries "$1"
}
guest_binary "$(command -v curl)"
guest_libraries "$GUEST/bin/espalier"
for extra in ${GUEST_BINARIES:-}; do guest_binary "$extra"; done  # GUEST_BINARIES: more programs
mkdir -p "$GUEST/guest/tls-www"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=ktls.example \
  -addext subjectAltName=DNS:ktls.example -keyout "$GUEST/guest/ktls.key" -out "$GUEST/guest/ktls.pem" 2>/dev/null
head -c 1000000 /dev/urandom > "$GUEST/guest/tls-www/big.bin"
echo "hello over TLS" > "$GUEST/guest/tls-www/index.html"
# GUEST_INIT, GUEST_FILES: another /init and files for /guest (bench/ktls.sh's).
[ -n "${GUEST_INIT:-}" ] && cp "$GUEST_INIT" "$GUEST/init" && chmod +x "$GUEST/init"
for extra in ${GUEST_FILES:-}; do cp "$extra" "$GUEST/guest/"; done
python3 "$ROOT/tests/qemu/mkinitramfs.py" "$GUEST" "$CACHE/initrd.gz"

mem=(512 768 384 384)
numa=()
for n in 0 1 2 3; do
  numa+=(-object "memory-backend-ram,id=m$n,size=${mem[$n]}M" -numa "node,nodeid=$n,cpus=$((2 * n))-$((2 * n + 1)),memdev=m$n")
done
echo "booting the guest (4 nodes × 2 CPUs; ${QEMU_ACCEL:-tcg})…" >&2
set +e
# QEMU_ACCEL/QEMU_CPU: bench/ktls.sh boots the same guest under KVM with the host's CPU.
timeout --kill-after=5 "$TIMEOUT" qemu-system-x86_64 -accel "${QEMU_ACCEL:-tcg}" ${QEMU_CPU:+-cpu "$QEMU_CPU"} -m 2048 -smp 8,sockets=4,cores=2,threads=1 "${numa[@]}" \
  -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.gz" -append "console=ttyS0 quiet panic=-1" \
  -nographic -no-reboot -monitor none > "$CACHE/serial.log" 2>&1
set -e
tr -d '\r' < "$CACHE/serial.log" | grep -aoE "ESPALIER-CHECK .*" || true
grep -q "ESPALIER-GUEST-DONE" "$CACHE/serial.log" || { echo "QEMU-HARNESS: the guest did not finish within ${TIMEOUT}s; see $CACHE/serial.log" >&2; exit 2; }
