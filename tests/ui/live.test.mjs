// Live view and playback over WebRTC in Debian's Chromium against the real keeppeek binary:
// the UI's "Watch" button opens a WHEP session; frames decode (requestVideoFrameCallback
// counts rise); the fixture's bar-coded frame number, read from the decoded pixels,
// advances; closing the page frees the session on the server. Playback over the control
// channel shows the frame recorded at the chosen time; seek, pause, step and 4× behave.
// Screenshots go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { repo, shots, startKeeppeek, launchChromium, waitFor, freePort, setUpAdmin } from './harness.mjs';

// Reads the frame number the fixtures burn in as a bar code (tools/make-fixtures.sh): the
// bottom 24 rows of the 640x360 picture, 16 cells of 40 px, bit i white in cell i.
function readBarcode() {
  const video = document.querySelector('#live-video');
  const c = document.createElement('canvas');
  c.width = 640;
  c.height = 360;
  const g = c.getContext('2d', { willReadFrequently: true });
  g.drawImage(video, 0, 0, 640, 360);
  const row = g.getImageData(0, 348, 640, 1).data;
  let n = 0;
  for (let i = 0; i < 16; i++) {
    const x = 20 + 40 * i;
    const luma = (row[4 * x] + row[4 * x + 1] + row[4 * x + 2]) / 3;
    if (luma > 128) n |= 1 << i;
  }
  return n;
}

// keeppeek with live view on a free UDP port (loopback offered), and a page logged in as
// the first admin once the camera is up.
async function liveBox(t, extra = []) {
  const udp = await freePort();
  const { base } = await startKeeppeek(t, ['[webrtc]', `port = ${udp}`, 'loopback = true', ...extra]);
  const browser = await launchChromium(t);
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await setUpAdmin(page, base);
  return { base, page, errors };
}

