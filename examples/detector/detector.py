#!/usr/bin/env python3
"""A KeepPeek analysis service to start from: motion by frame differencing.

It watches one camera's sub stream over WHEP (WebRTC, with a `view` token), finds motion by
comparing each frame with the last (grey, scaled down, the changed pixels counted), and posts
events to KeepPeek with an `events:write` token: one event per stretch of motion, with a JPEG
of the frame and a box around what changed, updated by revisions while it goes on and ended
with its end time. Every post carries an idempotency key, so a retry after a lost answer is
answered, not stored twice; 429 and 503 are retried after the box's Retry-After.

    python3 detector.py --box https://nvr.local:8443 --camera porch \
        --view-token kp_… --events-token kp_… [--ca box.crt] [--stream sub]

Replace `Motion` with a model of your own: everything else (the stream, the posts, the
retries, revisions and idempotency) is what a real detector needs as it is.
"""

import argparse
import asyncio
import io
import json
import logging
import ssl
import time
import uuid

import aiohttp
import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription
from PIL import Image

log = logging.getLogger("detector")

# Frames are compared at this width (the height follows the picture's shape).
WORK_WIDTH = 160
# A pixel changed when its grey level moved by more than this (0-255).
PIXEL_THRESHOLD = 25
# Motion when more than this share of the picture changed.
AREA_THRESHOLD = 0.01
# A stretch of motion ends after this long without any.
QUIET_S = 3.0
# While motion goes on, a revision with the newest frame and box at most this often.
REVISION_EVERY_S = 2.0


