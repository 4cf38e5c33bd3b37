// Events in Debian's Chromium against the real keeppeek binary: a page watching the camera
// live is subscribed on its control channel and receives each of 20 revisions of an event
// (a 4K snapshot each) as it is stored; after kill -9 and a restart all 20 are there; the
// events list shows the event with its thumbnail, the timeline a marker, and Play shows the
// recording from the pre-roll before the event. Screenshots go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repo, shots, startKeeppeek, launchChromium, waitFor, freePort, setUpAdmin } from './harness.mjs';

const BOUNDARY = 'kp-ui-boundary';

function multipart(envelope, jpeg) {
  const head = Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="event"\r\nContent-Type: application/json\r\n\r\n`
    + `${JSON.stringify(envelope)}\r\n--${BOUNDARY}\r\nContent-Disposition: form-data; name="snapshot"; filename="s.jpg"\r\n`
    + 'Content-Type: image/jpeg\r\n\r\n');
  return Buffer.concat([head, jpeg, Buffer.from(`\r\n--${BOUNDARY}--\r\n`)]);
}

// The fixture snapshot with a comment naming revision `n` after its start marker.
function snapshot(jpeg, n) {
  const text = Buffer.from(`revision ${n}`);
  const len = Buffer.alloc(2);
  len.writeUInt16BE(text.length + 2);
  return Buffer.concat([jpeg.subarray(0, 2), Buffer.from([0xff, 0xfe]), len, text, jpeg.subarray(2)]);
}

async function makeToken(page, scopes) {
  return page.evaluate(async (scopes) => {
    const csrf = (await (await fetch('/api/me')).json()).csrf;
    const r = await fetch('/api/tokens', { method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': csrf },
      body: JSON.stringify({ name: 'detector', scopes }) });
    return (await r.json()).token;
  }, scopes);
}

test('events reach a subscribed browser live, survive kill -9, and play from their pre-roll', async (t) => {
  const udp = await freePort();
  const box = await startKeeppeek(t, ['[webrtc]', `port = ${udp}`, 'loopback = true'],
    ['record = "events"', 'pre_roll_s = 3', 'post_roll_s = 1']);
  const browser = await launchChromium(t);
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await setUpAdmin(page, box.base);
  const token = await makeToken(page, ['events:write', 'view', 'metrics']);
  const auth = { authorization: `Bearer ${token}` };

  await page.locator('#cameras tbody tr button').first().click();
  await waitFor('the event subscription', () => page.evaluate(() => document.querySelector('#events-live').dataset.subscribed === 'true'));
  // Let the pre-roll fill (3 s, and 2 s for late events) before the event.
  await new Promise((r) => setTimeout(r, 5500));

  const jpeg = readFileSync(join(repo, 'target', 'fixtures', 'snapshot-4k.jpg'));
  const t0 = Date.now() * 1000;
  for (let n = 1; n <= 20; n++) {
    const envelope = { id: 'porch-1', camera: 'porch', time_us: t0, labels: ['person'], score: 0.8, text: `revision ${n}`, idempotency_key: `porch-1-${n}` };
    const r = await fetch(`${box.base}/api/events`, { method: 'POST', body: multipart(envelope, snapshot(jpeg, n)),
      headers: { ...auth, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` } });
    const answer = await r.json();
    assert.equal(r.status, 201, JSON.stringify(answer));
    assert.deepEqual([answer.id, answer.rev], [1, n]);
  }
  await waitFor('20 live notices', () => page.evaluate(() => eventNotices.length >= 20), 10000);
  const notices = await page.evaluate(() => eventNotices);
  assert.deepEqual(notices.map((e) => e.rev), Array.from({ length: 20 }, (_, i) => i + 1), 'each revision, in order');
  assert.ok(notices.every((e) => e.event === 1 && e.camera === 'porch' && e.time_us === t0 && e.snapshot_url.includes(`rev=${e.rev}`)));
  await page.screenshot({ path: join(shots, 'events-live.png') });

  // The event's recording ends one keyframe after the post-roll; let it be written.
  await waitFor('the event recording to end', async () => {
    const text = await (await fetch(`${box.base}/metrics`, { headers: auth })).text();
    return Number(text.match(/^keeppeek_event_recordings_finished_total\{stream="porch\/main"\} (\d+)$/m)[1]) >= 1;
  });
  // ... and committed: the stream's runs reach past the event.
  await waitFor('the recording committed', async () => {
    const q = `from_us=${t0 - 60_000_000}&to_us=${Date.now() * 1000 + 1_000_000}`;
    const runs = (await (await fetch(`${box.base}/api/streams/porch/main/recordings?${q}`, { headers: auth })).json()).runs;
    return runs.some((r) => r.end_us > t0 + 1_000_000);
  });

  await box.kill9();
  await box.restart();
  const revs = await (await fetch(`${box.base}/api/events/1`, { headers: auth })).json();
  assert.equal(revs.revisions.length, 20, 'all 20 revisions after kill -9');
  for (const [i, r] of revs.revisions.entries()) {
    const got = Buffer.from(await (await fetch(`${box.base}${r.snapshot.url}`, { headers: auth })).arrayBuffer());
    assert.ok(got.equals(snapshot(jpeg, i + 1)), `revision ${i + 1}'s snapshot`);
  }

  // The UI after the restart: log in again; the list shows the latest revision with its
  // thumbnail.
  await page.goto(box.base);
  await page.fill('#login-username', 'root');
  await page.fill('#login-password', 'correct horse battery');
  await page.click('#login-form button');
  const item = page.locator('#events-list li').first();
  await item.waitFor();
  assert.equal(await item.getAttribute('data-rev'), '20');
  await waitFor('the thumbnail', () => item.locator('img').evaluate((img) => img.complete && img.naturalWidth === 3840));

  // Play: the camera's recording from the keyframe at or before the pre-roll. Playback
  // rides on a live session, which needs the camera's first frame since the restart.
  await waitFor('the camera connected again', async () =>
    (await (await fetch(`${box.base}/api/cameras`, { headers: auth })).json())[0].streams[0].connected === true);
  await item.locator('button').click();
  await waitFor('stored playback', () => page.evaluate(() => document.querySelector('#live-state').dataset.mode === 'stored'));
  await waitFor('a position', () => page.evaluate(() => document.querySelector('#playback-position').dataset.wallUs !== undefined));
  const position = Number(await page.evaluate(() => document.querySelector('#playback-position').dataset.wallUs));
  const from = t0 - 3_000_000;
  assert.ok(position <= from + 600_000 && position >= from - 1_200_000,
    `plays from the keyframe at or before the pre-roll: ${(position - from) / 1e6} s from event - 3 s`);
  await waitFor('the event on the timeline', () => page.evaluate(() => Number(document.querySelector('#timeline').dataset.events) >= 1));
  await page.screenshot({ path: join(shots, 'events-play.png') });
  assert.deepEqual(errors, []);
});
