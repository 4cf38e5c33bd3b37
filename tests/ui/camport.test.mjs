// The camera port from the browser alone, against the real binary: a box with a second
// network port (a veth pair made by tools/onvif-camera.sh, as root) and, plugged into it,
// an ONVIF camera it did not write (oxvif's mock device and the RTSP test camera, asking
// for their address by DHCP with busybox udhcpc). The admin sets the port up in Settings →
// Cameras (interface, the box's address, the cameras' addresses), reviewed then applied
// with keeppeek running on; the camera takes its address from the box and appears by
// itself as plugged in with its name and model; a second client finds the one address of
// the pool taken, and the block says so; added with its password (its streams read over
// ONVIF), it records; unplugged, it is shown so. Desktop and phone, axe-core,
// screenshots in target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { shots, startKeeppeek, launchChromium, newPage, waitFor, go, setUpAdmin, checkA11y, checkNoSideScroll,
  camerasOf, plugOnvifCamera, CAMERA_USER, CAMERA_PASSWORD, PHONE, DESKTOP } from './harness.mjs';

test('a camera port set up, a camera plugged in appears, is added with its password and records, then unplugged', async (t) => {
  const n = 8;
  const cam = await plugOnvifCamera(t, n);
  const box = await startKeeppeek(t, [], [], []);
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, box.base, 0);
  const pid = box.pid();

  // No port yet: the box offers to set one up, with its interfaces to choose from.
  await page.locator('form.camera-form').waitFor();
  await page.click('button:text-is("Cancel")');
  const port = page.locator('.camera-port');
  await port.locator('button[aria-label="Set up a camera port"]').waitFor();
  await port.locator('button[aria-label="Set up a camera port"]').click();
  const form = page.locator('form[aria-label="Camera port"]');
  await form.waitFor();
  const choices = await form.locator('[name="camera_port.interface"] option').allTextContents();
  assert.ok(choices.some((c) => c.startsWith(`${cam.interface}, cable in, ${cam.boxAddress}/24`)), choices.join(' | '));
  await form.locator('[name="camera_port.interface"]').selectOption(cam.interface);
  await form.locator('[name="camera_port.address"]').fill(`${cam.boxAddress}/24`);
  // One address for cameras: a second client finds it taken (below).
  await form.locator('[name="camera_port.pool"]').fill(`10.213.${n}.100-10.213.${n}.100`);
  await checkA11y(page, 'the camera port form');
  await page.screenshot({ path: join(shots, 'settings-camera-port-form.png'), fullPage: true });
  await form.locator('button:text-is("Review and set up")').click();
  await page.locator('.plan').waitFor();
  const diff = await page.locator('.plan .diff').textContent();
  assert.match(diff, new RegExp(`camera_port\\.interface.*${cam.interface}`));
  assert.match(await page.locator('.plan').textContent(), /Taken at once, with no camera paused/);
  await page.click('.plan button.primary');
  await waitFor('applied', async () => /Applied: revision 2/.test(await page.locator('#message').textContent()));

  // The camera takes its address from the box and appears by itself, with its model.
  const address = await cam.ready();
  assert.equal(address, `10.213.${n}.100`);
  const row = port.locator('.found-row[data-state="plugged-in"]');
  await waitFor('the camera shown plugged in, asked', async () => (await row.count()) === 1
    && /answers ONVIF and RTSP/.test(await row.textContent()), 40000);
  const text = await row.textContent();
  assert.match(text, new RegExp(`Porch-${n}`));
  assert.match(text, /MockCam-4K/);
  assert.match(text, new RegExp(address.replaceAll('.', '\\.')));
  assert.match(await port.textContent(), /Serving/);
  assert.doesNotMatch(await port.textContent(), /null|undefined|every address taken/);
  // Another client behind the port: the pool's one address is the camera's, so it gets
  // none, and the block says why and what to do.
  assert.notEqual(await cam.askAsAnother(), 0, 'a second client got an address from a pool of one');
  const full = port.locator('.pool-full');
  await waitFor('the pool shown full', async () => (await full.count()) === 1, 10000);
  assert.match(await full.textContent(), /requests? found every address taken: give the cameras more addresses \(Change\)/);
  assert.ok((await port.textContent()).includes(`from the box (10.213.${n}.100) and its time`));
  await checkA11y(page, 'a camera plugged into the camera port');
  await page.screenshot({ path: join(shots, 'settings-camera-port.png'), fullPage: true });
  await page.setViewportSize(PHONE);
  await checkNoSideScroll(page, 'the camera port at 390 px');
  await page.screenshot({ path: join(shots, 'settings-camera-port-phone.png'), fullPage: true });
  await page.setViewportSize(DESKTOP);

  // Added with its password: its streams read over ONVIF, probed, reviewed, applied.
  await row.locator('button').click();
  const add = page.locator(`form.camera-form[aria-label="Add Porch-${n}"]`);
  await add.waitFor();
  assert.match(await add.textContent(), /Plugged into the camera port at/);
  await page.fill('[name=name]', 'porch');
  await page.fill('[name=username]', CAMERA_USER);
  await page.fill('[name=password]', CAMERA_PASSWORD);
  await page.click('button:text-is("Read its streams")');
  await page.locator('.probe-result[data-ok=true]').waitFor({ timeout: 20000 });
  assert.equal(await page.inputValue('[name="main.url"]'), `rtsp://${address}:554/mock/stream`);
  await page.click('text=Review and add');
  await page.locator('.plan').waitFor();
  await page.click('.plan button.primary');
  await waitFor('applied', async () => /Applied: revision 3/.test(await page.locator('#message').textContent()));
  await waitFor('the plugged-in camera records', async () =>
    (await camerasOf(page)).some((c) => c.camera === 'porch' && c.streams[0].connected), 30000);
  await waitFor('marked as added', async () => /Added as porch/.test(await port.locator(`.found-row`).first().textContent()), 10000);

  // Unplugged: its lease released, it is shown so.
  await cam.unplug();
  await waitFor('shown unplugged', async () => (await port.locator('.found-row[data-state="unplugged"]').count()) === 1, 20000);
  assert.match(await port.locator('.found-row').first().textContent(), /Unplugged/);
  await page.screenshot({ path: join(shots, 'settings-camera-port-unplugged.png'), fullPage: true });
  assert.equal(box.pid(), pid, 'keeppeek never restarted');
  assert.deepEqual(page.errors, []);
});
