// Live view and playback over WebRTC in Debian's Chromium against the real keeppeek binary:
// a camera's page opens a WHEP session whose frames decode (requestVideoFrameCallback
// counts rise) and whose bar-coded frame number, read from the decoded pixels, advances;
// closing the page frees the session on the server. Playback over the control channel shows
// the frame recorded at the chosen time; seek, pause, step and 4× behave. The live wall of
// four cameras decodes in every tile, and a tile scrolled out of view gives its session
// back. Screenshots go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { shots, startLiveKeeppeek, launchChromium, newPage, waitFor, sleep, go, setUpAdmin, logIn, sessionCounter, readBarcode,
  countFrames, fileCamera, waitConnected, PHONE } from './harness.mjs';

// keeppeek with live view, and a page logged in as the first admin once the cameras are up.
async function liveBox(t, { cameras = null, streams = 1, page: options = {} } = {}) {
  const box = await startLiveKeeppeek(t, [], [], cameras);
  const { base } = box;
  const browser = await launchChromium(t);
  const page = await newPage(browser, options);
  await setUpAdmin(page, base, streams);
  return { base, page, errors: page.errors, browser, box };
}

const VIDEO = '.player-video';

test('live view: frames decode, the counter advances, closing the page frees the session', async (t) => {
  const { base, page, errors, box } = await liveBox(t);
  const sessionsOpen = await sessionCounter(page, base);

  // The wall's tile, by keyboard: its link opens the camera.
  const started = Date.now();
  await page.locator('.tile-name').first().focus();
  await page.keyboard.press('Enter');
  await page.locator(VIDEO).waitFor();
  const frames = await countFrames(page, VIDEO);
  await waitFor('a first decoded frame', async () => (await frames()) > 0, 15000);
  const firstFrameMs = Date.now() - started;
  await waitFor('only the camera page holding a session', async () => (await sessionsOpen()) === 1);
  const a = await page.evaluate(readBarcode, VIDEO);
  const framesA = await frames();
  await page.screenshot({ path: join(shots, 'live-1.png') });
  await sleep(2000);
  const b = await page.evaluate(readBarcode, VIDEO);
  const framesB = await frames();
  await page.screenshot({ path: join(shots, 'live-2.png') });
  // The clip is 150 frames at 15 fps and loops: 2 s later the counter is ~30 frames on.
  const advanced = (b - a + 150) % 150;
  assert.ok(a < 150 && b < 150, `bar codes read ${a} then ${b}`);
  assert.ok(advanced >= 15 && advanced <= 45, `the counter went from ${a} to ${b}`);
  assert.ok(framesB - framesA >= 20, `${framesB - framesA} frames shown in 2 s`);
  console.log(`live view: first frame ${firstFrameMs} ms after the key press; counter ${a} → ${b}`);

  // The box goes away (kill -9): the page says the live view stopped and offers to try
  // again; once the box is back, trying again shows live video.
  const lostAt = Date.now();
  await box.kill9();
  await page.locator('.player-state .retry').waitFor({ timeout: 20000 });
  assert.match(await page.locator('.player-state').textContent(), /Live view stopped/);
  console.log(`live view: the loss shown ${Date.now() - lostAt} ms after the box went away`);
  await box.restart();
  await logIn(page, base);
  await waitConnected(page, 1);
  await go(page, '#/live/porch', VIDEO);
  const again = await countFrames(page, VIDEO);
  await waitFor('frames after the restart', async () => (await again()) > 0, 30000);
  await waitFor('one session again', async () => (await sessionsOpen()) === 1);

  // Closing the page ends the session on the server.
  await page.close();
  await waitFor('the session to close', async () => (await sessionsOpen()) === 0, 20000);
  assert.deepEqual(errors, []);
});

