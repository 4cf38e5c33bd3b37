// The web face in a real browser (Debian's Chromium, driven by playwright-core) against the
// real keeppeek binary recording a file camera: first-time setup, the camera list, a day's
// coverage, an export download that ffprobe plays, logout and login again. Screenshots go
// to target/ui/. Run from the repository root after `cargo build`: node --test tests/ui/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const repo = resolve(import.meta.dirname, '..', '..');
const shots = join(repo, 'target', 'ui');
mkdirSync(shots, { recursive: true });

function freePort() {
  return new Promise((ok) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => ok(p)); });
  });
}

async function waitFor(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { if (await fn()) return; } catch (_) { /* not yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}`);
}

test('setup, cameras, coverage, export and logout in Chromium', async (t) => {
  const bin = join(repo, 'target', 'debug', 'keeppeek');
  const clip = join(repo, 'target', 'fixtures', 'h264.mp4');
  assert.ok(existsSync(bin), `build keeppeek first (${bin})`);
  assert.ok(existsSync(clip), `make the fixtures first (${clip})`);
  const dir = mkdtempSync(join(tmpdir(), 'kp-ui-'));
  const port = await freePort();
  writeFileSync(join(dir, 'keeppeek.toml'), [
    'data_dir = "data"', `listen = "127.0.0.1:${port}"`, 'flush_interval_s = 1',
    '[retention]', 'stream_max_bytes = "1 GiB"', 'total_max_bytes = "1 GiB"',
    '[webrtc]', 'port = 0',
    '[[cameras]]', 'name = "porch"', `main = { url = "file://${clip}" }`, '',
  ].join('\n'));
  const daemon = spawn(bin, ['run', '--config', join(dir, 'keeppeek.toml')], { stdio: 'ignore', env: { ...process.env, NO_COLOR: '1' } });
  t.after(() => daemon.kill('SIGTERM'));
  const base = `http://127.0.0.1:${port}`;
  await waitFor('the web face', async () => (await fetch(`${base}/healthz`)).ok);

  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  t.after(() => browser.close());
  const context = await browser.newContext({ acceptDownloads: true });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));

  // First-time setup, by keyboard.
  await page.goto(base);
  await page.locator('#setup-username').waitFor();
  await page.screenshot({ path: join(shots, '1-setup.png') });
  await page.keyboard.type('root');
  await page.keyboard.press('Tab');
  await page.keyboard.type('correct horse battery');
  await page.keyboard.press('Enter');

  // The camera list with live state.
  await page.locator('#cameras tbody tr').first().waitFor();
  await waitFor('the camera to connect', async () => {
    await page.reload();
    await page.locator('#cameras tbody tr').first().waitFor();
    return (await page.locator('#cameras tbody tr').first().innerText()).includes('connected\t');
  });
  const row = await page.locator('#cameras tbody tr').first().innerText();
  assert.match(row, /porch\tmain\tconnected\th264\t640×360/);
  await page.screenshot({ path: join(shots, '2-cameras.png') });

  // Today's coverage: some share of the current 6 hours is recorded.
  await new Promise((r) => setTimeout(r, 4000));
  await page.click('#day-form button');
  await page.locator('#coverage li').first().waitFor();
  const shares = await page.locator('#coverage li').evaluateAll((lis) => lis.map((li) => Number(li.dataset.share)));
  assert.equal(shares.length, 4);
  assert.ok(shares.some((s) => s > 0), `coverage ${shares}`);
  await page.screenshot({ path: join(shots, '3-coverage.png') });

  // Export the last minute and download it. (Fragments reach the catalog a GOP and a flush
  // interval after they are recorded; by now several have.)
  await new Promise((r) => setTimeout(r, 2000));
  await page.evaluate(() => { document.querySelector('#export-to').value = localInput(new Date()); });
  await page.click('#export-form button');
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export-mp4')]);
  const saved = join(shots, 'export.mp4');
  await download.saveAs(saved);
  assert.match(download.suggestedFilename(), /^porch-main-\d{8}-\d{6}Z\.mp4$/);
  const probe = execFileSync('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-count_packets',
    '-show_entries', 'stream=codec_name,nb_read_packets', '-of', 'csv=p=0', saved]).toString().trim();
  const [codec, packets] = probe.split(',');
  assert.equal(codec, 'h264');
  assert.ok(Number(packets) >= 45, `several seconds: ${probe}`);
  await page.screenshot({ path: join(shots, '4-export.png') });

  // Log out: back to the login form; log in again.
  await page.click('#logout');
  await page.locator('#login-username').waitFor();
  await page.screenshot({ path: join(shots, '5-logged-out.png') });
  const me = await page.evaluate(async () => (await fetch('/api/me')).status);
  assert.equal(me, 401, 'the session is gone');
  await page.fill('#login-username', 'root');
  await page.fill('#login-password', 'correct horse battery');
  await page.click('#login-form button');
  await page.locator('#cameras tbody tr').first().waitFor();
  assert.deepEqual(errors, []);
});
