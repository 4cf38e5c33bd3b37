// The timeline page in Debian's Chromium against the real keeppeek binary recording a file
// camera whose frames carry a bar-coded counter: a click on a recorded moment plays the
// frame recorded then, a drag of the playhead seeks, keys, the wheel and buttons zoom, a
// drag pans, event markers filter by label; then the same on a phone, vertical, by touch:
// a tap plays, a swipe pans, a pinch zooms. Screenshots go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { shots, startLiveKeeppeek, launchChromium, newPage, waitFor, sleep, go, setUpAdmin, logIn, readBarcode,
  PHONE } from './harness.mjs';

const VIDEO = '.player-video';
const BOUNDARY = 'kp-ui-boundary';

// The track's window and box.
async function track(page) {
  const t = page.locator('.tl-track');
  const [from, to] = [Number(await t.getAttribute('data-from')), Number(await t.getAttribute('data-to'))];
  const box = await t.boundingBox();
  const vertical = await page.locator('.timeline.vertical').count() === 1;
  // The client point of time `us` (horizontal: left to right; vertical: newest at the top).
  const point = (us) => {
    const share = (us - from) / (to - from);
    return vertical ? { x: box.x + box.width * 0.75, y: box.y + box.height * (1 - share) }
      : { x: box.x + box.width * share, y: box.y + 40 };
  };
  return { from, to, span: to - from, box, point, vertical };
}