test('playback: the frame recorded at the chosen time, then seek, pause, step and 4x', async (t) => {
  const { page, errors } = await liveBox(t);

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

  await go(page, '#/live/porch', VIDEO);
  await page.waitForFunction(() => keeppeek.player && keeppeek.player.session && keeppeek.player.session.channel.readyState === 'open');
  const position = async () => Number(await page.locator('.player-position').getAttribute('data-wall-us'));
  const mode = () => page.locator('.player-state').getAttribute('data-mode');
  const shown = async () => {
    await sleep(600); // the jitter buffer drains
    return page.evaluate(readBarcode, VIDEO);
  };
  const near = (a, b) => Math.min((a - b + 150) % 150, (b - a + 150) % 150) <= 1;

  // Play from 5.3 s in: it starts at the keyframe at or before (5.0 s, frame 75).
  const target = start + 5_300_000;
  await page.evaluate((wall) => keeppeek.player.play(wall), target);
  await waitFor('stored playback', async () => (await mode()) === 'stored');
  await waitFor('a position', async () => (await position()) > 0);
  const first = await position();
  assert.ok(first <= target && first > target - 1_100_000, `starts at ${first - start} µs, target ${target - start}`);
  // Wall times are stamped at receipt: the frame-time mapping holds within a frame.
  const phase = frameAt(first) % 15;
  assert.ok(phase <= 1 || phase >= 14, `a keyframe (frame ${frameAt(first)})`);

  // Pause, with the player's button: the picture holds the frame recorded at the position.
  await sleep(700);
  await page.click('.player-controls .pause');
  await waitFor('paused', async () => (await page.locator('.player-state').getAttribute('data-paused')) === 'true');
  const paused = await position();
  const pausedFrame = await shown();
  assert.ok(near(pausedFrame, frameAt(paused)), `shows frame ${pausedFrame}, recorded at ${paused - start} µs: frame ${frameAt(paused)}`);
  await page.screenshot({ path: join(shots, 'playback-paused.png') });

  // Step: one frame on.
  await page.click('.player-controls .step');
  await waitFor('a step', async () => (await position()) > paused);
  const stepped = await position();
  assert.ok(stepped - paused >= 50_000 && stepped - paused <= 80_000, `a step of ${stepped - paused} µs`);
  assert.ok(near(await shown(), frameAt(stepped)), 'the next frame is shown');

  // Seek back to 3.5 s: the keyframe at 3.0 s.
  await page.evaluate((wall) => keeppeek.player.play(wall), start + 3_500_000);
  await waitFor('the seek', async () => (await position()) < paused - 1_000_000);
  const sought = await position();
  assert.ok(Math.abs(sought - (start + 3_000_000)) < 100_000, `seek landed at ${sought - start} µs`);

  // 4×, keyframes only: about 6 s of recording in 1.5 s.
  await page.selectOption('.player-controls .rate', '4');
  await page.click('.player-controls .pause');
  const before = await position();
  await sleep(1500);
  const advanced = (await position()) - before;
  assert.ok(advanced >= 4_000_000 && advanced <= 8_000_000, `4× advanced ${advanced} µs in 1.5 s`);

  // Back to live, by keyboard.
  await page.keyboard.press('l');
  await waitFor('live again', async () => (await mode()) === 'live');
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

test('live wall: six cameras decode, and tiles scrolled away give their sessions back', async (t) => {
  const names = ['porch', 'yard', 'drive', 'gate', 'shed', 'door'];
  const cameras = names.flatMap((n, i) => fileCamera(n, { sub: i === 1 }));
  const { base, page, errors } = await liveBox(t, { cameras, streams: 7 });
  const sessionsOpen = await sessionCounter(page, base);
  await go(page, '#/live', '.tile video');

  // Each tile shows its stream (the sub stream where there is one), three to a row.
  const streams = await page.locator('.tile video').evaluateAll((vs) => vs.map((v) => v.dataset.stream));
  assert.deepEqual(streams.sort(), ['door/main', 'drive/main', 'gate/main', 'porch/main', 'shed/main', 'yard/sub']);
  assert.equal(await page.locator('.wall').evaluate((w) => getComputedStyle(w).gridTemplateColumns.split(' ').length), 3);
  // Posters: each stream's newest keyframe kept, as a one-frame MP4 (once one is committed).
  let poster = null;
  await waitFor('a poster', async () => {
    poster = await page.evaluate(async () => {
      const r = await fetch('/api/streams/porch/main/poster.mp4');
      return [r.status, r.headers.get('content-type'), (await r.arrayBuffer()).byteLength];
    });
    return poster[0] !== 404;
  });
  assert.equal(poster[0], 200);
  assert.equal(poster[1], 'video/mp4');
  assert.ok(poster[2] > 1000, `a picture: ${poster[2]} bytes`);

  // Every tile decodes: its bar-coded counter advances.
  await waitFor('six sessions', async () => (await sessionsOpen()) === 6, 20000);
  const tiles = names.map((n) => `.tile[data-camera="${n}"] video`);
  const counters = [];
  for (const sel of tiles) counters.push(await countFrames(page, sel));
  await waitFor('every tile decoding', async () => Math.min(...(await Promise.all(counters.map((c) => c())))) >= 15, 15000);
  const first = await Promise.all(tiles.map((sel) => page.evaluate(readBarcode, sel)));
  await sleep(1500);
  const later = await Promise.all(tiles.map((sel) => page.evaluate(readBarcode, sel)));
  for (const [i, n] of names.entries()) {
    const advanced = (later[i] - first[i] + 150) % 150;
    assert.ok(advanced >= 10 && advanced <= 40, `${n}: the counter went from ${first[i]} to ${later[i]}`);
  }
  await page.screenshot({ path: join(shots, 'live-wall.png') });

  // A double click makes a tile full screen; Escape leaves it.
  await page.dblclick('.tile[data-camera=gate] video');
  await waitFor('the tile full screen', () => page.evaluate(() => document.fullscreenElement?.dataset.camera === 'gate'));
  await page.keyboard.press('Escape');
  await page.evaluate(() => document.fullscreenElement && document.exitFullscreen());
  await waitFor('back from full screen', () => page.evaluate(() => !document.fullscreenElement));
  assert.match(page.url(), /#\/live$/, 'the double click did not open the camera');

  // On a phone the wall is one column: the tiles below the fold give their sessions back;
  // scrolled to the end, the first tiles do, and those now in view take one.
  const holding = () => page.locator('.tile[data-session]').evaluateAll((ts) => ts.map((x) => x.dataset.camera).sort().join());
  await page.setViewportSize(PHONE);
  // (The window leaves full screen and takes the new size over a few frames.)
  await waitFor('one column on a phone', async () => (await page.locator('.wall')
    .evaluate((w) => getComputedStyle(w).gridTemplateColumns.split(' ').length)) === 1);
  await waitFor('the tiles below the fold released', async () => (await holding()) === 'door,drive,gate,porch'
    && (await sessionsOpen()) === 4, 10000);
  await page.screenshot({ path: join(shots, 'live-wall-phone.png') });
  await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
  await waitFor('the first tiles released, the last ones open', async () => (await holding()) === 'gate,porch,shed,yard'
    && (await sessionsOpen()) === 4, 10000);
  await page.screenshot({ path: join(shots, 'live-wall-phone-scrolled.png') });
  await page.evaluate(() => window.scrollTo(0, 0));
  await waitFor('the first tile open again', async () => (await page.locator('.tile[data-camera=door][data-session]').count()) === 1, 10000);
  assert.deepEqual(errors, []);
});
