// A firmware update through the web face, in Debian's Chromium against the box booted from
// its image (tests/image runs this; not a test of its own): log in as the admin, open the
// System page, choose the bundle, install; the upload's progress bar rises, and the page
// says where it was installed. Prints JSON: { progress: [...], result, screenshots }.
// Usage: node tests/ui/image-update.mjs BASE_URL BUNDLE
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { shots, logIn, go } from './harness.mjs';

const [base, bundle] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update'] });
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await logIn(page, base);
  await go(page, '#/system', '#update-form');
  await page.screenshot({ path: join(shots, 'system-image.png') });
  // Every value the progress bar shows while the bundle goes up.
  await page.evaluate(() => {
    window.progressSeen = [];
    const bar = document.querySelector('#update-form progress');
    new MutationObserver(() => window.progressSeen.push(Number(bar.value))).observe(bar, { attributes: true });
    const watch = () => { window.progressSeen.push(Number(bar.value)); if (!bar.hidden || !window.progressSeen.length) requestAnimationFrame(watch); };
    requestAnimationFrame(watch);
  });
  await page.setInputFiles('#update-file', bundle);
  await page.click('#update-form button[type=submit]');
  const result = page.locator('#update-result');
  await page.waitForFunction(() => /^(Installed|Refused)/.test(document.querySelector('#update-result').textContent), null, { timeout: 120000 });
  await page.screenshot({ path: join(shots, 'system-image-installed.png') });
  const progress = [...new Set(await page.evaluate(() => window.progressSeen))];
  console.log(JSON.stringify({ progress, result: await result.innerText(), errors }));
} finally {
  await browser.close();
}
