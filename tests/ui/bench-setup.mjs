// Live view set-up time for benches/live.rs (not a test): keeppeek recording the fixture
// clip, Chromium logged in; five times: click "Watch", time to the first decoded frame
// (requestVideoFrameCallback), stop. Prints JSON: { ms: [...], median_ms }.
import { startKeeppeek, launchChromium, freePort, waitFor } from './harness.mjs';

const cleanups = [];
const t = { after: (fn) => cleanups.push(fn) };
try {
  const udp = await freePort();
  const { base } = await startKeeppeek(t, ['[webrtc]', `port = ${udp}`, 'loopback = true']);
  const browser = await launchChromium(t);
  const page = await browser.newPage();
  await page.goto(base);
  await page.locator('#setup-username').waitFor();
  await page.fill('#setup-username', 'root');
  await page.fill('#setup-password', 'correct horse battery');
  await page.click('#setup-form button');
  await waitFor('the camera to connect', async () => {
    await page.reload();
    await page.locator('#cameras tbody tr').first().waitFor();
    return (await page.locator('#cameras tbody tr').first().innerText()).includes('connected\t');
  });
  const ms = [];
  for (let i = 0; i < 5; i++) {
    const took = await page.evaluate(() => new Promise((done) => {
      const v = document.querySelector('#live-video');
      const t0 = performance.now();
      v.requestVideoFrameCallback(() => done(performance.now() - t0));
      document.querySelector('#cameras tbody tr button').click();
    }));
    ms.push(Math.round(took));
    await page.click('#live-stop');
    await new Promise((r) => setTimeout(r, 500));
  }
  const sorted = [...ms].sort((a, b) => a - b);
  console.log(JSON.stringify({ ms, median_ms: sorted[2] }));
} finally {
  for (const fn of cleanups.reverse()) await fn();
}
