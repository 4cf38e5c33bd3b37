#!/usr/bin/env bash
# Builds a board's disk image and update bundle: one command.
#
# Usage: tools/image.sh [--board NAME] [--version V] [--key SECRET_KEY] [--slot-only]
#   --board     a folder of board/ (default qemu-virt)
#   --version   the firmware version the slot carries (default: the crate's version)
#   --key       the minisign secret key that signs the bundle (default: the development key,
#               images/keys/development.key; release keys are never in the repository)
#   --slot-only build the root slot and its bundle, not the disk image
#
# Lands in target/images/BOARD/: keeppeek-V-BOARD.img, keeppeek-V-BOARD.bundle, sizes.txt.
# Flash the image with `dd if=... of=/dev/sdX bs=4M conv=fsync`; boot it in QEMU with
# tools/qemu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

board=qemu-virt version= key=images/keys/development.key extra=()
while (($#)); do
    case $1 in
    --board) board=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --key) key=$2; shift 2 ;;
    --slot-only) extra+=(--slot-only); shift ;;
    *) echo "tools/image.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ -n $version ]] || version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

[[ -f board/$board/board.sh ]] || { echo "tools/image.sh: no board '$board' (board/*/board.sh)" >&2; exit 2; }
# What every image is made of, and what this board adds.
base=$(grep -v '^#' tools/image/debs.lock |
    awk 'NF == 3 && ($1 ~ /^linux-image-/ || $1 == "busybox-static" || $1 == "grub-efi-arm64-bin") { print $1 }')
# shellcheck disable=SC2046 # word splitting of the package lists is meant
bash tools/image/fetch-debs.sh target/images/debs $base $(source "board/$board/board.sh"; echo "${BOARD_DEBS:-}")
target=aarch64-unknown-linux-musl
cargo build --quiet --profile image --target "$target" --bin keeppeek
bash images/build.sh --board "$board" --binary "target/$target/image/keeppeek" \
    --debs target/images/debs --version "$version" --key "$key" --out "target/images/$board" "${extra[@]}"
