#!/usr/bin/env bash
# Assembles a board's disk image and update bundle from an aarch64 keeppeek binary and the
# pinned arm64 Debian packages. No loop devices, no mounts, no root needed but for one
# device node in the initramfs (made by cpio's own list when not root).
#
# Usage: images/build.sh --board NAME --binary PATH --debs DIR --version VERSION --out DIR
#                        [--key SECRET_KEY] [--slot-only]
#
# Writes to OUT:
#   rootfs.squashfs                         the root slot (kernel, initramfs, busybox,
#                                           keeppeek, defaults)
#   keeppeek-VERSION-BOARD.img              the GPT disk image (ESP, slot A, slot B, data),
#                                           slot A holding this firmware, slot B empty
#   keeppeek-VERSION-BOARD.bundle           the signed update bundle of the same slot
#   sizes.txt                               what each piece weighs
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

board= binary= debs= version= out= key="$repo/images/keys/development.key" slot_only=
while (($#)); do
    case $1 in
    --board) board=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --debs) debs=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --key) key=$2; shift 2 ;;
    --slot-only) slot_only=1; shift ;;
    *) echo "images/build.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
for v in board binary debs version out; do
    [[ -n ${!v} ]] || { echo "images/build.sh: --$v is required" >&2; exit 2; }
done
board_dir="$repo/board/$board"
[[ -f $board_dir/board.sh ]] || { echo "images/build.sh: no board '$board' (board/*/board.sh)" >&2; exit 2; }
# shellcheck source=/dev/null
source "$board_dir/board.sh"

need() { command -v "$1" >/dev/null || { echo "images/build.sh: $1 is missing (package $2)" >&2; exit 1; }; }
need mksquashfs squashfs-tools
need mkfs.vfat dosfstools
need mcopy mtools
need mkfs.ext4 e2fsprogs
need sfdisk fdisk
need cpio cpio
need depmod kmod
need grub-mkimage grub-common
need grub-editenv grub-common

mkdir -p "$out"
out=$(cd "$out" && pwd)
work="$out/work"
rm -rf "$work"
mkdir -p "$work"

# A package's .deb in the cache ($1 may be a pattern).
deb() {
    local f
    # shellcheck disable=SC2206 # the pattern is meant to expand
    f=("$debs"/$1_*_arm64.deb)
    [[ -e ${f[0]} ]] || { echo "images/build.sh: no $1 in $debs (tools/image/fetch-debs.sh fetches it)" >&2; return 1; }
    echo "${f[0]}"
}
mkdir -p "$work/deb"
for p in busybox-static grub-efi-arm64-bin 'linux-image-*-arm64' ${BOARD_DEBS:-}; do
    file=$(deb "$p")
    dpkg-deb -x "$file" "$work/deb"
done
kver=$(basename "$(ls -d "$work"/deb/lib/modules/*)")
busybox="$work/deb/bin/busybox"

# --- the initramfs: busybox, the board's modules (dependencies first), /init -------------
depmod -b "$work/deb" "$kver"
moddir="$work/deb/lib/modules/$kver"
initramfs="$work/initramfs"
mkdir -p "$initramfs"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$busybox" "$initramfs/bin/busybox"
for a in sh mount umount insmod grep sed cat sleep usleep reboot switch_root; do
    ln -s busybox "$initramfs/bin/$a"
done
cp "$here/initramfs-init" "$initramfs/init"
order=()
add_module() {
    local line path deps d i
    line=$(grep -E "(^|/)$1\.ko:" "$moddir/modules.dep") ||
        { grep -qE "/$1\.ko$" "$moddir/modules.builtin" && return 0; echo "images/build.sh: no module $1" >&2; exit 1; }
    path=${line%%:*}
    read -r -a deps <<<"${line#*:}"
    # modules.dep lists what a module needs, the most basic last.
    for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
        d=$(basename "${deps[i]}" .ko)
        [[ " ${order[*]} " == *" $d.ko "* ]] || { order+=("$d.ko"); cp "$moddir/${deps[i]}" "$initramfs/lib/modules/"; }
    done
    d=$(basename "$path" .ko)
    [[ " ${order[*]} " == *" $d.ko "* ]] || { order+=("$d.ko"); cp "$moddir/$path" "$initramfs/lib/modules/"; }
}
for m in $BOARD_MODULES; do add_module "$m"; done
printf '%s\n' "${order[@]}" >"$initramfs/lib/modules/order"
# The console the kernel opens for /init's output (only root can make the node; without it
# the script still writes to /dev/console once devtmpfs is mounted).
[[ $(id -u) != 0 ]] || mknod -m 600 "$initramfs/dev/console" c 5 1
(cd "$initramfs" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 >"$work/initramfs.cpio")
gzip -9 -n <"$work/initramfs.cpio" >"$work/initrd"

