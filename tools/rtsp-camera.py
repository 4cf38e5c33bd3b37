#!/usr/bin/python3
"""A simulated IP camera: an RTSP server that loops the fixture clips forever.

Built on gst-rtsp-server through PyGObject (Debian: python3-gi,
gir1.2-gst-rtsp-server-1.0, gstreamer1.0-plugins-base/-good/-bad). It must run
under Debian's /usr/bin/python3: other interpreters usually lack `gi`.

Paths (fixtures from tools/make-fixtures.sh):
  /h264           h264.264, 15 fps, keyframe every 1 s
  /h265           h265.265, 15 fps, keyframe every 1 s
  /h264-auth      h264.264; with --user/--password it needs credentials
  /h264-long-gop  h264-long-gop.264, 15 fps, keyframe every 10 s
  /h264-aac       h264.264 as on /h264 (pay0) plus tone.adts (pay1): AAC-LC mono
                  48 kHz as RTP mpeg4-generic (RFC 3640, AAC-hbr, config= in the
                  SDP fmtp), payload type 97, as most IP cameras send it
  /h264-pcmu      h264.264 plus tone.pcmu: G.711 µ-law, 8 kHz mono, payload type 0,
                  20 ms packets (many cameras' default)
  /h264-pcmu-late as /h264-pcmu, but each picture leaves 600 ms after the sound of its
                  moment (a camera whose video encoder lags its sound; the RTCP sender
                  reports still pair each stream's RTP time with its capture time)
  /h265-pcma      h265.265 plus tone.pcma: G.711 A-law, payload type 8, 20 ms packets
  /h264-pcma      h264.264 plus tone.pcma (A-law with a picture any browser decodes)
  /h264-opus      h264.264 plus tone.pcmu encoded to Opus on the fly (payload type 111,
                  20 ms packets), as the few cameras with Opus send it
                  The audio fixtures hold a quiet 440 Hz tone with a loud 1 kHz burst at
                  5.0-5.2 s of each 10 s loop: where video frame 75 is.
  /mjpeg          a test pattern as Motion JPEG, 320x240 at 5 fps: a codec KeepPeek
                  does not record (what a camera probe must name)

Each path is one shared pipeline: the first client starts it at frame 0, later
clients join mid-stream, as with a real camera. RTP over TCP (interleaved) and
UDP are both offered. The server listens on 127.0.0.1 unless --address says
otherwise; --alias serves a path under a second name too.

With --ready-file, "ready\\n" is written to that file once the socket listens
and the main loop runs, so a test can wait for the file instead of polling the
port. SIGTERM / SIGINT stop the server cleanly (exit status 0).
"""

import argparse
import ctypes
import os
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtsp", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtsp, GstRtspServer  # noqa: E402

FPS_NUM, FPS_DEN = 15, 1

# name -> (video fixture, codec, (audio fixture, audio codec) or None). The codec selects
# parser and payloader; the audio fixture is raw ADTS AAC or raw G.711.
PATHS = {
    "/h264": ("h264.264", "h264", None),
    "/h265": ("h265.265", "h265", None),
    "/h264-auth": ("h264.264", "h264", None),
    "/h264-long-gop": ("h264-long-gop.264", "h264", None),
    "/h264-aac": ("h264.264", "h264", ("tone.adts", "aac")),
    "/h264-pcmu": ("h264.264", "h264", ("tone.pcmu", "pcmu")),
    "/h264-pcmu-late": ("h264.264", "h264", ("tone.pcmu", "pcmu")),
    "/h265-pcma": ("h265.265", "h265", ("tone.pcma", "pcma")),
    "/h264-pcma": ("h264.264", "h264", ("tone.pcma", "pcma")),
    "/h264-opus": ("h264.264", "h264", ("tone.pcmu", "opus")),
}

# Paths whose pictures are held this long (ns) before they are sent, after their timestamps
# are set: the sound of a moment leaves that much before its picture.
VIDEO_DELAY_NS = {"/h264-pcmu-late": 600_000_000}

