#!/bin/sh
# An ONVIF camera on a network of its own, for tests (as root):
#   tools/onvif-camera.sh N USER PASSWORD FIXTURES READY_FILE
# makes the network namespace kp-onvif-N joined to this one by a veth pair (10.213.N.1
# here, 10.213.N.2 there, with a multicast route there), and runs in it the ONVIF device
# peer (tools/onvif-device, oxvif's mock device: WS-Discovery answers, device and media
# services, digests checked for USER/PASSWORD) on 10.213.N.2:8000 and the RTSP test camera
# on 10.213.N.2:554 serving /h264-auth at the device's stream address (/mock/stream), both
# with USER/PASSWORD. Writes "ready" to READY_FILE once both listen; on SIGTERM stops them
# and removes the namespace and the pair. The peer is built by tools/test.sh setup.
#
# With ONVIF_CAMERA_DHCP=1 the camera is plugged into a camera port instead: 10.213.N.1/24
# is the box's address there (kpoN-h, for keeppeek's [camera_port]), and the camera takes
# its address from the box with busybox udhcpc (host name porch-N, released when it stops),
# then starts its services there. READY_FILE.link appears once the pair is up, READY_FILE.pid
# holds udhcpc's PID (SIGUSR1: renew) and READY_FILE.leases one line per lease event
# ("bound ADDRESS", "renew ADDRESS").
set -eu
n=$1 user=$2 password=$3 fixtures=$4 ready=$5
repo=$(cd "$(dirname "$0")/.." && pwd)
device="$repo/target/peers/release/onvif-device"
[ -x "$device" ] || { echo "onvif-camera: $device is missing: run tools/test.sh setup" >&2; exit 1; }
ns="kp-onvif-$n" here="kpo$n-h" there="kpo$n-c" net="10.213.$n"
work=$(mktemp -d)
pids=""
cleanup() {
    trap - EXIT INT TERM
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    ip link del "$here" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
# What a killed run may have left.
ip netns del "$ns" 2>/dev/null || true
ip link del "$here" 2>/dev/null || true
ip netns add "$ns"
ip link add "$here" type veth peer name "$there"
ip link set "$there" netns "$ns"
ip addr add "$net.1/24" dev "$here"
# No IPv6 on the box's end, as keeppeek leaves a camera port: set before it comes up, so
# that keeppeek's own setting later changes nothing a browser on this host would notice.
echo 1 >"/proc/sys/net/ipv6/conf/$here/disable_ipv6"
ip link set "$here" up
ip -n "$ns" link set "$there" up
ip -n "$ns" link set lo up
ip -n "$ns" route add 224.0.0.0/4 dev "$there"
camera="$net.2"
if [ "${ONVIF_CAMERA_DHCP:-0}" = 1 ]; then
    cat >"$work/udhcpc.sh" <<EOF_SCRIPT
#!/bin/sh
case "\$1" in
    bound|renew)
        ip addr replace "\$ip/\$mask" dev "\$interface"
        echo "\$1 \$ip" >>"$ready.leases"
        echo "\$ip" >"$work/lease" ;;
    deconfig) ip -4 addr flush dev "\$interface" ;;
esac
EOF_SCRIPT
    chmod +x "$work/udhcpc.sh"
    touch "$ready.link"
    ip netns exec "$ns" busybox udhcpc -f -R -i "$there" -s "$work/udhcpc.sh" -t 5 -T 1 -A 1 \
        -x "hostname:porch-$n" >"$work/udhcpc.log" 2>&1 &
    pids="$pids $!"
    echo $! >"$ready.pid"
    tries=0
    until [ -s "$work/lease" ]; do
        tries=$((tries + 1))
        if [ $tries -gt 600 ]; then
            echo "onvif-camera: no lease after 60 s" >&2
            cat "$work/udhcpc.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    camera=$(cat "$work/lease")
else
    ip -n "$ns" addr add "$camera/24" dev "$there"
fi
ip netns exec "$ns" /usr/bin/python3 "$repo/tools/rtsp-camera.py" --address "$camera" --port 554 \
    --alias /mock/stream=/h264-auth --user "$user" --password "$password" --fixtures "$fixtures" \
    --ready-file "$work/rtsp" >"$work/rtsp.log" 2>&1 &
pids="$pids $!"
ip netns exec "$ns" "$device" "$camera" 8000 "$user" "$password" "Porch-$n" >"$work/device.log" 2>&1 &
pids="$pids $!"
tries=0
until [ -f "$work/rtsp" ] && grep -q '^ready' "$work/device.log"; do
    tries=$((tries + 1))
    if [ $tries -gt 300 ]; then
        echo "onvif-camera: not ready after 30 s" >&2
        cat "$work/rtsp.log" "$work/device.log" >&2
        exit 1
    fi
    sleep 0.1
done
echo ready >"$ready.tmp" && mv "$ready.tmp" "$ready"
# Until told to stop (a signal runs the trap), or a peer dies.
wait
