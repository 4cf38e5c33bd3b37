// Single sign-on in Chromium through a real OpenID provider (panva's oidc-provider, over TLS
// on loopback, its own development login and consent pages): the login page offers the
// provider, the person signs in there and lands on the box as the role their groups give
// (an admin sees Settings, a viewer does not), logout goes through the provider's own
// sign-out and back, and a person with no role comes back to the login page with why. The
// provider is added beforehand in Settings → Accounts, which shows the address to register.
// Screenshots at desktop and phone sizes go to target/ui/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { X509Certificate, createHash } from 'node:crypto';
import { readFileSync, existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { shots, repo, startKeeppeek, launchChromium, newPage, waitFor, go, setUpAdmin, checkA11y, checkNoSideScroll, freePort,
  PHONE } from './harness.mjs';

test('single sign-on through oidc-provider: admin and viewer by their groups, logout through the provider, no role refused', async (t) => {
  const work = mkdtempSync(join(tmpdir(), 'kp-oidc-'));
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'p.key',
    '-out', 'p.crt', '-days', '5', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
    '-addext', 'basicConstraints=critical,CA:FALSE'], { cwd: work, stdio: 'pipe' });
  const providerPort = await freePort();
  const issuer = `https://127.0.0.1:${providerPort}`;
  const ca = readFileSync(join(work, 'p.crt'), 'utf8');
  const { base } = await startKeeppeek(t, ['[oidc.home]', 'name = "Home ID"', `issuer = "${issuer}"`, 'client_id = "keeppeek"',
    'client_secret = "kp-client-secret"', 'admin_values = "nvr-admins"', 'viewer_values = "nvr-viewers"', `ca_pem = """${ca}"""`]);
  const provider = spawn('node', [join(repo, 'tests', 'ui', 'oidc-provider.mjs'), '--port', String(providerPort), '--cert', join(work, 'p.crt'),
    '--key', join(work, 'p.key'), '--keys', join(work, 'keys.json'), '--redirect', base, '--ready', join(work, 'ready')], { stdio: 'ignore' });
  t.after(() => provider.kill('SIGTERM'));
  await waitFor('oidc-provider', () => existsSync(join(work, 'ready')));
  // The local admin first (setup), then the browser accepts the provider's certificate by
  // its key, as a person would at its warning.
  const made = await fetch(`${base}/api/setup`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'root', password: 'correct horse battery' }) });
  assert.equal(made.status, 201);
  const spki = createHash('sha256').update(new X509Certificate(ca).publicKey.export({ type: 'spki', format: 'der' })).digest('base64');
  const browser = await launchChromium(t, [`--ignore-certificate-errors-spki-list=${spki}`]);

  const signIn = async (page, account) => {
    await page.goto(base);
    await page.locator('#sso a[data-provider="home"]').click();
    await page.waitForURL(`${issuer}/interaction/**`);
    await page.fill('input[name=login]', account);
    await page.fill('input[name=password]', 'anything');
    await page.click('button[type=submit]');
    // Consent, the first time for this account.
    await page.locator('button[type=submit]').click();
    await page.waitForURL(`${base}/**`);
  };

  // The login page offers the provider.
  const page = await newPage(browser);
  await page.goto(base);
  await page.locator('#sso a[data-provider="home"]').waitFor();
  assert.equal(await page.locator('#sso a').textContent(), 'Sign in with Home ID');
  await page.screenshot({ path: join(shots, 'login-sso-desktop.png') });
  await checkA11y(page, 'the login page with single sign-on');

  // An admin by their groups: lands on the live page, sees Settings, is named as the provider named them.
  await signIn(page, 'admin-ann');
  await page.locator('#nav a').first().waitFor();
  assert.match(await page.locator('#who').textContent(), /admin-ann/);
  assert.ok(await page.locator('#nav a[href="#/settings"]').isVisible());
  const cookies = await page.context().cookies(base);
  assert.ok(cookies.find((c) => c.name === 'kp_session')?.httpOnly);
  // The provider is listed in Settings → Accounts with the address to register.
  await go(page, '#/settings/accounts', '#sso-providers');
  assert.match(await page.locator('#sso-providers').textContent(), /Home ID/);
  assert.equal(await page.locator('#sso-callback').textContent(), `${base}/api/oidc/callback`);
  await page.locator('#sso-settings').screenshot({ path: join(shots, 'settings-sso-desktop.png') });
  // Logout: the box's session ends, the provider asks to sign out too, then sends the browser back.
  await page.click('#logout');
  await page.waitForURL(`${issuer}/session/end**`);
  await page.click('button[name=logout]');
  await page.waitForURL(`${base}/**`);
  await page.locator('#login-form').waitFor();
  assert.equal((await page.evaluate(async () => (await fetch('/api/me')).status)), 401);

  // A viewer by their groups: no Settings.
  const viewer = await newPage(browser);
  await signIn(viewer, 'viewer-bob');
  await viewer.locator('#nav a').first().waitFor();
  assert.match(await viewer.locator('#who').textContent(), /viewer-bob/);
  assert.equal(await viewer.locator('#nav a[href="#/settings"]').count(), 0);
  assert.equal(await viewer.evaluate(async () => (await fetch('/api/users')).status), 403);

  // Someone with no role here: back on the login page, told why.
  const nobody = await newPage(browser);
  await signIn(nobody, 'guest-carl');
  await waitFor('the refusal', async () => /no role on this box/.test(await nobody.locator('#message').textContent()));
  assert.match(await nobody.locator('#message').textContent(), /Single sign-on refused: Home ID: guest-carl has no role/);
  await nobody.setViewportSize(PHONE);
  await nobody.screenshot({ path: join(shots, 'login-sso-refused-phone.png') });
  await checkNoSideScroll(nobody, 'the login page on a phone');
  for (const p of [page, viewer, nobody]) assert.deepEqual(p.errors, []);
});

