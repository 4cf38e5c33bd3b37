// The offsite archive in the browser, against a real S3-compatible server no one here wrote
// (s3s-fs, built by tools/test.sh under target/peers; it checks every request's signature):
// a target set up from Settings → Archive, its state shown as it stores footage; then the
// footage the box deleted (its stream's cap is 1 MiB, so retention takes it once it is
// stored) shows striped on the timeline and plays from the bucket; an event the bucket holds
// and the box no longer does is listed there, plays, and its snapshot comes from the bucket.
// Screenshots at desktop and phone sizes in target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repo, shots, PHONE, freePort, waitFor, startKeeppeek, launchChromium, newPage, setUpAdmin, go, checkA11y, checkNoSideScroll } from './harness.mjs';

const ACCESS_KEY = 'keeppeek-test';
const SECRET_KEY = 'a-secret-the-server-checks';

async function startS3(t) {
  const bin = join(repo, 'target', 'peers', 's3s-fs', 'bin', 's3s-fs');
  assert.ok(existsSync(bin), `${bin} is missing: tools/test.sh builds it (cargo install s3s-fs)`);
  const dir = mkdtempSync(join(tmpdir(), 'kp-s3-'));
  mkdirSync(join(dir, 'nvr'));
  const port = await freePort();
  const server = spawn(bin, ['--host', '127.0.0.1', '--port', String(port), '--access-key', ACCESS_KEY, '--secret-key', SECRET_KEY, dir],
    { stdio: 'ignore' });
  t.after(() => server.kill());
  await waitFor('s3s-fs listening', async () => { await fetch(`http://127.0.0.1:${port}/`); return true; }, 10000);
  return { port, dir };
}

