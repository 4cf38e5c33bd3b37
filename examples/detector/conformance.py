#!/usr/bin/env python3
"""Checks a box against what this detector needs, with the detector's own client.

Three phases, each post waiting for its durable acknowledgement:

1. `envelope`: 20 events with an envelope only (the transport's baseline);
2. `revision`: 20 revisions of one event, each with a large JPEG (`--jpeg`, e.g. 3840x2160),
   then the last revision's idempotency key sent again, which must get the same answer back;
3. `watch`: the detector itself on the camera's stream for `--watch-s` seconds, its events
   posted as it finds motion.

Each stored revision is printed as a JSON line on stdout. With `--lockstep`, the script then
waits for a line on stdin before the next post: a driver that watches the box's live notices
(the browser's control channel) says "next" once it has seen the revision's notice. At the
end it prints a summary line with the round trips (`"phase": "summary"`).

    python3 conformance.py --box http://nvr.local:8080 --camera porch \
        --view-token kp_… --events-token kp_… --jpeg frame.jpg [--lockstep]
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid

from detector import Box, watch


def say(line):
    print(json.dumps(line), flush=True)


async def go_on(lockstep):
    """In lockstep, waits for the driver's word; anything but "next" stops the run."""
    if not lockstep:
        return
    word = (await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)).strip()
    if word != "next":
        raise SystemExit(f"the driver said {word!r}, not next")


def p95(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


async def timed_post(box, envelope, jpeg=None):
    started = time.perf_counter()
    answer = await box.post_event(envelope, jpeg)
    return answer, (time.perf_counter() - started) * 1000


async def run(a):
    jpeg = open(a.jpeg, "rb").read()
    times = {"envelope": [], "revision": []}
    run_id = uuid.uuid4().hex[:8]
    async with Box(a.box, a.view_token, a.events_token, a.ca) as box:
        for n in range(1, 21):
            envelope = {"id": f"baseline-{run_id}-{n}", "camera": a.camera, "time_us": int(time.time() * 1e6),
                        "labels": ["baseline"], "score": 0.5, "idempotency_key": f"baseline-{run_id}-{n}"}
            answer, ms = await timed_post(box, envelope)
            if answer.get("rev") != 1:
                raise SystemExit(f"a new event's first answer is not revision 1: {answer}")
            times["envelope"].append(ms)
            say({"phase": "envelope", "n": n, "event": answer["id"], "rev": answer["rev"], "ms": round(ms, 2)})
            await go_on(a.lockstep)

        start_us = int(time.time() * 1e6)
        box_ = {"label": "person", "score": 0.9, "x": 0.25, "y": 0.2, "w": 0.2, "h": 0.6}
        last = None
        for n in range(1, 21):
            envelope = {"id": f"person-{run_id}", "camera": a.camera, "time_us": start_us, "labels": ["person"],
                        "score": 0.9, "boxes": [box_], "text": f"revision {n}",
                        "idempotency_key": f"person-{run_id}-{n}"}
            answer, ms = await timed_post(box, envelope, jpeg)
            if answer.get("rev") != n:
                raise SystemExit(f"revision {n} was stored as {answer}")
            times["revision"].append(ms)
            last = (envelope, answer)
            say({"phase": "revision", "n": n, "event": answer["id"], "rev": answer["rev"], "ms": round(ms, 2),
                 "jpeg_bytes": len(jpeg)})
            await go_on(a.lockstep)
        again = await box.post_event(last[0], jpeg)
        if (again["id"], again["rev"]) != (last[1]["id"], last[1]["rev"]):
            raise SystemExit(f"a retried key was stored again: {again} after {last[1]}")
        say({"phase": "retry", "event": again["id"], "rev": again["rev"]})

        found = []
        await watch(box, a.camera, a.stream, a.watch_s, on_event=lambda answer: found.append(answer))
        for answer in found:
            say({"phase": "watch", "event": answer["id"], "rev": answer["rev"]})
        if not found:
            raise SystemExit(f"the detector found no motion in {a.watch_s} s of {a.camera}/{a.stream}")

    say({"phase": "summary",
         "envelope_ms": {"p50": round(statistics.median(times["envelope"]), 2), "p95": round(p95(times["envelope"]), 2)},
         "revision_ms": {"p50": round(statistics.median(times["revision"]), 2), "p95": round(p95(times["revision"]), 2)},
         "watch_events": len({answer["id"] for answer in found})})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--box", required=True)
    p.add_argument("--camera", required=True)
    p.add_argument("--stream", default="sub", choices=["main", "sub"])
    p.add_argument("--view-token", required=True)
    p.add_argument("--events-token", required=True)
    p.add_argument("--ca")
    p.add_argument("--jpeg", required=True, help="the snapshot sent with each revision")
    p.add_argument("--watch-s", type=float, default=15.0)
    p.add_argument("--lockstep", action="store_true", help="wait for 'next' on stdin after each stored post")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