test('a provider added in Settings → Accounts: reviewed, applied without a restart, offered on the login page', async (t) => {
  const { base } = await startKeeppeek(t);
  const browser = await launchChromium(t);
  const page = await newPage(browser);
  await setUpAdmin(page, base);
  await go(page, '#/settings/accounts', '#sso-add');
  assert.match(await page.locator('#sso-providers').textContent(), /None yet/);
  await page.click('#sso-add');
  const form = page.locator('#sso-form');
  await form.locator('input[name=id]').fill('office');
  await form.locator('input[name=name]').fill('Office login');
  await form.locator('input[name=issuer]').fill('https://id.office.example');
  await form.locator('input[name=client_id]').fill('nvr');
  await form.locator('input[name=client_secret]').fill('s3cret-value');
  await form.locator('input[name=admin_values]').fill('it-admins');
  await form.locator('input[name=viewer_values]').fill('staff, guards');
  await form.locator('button[type=submit]').click();
  const plan = page.locator('#sso-settings .plan');
  await plan.waitFor();
  const text = await plan.textContent();
  assert.match(text, /oidc\.office\.issuer none → https:\/\/id\.office\.example/);
  assert.match(text, /oidc\.office\.client_secret none → set/);
  assert.doesNotMatch(text, /s3cret-value/);
  assert.doesNotMatch(text, /ca_pem/, 'a field the provider does not have is not listed');
  assert.match(text, /Taken at once, with no camera paused/);
  await page.locator('#sso-settings').screenshot({ path: join(shots, 'settings-sso-review-desktop.png') });
  await plan.locator('button.primary').click();
  await waitFor('the provider listed', async () => /Office login/.test(await page.locator('#sso-providers').textContent()));
  const listed = await (await fetch(`${base}/api/oidc/providers`)).json();
  assert.deepEqual(listed, [{ id: 'office', name: 'Office login' }]);
  // Someone else's browser: the login page offers it.
  const other = await newPage(browser);
  await other.goto(base);
  await other.locator('#sso a[data-provider="office"]').waitFor();
  await other.setViewportSize(PHONE);
  await page.setViewportSize(PHONE);
  await page.locator('#sso-settings').screenshot({ path: join(shots, 'settings-sso-phone.png') });
  await checkNoSideScroll(page, 'Settings → Accounts on a phone');
  await checkA11y(page, 'Settings → Accounts with single sign-on');
  for (const p of [page, other]) assert.deepEqual(p.errors, []);
});