# The elements from an audio fixture's file to its payloader (pay1), for each audio codec.
# G.711 comes as whole files: rawaudioparse (named aparse) hands them on, stamped by
# stamp_raw_audio, and the payloader cuts 20 ms packets, as cameras send.
G711_PTIME_NS = 20_000_000
AUDIO_CHAINS = {
    # aacparse turns ADTS into raw AAC frames with codec_data (the AudioSpecificConfig),
    # which rtpmp4gpay puts into the SDP as config=: RFC 3640 "mpeg4-generic", mode
    # AAC-hbr, as IP cameras send.
    "aac": " ! audio/mpeg,mpegversion=4,stream-format=adts ! aacparse name=aparse"
           " ! audio/mpeg,mpegversion=4,stream-format=raw ! rtpmp4gpay name=pay1 pt=97",
    "pcmu": " ! rawaudioparse name=aparse format=mulaw sample-rate=8000 num-channels=1"
            f" ! rtppcmupay name=pay1 pt=0 min-ptime={G711_PTIME_NS} max-ptime={G711_PTIME_NS}",
    "pcma": " ! rawaudioparse name=aparse format=alaw sample-rate=8000 num-channels=1"
            f" ! rtppcmapay name=pay1 pt=8 min-ptime={G711_PTIME_NS} max-ptime={G711_PTIME_NS}",
    "opus": " ! rawaudioparse name=aparse format=mulaw sample-rate=8000 num-channels=1"
            " ! mulawdec ! audioconvert ! audioresample ! audio/x-raw,rate=48000"
            " ! opusenc frame-size=20 ! rtpopuspay name=pay1 pt=111",
}

# Served only when their fixtures were made (`tools/make-fixtures.sh DIR --bench`): the
# recording benchmark's camera-like streams.
BENCH_PATHS = {
    "/h264-720p": ("h264-720p.264", "h264", None),
    "/h264-1080p": ("h264-1080p.264", "h264", None),
    "/h264-720p-pcmu": ("h264-720p.264", "h264", ("tone.pcmu", "pcmu")),
    "/h264-1080p-pcmu": ("h264-1080p.264", "h264", ("tone.pcmu", "pcmu")),
}

# AAC-LC: every frame (ADTS or RTP access unit) holds 1024 samples per channel.
AAC_FRAME_SAMPLES = 1024

# Roles for gst-rtsp-server's permission checks.
ROLE_ANON = "anonymous"
ROLE_USER = "user"


def enable_basic_and_digest(auth):
    """auth.set_supported_methods(BASIC | DIGEST).

    GstRTSPAuthMethod is a bitmask in C, but the introspection data declares it
    a plain enum, so PyGObject refuses the combined value 3 ("invalid enum
    value"). Call the C function directly with the object's pointer instead.
    """
    both = int(GstRtsp.RTSPAuthMethod.BASIC) | int(GstRtsp.RTSPAuthMethod.DIGEST)
    try:
        auth.set_supported_methods(GstRtsp.RTSPAuthMethod(both))
        return
    except (TypeError, ValueError):
        pass
    lib = ctypes.CDLL("libgstrtspserver-1.0.so.0")  # already loaded by gi
    capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    capsule_ptr.restype = ctypes.c_void_p
    capsule_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
    set_methods = lib.gst_rtsp_auth_set_supported_methods
    set_methods.restype = None
    set_methods.argtypes = [ctypes.c_void_p, ctypes.c_int]
    set_methods(capsule_ptr(auth.__gpointer__, None), both)
    get_methods = lib.gst_rtsp_auth_get_supported_methods
    get_methods.restype = ctypes.c_int
    get_methods.argtypes = [ctypes.c_void_p]
    if get_methods(capsule_ptr(auth.__gpointer__, None)) != both:
        sys.exit("rtsp-camera: could not enable Basic + Digest authentication")


def frame_time(n):
    """Timestamp in ns of frame n, exact (no accumulated rounding drift)."""
    return n * Gst.SECOND * FPS_DEN // FPS_NUM


def stamp_frames(pad, info, state):
    """Pad probe: give every access unit PTS = DTS = n / 15 s.

    A raw elementary stream carries no timestamps. Without this every RTP packet
    gets the same timestamp (and the sinks, which sync on timestamps, would not
    pace the stream). The counter lives with the pipeline, so it keeps growing
    when multifilesrc wraps around: timestamps stay monotonic across loops.
    The clips have no B-frames, so decode order is presentation order.
    """
    buf = info.get_buffer()
    if buf is not None:
        n = state["frame"]
        state["frame"] = n + 1
        buf.pts = frame_time(n)
        buf.dts = buf.pts
        buf.duration = frame_time(n + 1) - buf.pts
    return Gst.PadProbeReturn.OK


