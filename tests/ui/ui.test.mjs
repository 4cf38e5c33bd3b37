// The web face's pages in a real browser (Debian's Chromium, driven by playwright-core)
// against the real keeppeek binary recording a file camera: first-time setup by keyboard,
// then every page at desktop (1440×900) and phone (390×844) sizes, each checked by axe-core
// and for sideways scrolling, with screenshots in target/ui/; the timeline's window
// download that ffprobe plays; the health page's figures; users and tokens with the box's
// refusal next to its field; the support bundle; logout and login again.
// Run from the repository root after `cargo build`: node --test tests/ui/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { shots, startKeeppeek, launchChromium, newPage, waitFor, sleep, go, logIn, waitConnected, checkA11y,
  checkNoSideScroll, DESKTOP, PHONE } from './harness.mjs';

// Each page: its hash and an element that shows it is drawn.
const PAGES = [
  ['live', '#/live', '.tile video'],
  ['timeline', '#/timeline/porch', '.tl-track[data-runs]'],
  ['events', '#/events', '.more'],
  ['health', '#/health', 'table.health tbody tr'],
  ['settings', '#/settings', '.camera-list'],
  ['recording', '#/settings/recording', '.bulk-form'],
  ['storage', '#/settings/storage', 'table.reach'],
  ['revisions', '#/settings/revisions', '.revisions-list li'],
  ['accounts', '#/settings/accounts', '#user-form'],
  ['system', '#/system', '#system-status'],
];

