// Live view over WebRTC in Debian's Chromium against the real keeppeek binary: the UI's
// "Watch" button opens a WHEP session; frames decode (requestVideoFrameCallback counts
// rise); the fixture's bar-coded frame number, read from the decoded pixels, advances;
// closing the page frees the session on the server. Screenshots go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { shots, startKeeppeek, launchChromium, waitFor, freePort } from './harness.mjs';

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

test('live view: frames decode, the counter advances, closing the page frees the session', async (t) => {
  const udp = await freePort();
  const { base } = await startKeeppeek(t, ['[webrtc]', `port = ${udp}`, 'loopback = true']);
  const browser = await launchChromium(t);
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));

  await page.goto(base);
  await page.locator('#setup-username').waitFor();
  await page.fill('#setup-username', 'root');
  await page.fill('#setup-password', 'correct horse battery');
  await page.click('#setup-form button');
  await page.locator('#cameras tbody tr').first().waitFor();
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
  await waitFor('the camera to connect', async () => {
    await page.reload();
    await page.locator('#cameras tbody tr').first().waitFor();
    return (await page.locator('#cameras tbody tr').first().innerText()).includes('connected\t');
  });

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
