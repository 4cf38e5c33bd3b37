// Events in Debian's Chromium against the real keeppeek binary: the timeline page of a
// camera is subscribed on its control channel and receives each of 20 revisions of an event
// (a 4K snapshot each) as it is stored; after kill -9 and a restart all 20 are there; the
// events page lists the event with its thumbnail, shows a new one arriving at the top, and
// filters by label; the event's page draws its boxes, lists every revision, plays the
// recording from the pre-roll before the event and downloads its clip, which ffprobe reads.
// Screenshots go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { repo, shots, startLiveKeeppeek, launchChromium, newPage, waitFor, go, setUpAdmin, logIn, checkA11y, checkNoSideScroll,
  fileCamera, PHONE, DESKTOP } from './harness.mjs';

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

test('events reach a subscribed browser live, survive kill -9, are reviewed and play from their pre-roll', async (t) => {
  const box = await startLiveKeeppeek(t, [], ['record = "events"', 'pre_roll_s = 3', 'post_roll_s = 1']);
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, box.base);
  const token = await makeToken(page, ['events:write', 'view', 'metrics']);
  const auth = { authorization: `Bearer ${token}` };

  await go(page, '#/timeline/porch', '.tl-track');
  await waitFor('the event subscription', () => page.evaluate(() => document.querySelector('.tl-lane').dataset.subscribed === 'true'));
  // Let the pre-roll fill (3 s, and 2 s for late events) before the event.
  await new Promise((r) => setTimeout(r, 5500));

  const jpeg = readFileSync(join(repo, 'target', 'fixtures', 'snapshot-4k.jpg'));
  const t0 = Date.now() * 1000;
  const boxes = [{ label: 'person', score: 0.8, x: 0.1, y: 0.2, w: 0.3, h: 0.5 }];
  const post = async (envelope, n) => {
    const r = await fetch(`${box.base}/api/events`, { method: 'POST', body: multipart(envelope, snapshot(jpeg, n)),
      headers: { ...auth, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` } });
    const answer = await r.json();
    assert.equal(r.status, 201, JSON.stringify(answer));
    return answer;
  };
  for (let n = 1; n <= 20; n++) {
    const answer = await post({ id: 'porch-1', camera: 'porch', time_us: t0, labels: ['person'], score: 0.8, boxes, text: `revision ${n}`,
      idempotency_key: `porch-1-${n}` }, n);
    assert.deepEqual([answer.id, answer.rev], [1, n]);
  }
  await waitFor('20 live notices', () => page.evaluate(() => keeppeek.notices.length >= 20), 10000);
  const notices = await page.evaluate(() => keeppeek.notices);
  assert.deepEqual(notices.map((e) => e.rev), Array.from({ length: 20 }, (_, i) => i + 1), 'each revision, in order');
  assert.ok(notices.every((e) => e.event === 1 && e.camera === 'porch' && e.time_us === t0 && e.snapshot.url.includes(`rev=${e.rev}`)));
  await waitFor('the event on the timeline', async () => Number(await page.locator('.tl-track').getAttribute('data-events')) >= 1);
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

  // The events page after the restart: log in again; the list shows the latest revision
  // with its thumbnail.
  await logIn(page, box.base);
  await go(page, '#/events', '.event-card');
  const item = page.locator('.event-card').first();
  assert.equal(await item.getAttribute('data-rev'), '20');
  await waitFor('the thumbnail', () => item.locator('img').evaluate((img) => img.complete && img.naturalWidth === 3840));
  // Its footage outlived the kill -9, held against retention for the camera's 14 days.
  assert.equal(await item.locator('.footage').getAttribute('data-footage'), 'held');
  const until = new Date(Date.now() + 14 * 86400e3).toLocaleDateString([], { weekday: 'short', day: 'numeric', month: 'short' });
  assert.equal(await item.locator('.footage').innerText(), `Footage kept until ${until}`);

  // A new event while the page is open arrives at the top, marked new.
  await post({ camera: 'porch', time_us: Date.now() * 1000, labels: ['cat'], score: 0.6, text: 'on the wall' }, 21);
  await waitFor('the new event at the top', async () => (await page.locator('.event-card').first().getAttribute('data-event')) === '2');
  assert.match(await page.locator('.event-card').first().getAttribute('class'), /fresh/);
  assert.match(await page.locator('.news').innerText(), /1 new/);
  await page.screenshot({ path: join(shots, 'events-review.png') });
  await checkA11y(page, 'the events page');

  // Filter by label: the chip for "cat" leaves only the cat, and the URL says so.
  await page.click('.filters button.chip:has-text("cat")');
  await waitFor('only the cat', async () => (await page.locator('.event-card').count()) === 1
    && (await page.locator('.event-card').first().getAttribute('data-event')) === '2');
  assert.match(page.url(), /#\/events\?label=cat/);
  await page.setViewportSize(PHONE);
  await page.screenshot({ path: join(shots, 'events-review-phone.png') });
  await checkNoSideScroll(page, 'the events page at 390 px');
  await page.setViewportSize(DESKTOP);

  // The event's page: its snapshot with the box drawn where the event put it, and all 20
  // revisions.
  await go(page, '#/events/1', '.snapshot img');
  await waitFor('the snapshot', () => page.locator('.snapshot img').evaluate((img) => img.complete && img.naturalWidth === 3840));
  const [img, drawn] = [await page.locator('.snapshot img').boundingBox(), await page.locator('.box').first().boundingBox()];
  assert.ok(Math.abs(drawn.x - (img.x + 0.1 * img.width)) < 3 && Math.abs(drawn.width - 0.3 * img.width) < 4, `the box at ${JSON.stringify(drawn)} on ${JSON.stringify(img)}`);
  assert.equal(await page.locator('.revisions button').count(), 20);
  await page.screenshot({ path: join(shots, 'event-detail.png') });
  await checkA11y(page, 'an event\'s page');

  // The clip: from the pre-roll to the post-roll, as an MP4 ffprobe reads.
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('text=Download clip')]);
  const saved = join(shots, 'event-clip.mp4');
  await download.saveAs(saved);
  const seconds = Number(execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'format=duration', '-of', 'csv=p=0', saved]).toString());
  assert.ok(seconds >= 3 && seconds <= 8, `a clip of ${seconds} s around the event`);

  // Play: the camera's recording from the keyframe at or before the pre-roll. Playback
  // rides on a live session, which needs the camera's first frame since the restart.
  await waitFor('the camera connected again', async () =>
    (await (await fetch(`${box.base}/api/cameras`, { headers: auth })).json())[0].streams[0].connected === true);
  await page.click('text=Play from before');
  await waitFor('stored playback', () => page.evaluate(() => document.querySelector('.player-state').dataset.mode === 'stored'));
  await waitFor('a position', () => page.evaluate(() => document.querySelector('.player-position').dataset.wallUs !== undefined));
  const position = Number(await page.evaluate(() => document.querySelector('.player-position').dataset.wallUs));
  const from = t0 - 3_000_000;
  assert.ok(position <= from + 600_000 && position >= from - 1_200_000,
    `plays from the keyframe at or before the pre-roll: ${(position - from) / 1e6} s from event - 3 s`);
  await page.screenshot({ path: join(shots, 'events-play.png') });

  // An admin deletes the event: its page says its footage is held, asks first, and the
  // list no longer has it (this is its page still, playing).
  await page.locator('.meta .footage').waitFor();
  assert.match(await page.locator('.meta .footage').innerText(), /^Footage kept until /);
  await page.click('button:text-is("Delete event")');
  await page.locator('dialog.confirm').waitFor();
  assert.match(await page.locator('dialog.confirm p').innerText(), /no longer held/);
  await page.click('dialog.confirm button:text-is("Delete")');
  await page.locator('.event-card').first().waitFor();
  assert.match(await page.locator('#message').innerText(), /Event deleted/);
  assert.equal(await page.locator('.event-card[data-event="1"]').count(), 0);
  assert.equal((await fetch(`${box.base}/api/events/1`, { headers: auth })).status, 404);
  assert.deepEqual(page.errors, []);
});

test('the events list pages as it is scrolled, and filters by camera, time and words', async (t) => {
  const cameras = ['porch', 'yard'].flatMap((n) => fileCamera(n, { lines: ['record = "events"', 'pre_roll_s = 0', 'post_roll_s = 0'] }));
  const box = await startLiveKeeppeek(t, [], [], cameras);
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, box.base, 2);
  const token = await makeToken(page, ['events:write']);
  // 70 events over the last 70 minutes, every 7th on the yard and an old one of last week.
  const now = Date.now() * 1000;
  const send = async (envelope) => {
    const r = await fetch(`${box.base}/api/events`, { method: 'POST', body: JSON.stringify(envelope),
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } });
    assert.equal(r.status, 201, await r.text());
  };
  for (let i = 0; i < 70; i++) {
    await send({ camera: i % 7 ? 'porch' : 'yard', time_us: now - i * 60e6, labels: [i % 2 ? 'car' : 'person'], text: `number ${i}`, record: false });
  }
  await send({ camera: 'porch', time_us: now - 6 * 86400e6, labels: ['fox'], text: 'a fox at night', record: false });

  // 30 at first; scrolled to the end, the next pages come.
  await go(page, '#/events', '.event-card');
  const cards = page.locator('.event-card');
  await waitFor('the first page', async () => (await cards.count()) === 30);
  for (const want of [60, 71]) {
    await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
    await waitFor(`${want} events`, async () => (await cards.count()) === want);
  }
  await waitFor('the end', async () => (await page.locator('.more').innerText()) === 'That is all.');
  assert.equal(await cards.last().getAttribute('data-time-us'), String(now - 6 * 86400e6), 'oldest last');

  // Filters: the yard (10 events); the last hour (60 of 71); words.
  await page.click('.filters button.chip:has-text("yard")');
  await waitFor('the yard only', async () => (await cards.count()) === 10);
  // Each click draws the list anew: the next click waits for the new list, or it may land
  // on the old one as it goes.
  await page.click('.filters button.chip:has-text("All cameras")');
  await page.locator('.filters button.chip[aria-pressed="true"]:has-text("All cameras")').waitFor();
  await waitFor('all cameras\' first page', async () => (await cards.count()) === 30)
    .catch(async (e) => { throw new Error(`${e.message}: ${await cards.count()} cards at ${page.url()}`); });
  await page.click('.filters button.chip:has-text("Last hour")');
  await page.locator('.filters button.chip[aria-pressed="true"]:has-text("Last hour")').waitFor();
  await waitFor('the last hour\'s first page', async () => (await cards.count()) === 30 && /time=/.test(page.url()))
    .catch(async (e) => { throw new Error(`${e.message}: ${await cards.count()} cards at ${page.url()}`); });
  // Scrolled on to the end (the box tells the end by an empty page after a full one).
  await waitFor('the last hour', async () => {
    await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
    return (await cards.count()) === 60 && (await page.locator('.more').innerText()) === 'That is all.';
  });
  await page.click('.filters button.chip:has-text("Any time")');
  // The list is drawn again for the new filter: type into the new one.
  await page.locator('.filters button.chip[aria-pressed="true"]:has-text("Any time")').waitFor();
  await page.fill('.search input', 'fox');
  await page.press('.search input', 'Enter');
  await waitFor('the fox', async () => (await cards.count()) === 1 && /a fox at night/.test(await cards.first().innerText()));
  assert.match(page.url(), /q=fox/);
  // Reload keeps the filter (it is in the URL).
  await page.reload();
  await waitFor('the fox after a reload', async () => (await cards.count()) === 1);
  assert.deepEqual(page.errors, []);
});
