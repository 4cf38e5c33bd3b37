// The web face over HTTPS in Chromium: the box's own certificate accepted by its key (as a
// user accepts it at the browser's warning, after checking its fingerprint), the plain HTTP
// address sent on to HTTPS, setup and login with a Secure cookie, and the System page's
// certificate card showing the very fingerprint and key pin the connection used, refusing a
// key that is not the certificate's. Without the acceptance Chromium refuses the box.
// HTTPS turned on from the System page as a reviewed config change. Screenshots at desktop
// and phone sizes go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate, createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { get as httpsGet } from 'node:https';
import { readFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { shots, startKeeppeek, launchChromium, newPage, waitFor, go, setUpAdmin, checkA11y, checkNoSideScroll, freePort,
  PHONE } from './harness.mjs';

test('the UI over HTTPS: the certificate accepted, login with a Secure cookie, its fingerprint on the System page', async (t) => {
  const httpsPort = await freePort();
  const { base: plain, dir } = await startKeeppeek(t, ['[https]', `listen = "127.0.0.1:${httpsPort}"`]);
  const base = `https://127.0.0.1:${httpsPort}`;
  const cert = new X509Certificate(readFileSync(join(dir, 'data', 'tls', 'own.crt')));
  const spki = createHash('sha256').update(cert.publicKey.export({ type: 'spki', format: 'der' })).digest('base64');

  // Not accepted: Chromium refuses the box's certificate.
  const wary = await launchChromium(t);
  const refused = await newPage(wary);
  await assert.rejects(refused.goto(base), /ERR_CERT_AUTHORITY_INVALID/);

  // Accepted (its key): the plain address lands on HTTPS, and setup goes through.
  const browser = await launchChromium(t, [`--ignore-certificate-errors-spki-list=${spki}`]);
  const page = await newPage(browser);
  await page.goto(`${plain}/`);
  assert.equal(new URL(page.url()).origin, base);
  await setUpAdmin(page, base);
  const cookies = await page.context().cookies(base);
  const session = cookies.find((c) => c.name === 'kp_session');
  assert.ok(session && session.secure && session.httpOnly, JSON.stringify(cookies));

  await go(page, '#/system', '#https-fingerprint');
  assert.equal(await page.locator('#https-fingerprint').textContent(), cert.fingerprint256);
  assert.equal(await page.locator('#https-pin').textContent(), `sha256//${spki}`);
  assert.match(await page.locator('#https-facts').textContent(), /127\.0\.0\.1/);
  await page.locator('#https').screenshot({ path: join(shots, 'https-desktop.png') });
  await page.screenshot({ path: join(shots, 'system-https-desktop.png'), fullPage: true });
  await checkA11y(page, 'the System page over HTTPS');

  // An admin's certificate whose key is another's is refused, with the reason.
  const work = mkdtempSync(join(tmpdir(), 'kp-certs-'));
  const openssl = (...args) => execFileSync('openssl', args, { cwd: work, stdio: 'pipe' });
  openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'a.key', '-out', 'a.crt',
    '-days', '10', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-addext', 'basicConstraints=critical,CA:FALSE');
  openssl('genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', 'b.key');
  await page.locator('#https details summary').click();
  await page.setInputFiles('#https-form input[name=certificate]', join(work, 'a.crt'));
  await page.setInputFiles('#https-form input[name=key]', join(work, 'b.key'));
  await page.click('#https-form button[type=submit]');
  await waitFor('the refusal', async () => /the key does not belong to the certificate/.test(await page.locator('#https-result').textContent()))
    .catch(async (e) => { throw new Error(`${e.message}: ${await page.locator('#https-result').textContent()} / ${await page.locator('#message').textContent()} / ${page.trouble}`); });
  assert.equal(await page.locator('#https-fingerprint').textContent(), cert.fingerprint256);

  await page.setViewportSize(PHONE);
  await page.locator('#https').scrollIntoViewIfNeeded();
  await page.locator('#https').screenshot({ path: join(shots, 'https-phone.png') });
  await page.screenshot({ path: join(shots, 'system-https-phone.png'), fullPage: true });
  await checkNoSideScroll(page, 'the System page on a phone');
  assert.deepEqual(page.errors, []);
});

test('HTTPS turned on from the System page: reviewed, applied, and the box answers on its port', async (t) => {
  const { base, dir } = await startKeeppeek(t);
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, base);
  await go(page, '#/system', '#https-on');
  const port = await freePort();
  await page.fill('#https-on input[name="https.listen"]', String(port));
  await page.click('#https-on button[type=submit]');
  await page.locator('#https-on .plan').waitFor();
  assert.match(await page.locator('#https-on .plan').textContent(), new RegExp(`https\\.listen none → 0\\.0\\.0\\.0:${port}`));
  await page.locator('#https').screenshot({ path: join(shots, 'https-off-review.png') });
  await page.click('#https-on .plan button.primary');
  await waitFor('the notice', async () => /HTTPS is on/.test(await page.locator('#message').textContent()));
  // The box restarted with HTTPS: its own certificate on disk, served on the port.
  await waitFor('the HTTPS port', () => new Promise((ok) => {
    const req = httpsGet({ host: '127.0.0.1', port, path: '/healthz', rejectUnauthorized: false }, (r) => ok(r.statusCode === 200));
    req.on('error', () => ok(false));
  }), 30000);
  const cert = new X509Certificate(readFileSync(join(dir, 'data', 'tls', 'own.crt')));
  assert.ok(cert.checkIP('127.0.0.1'));
  // Plain HTTP now sends the browser on.
  const r = await fetch(`${base}/`, { redirect: 'manual' });
  assert.equal(r.status, 307);
  assert.equal(r.headers.get('location'), `https://127.0.0.1:${port}/`);
  assert.deepEqual(page.errors, []);
});