# --- the root slot -----------------------------------------------------------------------
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{bin,boot,data,dev,proc,sys,run,tmp,usr/bin,etc/keeppeek}
cp "$busybox" "$rootfs/bin/busybox"
# The applets a person at the console (or the support bundle) wants, and those init runs.
for a in sh ash ls cat cp mv rm mkdir ln ps top free df du dmesg mount umount sync grep sed \
    awk head tail less vi ip ifconfig route ping udhcpc hwclock date sleep kill reboot \
    poweroff halt uname uptime find xargs tar gzip wc sort tee stat hexdump; do
    ln -s busybox "$rootfs/bin/$a"
done
install -m 0755 "$binary" "$rootfs/usr/bin/keeppeek"
install -m 0755 "$here/udhcpc.script" "$rootfs/etc/udhcpc.script"
cp "$work"/deb/boot/vmlinuz-"$kver" "$rootfs/boot/vmlinuz"
cp "$work/initrd" "$rootfs/boot/initrd"
for dtb in $BOARD_DTBS; do
    mkdir -p "$rootfs/boot/dtbs/$(dirname "$dtb")"
    cp "$work/deb/usr/lib/linux-image-$kver/$dtb" "$rootfs/boot/dtbs/$dtb"
done
cp "$board_dir/keeppeek.toml" "$rootfs/etc/keeppeek/keeppeek.toml"
slot_bytes=$((BOARD_SLOT_MIB << 20))
cat >"$rootfs/etc/keeppeek/firmware.toml" <<EOF
# Written by images/build.sh: what this root slot is.
version = "$version"
board = "$BOARD_NAME"
kernel = "$kver"
slot_bytes = $slot_bytes
net_if = "$BOARD_NET_IF"
EOF
ln -s /run/resolv.conf "$rootfs/etc/resolv.conf"
printf 'root:x:0:0:root:/data:/bin/sh\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\n' >"$rootfs/etc/group"
# gzip: GRUB reads gzip and xz squashfs (not zstd), and inflating the 33 MB kernel in GRUB
# takes 1.4 s under QEMU against 3.2 s for xz, for a slot of 17.9 MB instead of 14.6 MB
# (docs/performance.md). Fixed times and owners keep the slot reproducible.
rm -f "$out/rootfs.squashfs"
mksquashfs "$rootfs" "$out/rootfs.squashfs" -comp gzip -all-root -noappend -quiet -no-progress \
    -mkfs-time 0 -all-time 0 >/dev/null
payload_bytes=$(stat -c %s "$out/rootfs.squashfs")
if ((payload_bytes > slot_bytes)); then
    echo "images/build.sh: the slot holds $slot_bytes bytes, the root file system is $payload_bytes" >&2
    exit 1
fi

# --- the update bundle -------------------------------------------------------------------
bundle="$out/keeppeek-$version-$BOARD_NAME.bundle"
"$repo/tools/make-bundle.sh" --slot "$out/rootfs.squashfs" --version "$version" --board "$BOARD_NAME" \
    --slot-bytes "$slot_bytes" --key "$key" --out "$bundle"
[[ -z $slot_only ]] || exit 0

# --- the EFI system partition: GRUB, its configuration and environment ------------------
esp_dir="$work/esp"
mkdir -p "$esp_dir/EFI/BOOT" "$esp_dir/EFI/keeppeek"
# GRUB's root is the partition it was started from (the ESP); its configuration is there.
grub-mkimage -O arm64-efi -d "$work/deb/usr/lib/grub/arm64-efi" -p /EFI/BOOT \
    -o "$esp_dir/EFI/BOOT/BOOTAA64.EFI" \
    part_gpt fat squash4 xzio gzio linux normal configfile loadenv test regexp echo sleep reboot \
    efi_gop