class Motion:
    """Frame differencing: the share of pixels that changed, and the box around them."""

    def __init__(self):
        self.last = None

    def see(self, grey):
        """`grey`: a 2-D uint8 array. Returns (share changed, box as fractions) or None."""
        h, w = grey.shape
        step = max(1, w // WORK_WIDTH)
        small = grey[::step, ::step].astype(np.int16)
        last, self.last = self.last, small
        if last is None or last.shape != small.shape:
            return None
        changed = np.abs(small - last) > PIXEL_THRESHOLD
        share = float(changed.mean())
        if share < AREA_THRESHOLD:
            return None
        ys, xs = np.nonzero(changed)
        sh, sw = small.shape
        box = {
            "x": float(xs.min()) / sw,
            "y": float(ys.min()) / sh,
            "w": float(xs.max() - xs.min() + 1) / sw,
            "h": float(ys.max() - ys.min() + 1) / sh,
        }
        return share, box


class Box:
    """KeepPeek's HTTP API, as this service uses it."""

    def __init__(self, base, view_token, events_token, ca=None):
        self.base = base.rstrip("/")
        self.view = view_token
        self.events = events_token
        self.ssl = ssl.create_default_context(cafile=ca) if ca else None
        self.http = None

    async def __aenter__(self):
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self

    async def __aexit__(self, *exc):
        await self.http.close()

    async def whep(self, stream, offer_sdp):
        """Posts a WHEP offer for `stream` (`camera/main` or `camera/sub`); the answer."""
        async with self.http.post(
            f"{self.base}/api/whep/{stream}",
            data=offer_sdp,
            headers={"authorization": f"Bearer {self.view}", "content-type": "application/sdp"},
            ssl=self.ssl,
        ) as r:
            text = await r.text()
            if r.status != 201:
                raise RuntimeError(f"WHEP refused: {r.status} {text}")
            return text, r.headers.get("location")

    async def post_event(self, envelope, jpeg=None, attempts=5):
        """Posts an event (and its snapshot); returns the box's answer once it is durable.
        The same idempotency key goes with every attempt."""
        envelope = dict(envelope, idempotency_key=envelope.get("idempotency_key") or str(uuid.uuid4()))
        for attempt in range(attempts):
            form = aiohttp.FormData()
            form.add_field("event", json.dumps(envelope), content_type="application/json")
            if jpeg is not None:
                form.add_field("snapshot", jpeg, filename="frame.jpg", content_type="image/jpeg")
            try:
                async with self.http.post(
                    f"{self.base}/api/events",
                    data=form,
                    headers={"authorization": f"Bearer {self.events}"},
                    ssl=self.ssl,
                ) as r:
                    answer = await r.json(content_type=None)
                    if r.status in (200, 201):
                        return answer
                    if r.status in (429, 503):
                        wait = float(r.headers.get("retry-after", "1"))
                        log.warning("the box is busy (%s): again in %.0f s", r.status, wait)
                        await asyncio.sleep(wait)
                        continue
                    raise RuntimeError(f"event refused: {r.status} {answer}")
            except aiohttp.ClientError as e:
                # The answer may be lost after the box stored it: the key makes the retry safe.
                log.warning("posting failed (%s): again", e)
                await asyncio.sleep(min(2 ** attempt, 10))
        raise RuntimeError("the box did not take the event")


def jpeg_of(frame):
    """A JPEG of a video frame."""
    out = io.BytesIO()
    Image.fromarray(frame.to_ndarray(format="rgb24")).save(out, format="JPEG", quality=85)
    return out.getvalue()


async def watch(box, camera, stream="sub", seconds=None, on_event=None):
    """Watches `camera`'s stream and posts events for motion until `seconds` have passed
    (forever when None). `on_event(answer)` is called with each stored revision's answer."""
    pc = RTCPeerConnection()
    pc.addTransceiver("video", direction="recvonly")
    frames = asyncio.Queue(maxsize=2)

    @pc.on("track")
    def on_track(track):
        async def pump():
            while True:
                try:
                    f = await track.recv()
                except Exception:
                    return
                if frames.full():
                    frames.get_nowait()  # keep up: the newest frame counts
                frames.put_nowait(f)

        asyncio.ensure_future(pump())

    await pc.setLocalDescription(await pc.createOffer())
    answer, _ = await box.whep(f"{camera}/{stream}", pc.localDescription.sdp)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    log.info("watching %s/%s", camera, stream)

    motion = Motion()
    current = None  # the stretch of motion going on: its id, start, last seen and last revision
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while deadline is None or time.monotonic() < deadline:
            try:
                frame = await asyncio.wait_for(frames.get(), timeout=1.0)
            except asyncio.TimeoutError:
                frame = None
            now = time.time()
            seen = motion.see(frame.to_ndarray(format="gray")) if frame is not None else None
            if seen is not None:
                share, box_ = seen
                envelope = {
                    "camera": camera,
                    "labels": ["motion"],
                    "score": round(min(1.0, share * 10), 3),
                    "boxes": [dict(box_, label="motion", score=round(min(1.0, share * 10), 3))],
                    "text": f"{share:.1%} of the picture changed",
                }
                if current is None:
                    current = {"id": str(uuid.uuid4()), "start": now, "seen": now, "posted": 0.0}
                    log.info("motion on %s", camera)
                current["seen"] = now
                if now - current["posted"] >= REVISION_EVERY_S:
                    current["posted"] = now
                    envelope.update(id=current["id"], time_us=int(current["start"] * 1e6))
                    answer = await box.post_event(envelope, jpeg_of(frame))
                    if on_event:
                        on_event(answer)
            elif current is not None and now - current["seen"] >= QUIET_S:
                answer = await box.post_event({
                    "id": current["id"], "camera": camera, "labels": ["motion"],
                    "time_us": int(current["start"] * 1e6), "end_us": int(current["seen"] * 1e6),
                    "text": "motion ended",
                })
                if on_event:
                    on_event(answer)
                log.info("motion on %s ended", camera)
                current = None
    finally:
        await pc.close()


async def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--box", required=True, help="the box's address, https://… or http://…")
    p.add_argument("--camera", required=True)
    p.add_argument("--stream", default="sub", choices=["main", "sub"])
    p.add_argument("--view-token", required=True, help="a token with the view scope")
    p.add_argument("--events-token", required=True, help="a token with the events:write scope")
    p.add_argument("--ca", help="the box's certificate (PEM), to trust its own")
    p.add_argument("--seconds", type=float, help="stop after this long")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("aioice", "aiortc"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    async with Box(a.box, a.view_token, a.events_token, a.ca) as box:
        await watch(box, a.camera, a.stream, a.seconds)


if __name__ == "__main__":
    asyncio.run(main())
