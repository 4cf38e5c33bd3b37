// What the browser tests share: the real keeppeek binary on a fresh data directory, Debian's
// Chromium driven by playwright-core, axe-core, and small waits. Screenshots go to
// target/ui/.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync, existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

export const repo = resolve(import.meta.dirname, '..', '..');
export const shots = join(repo, 'target', 'ui');
mkdirSync(shots, { recursive: true });
export const clip = join(repo, 'target', 'fixtures', 'h264.mp4');

export const DESKTOP = { width: 1440, height: 900 };
export const PHONE = { width: 390, height: 844 };

export function freePort() {
  return new Promise((ok) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => ok(p)); });
  });
}

export async function waitFor(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { if (await fn()) return; } catch (_) { /* not yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Config lines of a file camera named `name` playing the fixture clip (`sub` adds a sub
// stream from the same clip).
export function fileCamera(name, { sub = false, lines = [] } = {}) {
  return ['[[cameras]]', `name = "${name}"`, ...lines, `main = { url = "file://${clip}" }`,
    ...(sub ? [`sub = { url = "file://${clip}" }`] : [])];
}

// Starts keeppeek recording camera "porch" from the fixture clip, with `extra` config lines
// (a `[webrtc]` table turns live view on; without one it is off) and `camera` lines in the
// camera's table; `cameras` replaces the one camera with other tables; `top` lines go before
// every table; `streamMax` is each stream's retention cap. Stopped when `t`
// ends; `kill9()` and `restart()` are a power cut and the next boot on the same data
// directory.
export async function startKeeppeek(t, extra = [], camera = [], cameras = null, top = [], { streamMax = '1 GiB' } = {}) {
  const bin = process.env.KEEPPEEK_BIN || join(repo, 'target', 'debug', 'keeppeek');
  assert.ok(existsSync(bin), `build keeppeek first (${bin})`);
  assert.ok(existsSync(clip), `make the fixtures first (${clip})`);
  const dir = mkdtempSync(join(tmpdir(), 'kp-ui-'));
  const port = await freePort();
  const webrtc = extra.some((l) => l.trim() === '[webrtc]') ? [] : ['[webrtc]', 'port = 0'];
  writeFileSync(join(dir, 'keeppeek.toml'), [
    'data_dir = "data"', `listen = "127.0.0.1:${port}"`, 'flush_interval_s = 1', ...top,
    '[retention]', `stream_max_bytes = "${streamMax}"`, 'total_max_bytes = "1 GiB"',
    ...webrtc, ...extra,
    ...(cameras || fileCamera('porch', { lines: camera })), '',
  ].join('\n'));
  const base = `http://127.0.0.1:${port}`;
  let daemon = null;
  const up = async () => {
    daemon = spawn(bin, ['run', '--config', join(dir, 'keeppeek.toml')], { stdio: 'ignore', env: { ...process.env, NO_COLOR: '1' } });
    await waitFor('the web face', async () => (await fetch(`${base}/healthz`)).ok);
  };
  t.after(() => daemon.kill('SIGTERM'));
  await up();
  const kill9 = () => new Promise((ok) => { daemon.once('exit', ok); daemon.kill('SIGKILL'); });
  return { base, dir, kill9, restart: up, pid: () => daemon.pid };
}

// keeppeek with live view on a free UDP port (loopback offered).
export async function startLiveKeeppeek(t, extra = [], camera = [], cameras = null) {
  const udp = await freePort();
  return startKeeppeek(t, ['[webrtc]', `port = ${udp}`, 'loopback = true', ...extra], camera, cameras);
}

// Debian's Chromium, headless; `args` adds flags (such as a certificate accepted).
export async function launchChromium(t, args = []) {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', ...args],
  });
  t.after(() => browser.close());
  return browser;
}

// A page that records its script errors in `page.errors`.
export async function newPage(browser, options = {}) {
  const context = await browser.newContext({ viewport: DESKTOP, acceptDownloads: true, ...options });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(String(e)));
  // Requests that failed or were refused, for a failure's message.
  page.trouble = [];
  page.on('requestfailed', (r) => page.trouble.push(`${r.method()} ${r.url()}: ${r.failure()?.errorText}`));
  page.on('response', (r) => { if (r.status() >= 500) page.trouble.push(`${r.request().method()} ${r.url()}: ${r.status()}`); });
  return page;
}

// What /api/cameras says, asked from the page (with its session).
export const camerasOf = (page) => page.evaluate(async () => (await fetch('/api/cameras')).json());

// Every stream of every camera connected.
export async function waitConnected(page, streams) {
  await waitFor(`${streams} streams connected`, async () => {
    const list = (await camerasOf(page)).flatMap((c) => c.streams);
    return list.length === streams && list.every((s) => s.connected);
  }, 30000);
}

// First-time setup of the admin "root" in `page`, then waits until `streams` streams are
// connected (0: no wait).
export async function setUpAdmin(page, base, streams = 1) {
  await page.goto(base);
  try {
    await page.locator('#setup-username').waitFor();
  } catch (e) {
    // What the page showed instead, for the failure's reader.
    await page.screenshot({ path: join(shots, 'failed-setup.png') }).catch(() => {});
    const shown = (await page.locator('body').innerText().catch(() => '?')).slice(0, 300);
    throw new Error(`no setup form at ${page.url()}: ${shown}; errors ${JSON.stringify(page.errors)}; requests ${JSON.stringify(page.trouble)}`);
  }
  await page.fill('#setup-username', 'root');
  await page.fill('#setup-password', 'correct horse battery');
  await page.click('#setup-form button[type=submit]');
  await page.locator('#nav a').first().waitFor();
  if (streams) await waitConnected(page, streams);
}

export async function logIn(page, base) {
  await page.goto(base);
  await page.locator('#login-username').waitFor();
  await page.fill('#login-username', 'root');
  await page.fill('#login-password', 'correct horse battery');
  await page.click('#login-form button[type=submit]');
  await page.locator('#nav a').first().waitFor();
}

// Goes to `hash` and waits for its page to be drawn.
export async function go(page, hash, ready) {
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.locator(ready).first().waitFor();
}

// A metrics token, and the count of open WebRTC sessions the box reports with it.
export async function sessionCounter(page, base) {
  const token = await page.evaluate(async () => {
    const csrf = (await (await fetch('/api/me')).json()).csrf;
    const r = await fetch('/api/tokens', { method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': csrf },
      body: JSON.stringify({ name: `watcher-${Date.now()}`, scopes: ['metrics'] }) });
    return (await r.json()).token;
  });
  return async () => {
    const text = await (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
    return Number(text.match(/^keeppeek_webrtc_sessions_open (\d+)$/m)[1]);
  };
}

// Reads the frame number the fixtures burn in as a bar code (tools/make-fixtures.sh) from
// `video` (a selector): the bottom 24 rows of the 640x360 picture, 16 cells of 40 px, bit i
// white in cell i. Runs in the page.
export function readBarcode(selector) {
  const video = document.querySelector(selector);
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

// Counts the frames `selector`'s video presents, in window.framesShown[key].
export async function countFrames(page, selector, key = selector) {
  await page.evaluate(([sel, k]) => {
    window.framesShown = window.framesShown || {};
    window.framesShown[k] = 0;
    const v = document.querySelector(sel);
    const count = () => { window.framesShown[k]++; v.requestVideoFrameCallback(count); };
    v.requestVideoFrameCallback(count);
  }, [selector, key]);
  return () => page.evaluate((k) => window.framesShown[k], key);
}

const axeSource = readFileSync(join(repo, 'tests', 'ui', 'node_modules', 'axe-core', 'axe.min.js'), 'utf8');

// axe-core in the page: fails on any violation of impact serious or critical.
export async function checkA11y(page, what) {
  // Through DevTools: the page's Content-Security-Policy allows no inline script.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Runtime.evaluate', { expression: axeSource });
  await cdp.detach();
  const result = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
  });
  assert.deepEqual(result, [], `accessibility of ${what}`);
}

// No sideways scrolling at this width.
export async function checkNoSideScroll(page, what) {
  const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  assert.ok(scroll <= inner, `${what} scrolls sideways: ${scroll} > ${inner}`);
}

export const CAMERA_USER = 'kp';
export const CAMERA_PASSWORD = 's3cret';

// The simulated IP camera (tools/rtsp-camera.py, gst-rtsp-server) on a free port, its
// /h264-auth path behind CAMERA_USER and CAMERA_PASSWORD; stopped when the test ends.
// Fails loudly when it cannot start.
// An ONVIF camera on a network namespace of its own (tools/onvif-camera.sh, as root):
// oxvif's mock device answering WS-Discovery and ONVIF at 10.213.N.2:8000, the RTSP test
// camera at the stream address it gives. Stopped, and its network removed, after the test.
export async function startOnvifCamera(t, n) {
  const dir = mkdtempSync(join(tmpdir(), 'kp-onvif-'));
  const ready = join(dir, 'ready');
  const camera = spawn(join(repo, 'tools', 'onvif-camera.sh'), [String(n), CAMERA_USER, CAMERA_PASSWORD,
    join(repo, 'target', 'fixtures'), ready], { stdio: ['ignore', 'ignore', 'inherit'] });
  let exited = null;
  camera.on('exit', (code) => { exited = code; });
  t.after(() => new Promise((done) => {
    if (exited !== null) return done();
    camera.on('exit', done);
    camera.kill('SIGTERM');
  }));
  await waitFor('the ONVIF camera ready', () => {
    assert.equal(exited, null, 'tools/onvif-camera.sh exited: as root, with its peer built?');
    return existsSync(ready);
  }, 40000);
  return { address: `10.213.${n}.2` };
}

// An ONVIF camera plugged into a camera port (tools/onvif-camera.sh with ONVIF_CAMERA_DHCP=1,
// as root): the pair kpoN-h (10.213.N.1/24, the box's address on the port) to a namespace
// where the camera asks for its address by DHCP until the box gives one, then starts its
// services there. Returns once the port is up; `ready()` waits for the lease and services
// and gives the camera's address; `unplug()` stops it (its lease released).
export async function plugOnvifCamera(t, n) {
  const dir = mkdtempSync(join(tmpdir(), 'kp-onvif-'));
  const ready = join(dir, 'ready');
  const camera = spawn(join(repo, 'tools', 'onvif-camera.sh'), [String(n), CAMERA_USER, CAMERA_PASSWORD,
    join(repo, 'target', 'fixtures'), ready], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, ONVIF_CAMERA_DHCP: '1' } });
  let exited = null;
  camera.on('exit', (code) => { exited = code; });
  const unplug = () => new Promise((done) => {
    if (exited !== null) return done();
    camera.on('exit', done);
    camera.kill('SIGTERM');
  });
  t.after(unplug);
  await waitFor('the camera port up', () => {
    assert.equal(exited, null, 'tools/onvif-camera.sh exited: as root, with its peer built?');
    return existsSync(`${ready}.link`);
  });
  const readyNow = async () => {
    await waitFor('the plugged-in camera leased and ready', () => {
      assert.equal(exited, null, 'tools/onvif-camera.sh exited');
      return existsSync(ready);
    }, 60000);
    return readFileSync(`${ready}.leases`, 'utf8').trim().split('\n')[0].split(' ')[1];
  };
  // A second DHCP client behind the port (the same cable, a client id of its own) asks for
  // an address and takes none: busybox udhcpc, two DISCOVERs a second apart, its script a
  // no-op so the camera's address is left alone. Resolves with its exit code.
  const askAsAnother = () => new Promise((done) => {
    const ask = spawn('ip', ['netns', 'exec', `kp-onvif-${n}`, 'busybox', 'udhcpc', '-i', `kpo${n}-c`, '-n', '-q',
      '-t', '2', '-T', '1', '-s', '/bin/true', '-x', '0x3d:01020000000001'], { stdio: 'ignore' });
    ask.on('exit', done);
  });
  return { interface: `kpo${n}-h`, boxAddress: `10.213.${n}.1`, ready: readyNow, unplug, askAsAnother };
}

export async function startRtspCamera(t) {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'kp-cam-'));
  const ready = join(dir, 'ready');
  const camera = spawn('/usr/bin/python3', [join(repo, 'tools', 'rtsp-camera.py'), '--port', String(port),
    '--fixtures', join(repo, 'target', 'fixtures'), '--user', CAMERA_USER, '--password', CAMERA_PASSWORD, '--ready-file', ready],
  { stdio: 'ignore' });
  let exited = null;
  camera.on('exit', (code) => { exited = code; });
  t.after(() => camera.kill('SIGTERM'));
  await waitFor('the RTSP camera ready', () => {
    assert.equal(exited, null, 'the RTSP camera exited: is /usr/bin/python3 with gi installed?');
    return existsSync(ready);
  });
  return { port, url: (path) => `rtsp://127.0.0.1:${port}${path}` };
}
