#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ in turn, one libFuzzer process at a time, and exits
# non-zero if any of them failed to build or found a crash (its input is left in
# fuzz/artifacts/<target>/).
#
# Usage: tools/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]   (default 300 s, every target)
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET="${1:-300}"
shift || true

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

# libFuzzer's instrumentation (-Zsanitizer, sanitizer coverage) takes nightly-only flags, and
# we build with the stable toolchain alone (no nightly is installed or downloadable here).
# Stable carries the same flags behind the bootstrap switch; ASan works this way (checked
# with Rust 1.95).
export RUSTC_BOOTSTRAP=1
# Apart from the main crate's target/, so fuzzing never waits on the regular build's lock
# nor rebuilds its artifacts with fuzzing flags. Git-ignored.
export CARGO_TARGET_DIR=fuzz/target
SANITIZER=address

# Extra libFuzzer flags per target.
extra_args() {
    case "$1" in
        # A moof may be up to MOOF_MAX_BYTES (9600) long; inputs past libFuzzer's default
        # 4096-byte cap are needed to reach full 512-sample truns and the TooLarge check.
        fmp4_read | onvif) echo "-max_len=16384" ;;
    esac
}

failed=()
targets=("$@")
if ((${#targets[@]} == 0)); then
    mapfile -t targets < <(cargo fuzz list)
fi
for target in "${targets[@]}"; do
    printf '\n== %s: %s s\n' "$target" "$SECONDS_PER_TARGET"
    # shellcheck disable=SC2046  # extra_args is a word list on purpose
    if ! cargo fuzz run --sanitizer "$SANITIZER" "$target" -- \
        -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 $(extra_args "$target"); then
        failed+=("$target")
    fi
done

if ((${#failed[@]})); then
    printf '\nfuzz targets that failed: %s (crash inputs are in fuzz/artifacts/)\n' "${failed[*]}" >&2
    exit 1
fi
