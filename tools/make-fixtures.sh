#!/usr/bin/env bash
# Generate the small fixture clips the tests and the simulated RTSP camera use.
#
# Usage: tools/make-fixtures.sh OUT_DIR
#
# Every clip is 640x360 at 15 fps: testsrc2 with a burned-in frame counter
# ("f=<frame> t=<time>") for people, and the same frame number as a bar code for
# programs: the bottom 24 rows are 16 cells of 40 px, cell i (from the left) white
# when bit i of the frame number is set, black otherwise. A test reads it from a
# decoded frame's pixels (the middle of each cell, threshold at half brightness). Encoding is deterministic in shape:
# no B-frames (PTS == DTS, so the camera can stamp frames itself) and a fixed GOP
# without scene-cut keyframes, so keyframe positions are known in advance.
#
#   h264.mp4           10 s, H.264 Main + mono AAC, plain (non-fragmented) MP4, GOP 1 s
#   h264.264           the same video as a raw Annex-B elementary stream
#   h265.265           10 s, H.265 raw Annex-B, GOP 1 s, parameter sets with every IDR
#   h264-long-gop.264  20 s, H.264 raw Annex-B, GOP 10 s (long-GOP tests)
#   h264-heavy.mp4     10 s, H.264 at 8 Mbit/s (moving noise), no sound, plain MP4, GOP 1 s:
#                      segments past the archive's part size (8 MiB) in seconds
#   snapshot-4k.jpg    a 3840x2160 JPEG of about 420 kB (noise keeps it from compressing
#                      to nothing), an event's snapshot
#   tone.adts          the camera's sound: a quiet 440 Hz tone and a loud 1 kHz burst at
#                      5.0-5.2 s (where video frame 75 is), AAC-LC mono 48 kHz 32 kb/s,
#                      raw ADTS: exactly 469 frames of 1024 samples = 10.0053 s (the
#                      camera's /h264-aac audio; see gen_tone_adts)
#   tone.pcmu          the same sound, 10.000 s of G.711 µ-law, 8 kHz mono, raw (80,000 bytes)
#   tone.pcma          the same as A-law
#
# Files that already exist are kept (idempotent): delete one to regenerate it.
# Needs ffmpeg with libx264, libx265 and drawtext (Debian's ffmpeg has all three)
# and a TrueType font (fonts-dejavu-core; override with FIXTURE_FONT).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || ( $# -eq 2 && $2 != --bench ) ]]; then
    echo "usage: $0 OUT_DIR [--bench]" >&2
    exit 2
fi
out_dir=$1
bench=${2:-}
mkdir -p "$out_dir"

font=${FIXTURE_FONT:-/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf}
if [[ ! -r $font ]]; then
    echo "$0: font $font not found (install fonts-dejavu-core or set FIXTURE_FONT)" >&2
    exit 1
fi
command -v ffmpeg >/dev/null || { echo "$0: ffmpeg not found" >&2; exit 1; }

readonly FPS=15
readonly SIZE=640x360

# Test pattern with a large counter in a dark box at the top left. `\:` escapes the
# colon inside the pts expansion from the filter-graph parser.
video_src() {
    local seconds=$1
    printf '%s' "testsrc2=size=${SIZE}:rate=${FPS}:duration=${seconds},"
    printf '%s' "drawtext=fontfile='${font}':text='f=%{frame_num} t=%{pts\\:hms}'"
    printf '%s' ":fontsize=36:fontcolor=white:box=1:boxcolor=black@0.7:boxborderw=8:x=16:y=16,"
    # The bar code. geq works per plane (W and H are the plane's own size), so the strip
    # is placed by fraction: the luma cells carry the bits, the chroma is neutral there.
    local strip='gte(Y,H*336/360)' cell='floor(X*16/W)'
    printf '%s' "geq=lum='if(${strip},255*mod(floor(N/pow(2,${cell})),2),lum(X,Y))'"
    printf '%s' ":cb='if(${strip},128,cb(X,Y))':cr='if(${strip},128,cr(X,Y))'"
}

# Common H.264 settings. -bf 0: no B-frames. -g/-keyint_min equal and
# -sc_threshold 0: keyframes exactly every GOP frames, never on scene cuts.
# CRF 32 keeps a 10 s clip in the low hundreds of kB.
x264_args() {
    local gop=$1
    echo -c:v libx264 -preset veryfast -crf 32 -profile:v main -pix_fmt yuv420p \
        -bf 0 -g "$gop" -keyint_min "$gop" -sc_threshold 0
}

ff() { ffmpeg -hide_banner -nostdin -loglevel error -y "$@"; }

# Run a generator into a temporary name and rename on success, so an
# interrupted run never leaves a truncated file that a later run would keep.
generate() {
    local name=$1; shift
    local dest="$out_dir/$name"
    if [[ -e $dest ]]; then
        return 0
    fi
    local tmp="$out_dir/.tmp.$$.$name"
    # shellcheck disable=SC2064  # expand $tmp now, not when the trap fires
    trap "rm -f $(printf %q "$tmp")" EXIT
    local start=$SECONDS
    "$@" "$tmp"
    mv -f "$tmp" "$dest"
    trap - EXIT
    echo "made $dest ($(stat -c %s "$dest") bytes, $((SECONDS - start)) s)"
}

gen_h264_mp4() {
    # shellcheck disable=SC2046  # x264_args is word-split on purpose
    ff -f lavfi -i "$(video_src 10)" \
        -f lavfi -i "sine=frequency=440:sample_rate=48000:duration=10" \
        $(x264_args $FPS) \
        -c:a aac -b:a 32k -ac 1 \
        -t 10 -movflags +faststart -f mp4 "$1"
}

