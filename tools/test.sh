#!/usr/bin/env bash
# KeepPeek's one test command: installs what the tests need when it is missing (Debian
# packages, rustup targets), then runs every test: unit tests on the host and on aarch64
# under qemu-user, the integration tests against real peers, the browser tests, the
# firmware image booted under QEMU, and the benchmarks in smoke mode. Run as root on Debian bookworm (as CI does).
#
# Usage: tools/test.sh            everything
#        tools/test.sh --no-setup skip the install checks
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
    ffmpeg fonts-dejavu-core mediainfo
    python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-tools
    gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
    qemu-user-static gcc-aarch64-linux-gnu libc6-dev-arm64-cross
    chromium
    qemu-system-arm u-boot-qemu squashfs-tools mtools dosfstools fdisk e2fsprogs cpio kmod
    grub-common minisign iproute2 python3-venv
    openssl curl gnutls-bin util-linux
    mosquitto mosquitto-clients
    faketime
    busybox dhcpcd-base isc-dhcp-client dnsmasq-base ntpsec-ntpdate
)
RUST_TARGETS=(aarch64-unknown-linux-musl)

# Each step says when it starts (seconds since the command began), so a slow one shows.
step() { printf '\n== %s (at %d s)\n' "$*" "$SECONDS"; }

setup() {
    local missing=()
    for p in "${DEBIAN_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        step "installing Debian packages: ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
    if ! command -v npm >/dev/null; then
        step "installing Node.js and npm"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
    fi
    if [[ ! -d tests/ui/node_modules/playwright-core || ! -d tests/ui/node_modules/axe-core || ! -d tests/ui/node_modules/oidc-provider ]]; then
        step "installing playwright-core (it drives Debian's Chromium; no browser is downloaded), axe-core and oidc-provider (the OpenID peer)"
        (cd tests/ui && npm ci --no-audit --no-fund --silent)
    fi
    # Home Assistant, the MQTT tests' peer: its newest release for the Python 3.13 pyenv
    # holds (about 600 MB), cached under target/.
    if [[ ! -x target/ha/venv/bin/hass ]]; then
        local py
        py=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3 2>/dev/null | head -1)
        [[ -n $py ]] || { echo "Home Assistant needs a Python 3.13 (pyenv): none found" >&2; exit 1; }
        step "installing Home Assistant 2025.4.4, its frontend and paho-mqtt under target/ha (Python $("$py" -V))"
        rm -rf target/ha && "$py" -m venv target/ha/venv
        target/ha/venv/bin/pip install -q --no-compile homeassistant==2025.4.4 home-assistant-frontend==20250411.0 paho-mqtt==2.1.0
    fi
    # The example detector's packages (examples/detector/requirements.txt), for its test.
    if ! cmp -s examples/detector/requirements.txt target/detector/requirements.txt; then
        step "installing the example detector's packages under target/detector ($(python3 -V))"
        rm -rf target/detector && python3 -m venv target/detector/venv
        target/detector/venv/bin/pip install -q --no-compile -r examples/detector/requirements.txt
        cp examples/detector/requirements.txt target/detector/requirements.txt
    fi
    local installed
    installed=$(rustup target list --installed)
    for t in "${RUST_TARGETS[@]}"; do
        grep -qx "$t" <<<"$installed" || { step "adding rustup target $t"; rustup target add "$t"; }
    done
}

[[ ${1:-} == --no-setup ]] || setup

step "format"
cargo fmt --check

step "fixtures"
bash tools/make-fixtures.sh target/fixtures

step "test peers"
# An ONVIF device KeepPeek did not write (the crate oxvif's mock device), built once and
# cached under target/peers; tools/onvif-camera.sh runs it in a network namespace.
cargo build --release --locked --quiet --manifest-path tools/onvif-device/Cargo.toml --target-dir target/peers
# An S3-compatible server that checks signatures (s3s-fs, the s3s project's server on a
# directory), installed once under target/peers/s3s-fs; tests/recorder/archive.rs runs it.
[[ -x target/peers/s3s-fs/bin/s3s-fs ]] ||
    cargo install --quiet --locked s3s-fs --version 0.14.1 --features binary --root target/peers/s3s-fs

