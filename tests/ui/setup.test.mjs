// Setting the box up from the browser alone, against the real binary, an ONVIF camera it
// did not write (oxvif's mock device, the crate `oxvif` 0.17, in a network namespace of its
// own with the RTSP test camera at its stream address: tools/onvif-camera.sh) and the RTSP
// test camera (tools/rtsp-camera.py): a fresh box with no camera; the admin set up; the
// first run opens the camera form and searches the network, where WS-Discovery finds the
// camera; its streams read over ONVIF with a wrong password say so next to the password,
// with the right one they fill the form and a probe says what the camera sends; the camera
// is added after its plan is reviewed, shows live and is marked as added; a viewer of it
// keeps its session while another camera is added; its recording changes to events (the
// diff shown, then applied) while it stays live; the revisions list who did what; the
// storage tab shows the disk and how far back each stream reaches, and a retention cap
// changes; Settings → Integrations shows the camera's own detections subscribed (ONVIF
// events) with the events they made; it is removed, and its subscription with it. Nothing is edited by hand and keeppeek never restarts. Desktop
// and phone, axe-core, screenshots in target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { shots, startLiveKeeppeek, startRtspCamera, launchChromium, newPage, waitFor, sleep, go, setUpAdmin, countFrames,
  checkA11y, checkNoSideScroll, camerasOf, startOnvifCamera, CAMERA_USER, CAMERA_PASSWORD, PHONE, DESKTOP } from './harness.mjs';

