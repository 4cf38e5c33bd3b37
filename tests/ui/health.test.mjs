// Recording health with the most cameras a box takes (127, each with a main and a sub
// stream: two recorded from the fixture clip, the rest pointing at a port where no camera
// answers): a page shows 25 streams and stays under 1,500 elements, pages on to the last,
// shows the recorded streams' coverage and the others' errors, passes axe-core and does not
// scroll sideways on a phone. Screenshots go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { shots, startKeeppeek, launchChromium, newPage, waitFor, sleep, go, fileCamera, setUpAdmin, checkA11y, checkNoSideScroll,
  PHONE } from './harness.mjs';

const CAMERAS = 127;

test('recording health of 127 cameras × 2 streams: 25 rows a page, a small page, paging to the end', async (t) => {
  const cameras = [];
  for (let i = 0; i < CAMERAS; i++) {
    const name = `cam${String(i).padStart(3, '0')}`;
    if (i < 2) cameras.push(...fileCamera(name, { sub: true }));
    else {
      cameras.push('[[cameras]]', `name = "${name}"`, 'record = "off"', `main = { url = "rtsp://127.0.0.1:9/${name}/main" }`,
        `sub = { url = "rtsp://127.0.0.1:9/${name}/sub" }`);
    }
  }
  const { base } = await startKeeppeek(t, [], [], cameras, ['ram_class = "2 GiB"']);
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, base, 0);
  // Some seconds recorded and committed, and every offline camera tried once.
  await waitFor('the recorded streams connected', async () => {
    const list = await page.evaluate(async () => (await fetch('/api/cameras')).json());
    return list.slice(0, 2).every((c) => c.streams.every((s) => s.connected))
      && list.slice(2).every((c) => c.streams.every((s) => s.last_error));
  }, 30000);
  await sleep(4000);

  await go(page, '#/health', 'table.health tbody tr');
  const rows = page.locator('table.health tbody tr');
  assert.equal(await rows.count(), 25);
  const elements = await page.evaluate(() => document.body.querySelectorAll('*').length);
  assert.ok(elements < 1500, `${elements} elements on the page`);
  assert.match(await page.locator('.pager').innerText(), /1–25 of 254 streams/);
  const first = page.locator('tr[data-stream="cam000/main"]');
  assert.ok(Number(await first.locator('.meter').first().getAttribute('data-share')) > 0, 'cam000 has recorded');
  assert.match(await page.locator('tr[data-stream="cam002/main"]').innerText(), /offline/);
  assert.ok((await page.locator('tr[data-stream="cam002/main"] .error-cell').innerText()).length > 0, 'an offline stream says why');
  await page.screenshot({ path: join(shots, 'health-127-desktop.png') });
  await checkA11y(page, 'recording health with 127 cameras');
  console.log(`health: 25 rows of 254 streams, ${elements} elements on the page`);

  // Next, then straight to the last page by its link: 4 rows.
  await page.click('.pager a:has-text("Next")');
  await waitFor('the second page', async () => /26–50 of 254/.test(await page.locator('.pager').innerText()));
  assert.equal(await rows.count(), 25);
  await go(page, '#/health?from=250', '.pager');
  await waitFor('the last page', async () => /251–254 of 254/.test(await page.locator('.pager').innerText()));
  assert.equal(await rows.count(), 4);
  assert.equal(await page.locator('.pager a:has-text("Next")').count(), 0, 'no page after the last');

  await page.setViewportSize(PHONE);
  await go(page, '#/health', 'table.health tbody tr');
  await sleep(300);
  await checkNoSideScroll(page, 'recording health at 390 px');
  await checkA11y(page, 'recording health at 390 px');
  await page.screenshot({ path: join(shots, 'health-127-phone.png') });
  assert.deepEqual(page.errors, []);
});
