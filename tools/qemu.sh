#!/usr/bin/env bash
# Boots a KeepPeek disk image in QEMU's virt machine (Cortex-A53, 512 MiB) the way the
# reference board boots: U-Boot, then GRUB from the EFI system partition. The web face is
# forwarded to 127.0.0.1:8080 (or --http PORT); the serial console is this terminal (quit:
# Ctrl-A X). A second NIC is the board's camera port (eth1), on a network of its own with
# nothing plugged in. The image is used in place: copy it first to keep a clean one.
#
# Usage: tools/qemu.sh [--http PORT] IMAGE
set -euo pipefail
http=8080
while (($#)); do
    case $1 in
    --http) http=$2; shift 2 ;;
    *) image=$1; shift ;;
    esac
done
[[ -n ${image:-} ]] || { echo "usage: tools/qemu.sh [--http PORT] IMAGE" >&2; exit 2; }
exec qemu-system-aarch64 -M virt -cpu cortex-a53 -m 512 -smp 2 -nographic \
    -bios /usr/lib/u-boot/qemu_arm64/u-boot.bin \
    -drive "if=none,id=disk,format=raw,file=$image" -device virtio-blk-pci,drive=disk \
    -netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$http-:8080" -device virtio-net-pci,netdev=n0,romfile= \
    -netdev user,id=n1,restrict=on,net=192.168.250.0/24 -device virtio-net-pci,netdev=n1,romfile= \
    -device virtio-rng-pci -device i6300esb -action watchdog=reset
