// The example analysis service (examples/detector) against the real keeppeek binary, with
// its own client (conformance.py, in the detector's venv under target/detector): 20
// envelope-only events as the transport's baseline, then 20 revisions of one event with a
// 3840x2160 JPEG, each waiting for its durable acknowledgement and then for the matching
// notice on the control channel of a timeline page open in Chromium (a WebRTC data channel),
// a retried idempotency key answered and not stored again, and then the detector itself
// watching the camera's sub stream over WHEP and posting motion with a box. The events page
// then finds the revised event and the detector's motion. Screenshots go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { repo, shots, startLiveKeeppeek, launchChromium, newPage, waitFor, go, setUpAdmin, checkNoSideScroll, fileCamera,
  PHONE, DESKTOP } from './harness.mjs';

const python = join(repo, 'target', 'detector', 'venv', 'bin', 'python');

async function makeToken(page, name, scopes) {
  return page.evaluate(async ([name, scopes]) => {
    const csrf = (await (await fetch('/api/me')).json()).csrf;
    const r = await fetch('/api/tokens', { method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': csrf },
      body: JSON.stringify({ name, scopes }) });
    return { status: r.status, answer: await r.json() };
  }, [name, scopes]).then(({ status, answer }) => {
    assert.equal(status, 201, `token ${name}: ${JSON.stringify(answer)}`);
    return answer.token;
  });
}

test('the example detector: 20 envelopes, 20 revisions with a 4K JPEG each acknowledged and seen live, its own motion found', async (t) => {
  assert.ok(existsSync(python), `the detector's venv is missing (${python}): tools/test.sh makes it`);
  const box = await startLiveKeeppeek(t, [], [], fileCamera('porch', { sub: true, lines: ['record = "events"', 'pre_roll_s = 2', 'post_roll_s = 1'] }));
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, box.base, 2);
  const view = await makeToken(page, 'detector-view', ['view']);
  const events = await makeToken(page, 'detector-events', ['events:write']);
  await go(page, '#/timeline/porch', '.tl-track');
  await waitFor('the event subscription', () => page.evaluate(() => document.querySelector('.tl-lane').dataset.subscribed === 'true'));

  const run = spawn(python, [join(repo, 'examples', 'detector', 'conformance.py'), '--box', box.base, '--camera', 'porch',
    '--view-token', view, '--events-token', events, '--jpeg', join(repo, 'target', 'fixtures', 'snapshot-4k.jpg'),
    '--watch-s', '12', '--lockstep'], { cwd: join(repo, 'examples', 'detector'), stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  run.stderr.on('data', (d) => { stderr += d; });
  t.after(() => run.kill('SIGKILL'));
  const exited = new Promise((ok) => run.on('exit', ok));

  // Each stored post: its notice on the control channel before the next post.
  const lines = [];
  const noticeMs = [];
  for await (const text of createInterface({ input: run.stdout })) {
    const line = JSON.parse(text);
    lines.push(line);
    if (line.phase === 'envelope' || line.phase === 'revision') {
      const acked = Date.now();
      // Looked for at every frame the page draws, so the time it took is to a frame.
      await page.waitForFunction(([event, rev]) => keeppeek.notices.some((n) => n.event === event && n.rev === rev),
        [line.event, line.rev], { polling: 'raf', timeout: 5000 })
        .catch((e) => { throw new Error(`the notice of event ${line.event} revision ${line.rev}: ${e.message}`); });
      noticeMs.push(Date.now() - acked);
      run.stdin.write('next\n');
    }
  }
  const code = await exited;
  assert.equal(code, 0, `conformance.py failed: ${stderr.slice(-2000)}`);

  const of = (phase) => lines.filter((l) => l.phase === phase);
  assert.deepEqual(of('envelope').map((l) => l.rev), Array(20).fill(1), '20 new events');
  assert.equal(new Set(of('envelope').map((l) => l.event)).size, 20);
  const revisions = of('revision');
  assert.deepEqual(revisions.map((l) => l.rev), Array.from({ length: 20 }, (_, i) => i + 1), 'revisions 1 to 20, in order');
  assert.equal(new Set(revisions.map((l) => l.event)).size, 1, 'one event');
  assert.ok(revisions.every((l) => l.jpeg_bytes > 300_000), 'each with the 4K JPEG');
  const revised = revisions[0].event;
  assert.deepEqual(of('retry').map((l) => [l.event, l.rev]), [[revised, 20]], 'the retried key answered with the stored revision');
  const watched = of('watch');
  assert.ok(watched.length >= 1, 'the detector posted motion');
  const summary = of('summary')[0];
  writeFileSync(join(shots, 'detector-report.json'), JSON.stringify({ ...summary, notice_after_ack_ms: noticeMs }, null, 2));
  console.log(`detector: envelope p50 ${summary.envelope_ms.p50} ms p95 ${summary.envelope_ms.p95} ms; `
    + `4K revision p50 ${summary.revision_ms.p50} ms p95 ${summary.revision_ms.p95} ms; notice after ack p50 ${[...noticeMs].sort((a, b) => a - b)[noticeMs.length >> 1]} ms, max ${Math.max(...noticeMs)} ms; `
    + `${summary.watch_events} motion event(s)`);

  // No second 21st revision from the retry: the timeline's notices end at 20 for that event.
  const revs = await page.evaluate((event) => keeppeek.notices.filter((n) => n.event === event).map((n) => n.rev), revised);
  assert.deepEqual(revs, Array.from({ length: 20 }, (_, i) => i + 1));
  // The detector's motion reached the page live too.
  const motionEvent = watched[0].event;
  await waitFor('the motion notice', () => page.evaluate((event) => keeppeek.notices.some((n) => n.event === event && n.labels.includes('motion')), motionEvent));

  // The events page: the revised event with its 4K snapshot and box, and the detector's motion.
  await go(page, '#/events', '.event-card');
  await waitFor('the revised event listed', async () => (await page.locator(`.event-card[data-event="${revised}"]`).getAttribute('data-rev')) === '20');
  await page.click('.filters button.chip:has-text("motion")');
  await waitFor('the detector\'s motion', async () => (await page.locator(`.event-card[data-event="${motionEvent}"]`).count()) === 1
    && (await page.locator('.event-card').count()) === new Set(watched.map((l) => l.event)).size);
  await page.screenshot({ path: join(shots, 'detector-events.png') });
  await go(page, `#/events/${motionEvent}`, '.snapshot img');
  await waitFor('the detector\'s snapshot', () => page.locator('.snapshot img').evaluate((img) => img.complete && img.naturalWidth > 0));
  assert.ok(await page.locator('.box').count() >= 1, 'the detector\'s box drawn');
  await page.screenshot({ path: join(shots, 'detector-event.png') });
  await go(page, `#/events/${revised}`, '.snapshot img');
  await waitFor('the 4K snapshot', () => page.locator('.snapshot img').evaluate((img) => img.complete && img.naturalWidth === 3840));
  assert.equal(await page.locator('.revisions button').count(), 20);
  await page.setViewportSize(PHONE);
  await page.screenshot({ path: join(shots, 'detector-event-phone.png'), fullPage: true });
  await checkNoSideScroll(page, 'an event of the detector at 390 px');
  await page.setViewportSize(DESKTOP);
  assert.deepEqual(page.errors, []);
});