def stamp_aac_frames(pad, info, state):
    """Pad probe: give every AAC frame PTS = DTS = n * 1024 / rate s.

    The audio counterpart of stamp_frames. aacparse would interpolate timestamps
    itself, but the looped file gives no guarantee about them at the wrap; counting
    samples here keeps them monotonic and exactly at real time across loops, with
    the same origin (0) as the video, so the two streams start together.
    """
    buf = info.get_buffer()
    if buf is not None:
        rate = state.get("rate")
        if rate is None:
            caps = pad.get_current_caps()
            ok, rate = caps.get_structure(0).get_int("rate") if caps else (False, 0)
            if not ok or rate <= 0:
                return Gst.PadProbeReturn.OK  # cannot happen after aacparse negotiated
            state["rate"] = rate
        n = state["frame"]
        state["frame"] = n + 1
        buf.pts = n * AAC_FRAME_SAMPLES * Gst.SECOND // rate
        buf.dts = buf.pts
        buf.duration = (n + 1) * AAC_FRAME_SAMPLES * Gst.SECOND // rate - buf.pts
    return Gst.PadProbeReturn.OK


def stamp_raw_audio(pad, info, state):
    """Pad probe: stamp raw 8-bit audio (G.711) by the samples before it, at 8 kHz.

    The file comes whole, once per loop; counting samples keeps the timestamps at real
    time and monotonic across loops, with the video's origin (0), as stamp_aac_frames.
    """
    buf = info.get_buffer()
    if buf is not None:
        n = state["samples"]
        size = buf.get_size()
        state["samples"] = n + size
        buf.pts = n * Gst.SECOND // 8000
        buf.dts = buf.pts
        buf.duration = (n + size) * Gst.SECOND // 8000 - buf.pts
    return Gst.PadProbeReturn.OK


def report_capture_times(factory, media):
    """Makes the media's RTCP sender reports pair each stream's RTP time with the moment it
    was captured (its timestamp), not the moment it was sent (rtpbin's default): what a
    camera whose pictures leave later than its sound must report for a receiver to put them
    in step. Set on each RTP session once the media is prepared (rtpbin makes them then and
    does not pass a change of its own property on to them)."""

    def prepared(media):
        pipeline = media.get_element().get_parent()
        it = pipeline.iterate_recurse()
        while True:
            ok, element = it.next()
            if ok != Gst.IteratorResult.OK:
                break
            factory_ = element.get_factory()
            if factory_ is not None and factory_.get_name() == "rtpsession":
                element.set_property("rtcp-sync-send-time", False)

    media.connect("prepared", prepared)