test('an archive set up in Settings stores footage, and the timeline plays what only the bucket holds', { timeout: 300000 }, async (t) => {
  const s3 = await startS3(t);
  const kp = await startKeeppeek(t, [], [], null, [], { streamMax: '1 MiB' });
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, kp.base);

  // Settings → Archive: a new target, reviewed, then applied.
  await go(page, '#/settings/archive', '#archive-add-card form');
  const form = page.locator('#archive-add-card form');
  await form.locator('[name=endpoint]').fill(`http://127.0.0.1:${s3.port}`);
  await form.locator('[name=bucket]').fill('nvr');
  await form.locator('[name=prefix]').fill('house');
  await form.locator('[name=access_key]').fill(ACCESS_KEY);
  await form.locator('[name=secret_key]').fill(SECRET_KEY);
  await form.locator('[name=before_delete]').check();
  await form.locator('button[type=submit]').click();
  const plan = page.locator('#archive-add-card .plan');
  await plan.waitFor();
  const planText = await plan.innerText();
  assert.match(planText, /Taken at once, with no camera paused/, planText);
  assert.ok(!planText.includes(SECRET_KEY), 'the secret is not shown back');
  await plan.locator('button.primary').click();
  const status = page.locator('[data-status=offsite]');
  await waitFor('the target stores footage', async () => Number((/(\d+) recordings? \(/.exec(await status.innerText()) || [])[1]) >= 1, 60000);
  assert.match(await page.locator('[data-archive-target=offsite]').innerText(), /127\.0\.0\.1:\d+\/nvr\/house/);
  await page.screenshot({ path: join(shots, 'settings-archive.png'), fullPage: true });
  await checkA11y(page, 'settings → archive');
  // The bucket's boxes.
  await page.click('#archive-list');
  await page.locator('[data-box=house]').waitFor();
  assert.match(await page.locator('[data-box=house]').innerText(), /this box/);
  await page.setViewportSize(PHONE);
  await checkNoSideScroll(page, 'settings → archive on a phone');
  await page.screenshot({ path: join(shots, 'settings-archive-phone.png'), fullPage: true });
  await page.setViewportSize({ width: 1440, height: 900 });

  // Retention deletes what the bucket holds: the oldest archived recording is gone here.
  let gone = null;
  await waitFor('a recording deleted here and held by the bucket', async () => {
    const now = Date.now() * 1000;
    const local = await page.evaluate(async (q) => (await (await fetch(`/api/streams/porch/main/recordings?${q}`)).json()), `from_us=${now - 3600e6}&to_us=${now}`);
    const archived = await page.evaluate(async (q) => (await (await fetch(`/api/archive/offsite/recordings?${q}`)).json()), `stream=porch/main&from_us=${now - 3600e6}&to_us=${now}`);
    const first = local.runs.length ? local.runs[0].start_us : Infinity;
    gone = archived.recordings.find((r) => r.wall_end_us <= first);
    return Boolean(gone);
  }, 120000);

  // An event in that stretch, with a snapshot: stored in the bucket, then deleted here.
  const jpeg = readFileSync(join(repo, 'target', 'fixtures', 'snapshot-4k.jpg'));
  const eventId = await page.evaluate(async ({ at, jpeg }) => {
    const csrf = (await (await fetch('/api/me')).json()).csrf;
    const headers = { 'content-type': 'application/json', 'x-csrf-token': csrf };
    const made = await fetch('/api/tokens', { method: 'POST', headers, body: JSON.stringify({ name: 'detector', scopes: ['events:write'] }) });
    const { token } = await made.json();
    const form = new FormData();
    form.append('event', new Blob([JSON.stringify({ camera: 'porch', time_us: at, labels: ['fox'], record: false })], { type: 'application/json' }));
    form.append('snapshot', new Blob([new Uint8Array(jpeg)], { type: 'image/jpeg' }), 's.jpg');
    const r = await fetch('/api/events', { method: 'POST', body: form, headers: { authorization: `Bearer ${token}` } });
    return (await r.json()).id;
  }, { at: gone.wall_start_us + 1e6, jpeg: [...jpeg] });
  assert.ok(eventId, 'the event is stored');
  // Stored, and in its camera's events manifest (written between uploads).
  await waitFor('the event stored in the bucket and described', async () => page.evaluate(async (at) => {
    const q = `camera=porch&from_us=${at - 1e6}&to_us=${at + 1e6}`;
    const r = await fetch(`/api/archive/offsite/events?${q}`);
    return r.ok && (await r.json()).events.length === 1;
  }, gone.wall_start_us + 1e6), 90000);
  const deleted = await page.evaluate(async (id) => {
    const csrf = (await (await fetch('/api/me')).json()).csrf;
    return (await fetch(`/api/events/${id}`, { method: 'DELETE', headers: { 'x-csrf-token': csrf } })).status;
  }, eventId);
  assert.ok(deleted < 300, `the event is deleted here: ${deleted}`);

  // The timeline shows it striped, and a click there plays it from the bucket.
  await go(page, '#/timeline/porch', '.tl-track').catch((e) => {
    throw new Error(`${e.message}: errors ${JSON.stringify(page.errors)}; requests ${JSON.stringify(page.trouble)}`);
  });
  await page.evaluate(() => { const now = Date.now() * 1000; window.keeppeek.timeline.setWindow(now - 5 * 60e6, now + 10e6, true); });
  await waitFor('an archived stretch on the timeline', async () => (await page.locator('.tl-run.archived').count()) >= 1, 20000);
  // The widest stretch (the event's hold keeps footage around it here, so there may be more
  // than one).
  // (Scrolled into view first: on a phone the upright timeline is taller than the screen.)
  const widest = async () => {
    const runs = page.locator('.tl-run.archived');
    const areas = await runs.evaluateAll((els) => els.map((e) => e.getBoundingClientRect()).map((r) => r.width * r.height));
    const stretch = runs.nth(areas.indexOf(Math.max(...areas)));
    await stretch.scrollIntoViewIfNeeded();
    return stretch.boundingBox();
  };
  assert.ok(await page.locator('.tl-legend').isVisible(), 'the stripes are explained');
  const playArchived = async () => {
    const b = await widest();
    await page.mouse.click(b.x + b.width / 2, b.y + b.height / 2);
    await page.locator('.tl-archived video').waitFor();
    await waitFor('the archived footage decoding', async () => page.evaluate(() => {
      const v = document.querySelector('.tl-archived video');
      return !v.error && v.webkitVideoDecodedByteCount > 10000 && v.currentTime > 0.5;
    }), 30000);
  };
  // The event the bucket holds is listed, and plays from there.
  const chip = page.locator('.tl-in-view [data-archived=true]');
  await waitFor('the archived event listed', async () => (await chip.count()) === 1, 20000);
  assert.match(await chip.innerText(), /fox · archive/);
  const snapshot = await page.evaluate(async () => {
    const e = window.keeppeek.timeline.events.find((x) => x.archived);
    const r = await fetch(e.snapshot.url);
    return { status: r.status, type: r.headers.get('content-type'), bytes: (await r.arrayBuffer()).byteLength };
  });
  assert.deepEqual(snapshot, { status: 200, type: 'image/jpeg', bytes: jpeg.length }, 'its snapshot, from the bucket');
  await chip.click();
  await waitFor('the archived event playing', async () => page.evaluate(() => {
    const v = document.querySelector('.tl-archived video');
    return !v.error && v.currentTime > 0.5;
  }), 30000);
  await playArchived();
  assert.match(await page.locator('.tl-archived .archived-state').innerText(), /From the archive \(offsite\)/);
  assert.ok(await page.locator('.tl-player:not(.tl-archived)').isHidden(), 'the live player makes room');
  await page.screenshot({ path: join(shots, 'timeline-archive.png') });
  await checkA11y(page, 'the timeline playing from the archive');
  // On a phone the timeline stands upright; the stretch still plays.
  await page.setViewportSize(PHONE);
  // The timeline turns upright once the page has seen the new width.
  await page.locator('.timeline.vertical').waitFor();
  await playArchived();
  await checkNoSideScroll(page, 'the timeline from the archive on a phone');
  await page.screenshot({ path: join(shots, 'timeline-archive-phone.png'), fullPage: true });
  // Back to live: the archive's player goes.
  await page.locator('.tl-archived button').click();
  assert.ok(await page.locator('.tl-archived').isHidden());
  assert.deepEqual(page.errors, []);
});