test('a camera found working, added, watched, changed and removed from the browser alone', async (t) => {
  const onvif = await startOnvifCamera(t, 2);
  const camera = await startRtspCamera(t);
  const box = await startLiveKeeppeek(t, [], [], []);
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, box.base, 0);

  // The first run leads to the camera form, and a search finds the camera on the network.
  await page.locator('form.camera-form').waitFor();
  assert.match(page.url(), /#\/settings$/);
  const found = page.locator(`.found-row[data-address="${onvif.address}"]`);
  await found.waitFor({ timeout: 15000 });
  assert.match(await found.textContent(), /Porch-2.*MockCam-4K/);
  await page.screenshot({ path: join(shots, 'settings-found.png'), fullPage: true });
  await found.locator('button').click();
  await page.locator('form.camera-form[aria-label="Add Porch-2"]').waitFor();
  assert.equal(await page.inputValue('[name=name]'), 'porch-2');
  await page.fill('[name=name]', 'porch');
  // Its streams, read over ONVIF: a wrong password is named; the right one fills the form,
  // and the probe that follows says what the camera sends.
  await page.fill('[name=username]', CAMERA_USER);
  await page.fill('[name=password]', 'not the password');
  await page.click('button:text-is("Read its streams")');
  const passwordError = page.locator('label.field:has([name=password]) .field-error');
  await waitFor('the wrong password named', async () => /user name and password/.test(await passwordError.textContent()));
  await page.fill('[name=password]', CAMERA_PASSWORD);
  await page.click('button:text-is("Read its streams")');
  await page.locator('.probe-result[data-ok=true]').waitFor({ timeout: 20000 });
  assert.equal(await page.inputValue('[name="main.url"]'), `rtsp://${onvif.address}:554/mock/stream`);
  assert.match(await page.locator('.probe-result').textContent(), /H\.264 640×360 at 15 fps/);
  await checkA11y(page, 'the camera form');
  await page.screenshot({ path: join(shots, 'settings-add-camera.png'), fullPage: true });

  // Reviewed, then applied: the camera records and shows live.
  await page.click('text=Review and add');
  await page.locator('.plan').waitFor();
  assert.match(await page.locator('.plan .diff').textContent(), /porch: added/);
  assert.match(await page.locator('.plan').textContent(), /Start: porch/);
  await page.screenshot({ path: join(shots, 'settings-plan.png'), fullPage: true });
  const pid = box.pid();
  await page.click('.plan button.primary');
  await waitFor('applied', async () => /Applied: revision 2/.test(await page.locator('#message').textContent()));
  await page.locator('.camera-row[data-camera=porch]').waitFor();
  await waitFor('marked as added', async () => /Added as porch/.test(await found.textContent()));
  await waitFor('the camera connected', async () => (await camerasOf(page)).some((c) => c.camera === 'porch' && c.streams[0].connected), 20000);
  await go(page, '#/live', '.tile[data-camera=porch] video');
  const frames = await countFrames(page, '.tile[data-camera=porch] video');
  await waitFor('live frames', async () => (await frames()) > 10, 20000);

  // A viewer of porch keeps its session, and its frames, while another camera is added.
  const viewer = await page.context().newPage();
  await viewer.goto(`${box.base}/#/live/porch`);
  await viewer.locator('.player-video').waitFor();
  const viewerFrames = await countFrames(viewer, '.player-video');
  await waitFor('the viewer sees frames', async () => (await viewerFrames()) > 5, 20000);
  const session = await viewer.evaluate(() => keeppeek.player.session.location);
  const before = await viewerFrames();
  const added = await page.evaluate(async (url) => {
    const csrf = (await (await fetch('/api/me')).json()).csrf;
    const base = (await (await fetch('/api/config')).json()).rev;
    const r = await fetch('/api/config/apply', { method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': csrf },
      body: JSON.stringify({ base, changes: [{ op: 'add_camera', name: 'gate', set: { main: { url } } }] }) });
    return r.status;
  }, camera.url('/h264'));
  assert.equal(added, 200);
  await waitFor('the new camera connected', async () => (await camerasOf(page)).some((c) => c.camera === 'gate' && c.streams[0].connected), 20000);
  await sleep(1000);
  assert.ok((await viewerFrames()) - before >= 15, `${(await viewerFrames()) - before} frames while the camera was added`);
  assert.equal(await viewer.evaluate(() => keeppeek.player.session.location), session, 'the same session');
  assert.equal(await viewer.evaluate(() => keeppeek.player.session.pc.connectionState), 'connected');
  await viewer.close();

  // Its recording changes to events; it stays live.
  await go(page, '#/settings', '.camera-row[data-camera=porch]');
  await page.click('button[aria-label="Change porch"]');
  await page.selectOption('form.camera-form [name=record]', 'events');
  await page.click('text=Review the change');
  await page.locator('.plan').waitFor();
  assert.match(await page.locator('.plan .diff').textContent(), /porch: record continuous → events/);
  assert.doesNotMatch(await page.locator('.plan').textContent(), new RegExp(CAMERA_PASSWORD));
  await page.click('.plan button.primary');
  await waitFor('applied', async () => /Applied: revision 4/.test(await page.locator('#message').textContent()));
  await waitFor('recording around events', async () => (await camerasOf(page)).find((c) => c.camera === 'porch')?.streams[0].record_mode === 'events');

  // The revisions: who did what, on a phone too.
  await go(page, '#/settings/revisions', '.revisions-list li');
  const revisions = await page.locator('.revisions-list > li').allTextContents();
  assert.equal(revisions.length, 4);
  assert.match(revisions[0], /Revision 4 · user:root/);
  assert.match(revisions[0], /porch: record continuous → events/);
  assert.match(revisions[1], /gate: added/);
  assert.match(revisions[3], /the file/);
  await page.setViewportSize(PHONE);
  await checkNoSideScroll(page, 'revisions at 390 px');
  await checkA11y(page, 'revisions on a phone');
  await page.screenshot({ path: join(shots, 'settings-revisions-phone.png'), fullPage: true });
  await go(page, '#/settings', '.camera-row[data-camera=porch]');
  await checkNoSideScroll(page, 'camera settings at 390 px');
  await page.screenshot({ path: join(shots, 'settings-cameras-phone.png'), fullPage: true });
  await page.setViewportSize(DESKTOP);

  // Storage: the disk, how far back each stream reaches, and a retention cap changed.
  await go(page, '#/settings/storage', 'table.reach tr[data-stream="porch/main"]');
  assert.match(await page.locator('#disk-title + meter + p').textContent(), /used of .* free · recordings/);
  assert.doesNotMatch(await page.locator('tr[data-stream="porch/main"]').textContent(), /—/);
  await page.fill('[name="retention.stream_max_bytes"]', '0.5');
  await page.click('text=Review the change');
  await page.locator('.plan').waitFor();
  const capDiff = await page.locator('.plan .diff').textContent();
  assert.match(capDiff, /retention\.stream_max_bytes 1\.1 GB → 500 MB/);
  assert.doesNotMatch(capDiff, /total_max_bytes/, 'only what was changed');
  assert.match(await page.locator('.plan').textContent(), /Taken at once, with no camera paused/);
  await checkA11y(page, 'storage settings');
  await page.screenshot({ path: join(shots, 'settings-storage.png'), fullPage: true });
  await page.click('.plan button.primary');
  await waitFor('applied', async () => /Applied: revision 5/.test(await page.locator('#message').textContent()));
  await page.setViewportSize(PHONE);
  await checkNoSideScroll(page, 'storage at 390 px');
  await page.screenshot({ path: join(shots, 'settings-storage-phone.png'), fullPage: true });
  await page.setViewportSize(DESKTOP);
  await go(page, '#/settings', '.camera-row[data-camera=porch]');

  // The camera found over ONVIF reports its own detections (the mock camera's motion): its
  // subscription shows on Settings → Integrations, with the events it made.
  await go(page, '#/settings/integrations', '#camera-events-card');
  const follower = page.locator('#camera-events li[data-camera=porch]');
  await waitFor('porch subscribed, with events', async () => (await follower.count()) === 1
    && (await follower.getAttribute('data-state')) === 'subscribed' && /· [1-9]\d* events?/.test(await follower.textContent()), 20000);
  await page.locator('#camera-events-card').screenshot({ path: join(shots, 'settings-camera-events.png') });
  await checkA11y(page, 'Settings → Integrations with a camera\'s own detections');
  await page.setViewportSize(PHONE);
  await checkNoSideScroll(page, 'Integrations at 390 px');
  await page.screenshot({ path: join(shots, 'settings-integrations-phone.png'), fullPage: true });
  await page.setViewportSize(DESKTOP);
  await go(page, '#/settings', '.camera-row[data-camera=porch]');

  // Removed, after a confirmation and its plan.
  await page.click('button[aria-label="Remove porch"]');
  await page.click('dialog.confirm button.danger');
  await page.locator('.plan').waitFor();
  assert.match(await page.locator('.plan .diff').textContent(), /porch: removed/);
  await page.click('.plan button.primary');
  await waitFor('removed', async () => (await camerasOf(page)).map((c) => c.camera).join() === 'gate');
  // Its subscription ended with it.
  await waitFor('porch no longer followed', () => page.evaluate(async () =>
    (await (await fetch('/api/system/camera-events')).json()).cameras.length === 0));
  assert.equal(box.pid(), pid, 'keeppeek never restarted');
  assert.deepEqual(page.errors, []);
});