class LoopingClipFactory(GstRtspServer.RTSPMediaFactory):
    """Serves one Annex-B file in a loop, timestamped at 15 fps, and optionally
    an audio file (ADTS AAC, raw G.711) in a loop next to it as a second stream."""

    def __init__(self, location, codec, audio=None, video_delay_ns=0):
        super().__init__()
        self.location = location
        self.codec = codec
        # (fixture path, audio codec) or None.
        self.audio = audio
        self.video_delay_ns = video_delay_ns

    def do_create_element(self, url):
        c = self.codec
        # alignment=au: the payloader gets whole access units, so the probe on
        # the parser's output counts frames, not NAL units.
        # config-interval=-1: send the parameter sets in-band with every IDR,
        # so a client that joins mid-stream can decode from its first keyframe.
        desc = (
            f"multifilesrc name=src loop=true"
            f" ! video/x-{c},stream-format=byte-stream,framerate={FPS_NUM}/{FPS_DEN}"
            f" ! {c}parse name=parse"
            f" ! video/x-{c},stream-format=byte-stream,alignment=au"
        )
        if self.video_delay_ns:
            # Holds each picture until its time plus the delay (its timestamp, set on the
            # parser's output, stays): the sinks, which send each buffer at its time, find
            # it late and send it at once.
            desc += f" ! identity sync=true ts-offset={self.video_delay_ns}"
        desc += f" ! rtp{c}pay name=pay0 pt=96 config-interval=-1"
        if self.audio:
            desc += " multifilesrc name=asrc loop=true" + AUDIO_CHAINS[self.audio[1]]
        # A bin (not a pipeline): gst-rtsp-media puts it into its own pipeline.
        bin_ = Gst.parse_bin_from_description(desc, False)
        # Set the path as a property, not inside the launch string: no quoting issues.
        bin_.get_by_name("src").set_property("location", self.location)
        # create_element runs once per media; with shared media that is once per
        # pipeline, so each pipeline has its own frame counter starting at 0.
        parse_src = bin_.get_by_name("parse").get_static_pad("src")
        parse_src.add_probe(Gst.PadProbeType.BUFFER, stamp_frames, {"frame": 0})
        if self.audio:
            location, codec = self.audio
            bin_.get_by_name("asrc").set_property("location", location)
            aparse_src = bin_.get_by_name("aparse").get_static_pad("src")
            if codec == "aac":
                aparse_src.add_probe(Gst.PadProbeType.BUFFER, stamp_aac_frames, {"frame": 0})
            else:
                aparse_src.add_probe(Gst.PadProbeType.BUFFER, stamp_raw_audio, {"samples": 0})
        return bin_


def fixture_path(fixtures, filename):
    """Absolute path of a fixture file; exits if it is missing."""
    location = os.path.join(fixtures, filename)
    if not os.path.isfile(location):
        sys.exit(f"rtsp-camera: missing fixture {location} (run tools/make-fixtures.sh)")
    return os.path.abspath(location)


def build_server(args):
    server = GstRtspServer.RTSPServer()
    server.set_address(args.address)
    server.set_service(str(args.port))

    auth_paths = set(args.auth_path or ["/h264-auth"])
    unknown = auth_paths - PATHS.keys()
    if unknown:
        sys.exit(f"rtsp-camera: unknown --auth-path {sorted(unknown)}; known: {sorted(PATHS)}")
    use_auth = args.user is not None

    if use_auth:
        auth = GstRtspServer.RTSPAuth()
        # Offer both schemes, as many cameras do: Basic and Digest each appear
        # as a WWW-Authenticate header in the 401, and either is accepted.
        enable_basic_and_digest(auth)
        auth.set_realm("KeepPeek test camera")
        user_token = GstRtspServer.RTSPToken()
        user_token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, ROLE_USER)
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(args.user, args.password), user_token)
        auth.add_digest(args.user, args.password, user_token)
        # Clients without credentials get the anonymous role: they may use the
        # open paths, and get 401 on the protected ones.
        anon_token = GstRtspServer.RTSPToken()
        anon_token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, ROLE_ANON)
        auth.set_default_token(anon_token)
        server.set_auth(auth)

    mounts = server.get_mount_points()
    paths = dict(PATHS)
    paths.update({p: v for p, v in BENCH_PATHS.items() if os.path.isfile(os.path.join(args.fixtures, v[0]))})
    for alias in args.alias or []:
        new, _, existing = alias.partition("=")
        if existing not in paths or not new.startswith("/"):
            sys.exit(f"rtsp-camera: --alias {alias!r}: give NEW=EXISTING, EXISTING one of {sorted(paths)}")
        paths[new] = paths[existing]
        if existing in auth_paths:
            auth_paths.add(new)
    for path, (filename, codec, audio) in paths.items():
        location = fixture_path(args.fixtures, filename)
        if audio:
            audio = (fixture_path(args.fixtures, audio[0]), audio[1])
        factory = LoopingClipFactory(location, codec, audio, VIDEO_DELAY_NS.get(path, 0))
        if path in VIDEO_DELAY_NS:
            factory.connect("media-configure", report_capture_times)
        factory.set_shared(True)
        factory.set_protocols(GstRtsp.RTSPLowerTrans.TCP | GstRtsp.RTSPLowerTrans.UDP)
        if use_auth:
            # gst-rtsp-server answers a missing "access" permission with 404 and a
            # missing "construct" permission with 401 + WWW-Authenticate. Clients
            # (ffmpeg, retina) send credentials only after a 401 challenge, so on a
            # protected path anonymous may "access" but not "construct".
            anon_may_play = path not in auth_paths
            perms = GstRtspServer.RTSPPermissions()
            for role, may_play in ((ROLE_USER, True), (ROLE_ANON, anon_may_play)):
                perms.add_permission_for_role(role, GstRtspServer.RTSP_PERM_MEDIA_FACTORY_ACCESS, True)
                perms.add_permission_for_role(role, GstRtspServer.RTSP_PERM_MEDIA_FACTORY_CONSTRUCT, may_play)
            factory.set_permissions(perms)
        mounts.add_factory(path, factory)
    # A stream in a codec KeepPeek does not record, for probes to name.
    mjpeg = GstRtspServer.RTSPMediaFactory()
    mjpeg.set_launch("( videotestsrc is-live=true ! video/x-raw,format=I420,width=320,height=240,framerate=5/1"
                     " ! jpegenc ! rtpjpegpay name=pay0 pt=26 )")
    mjpeg.set_shared(True)
    if use_auth:
        # Open to anyone, as the other paths outside --auth-path.
        perms = GstRtspServer.RTSPPermissions()
        for role in (ROLE_USER, ROLE_ANON):
            perms.add_permission_for_role(role, GstRtspServer.RTSP_PERM_MEDIA_FACTORY_ACCESS, True)
            perms.add_permission_for_role(role, GstRtspServer.RTSP_PERM_MEDIA_FACTORY_CONSTRUCT, True)
        mjpeg.set_permissions(perms)
    mounts.add_factory("/mjpeg", mjpeg)
    return server