sed -e "s|@CMDLINE@|$BOARD_CMDLINE|" -e 's|@SLOT_A_PART@|gpt2|' -e 's|@SLOT_B_PART@|gpt3|' \
    "$here/grub.cfg" >"$esp_dir/EFI/BOOT/grub.cfg"
# What the board's own boot chain needs on the ESP (firmware, device tree, U-Boot).
if declare -F board_esp >/dev/null; then board_esp "$esp_dir" "$work/deb"; fi
grub-editenv "$esp_dir/EFI/keeppeek/grubenv" create
grub-editenv "$esp_dir/EFI/keeppeek/grubenv" set ORDER="a b" A_OK=1 B_OK=0 A_TRY=0 B_TRY=0
esp_img="$work/esp.img"
mkfs.vfat -C -n KP-ESP -i 4b500001 "$esp_img" $((BOARD_ESP_MIB * 1024)) >/dev/null
MTOOLS_SKIP_CHECK=1 mcopy -s -i "$esp_img" "$esp_dir"/* ::/

# --- the data partition: empty; keeppeek init lays it out on first boot ------------------
# It grows to the disk's end at first boot (src/system/grow.rs), so it is made for the disk,
# not for its size in the image (which would get 1 KiB blocks and an inode per 4 KiB):
# 4 KiB blocks, an inode per 64 KiB (recordings are MiBs, snapshots hundreds of KiB), no
# blocks reserved for root (keeppeek keeps its own reserve free), group descriptor blocks
# reserved for online growth to 8 TiB (mke2fs's most: 1024 blocks, 4 MiB per copy), and a
# 64 MiB journal: growing takes one transaction that touches every reserved descriptor block,
# and a transaction may use at most a quarter of the journal (16 MiB would allow 1024 blocks).
data_img="$work/data.img"
mkdir -p "$work/data"
mkfs.ext4 -q -L kp-data -b 4096 -T huge -I 256 -m 0 -J size=64 -E root_owner=0:0,resize=4294967295 -d "$work/data" \
    "$data_img" "${BOARD_DATA_MIB}M" >/dev/null

# --- the disk: GPT with named partitions, each written at its offset ---------------------
img="$out/keeppeek-$version-$BOARD_NAME.img"
rm -f "$img"
total_mib=$((1 + BOARD_ESP_MIB + 2 * BOARD_SLOT_MIB + BOARD_DATA_MIB + 1))
truncate -s "${total_mib}M" "$img"
esp_start=$((1 << 11)) # sectors of 512 bytes: 1 MiB
a_start=$((esp_start + BOARD_ESP_MIB * 2048))
b_start=$((a_start + BOARD_SLOT_MIB * 2048))
data_start=$((b_start + BOARD_SLOT_MIB * 2048))
sfdisk --quiet "$img" <<EOF
label: gpt
start=$esp_start, size=$((BOARD_ESP_MIB * 2048)), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=kp-esp
start=$a_start, size=$((BOARD_SLOT_MIB * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=kp-slot-a
start=$b_start, size=$((BOARD_SLOT_MIB * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=kp-slot-b
start=$data_start, size=$((BOARD_DATA_MIB * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=kp-data
EOF
put() { dd if="$1" of="$img" bs=1M seek=$(($2 / 2048)) conv=notrunc,sparse status=none; }
put "$esp_img" $esp_start
put "$out/rootfs.squashfs" $a_start
put "$data_img" $data_start

{
    echo "board                $BOARD_NAME"
    echo "version              $version"
    echo "kernel               $kver"
    echo "binary_bytes         $(stat -c %s "$binary")"
    echo "initrd_bytes         $(stat -c %s "$work/initrd")"
    echo "slot_used_bytes      $payload_bytes"
    echo "slot_bytes           $slot_bytes"
    echo "bundle_bytes         $(stat -c %s "$bundle")"
    echo "image_bytes          $(stat -c %s "$img")"
    echo "image_allocated_kib  $(du -k "$img" | cut -f1)"
} >"$out/sizes.txt"
rm -rf "$work"
cat "$out/sizes.txt"
