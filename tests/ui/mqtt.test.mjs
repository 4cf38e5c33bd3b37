// Settings → Integrations in Chromium, against a real broker (Debian's mosquitto, started
// here): an admin sets the broker, reviews the change (the password never shown), applies
// it with no restart, and the page shows the box connected while an independent subscriber
// (mosquitto_sub) reads the box's retained "online". Screenshots at desktop and phone sizes
// go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, chmodSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { shots, startKeeppeek, launchChromium, newPage, waitFor, go, setUpAdmin, checkA11y, checkNoSideScroll, freePort,
  PHONE } from './harness.mjs';

async function startBroker(t) {
  const dir = mkdtempSync(join(tmpdir(), 'kp-mqtt-'));
  chmodSync(dir, 0o777);
  const port = await freePort();
  writeFileSync(join(dir, 'mosquitto.conf'), `listener ${port} 127.0.0.1\nallow_anonymous true\nlog_dest stderr\n`);
  const broker = spawn('mosquitto', ['-c', join(dir, 'mosquitto.conf')], { stdio: 'ignore' });
  t.after(() => broker.kill('SIGKILL'));
  await waitFor('mosquitto', () => new Promise((resolve) => {
    const probe = spawn('mosquitto_pub', ['-h', '127.0.0.1', '-p', String(port), '-t', 'probe', '-m', 'x'], { stdio: 'ignore' });
    probe.on('exit', (code) => resolve(code === 0));
    probe.on('error', () => resolve(false));
  }));
  return port;
}

test('the broker set in Settings → Integrations: reviewed, applied at once, connected, and the box online', async (t) => {
  const port = await startBroker(t);
  const heard = [];
  const sub = spawn('mosquitto_sub', ['-h', '127.0.0.1', '-p', String(port), '-v', '-t', 'home/nvr/#']);
  sub.stdout.on('data', (d) => heard.push(...String(d).split('\n').filter(Boolean)));
  t.after(() => sub.kill('SIGKILL'));
  const { base } = await startKeeppeek(t);
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, base);
  await go(page, '#/settings/integrations', '#mqtt-form');
  assert.match(await page.locator('#mqtt-status').textContent(), /Not set up/);
  const form = page.locator('#mqtt-form');
  await form.locator('input[name=host]').fill('127.0.0.1');
  await form.locator('input[name=port]').fill(String(port));
  await form.locator('input[name=username]').fill('nvr');
  await form.locator('input[name=password]').fill('br0ker-secret');
  await form.locator('input[name=prefix]').fill('home/nvr');
  await form.locator('button[type=submit]').click();
  const plan = page.locator('#mqtt-settings .plan');
  await plan.waitFor();
  const text = await plan.textContent();
  assert.match(text, /mqtt\.host none → 127\.0\.0\.1/);
  assert.match(text, /mqtt\.password none → set/);
  assert.doesNotMatch(text, /br0ker-secret/);
  assert.match(text, /Taken at once, with no camera paused/);
  await page.setViewportSize({ width: 1440, height: 1100 });
  await page.locator('#mqtt-settings').screenshot({ path: join(shots, 'settings-mqtt-review-desktop.png') });
  await plan.locator('button.primary').click();
  // Applied without a restart: the page shows the connection once it is up.
  // ("not connected to …" is what it says while it tries: not that.)
  await waitFor('connected shown', async () => /(?<!not )connected to 127\.0\.0\.1/.test(await page.locator('#mqtt-status').textContent()));
  assert.doesNotMatch(await page.locator('#mqtt-status').textContent(), /not connected/);
  await waitFor('the box online at the broker', () => heard.includes('home/nvr/available online'));
  await page.locator('#mqtt-settings').screenshot({ path: join(shots, 'settings-mqtt-desktop.png') });
  // The password is not shown back.
  assert.equal(await page.locator('#mqtt-form input[name=password]').inputValue(), '');
  await checkA11y(page, 'Settings → Integrations');
  await page.setViewportSize(PHONE);
  await page.screenshot({ path: join(shots, 'settings-mqtt-phone.png'), fullPage: true });
  await checkNoSideScroll(page, 'Settings → Integrations on a phone');
  assert.deepEqual(page.errors, []);
});