step "unit tests: on the host, and on aarch64-unknown-linux-musl under qemu-user, side by side"
# Each run is as long as its 30-day soak, which holds one core: built one after the other,
# they run at once (the aarch64 run's output is shown after the host's).
cargo test --lib --bins --no-run
cargo test --lib --target aarch64-unknown-linux-musl --no-run
cargo test --lib --target aarch64-unknown-linux-musl >target/unit-aarch64.log 2>&1 &
aarch64_unit=$!
cargo test --lib --bins
aarch64_ok=0
wait "$aarch64_unit" || aarch64_ok=$?
step "unit tests on aarch64-unknown-linux-musl under qemu-user: what they said"
cat target/unit-aarch64.log
((aarch64_ok == 0)) || { echo "the aarch64 unit tests failed (exit $aarch64_ok)" >&2; exit 1; }

step "integration tests against real peers"
# The tests mostly wait on real time (cameras at 15 fps, flush intervals): run them side by
# side rather than two at a time. The two longest (the kill -9 loop, 32 cameras) would start
# last in name order and run on alone: they start first, beside the rest.
cargo test --test recorder --no-run
long_tests="power_cut::kill_9_at_random_moments scale::thirty_two_cameras"
# shellcheck disable=SC2086  # the names are word-split on purpose
cargo test --test recorder -- $long_tests --test-threads 2 >target/integration-long.log 2>&1 &
long_pid=$!
cargo test --test recorder -- --skip power_cut::kill_9_at_random_moments --skip scale::thirty_two_cameras --test-threads 8
long_ok=0
wait "$long_pid" || long_ok=$?
step "the two longest integration tests: what they said"
cat target/integration-long.log
((long_ok == 0)) || { echo "the longest integration tests failed (exit $long_ok)" >&2; exit 1; }
grep -q "test result: ok. 2 passed" target/integration-long.log || { echo "the two longest tests did not both run" >&2; exit 1; }

step "the worst-case memory test, alone (it loads both cores)"
cargo test --test recorder worst_case -- --ignored --nocapture

step "browser tests (Chromium + playwright-core; screenshots in target/ui/)"
cargo build --bin keeppeek
# Two files at a time: the tests mostly wait on real time (cameras at 15 fps, the box's
# intervals). The camera port's test alone after them: it makes a network interface and
# the box reconfigures it, and Chromium aborts its requests in flight when the host's
# network changes (net::ERR_NETWORK_CHANGED), its own and a neighbour's.
mapfile -t ui_tests < <(ls tests/ui/*.test.mjs | grep -v '/camport\.test\.mjs$')
node --test --test-concurrency=2 "${ui_tests[@]}"
node --test tests/ui/camport.test.mjs

step "firmware image: build it, boot it under QEMU, update it A/B"
# The aarch64 image build (LTO) and the arm64 packages are cached under target/.
bash tools/image.sh --board qemu-virt
cargo test --test image -- --nocapture --test-threads 1

step "the worst-case memory test on the image's aarch64 build, under qemu-user"
KEEPPEEK_BIN=target/aarch64-unknown-linux-musl/image/keeppeek KEEPPEEK_RUNNER=qemu-aarch64-static \
    cargo test --test recorder worst_case -- --ignored --nocapture

step "benchmarks (smoke mode)"
# Performance is a benchmark, not a test: this only proves the benchmark runs end to end.
# So the smoke builds link in seconds rather than a minute each, not with the full run's
# whole-program optimization (the figures in docs/performance.md come from `cargo bench`).
export CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16
# Full figures: `cargo bench --bench record`, `--bench web`, `--bench live`, `--bench events`,
# `--bench timeline`, `--bench config`, `--bench auth`, `--bench mqtt`, `--bench archive`,
# `--bench camport`
# (docs/performance.md).
cargo bench --bench record -- --smoke
cargo bench --bench web -- --smoke
cargo bench --bench live -- --smoke
cargo bench --bench events -- --smoke
cargo bench --bench timeline -- --smoke
cargo bench --bench config -- --smoke
cargo bench --bench auth -- --smoke
cargo bench --bench mqtt -- --smoke
cargo bench --bench archive -- --smoke
cargo bench --bench camport -- --smoke
