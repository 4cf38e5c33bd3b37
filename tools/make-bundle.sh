#!/usr/bin/env bash
# Makes a signed update bundle of a root slot: a ustar archive of exactly three members, in
# this order (the firmware reads it as a stream and refuses anything else):
#   manifest.json          format, version, board, slot size, payload size and SHA-256
#   manifest.json.minisig  a minisign (Ed25519) signature of manifest.json
#   rootfs.squashfs        the slot itself
#
# Usage: tools/make-bundle.sh --slot FILE --version V --board NAME --slot-bytes N --key KEY --out FILE
set -euo pipefail
slot= version= board= slot_bytes= key= out=
while (($#)); do
    case $1 in
    --slot) slot=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --board) board=$2; shift 2 ;;
    --slot-bytes) slot_bytes=$2; shift 2 ;;
    --key) key=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "make-bundle: unknown argument $1" >&2; exit 2 ;;
    esac
done
for v in slot version board slot_bytes key out; do
    [[ -n ${!v} ]] || { echo "make-bundle: --${v//_/-} is required" >&2; exit 2; }
done
command -v minisign >/dev/null || { echo "make-bundle: minisign is missing (package minisign)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$slot" "$dir/rootfs.squashfs"
printf '{"format":1,"version":"%s","board":"%s","slot_bytes":%d,"payload_bytes":%d,"payload_sha256":"%s"}\n' \
    "$version" "$board" "$slot_bytes" "$(stat -c %s "$slot")" "$(sha256sum "$slot" | cut -d' ' -f1)" \
    >"$dir/manifest.json"
minisign -S -s "$key" -m "$dir/manifest.json" -x "$dir/manifest.json.minisig" \
    -t "keeppeek $version $board" </dev/null >/dev/null
tar --format=ustar --owner=0 --group=0 --numeric-owner --mtime=@0 --mode=0644 \
    -C "$dir" -cf "$out.tmp" manifest.json manifest.json.minisig rootfs.squashfs
mv "$out.tmp" "$out"