async function postEvent(base, token, camera, timeUs, label) {
  const envelope = JSON.stringify({ camera, time_us: timeUs, labels: [label], score: 0.9 });
  const body = `--${BOUNDARY}\r\nContent-Disposition: form-data; name="event"\r\nContent-Type: application/json\r\n\r\n${envelope}\r\n--${BOUNDARY}--\r\n`;
  const r = await fetch(`${base}/api/events`, { method: 'POST', body,
    headers: { authorization: `Bearer ${token}`, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` } });
  assert.equal(r.status, 201, await r.text());
}

test('timeline: click plays the frame recorded then, drag seeks, zoom and pan, labels; on a phone by touch', async (t) => {
  const { base } = await startLiveKeeppeek(t);
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, base);
  const token = await page.evaluate(async () => {
    const csrf = (await (await fetch('/api/me')).json()).csrf;
    const r = await fetch('/api/tokens', { method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': csrf },
      body: JSON.stringify({ name: 'detector', scopes: ['events:write'] }) });
    return (await r.json()).token;
  });

  // 20 s recorded. The file camera plays the 15 fps clip from frame 0 when its session
  // starts, so the frame recorded at wall time W is (W - start) × 15 mod 150.
  const runs = async () => page.evaluate(async () => {
    const now = Date.now() * 1000;
    return (await (await fetch(`/api/streams/porch/main/recordings?from_us=${now - 3600e6}&to_us=${now}`)).json()).runs;
  });
  await waitFor('20 s recorded', async () => { const r = await runs(); return r.length && r[0].end_us - r[0].start_us >= 20e6; }, 45000);
  const start = (await runs())[0].start_us;
  const frameAt = (wallUs) => Math.round(((wallUs - start) * 15) / 1e6) % 150;
  const near = (a, b) => Math.min((a - b + 150) % 150, (b - a + 150) % 150) <= 1;
  await postEvent(base, token, 'porch', start + 6e6, 'person');
  await postEvent(base, token, 'porch', start + 12e6, 'car');
  await postEvent(base, token, 'porch', start + 12.2e6, 'car');

  await go(page, '#/timeline/porch', '.tl-track');
  await page.waitForFunction(() => keeppeek.player && keeppeek.player.session && keeppeek.player.session.channel.readyState === 'open');
  // Following the present, only the newest stretch is fetched again: the newest run grows
  // and stays one run.
  const newest = () => page.evaluate(() => { const r = keeppeek.timeline.runs; return [r.length, r.length ? r[r.length - 1].end_us : 0]; });
  await waitFor('runs drawn', async () => (await newest())[0] > 0);
  const [count0, end0] = await newest();
  await waitFor('the newest run grew', async () => (await newest())[1] > end0 + 2e6, 15000);
  assert.equal((await newest())[0], count0, 'the tail fetched joined the newest run');
  assert.deepEqual(await page.evaluate(async () => {
    const { mergeTail } = await import('/pages/timeline.js');
    const r = (a, b) => ({ start_us: a, end_us: b, kind: 'recorded' });
    return [mergeTail([r(0, 10), r(20, 30)], [r(25, 40), r(50, 60)]), mergeTail([r(0, 10)], []), mergeTail([r(0, 10)], [r(20, 30)])];
  }), [[{ start_us: 0, end_us: 10, kind: 'recorded' }, { start_us: 20, end_us: 40, kind: 'recorded' }, { start_us: 50, end_us: 60, kind: 'recorded' }],
    [{ start_us: 0, end_us: 10, kind: 'recorded' }],
    [{ start_us: 0, end_us: 10, kind: 'recorded' }, { start_us: 20, end_us: 30, kind: 'recorded' }]]);
  // The recording's first 30 s in view.
  await page.evaluate((s) => keeppeek.timeline.setWindow(s - 5e6, s + 25e6, true), start);
  // (Drawn once the track shows that window: the window followed before had the markers too.)
  await waitFor('runs and markers drawn', async () => Number(await page.locator('.tl-track').getAttribute('data-events')) === 3
    && Number(await page.locator('.tl-track').getAttribute('data-from')) === Math.round(start - 5e6));
  const position = async () => Number(await page.locator('.player-position').getAttribute('data-wall-us'));
  const pausedFrame = async () => {
    await page.click('.player-controls .pause');
    await waitFor('paused', async () => (await page.locator('.player-state').getAttribute('data-paused')) === 'true');
    await sleep(600); // the jitter buffer drains
    return [await position(), await page.evaluate(readBarcode, VIDEO)];
  };

  // A click on a recorded moment (8.3 s in): playback from the keyframe at or before it,
  // showing the frames recorded then.
  let tr = await track(page);
  let p = tr.point(start + 8.3e6);
  await page.mouse.click(p.x, p.y);
  await waitFor('stored playback', async () => (await page.locator('.player-state').getAttribute('data-mode')) === 'stored');
  await waitFor('a position', async () => (await position()) > 0);
  const first = await position();
  assert.ok(first <= start + 8.3e6 && first > start + 7.2e6, `plays from ${(first - start) / 1e6} s`);
  const [at, frame] = await pausedFrame();
  assert.ok(near(frame, frameAt(at)), `shows frame ${frame}, recorded at ${(at - start) / 1e6} s: frame ${frameAt(at)}`);
  await page.screenshot({ path: join(shots, 'timeline-played.png') });

  // Drag the playhead to 3.5 s: the seek lands on the keyframe at 3.0 s.
  tr = await track(page);
  const handle = await page.locator('.tl-handle').boundingBox();
  p = tr.point(start + 3.5e6);
  await page.mouse.move(handle.x + handle.width / 2, handle.y + handle.height / 2);
  await page.mouse.down();
  await page.mouse.move(p.x, handle.y + handle.height / 2, { steps: 8 });
  await page.mouse.up();
  await waitFor('the seek', async () => Math.abs((await position()) - (start + 3e6)) < 100_000, 10000);

  // Zoom in by key, out by the wheel and the button: the window's span follows.
  await page.focus('.tl-track');
  await page.keyboard.press('+');
  await waitFor('zoomed in', async () => Math.abs((await track(page)).span - tr.span / 2) < 1000);
  const zoomedIn = (await track(page)).span;
  await page.mouse.move(tr.box.x + tr.box.width / 2, tr.box.y + 40);
  await page.mouse.wheel(0, 400);
  await waitFor('zoomed out by the wheel', async () => (await track(page)).span > zoomedIn * 1.5);
  const wheeled = (await track(page)).span;
  await page.click('button[aria-label="Zoom out"]');
  await waitFor('zoomed out by the button', async () => Math.abs((await track(page)).span - Math.min(wheeled * 2, 86400e6)) < 1000);

  // Pan: drag the track 200 px right, and the window moves 200 px' worth earlier.
  tr = await track(page);
  const y = tr.box.y + tr.box.height - 6;
  await page.mouse.move(tr.box.x + 300, y);
  await page.mouse.down();
  await page.mouse.move(tr.box.x + 500, y, { steps: 10 });
  await page.mouse.up();
  const panned = await track(page);
  const expected = (200 / tr.box.width) * tr.span;
  assert.ok(Math.abs(tr.from - panned.from - expected) < expected * 0.05, `panned ${(tr.from - panned.from) / 1e6} s, expected ${expected / 1e6}`);

  // Labels: the window's markers, then only the cars.
  await page.evaluate((s) => keeppeek.timeline.setWindow(s - 5e6, s + 25e6, true), start);
  await page.click('.labels button:has-text("car")');
  await waitFor('only the cars', async () => Number(await page.locator('.tl-track').getAttribute('data-events')) === 2);
  await page.screenshot({ path: join(shots, 'timeline-desktop.png') });
  // The events in view are buttons too, for the keyboard: Enter on the first car plays from
  // its pre-roll (the camera's, before the event at 12 s).
  await waitFor('the cars listed', async () => (await page.locator('.tl-in-view button').count()) === 2);
  const preRollUs = await page.evaluate(async () => (await (await fetch('/api/cameras')).json())[0].streams[0].pre_roll_ms * 1000);
  await page.focus('.tl-in-view button >> nth=0');
  await page.keyboard.press('Enter');
  await waitFor('played from the pre-roll', async () => Math.abs((await position()) - (start + 12e6 - preRollUs)) < 1.1e6, 10000);

  // Keys on the focused timeline: space pauses and plays, L goes live, ← plays from a step
  // before the playhead (from now, when live).
  const state = (k) => page.locator('.player-state').getAttribute(`data-${k}`);
  await page.focus('.tl-track');
  const pausedBefore = await state('paused');
  await page.keyboard.press(' ');
  await waitFor('space toggles the pause', async () => (await state('paused')) !== pausedBefore);
  await page.keyboard.press('l');
  await waitFor('L goes live', async () => (await state('mode')) === 'live');
  const pressed = Date.now() * 1000;
  await page.keyboard.press('ArrowLeft');
  await waitFor('← plays from before now', async () => (await state('mode')) === 'stored' && (await position()) > 0);
  assert.ok((await position()) < pressed, 'from before the key was pressed');

  // The date picker: yesterday, the whole day.
  const [yesterday, midnight] = await page.evaluate(() => {
    const d = new Date();
    d.setDate(d.getDate() - 1);
    d.setHours(0, 0, 0, 0);
    const p = (n) => String(n).padStart(2, '0');
    return [`${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`, d.getTime() * 1000];
  });
  await page.fill('.toolbar input[type=date]', yesterday);
  await waitFor('yesterday in view', async () => {
    const w = await track(page);
    return Math.abs(w.from - midnight) < 1000 && Math.abs(w.span - 86400e6) < 1000;
  });
  assert.deepEqual(page.errors, []);

  // A phone: the timeline stands up, newest at the top, and is used by touch.
  const phone = await newPage(browser, { viewport: PHONE, hasTouch: true, isMobile: true });
  await logIn(phone, base);
  await go(phone, '#/timeline/porch', '.timeline.vertical .tl-track');
  await phone.waitForFunction(() => keeppeek.player && keeppeek.player.session && keeppeek.player.session.channel.readyState === 'open');
  await phone.evaluate((s) => keeppeek.timeline.setWindow(s - 5e6, s + 25e6, true), start);
  await waitFor('markers on the phone', async () => Number(await phone.locator('.tl-track').getAttribute('data-events')) === 3);
  await phone.screenshot({ path: join(shots, 'timeline-phone.png') });
  tr = await track(phone);
  p = tr.point(start + 14.3e6);
  await phone.touchscreen.tap(p.x, p.y);
  await waitFor('stored playback on the phone', async () => (await phone.locator('.player-state').getAttribute('data-mode')) === 'stored');
  await waitFor('a position on the phone', async () => Number(await phone.locator('.player-position').getAttribute('data-wall-us')) > 0);
  const tapped = Number(await phone.locator('.player-position').getAttribute('data-wall-us'));
  assert.ok(tapped <= start + 14.3e6 && tapped > start + 13.2e6, `a tap plays from ${(tapped - start) / 1e6} s`);
  await phone.click('.player-controls .pause');
  await waitFor('paused on the phone', async () => (await phone.locator('.player-state').getAttribute('data-paused')) === 'true');
  await sleep(600);
  const phoneAt = Number(await phone.locator('.player-position').getAttribute('data-wall-us'));
  const phoneFrame = await phone.evaluate(readBarcode, VIDEO);
  assert.ok(near(phoneFrame, frameAt(phoneAt)), `the phone shows frame ${phoneFrame}, recorded at frame ${frameAt(phoneAt)}`);

  // A swipe down 150 px: the content follows the finger, newer times come down into view.
  const cdp = await phone.context().newCDPSession(phone);
  const touch = (type, points) => cdp.send('Input.dispatchTouchEvent', { type, touchPoints: points.map(([x, yy], id) => ({ x, y: yy, id })) });
  tr = await track(phone);
  const x = tr.box.x + tr.box.width * 0.6;
  await touch('touchStart', [[x, tr.box.y + 100]]);
  for (let i = 1; i <= 10; i++) await touch('touchMove', [[x, tr.box.y + 100 + i * 15]]);
  await touch('touchEnd', []);
  const swiped = await track(phone);
  const swipeUs = (150 / tr.box.height) * tr.span;
  assert.ok(Math.abs(swiped.from - tr.from - swipeUs) < swipeUs * 0.1, `swiped ${(swiped.from - tr.from) / 1e6} s, expected ${swipeUs / 1e6}`);

  // A pinch, fingers moving apart from 100 to 300 px: a third of the span.
  const mid = tr.box.y + tr.box.height / 2;
  await touch('touchStart', [[x, mid - 50], [x, mid + 50]]);
  for (let i = 1; i <= 10; i++) await touch('touchMove', [[x, mid - 50 - i * 10], [x, mid + 50 + i * 10]]);
  await touch('touchEnd', []);
  const pinched = await track(phone);
  assert.ok(Math.abs(pinched.span - swiped.span / 3) < swiped.span * 0.03, `pinched to ${pinched.span / 1e6} s from ${swiped.span / 1e6}`);
  await phone.screenshot({ path: join(shots, 'timeline-phone-pinched.png') });
  assert.deepEqual(phone.errors, []);
});
