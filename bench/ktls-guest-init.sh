#!/bin/busybox sh
# /init of the guest bench/ktls.sh boots when this machine's kernel has no kTLS: Debian's
# kernel, its tls and crypto modules, espalier and nginx; runs bench/ktls-measure.sh and
# prints its KTLS-RESULT lines, then ESPALIER-GUEST-DONE, and powers off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
ip link set lo up
export PATH=/bin HOME=/root
ulimit -n 65536
mkdir -p /etc /root
printf 'root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n' > /etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' > /etc/group
echo /bin/modprobe > /proc/sys/kernel/modprobe
depmod 2>/dev/null
# The CPU's AES and carry-less multiply, as a server kernel would use them.
modprobe aesni_intel 2>/dev/null; modprobe ghash_clmulni_intel 2>/dev/null
if modprobe tls; then
  mkdir -p /tmp/ktls && cp /guest/cert.pem /guest/key.pem /tmp/ktls/
  echo "KTLS-INFO $(grep -m1 'model name' /proc/cpuinfo); aes: $(grep -c -m1 ' aes ' /proc/cpuinfo)"
  read -r rounds seconds < /guest/ktls-params
  sh /guest/ktls-measure.sh /bin/espalier /bin/nginx /tmp/ktls "$rounds" "$seconds" 2>&1
  grep -h "gcm\|chacha" /proc/crypto | grep -m4 driver | sed 's/^/KTLS-INFO crypto /'
else
  echo "KTLS-INFO modprobe tls failed"
fi
echo ESPALIER-GUEST-DONE
poweroff -f
