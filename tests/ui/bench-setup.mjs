// Live view set-up time for benches/live.rs (not a test): keeppeek recording the fixture
// clip, Chromium logged in; five times: click "Watch", time to the first decoded frame
// (requestVideoFrameCallback), stop. Prints JSON: { ms: [...], median_ms }.
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
