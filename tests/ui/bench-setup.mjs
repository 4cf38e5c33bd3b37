// Live view set-up time for benches/live.rs (not a test): keeppeek recording the fixture
// clip, Chromium logged in; five times: open the camera's page, time to the first decoded
// frame (requestVideoFrameCallback), leave it. Prints JSON: { ms: [...], median_ms }.
import { startKeeppeek, launchChromium, freePort, setUpAdmin } from './harness.mjs';

const cleanups = [];
const t = { after: (fn) => cleanups.push(fn) };
try {
  const udp = await freePort();
  const { base } = await startKeeppeek(t, ['[webrtc]', `port = ${udp}`, 'loopback = true']);
  const browser = await launchChromium(t);
  const page = await browser.newPage();
  await setUpAdmin(page, base);
  const ms = [];
  for (let i = 0; i < 5; i++) {
    // From a page without video to the camera's page: time to its first decoded frame.
    await page.evaluate(() => { location.hash = '#/settings/accounts'; });
    await page.locator('#user-form').waitFor();
    await new Promise((r) => setTimeout(r, 500));
    const took = await page.evaluate(() => new Promise((done) => {
      const t0 = performance.now();
      const watch = () => {
        const v = document.querySelector('.player-video');
        if (!v) return requestAnimationFrame(watch);
        v.requestVideoFrameCallback(() => done(performance.now() - t0));
      };
      location.hash = '#/live/porch';
      watch();
    }));
    ms.push(Math.round(took));
  }
  const sorted = [...ms].sort((a, b) => a - b);
  console.log(JSON.stringify({ ms, median_ms: sorted[2] }));
} finally {
  for (const fn of cleanups.reverse()) await fn();
}