gen_h264_heavy() {
    ff -f lavfi -i "testsrc2=size=640x360:rate=${FPS}:duration=10,noise=alls=40:allf=t" \
        -c:v libx264 -preset ultrafast -pix_fmt yuv420p -bf 0 -g "$FPS" -keyint_min "$FPS" -sc_threshold 0 \
        -b:v 8M -maxrate 8M -bufsize 8M -t 10 -movflags +faststart -f mp4 "$1"
}

gen_h264_annexb() {
    # Same bitstream as h264.mp4. The bitstream filter turns length-prefixed NAL units
    # into start codes and puts SPS/PPS (kept only in the MP4's avcC) before every IDR,
    # which a receiver joining a loop at any keyframe needs.
    ff -i "$out_dir/h264.mp4" -an -c:v copy -bsf:v h264_mp4toannexb -f h264 "$1"
}

gen_h265_annexb() {
    # open-gop=0: real IDRs every GOP. Otherwise x265 emits CRA pictures after the
    # first IDR, and clients that count only IDRs as keyframes (retina) see one per clip.
    # repeat-headers=1: VPS/SPS/PPS with every keyframe, as a camera sends them.
    # (-tag:v hvc1 only matters for MP4; it is harmless for a raw stream.)
    ff -f lavfi -i "$(video_src 10)" \
        -c:v libx265 -preset veryfast -crf 32 -pix_fmt yuv420p -tag:v hvc1 \
        -x265-params "log-level=error:keyint=${FPS}:min-keyint=${FPS}:scenecut=0:bframes=0:repeat-headers=1:open-gop=0" \
        -t 10 -f hevc "$1"
}

gen_h264_long_gop() {
    # 150-frame GOP (10 s) over 20 s: exactly two keyframes, at 0 s and 10 s.
    # libx264 writing a raw stream repeats SPS/PPS before each IDR by itself.
    # shellcheck disable=SC2046
    ff -f lavfi -i "$(video_src 20)" $(x264_args 150) -t 20 -f h264 "$1"
}

# The camera's sound, at sample rate $1 for $2 s: a quiet 440 Hz tone (so a listener always
# hears something) and a loud 1 kHz burst from 5.0 to 5.2 s of every 10 s, which a test
# finds in a recording (ffmpeg's silencedetect at -20 dB) and lines up with video frame 75.
tone_src() {
    printf '%s' "aevalsrc=exprs='0.05*sin(2*PI*440*t)+0.8*between(mod(t\,10)\,5\,5.2)*sin(2*PI*1000*t)'"
    printf '%s' ":s=$1:d=$2"
}

gen_tone_adts() {
    # The RTSP camera loops this next to the 10 s h264.264 and stamps each frame
    # itself (n * 1024 / 48000 s), so audio timestamps run at real time whatever the
    # file's length. Its content cannot loop in exactly 10 s (10 s at 48 kHz is
    # 468.75 frames), so it is cut at a whole 469 frames (10.0053 s): the audio
    # content drifts 5.3 ms per loop against the video's, the timestamps do not.
    # ffmpeg's AAC encoder puts one frame of priming (encoder delay) first, which raw
    # ADTS cannot signal: a decoder hears the burst 21 ms late, and a one-frame dip at
    # every loop point.
    ff -f lavfi -i "$(tone_src 48000 11)" \
        -c:a aac -profile:a aac_low -b:a 32k -ac 1 -ar 48000 \
        -frames:a 469 -f adts "$1"
}

gen_tone_g711() {
    # $1 is mulaw or alaw. 10 s exactly (80,000 samples): it loops in step with the video.
    ff -f lavfi -i "$(tone_src 8000 10)" -c:a "pcm_$1" -f "$1" "$2"
}

gen_snapshot_4k() {
    ff -f lavfi -i "testsrc2=size=3840x2160:rate=1,noise=alls=6:allf=u" -frames:v 1 -q:v 3 -f image2 -c:v mjpeg "$1"
}

generate h264.mp4 gen_h264_mp4
generate h264.264 gen_h264_annexb
generate h265.265 gen_h265_annexb
generate h264-long-gop.264 gen_h264_long_gop
generate tone.adts gen_tone_adts
generate tone.pcmu gen_tone_g711 mulaw
generate tone.pcma gen_tone_g711 alaw
generate h264-heavy.mp4 gen_h264_heavy
generate snapshot-4k.jpg gen_snapshot_4k

gen_bench_clip() {
    # A camera-like stream for the recording benchmark: moving noise keeps the encoder at
    # its bitrate (a plain test pattern compresses far below it), 2 s GOPs, 15 fps, 20 s.
    local size=$1 rate=$2
    ff -f lavfi -i "testsrc2=size=${size}:rate=${FPS}:duration=20,noise=alls=24:allf=t" \
        -c:v libx264 -preset veryfast -profile:v main -pix_fmt yuv420p -bf 0 \
        -g $((2 * FPS)) -keyint_min $((2 * FPS)) -sc_threshold 0 \
        -b:v "$rate" -maxrate "$rate" -bufsize "$rate" -t 20 -f h264 "$3"
}

# The benchmark's clips are large: made only when asked for (`--bench`).
if [[ $bench == --bench ]]; then
    generate h264-720p.264 gen_bench_clip 1280x720 2M
    generate h264-1080p.264 gen_bench_clip 1920x1080 4M
fi