test('live view: frames decode, the counter advances, closing the page frees the session', async (t) => {
  const { base, page, errors } = await liveBox(t);
  // A metrics token, to watch the server's session count from outside the page.
  const token = await page.evaluate(async () => {
    const csrf = (await (await fetch('/api/me')).json()).csrf;
    const r = await fetch('/api/tokens', { method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': csrf },
      body: JSON.stringify({ name: 'watcher', scopes: ['metrics'] }) });
    return (await r.json()).token;
  });
  const sessionsOpen = async () => {
    const text = await (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
    return Number(text.match(/^keeppeek_webrtc_sessions_open (\d+)$/m)[1]);
  };

  // Watch, by keyboard: the row's button.
  const started = Date.now();
  await page.locator('#cameras tbody tr button').first().focus();
  await page.keyboard.press('Enter');
  await page.locator('#live-video').waitFor();
  await page.evaluate(() => {
    window.framesShown = 0;
    const v = document.querySelector('#live-video');
    const count = () => { window.framesShown++; v.requestVideoFrameCallback(count); };
    v.requestVideoFrameCallback(count);
  });
  await waitFor('a first decoded frame', async () => (await page.evaluate(() => window.framesShown)) > 0, 15000);
  const firstFrameMs = Date.now() - started;
  assert.equal(await sessionsOpen(), 1);
  const a = await page.evaluate(readBarcode);
  const framesA = await page.evaluate(() => window.framesShown);
  await page.screenshot({ path: join(shots, 'live-1.png') });
  await new Promise((r) => setTimeout(r, 2000));
  const b = await page.evaluate(readBarcode);
  const framesB = await page.evaluate(() => window.framesShown);
  await page.screenshot({ path: join(shots, 'live-2.png') });
  // The clip is 150 frames at 15 fps and loops: 2 s later the counter is ~30 frames on.
  const advanced = (b - a + 150) % 150;
  assert.ok(a < 150 && b < 150, `bar codes read ${a} then ${b}`);
  assert.ok(advanced >= 15 && advanced <= 45, `the counter went from ${a} to ${b}`);
  assert.ok(framesB - framesA >= 20, `${framesB - framesA} frames shown in 2 s`);
  console.log(`live view: first frame ${firstFrameMs} ms after the click; counter ${a} → ${b}`);

  // Closing the page ends the session on the server.
  await page.close();
  await waitFor('the session to close', async () => (await sessionsOpen()) === 0, 20000);
  assert.deepEqual(errors, []);
});

test('playback: the frame recorded at the chosen time, then seek, pause, step and 4x', async (t) => {
  const { base, page, errors } = await liveBox(t);

  // The file camera plays the 15 fps clip from frame 0 when its session starts, so the frame
  // recorded at wall time W is (W - start) × 15 mod 150.
  const recordings = async () => page.evaluate(async () => {
    const now = Date.now() * 1000;
    const r = await fetch(`/api/streams/porch/main/recordings?from_us=${now - 3600e6}&to_us=${now}`);
    return (await r.json()).runs;
  });
  await waitFor('16 s recorded', async () => {
    const runs = await recordings();
    return runs.length > 0 && runs[0].end_us - runs[0].start_us >= 16e6;
  }, 40000);
  const start = (await recordings())[0].start_us;
  const frameAt = (wallUs) => Math.round(((wallUs - start) * 15) / 1e6) % 150;

  await page.locator('#cameras tbody tr button').first().click();
  await page.waitForFunction(() => live && live.channel.readyState === 'open');
  const position = async () => Number(await page.locator('#playback-position').getAttribute('data-wall-us'));
  const shown = async () => {
    await new Promise((r) => setTimeout(r, 600)); // the jitter buffer drains
    return page.evaluate(readBarcode);
  };
  const near = (a, b) => Math.min((a - b + 150) % 150, (b - a + 150) % 150) <= 1;

  // Play from 5.3 s in: it starts at the keyframe at or before (5.0 s, frame 75).
  const target = start + 5_300_000;
  await page.evaluate((wall) => sendControl({ play_stored: { stream: 'porch/main', wall_us: wall } }), target);
  await waitFor('stored playback', async () => (await page.locator('#live-state').getAttribute('data-mode')) === 'stored');
  const first = await position();
  assert.ok(first <= target && first > target - 1_100_000, `starts at ${first - start} µs, target ${target - start}`);
  // Wall times are stamped at receipt: the frame-time mapping holds within a frame.
  const phase = frameAt(first) % 15;
  assert.ok(phase <= 1 || phase >= 14, `a keyframe (frame ${frameAt(first)})`);

  // Pause: the picture holds the frame recorded at the reported position.
  await new Promise((r) => setTimeout(r, 700));
  await page.click('#pause');
  await waitFor('paused', async () => (await page.locator('#live-state').getAttribute('data-paused')) === 'true');
  const paused = await position();
  const pausedFrame = await shown();
  assert.ok(near(pausedFrame, frameAt(paused)), `shows frame ${pausedFrame}, recorded at ${paused - start} µs: frame ${frameAt(paused)}`);
  await page.screenshot({ path: join(shots, 'playback-paused.png') });

  // Step: one frame on.
  await page.click('#step');
  await waitFor('a step', async () => (await position()) > paused);
  const stepped = await position();
  assert.ok(stepped - paused >= 50_000 && stepped - paused <= 80_000, `a step of ${stepped - paused} µs`);
  assert.ok(near(await shown(), frameAt(stepped)), 'the next frame is shown');

  // Seek back to 3.5 s: the keyframe at 3.0 s.
  await page.evaluate((wall) => sendControl({ seek: { wall_us: wall } }), start + 3_500_000);
  await waitFor('the seek', async () => (await position()) < paused - 1_000_000);
  const sought = await position();
  assert.ok(Math.abs(sought - (start + 3_000_000)) < 100_000, `seek landed at ${sought - start} µs`);

  // 4×, keyframes only: about 6 s of recording in 1.5 s.
  await page.selectOption('#rate', '4');
  await page.click('#resume');
  const before = await position();
  await new Promise((r) => setTimeout(r, 1500));
  const advanced = (await position()) - before;
  assert.ok(advanced >= 4_000_000 && advanced <= 8_000_000, `4× advanced ${advanced} µs in 1.5 s`);

  // Back to live.
  await page.click('#play-live');
  await waitFor('live again', async () => (await page.locator('#live-state').getAttribute('data-mode')) === 'live');
  assert.deepEqual(errors, []);
});

test('control channel limits: the 17th cursor, an oversized message and a flood get error replies', async (t) => {
  const { page, errors } = await liveBox(t);
  await waitFor('16 s recorded', async () => page.evaluate(async () => {
    const now = Date.now() * 1000;
    const r = await fetch(`/api/streams/porch/main/recordings?from_us=${now - 3600e6}&to_us=${now}`);
    const runs = (await r.json()).runs;
    return runs.length > 0 && runs[0].end_us - runs[0].start_us >= 4e6;
  }), 40000);
  const result = await page.evaluate(async () => {
    const csrf = (await (await fetch('/api/me')).json()).csrf;
    const pc = new RTCPeerConnection();
    for (let i = 0; i < 17; i++) pc.addTransceiver('video', { direction: 'recvonly' });
    const channel = pc.createDataChannel('control');
    channel.binaryType = 'arraybuffer';
    const replies = [];
    channel.onmessage = (e) => replies.push(KeepPeekControl.decode('ServerMessage', e.data));
    await pc.setLocalDescription(await pc.createOffer());
    const r = await fetch('/api/whep/porch/main', { method: 'POST', headers: { 'content-type': 'application/sdp', 'x-csrf-token': csrf }, body: pc.localDescription.sdp });
    if (r.status !== 201) return { status: r.status, body: await r.text() };
    await pc.setRemoteDescription({ type: 'answer', sdp: await r.text() });
    await new Promise((ok, fail) => { channel.onopen = ok; setTimeout(() => fail(new Error('no channel')), 10000); });
    const wait = (ms) => new Promise((ok) => setTimeout(ok, ms));
    const send = (m) => channel.send(KeepPeekControl.encode('ClientMessage', m));
    const answer = async (id) => {
      for (let i = 0; i < 100 && !replies.some((m) => m.request_id === id); i++) await wait(50);
      return replies.find((m) => m.request_id === id);
    };
    const from = (Date.now() - 3000) * 1000;
    const out = { cursors: [] };
    for (let track = 0; track < 17; track++) {
      send({ request_id: 100 + track, track, play_stored: { stream: 'porch/main', wall_us: from } });
      const a = await answer(100 + track);
      out.cursors.push(a && (a.error ? a.error.code : a.state ? 'state' : '?'));
    }
    channel.send(new Uint8Array(64 * 1024 + 1));
    channel.send(new Uint8Array([0xff, 0xff, 0xff]));
    send({ request_id: 300, track: 99, pause: {} });
    await wait(500);
    out.oversized = replies.some((m) => m.error && m.error.code === 'too_large');
    out.garbage = replies.some((m) => m.error && m.error.code === 'bad_message');
    out.unknownTrack = (await answer(300))?.error?.code;
    // A flood: far more than the box keeps waiting for one session.
    for (let i = 0; i < 300; i++) send({ request_id: 1000 + i, track: 0, set_rate: { rate: 2 } });
    const settled = () => replies.filter((m) => m.request_id >= 1000 || (m.error && m.error.code === 'flooded')).length;
    for (let i = 0; i < 100 && settled() < 300; i++) await wait(100);
    out.flooded = replies.filter((m) => m.error && m.error.code === 'flooded').length;
    out.floodAnswers = replies.filter((m) => m.request_id >= 1000).length;
    // The session lives on.
    send({ request_id: 2000, track: 0, pause: {} });
    out.afterFlood = (await answer(2000))?.state?.paused;
    pc.close();
    return out;
  });
  assert.equal(result.status, undefined, JSON.stringify(result));
  assert.deepEqual(result.cursors.slice(0, 16), Array(16).fill('state'), JSON.stringify(result.cursors));
  assert.equal(result.cursors[16], 'too_many_cursors');
  assert.ok(result.oversized, 'a 64 KiB + 1 message is refused');
  assert.ok(result.garbage, 'garbage is refused');
  assert.equal(result.unknownTrack, 'unknown_track');
  assert.equal(result.floodAnswers + result.flooded, 300, `every message answered or refused: ${JSON.stringify(result)}`);
  assert.equal(result.afterFlood, true, 'the session answers after the flood');
  assert.deepEqual(errors, []);
});

test('live grid: every camera at once, from its sub stream when it has one', async (t) => {
  const clip = join(repo, 'target', 'fixtures', 'h264.mp4');
  const yard = ['[[cameras]]', 'name = "yard"', `main = { url = "file://${clip}" }`, `sub = { url = "file://${clip}" }`];
  const { page, errors } = await liveBox(t, yard);
  await waitFor('every stream connected', async () => {
    await page.reload();
    await page.locator('#cameras tbody tr').nth(2).waitFor();
    const rows = await page.locator('#cameras tbody tr').allInnerTexts();
    return rows.length === 3 && rows.every((r) => r.includes('\tconnected\t'));
  });
  await page.click('#grid-start');
  await page.locator('#grid-tiles video').nth(1).waitFor();
  const streams = await page.locator('#grid-tiles video').evaluateAll((vs) => vs.map((v) => v.dataset.stream));
  assert.deepEqual(streams, ['porch/main', 'yard/sub']);
  await page.evaluate(() => {
    window.tileFrames = [0, 0];
    document.querySelectorAll('#grid-tiles video').forEach((v, i) => {
      const count = () => { window.tileFrames[i]++; v.requestVideoFrameCallback(count); };
      v.requestVideoFrameCallback(count);
    });
  });
  await waitFor('both tiles decoding', async () => (await page.evaluate(() => Math.min(...window.tileFrames))) >= 15, 15000);
  await page.screenshot({ path: join(shots, 'live-grid.png') });
  await page.click('#grid-stop');
  await waitFor('the grid to close', async () => (await page.locator('#grid-tiles video').count()) === 0);
  assert.deepEqual(errors, []);
});
