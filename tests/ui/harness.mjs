// What the browser tests share: the real keeppeek binary on a fresh data directory, Debian's
// Chromium driven by playwright-core, and small waits. Screenshots go to target/ui/.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

export const repo = resolve(import.meta.dirname, '..', '..');
export const shots = join(repo, 'target', 'ui');
mkdirSync(shots, { recursive: true });

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

// Starts keeppeek recording camera "porch" from the fixture clip, with `extra` config lines
// (a `[webrtc]` table turns live view on; without one it is off) and `camera` lines in the
// camera's table. Stopped when `t` ends; `kill9()` and `restart()` are a power cut and the
// next boot on the same data directory.
export async function startKeeppeek(t, extra = [], camera = []) {
  const bin = process.env.KEEPPEEK_BIN || join(repo, 'target', 'debug', 'keeppeek');
  const clip = join(repo, 'target', 'fixtures', 'h264.mp4');
  assert.ok(existsSync(bin), `build keeppeek first (${bin})`);
  assert.ok(existsSync(clip), `make the fixtures first (${clip})`);
  const dir = mkdtempSync(join(tmpdir(), 'kp-ui-'));
  const port = await freePort();
  const webrtc = extra.some((l) => l.trim() === '[webrtc]') ? [] : ['[webrtc]', 'port = 0'];
  writeFileSync(join(dir, 'keeppeek.toml'), [
    'data_dir = "data"', `listen = "127.0.0.1:${port}"`, 'flush_interval_s = 1',
    '[retention]', 'stream_max_bytes = "1 GiB"', 'total_max_bytes = "1 GiB"',
    ...webrtc, ...extra,
    '[[cameras]]', 'name = "porch"', ...camera, `main = { url = "file://${clip}" }`, '',
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
  return { base, dir, kill9, restart: up };
}

export async function launchChromium(t) {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  t.after(() => browser.close());
  return browser;
}

// First-time setup of the admin "root" in `page`, then waits until the camera is connected.
export async function setUpAdmin(page, base) {
  await page.goto(base);
  await page.locator('#setup-username').waitFor();
  await page.fill('#setup-username', 'root');
  await page.fill('#setup-password', 'correct horse battery');
  await page.click('#setup-form button');
  await page.locator('#cameras tbody tr').first().waitFor();
  await waitFor('the camera to connect', async () => {
    await page.reload();
    await page.locator('#cameras tbody tr').first().waitFor();
    return (await page.locator('#cameras tbody tr').first().innerText()).includes('connected\t');
  });
}