def main():
    p = argparse.ArgumentParser(description="Simulated RTSP IP camera serving looping fixture clips.")
    p.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    p.add_argument("--address", default="127.0.0.1", help="IPv4 address to listen on (default: %(default)s)")
    p.add_argument("--alias", action="append", metavar="NEW=EXISTING",
                   help="serve the path EXISTING at NEW too (an ONVIF device's stream address); repeatable")
    p.add_argument("--fixtures", default="fixtures",
                   help="directory with h264.264, h265.265, h264-long-gop.264, tone.adts, tone.pcmu, tone.pcma"
                        " (default: %(default)s)")
    p.add_argument("--user", help="username required on the --auth-path paths")
    p.add_argument("--password", help="password for --user")
    p.add_argument("--auth-path", action="append", metavar="PATH",
                   help="path that needs credentials when --user is given; repeatable "
                        "(default: /h264-auth)")
    p.add_argument("--ready-file", help='write "ready\\n" here once the server accepts connections')
    args = p.parse_args()
    if not 0 < args.port < 65536:
        p.error("--port must be 1..65535")
    if (args.user is None) != (args.password is None):
        p.error("--user and --password go together")

    Gst.init(None)
    server = build_server(args)
    loop = GLib.MainLoop()

    # attach() binds and listens; it returns 0 when the port is taken or invalid.
    if server.attach(None) == 0:
        sys.exit(f"rtsp-camera: cannot listen on {args.address}:{args.port}")

    def on_signal():
        loop.quit()
        return GLib.SOURCE_REMOVE

    # Handled inside the main loop (a Python signal handler would only run
    # when the loop happens to return to Python).
    GLib.unix_signal_add(GLib.PRIORITY_HIGH, signal.SIGTERM, on_signal)
    GLib.unix_signal_add(GLib.PRIORITY_HIGH, signal.SIGINT, on_signal)

    def announce_ready():
        if args.ready_file:
            # Write-then-rename: a waiting test never reads a half-written file.
            tmp = args.ready_file + ".tmp"
            with open(tmp, "w") as f:
                f.write("ready\n")
            os.replace(tmp, args.ready_file)
        print(f"rtsp-camera: listening on rtsp://{args.address}:{server.get_bound_port()}"
              f" ({', '.join(PATHS)})", flush=True)
        return GLib.SOURCE_REMOVE

    # Runs as soon as the loop is up, i.e. when connections are actually served.
    GLib.idle_add(announce_ready)
    loop.run()
    print("rtsp-camera: stopping", flush=True)


if __name__ == "__main__":
    main()