test('setup, every page at both sizes, export, users, support bundle and logout', async (t) => {
  const { base } = await startKeeppeek(t);
  const browser = await launchChromium(t);
  const page = await newPage(browser);

  // First-time setup, by keyboard; it lands on the live wall.
  await page.goto(base);
  await page.locator('#setup-username').waitFor();
  await checkA11y(page, 'the setup form');
  await page.screenshot({ path: join(shots, 'setup.png') });
  await page.keyboard.type('root');
  await page.keyboard.press('Tab');
  await page.keyboard.type('correct horse battery');
  await page.keyboard.press('Enter');
  await page.locator('#nav a[aria-current=page][data-page=live]').waitFor();
  assert.deepEqual(await page.locator('#nav .nav-text').allInnerTexts(), ['Live', 'Timeline', 'Events', 'Recordings', 'Settings', 'System']);
  await waitConnected(page, 1);
  // Let some seconds be recorded and committed.
  await sleep(5000);

  // Light at both sizes, then dark (the system's setting) on the desktop.
  for (const [size, scheme] of [[DESKTOP, 'light'], [PHONE, 'light'], [DESKTOP, 'dark']]) {
    await page.setViewportSize(size);
    await page.emulateMedia({ colorScheme: scheme });
    const tag = `${size === DESKTOP ? 'desktop' : 'phone'}${scheme === 'dark' ? '-dark' : ''}`;
    for (const [name, hash, ready] of PAGES) {
      await go(page, hash, ready);
      await sleep(name === 'live' ? 1500 : 300);
      await page.screenshot({ path: join(shots, `${name}-${tag}.png`) });
      await checkNoSideScroll(page, `${name} at ${size.width} px`);
      await checkA11y(page, `${name} at ${size.width} px, ${scheme}`);
    }
  }
  // Between a phone and a desktop (a tablet, a narrow window) the top bar still fits: the
  // navigation does not run under the Log out button.
  for (const width of [702, 760, 820, 900, 1000, 1100]) {
    await page.setViewportSize({ width, height: 800 });
    const [navRight, logoutLeft, barScroll, barWidth] = await page.evaluate(() => [
      document.querySelector('#nav').getBoundingClientRect().right, document.querySelector('#logout').getBoundingClientRect().left,
      document.querySelector('.topbar').scrollWidth, document.querySelector('.topbar').clientWidth]);
    assert.ok(navRight <= logoutLeft && barScroll <= barWidth, `the top bar at ${width} px: navigation to ${navRight}, Log out from ${logoutLeft}`);
    if (width === 760) await page.screenshot({ path: join(shots, 'topbar-760.png'), clip: { x: 0, y: 0, width, height: 120 } });
  }
  await page.setViewportSize(DESKTOP);
  await page.emulateMedia({ colorScheme: 'light' });

  // Routing: Back returns to the previous page, reload keeps the page.
  await go(page, '#/health', 'table.health tbody tr');
  await go(page, '#/system', '#system-status');
  await page.goBack();
  await page.locator('#view[data-page=health]').waitFor();
  await page.reload();
  await page.locator('#view[data-page=health] table.health tbody tr').waitFor();

  // Recording health: the stream, connected, with some of the last 24 h recorded.
  const row = page.locator('table.health tbody tr[data-stream="porch/main"]');
  assert.match(await row.innerText(), /porch\s+main/);
  const day = Number(await row.locator('.meter').first().getAttribute('data-share'));
  assert.ok(day > 0 && day < 0.01, `a few seconds of 24 h: ${day}`);

  // The timeline's window, downloaded: an MP4 that ffprobe reads with seconds of video.
  await go(page, '#/timeline/porch', '.tl-track[data-runs]');
  await waitFor('a run on the timeline', async () => Number(await page.locator('.tl-track').getAttribute('data-runs')) >= 1);
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('text=Download window')]);
  const saved = join(shots, 'export.mp4');
  await download.saveAs(saved);
  assert.match(download.suggestedFilename(), /^porch-main-\d{8}-\d{6}Z\.mp4$/);
  const probe = execFileSync('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-count_packets',
    '-show_entries', 'stream=codec_name,nb_read_packets', '-of', 'csv=p=0', saved]).toString().trim();
  const [codec, packets] = probe.split(',');
  assert.equal(codec, 'h264');
  assert.ok(Number(packets) >= 45, `several seconds: ${probe}`);

  // Settings: a password the box refuses is answered next to the password field; a good
  // one adds the user; a token is shown once.
  await go(page, '#/settings/accounts', '#user-form');
  await page.fill('#user-form input[name=username]', 'guest');
  await page.fill('#user-form input[name=password]', 'x'.repeat(200));
  await page.click('#user-form button[type=submit]');
  const fieldError = page.locator('#user-form input[name=password] ~ .field-error');
  await waitFor('the refusal next to the password', async () => /password is \d+ to \d+ bytes/.test(await fieldError.innerText()));
  await page.screenshot({ path: join(shots, 'settings-refused.png') });
  await page.fill('#user-form input[name=password]', 'another good password');
  await page.click('#user-form button[type=submit]');
  await waitFor('the new user listed', async () => (await page.locator('.rows').first().innerText()).includes('guest'));
  await page.fill('#token-form input[name=name]', 'detector');
  await page.click('#token-form button[type=submit]');
  await page.locator('.secret code').waitFor();
  assert.match(await page.locator('.secret code').innerText(), /^kp_/);

  // Removing a user asks first; Cancel keeps them.
  await page.click('button[aria-label="Remove guest"]');
  await page.locator('dialog.confirm').waitFor();
  await checkA11y(page, 'the confirmation');
  await page.screenshot({ path: join(shots, 'settings-confirm.png') });
  await page.click('dialog.confirm button[value=no]');
  assert.ok((await page.locator('.rows').first().innerText()).includes('guest'));
  await page.click('button[aria-label="Remove guest"]');
  await page.click('dialog.confirm button[value=yes]');
  await waitFor('the user gone', async () => !(await page.locator('.rows').first().innerText()).includes('guest'));

  // System: a daemon run from a shell is not an image and says so; the support bundle
  // downloads (a tar whose config has its secrets replaced).
  await go(page, '#/system', '#system-status');
  assert.match(await page.locator('#system-status').innerText(), /not a KeepPeek image/);
  assert.equal(await page.locator('#update-form').count(), 0, 'no update form off an image');
  // What the box has written, by what wrote it, with a day's worth at the pace so far.
  const wear = await page.locator('section[aria-labelledby=wear-title]').innerText();
  assert.match(wear, /Recordings\s+[\d.]+ [KMG]?B · about [\d.]+ [KMG]?B a day/, wear);
  assert.match(wear, /Early saves\s+[\d.]+ [KMG]?B \([\d.]+% of all writes\) in \d+ for events/, wear);
  const [bundle] = await Promise.all([page.waitForEvent('download'), page.click('#support-bundle')]);
  assert.match(bundle.suggestedFilename(), /^keeppeek-support-\d+\.tar$/);
  const tarPath = join(shots, 'support.tar');
  await bundle.saveAs(tarPath);
  const listed = execFileSync('tar', ['-tf', tarPath]).toString();
  assert.match(listed, /^status\.json$/m);
  assert.match(listed, /^keeppeek\.toml$/m);

  // Log out: back to the login form; log in again, by the page's own form.
  await page.click('#logout');
  await page.locator('#login-username').waitFor();
  await checkA11y(page, 'the login form');
  await page.screenshot({ path: join(shots, 'logged-out.png') });
  assert.equal(await page.evaluate(async () => (await fetch('/api/me')).status), 401, 'the session is gone');
  await logIn(page, base);
  assert.deepEqual(page.errors, []);
});
