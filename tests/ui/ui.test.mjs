// The web face in a real browser (Debian's Chromium, driven by playwright-core) against the
// real keeppeek binary recording a file camera: first-time setup, the camera list, a day's
// coverage, an export download that ffprobe plays, logout and login again. Screenshots go
// to target/ui/. Run from the repository root after `cargo build`: node --test tests/ui/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { shots, startKeeppeek, launchChromium, waitFor } from './harness.mjs';

test('setup, cameras, coverage, export and logout in Chromium', async (t) => {
  const { base } = await startKeeppeek(t);
  const browser = await launchChromium(t);
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

  // The firmware section: a daemon run from a shell is not an image and says so; the support
  // bundle downloads (a tar whose config has its secrets replaced).
  assert.match(await page.locator('#system-status').innerText(), /not a KeepPeek image/);
  assert.ok(await page.locator('#update-form').isHidden(), 'no update form off an image');
  const [bundle] = await Promise.all([page.waitForEvent('download'), page.click('#support-bundle')]);
  assert.match(bundle.suggestedFilename(), /^keeppeek-support-\d+\.tar$/);
  const tarPath = join(shots, 'support.tar');
  await bundle.saveAs(tarPath);
  const listed = execFileSync('tar', ['-tf', tarPath]).toString();
  assert.match(listed, /^status\.json$/m);
  assert.match(listed, /^keeppeek\.toml$/m);

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
