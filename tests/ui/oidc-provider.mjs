// A real OpenID provider for the tests: panva's oidc-provider (certified), over TLS on
// loopback, with one client for KeepPeek. KeepPeek did not write it; this only configures it.
//
//   node oidc-provider.mjs --port P --cert CRT --key KEY --keys JWKS_FILE --redirect URL[,URL…]
//        [--rotate] [--auto ACCOUNT_FILE] [--jwks slow|huge] [--ready FILE]
//
// Accounts: any name logs in (the provider's own development pages ask for it); a name
// starting with "admin" gets groups ["nvr-admins"], with "viewer" ["nvr-viewers"], any other
// none. --auto skips the pages: each sign-in is the account named in ACCOUNT_FILE, consent
// given. --keys keeps the signing keys (RSA) across starts; --rotate adds a new key in front
// (it signs from then on; the old one is still listed). --jwks misbehaves on purpose: "slow"
// answers the key set after 8 s, "huge" sends 1 MiB of it.
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:https';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import Provider from 'oidc-provider';

const { values: o } = parseArgs({ options: {
  port: { type: 'string' }, cert: { type: 'string' }, key: { type: 'string' }, keys: { type: 'string' },
  redirect: { type: 'string' }, rotate: { type: 'boolean', default: false }, auto: { type: 'string' },
  jwks: { type: 'string' }, ready: { type: 'string' },
} });

function newKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
}
let keys = existsSync(o.keys) ? JSON.parse(readFileSync(o.keys, 'utf8')) : [newKey()];
if (o.rotate) keys = [newKey(), ...keys].slice(0, 2);
writeFileSync(o.keys, JSON.stringify(keys));

const issuer = `https://127.0.0.1:${o.port}`;
const redirects = o.redirect.split(',');
const groups = (id) => (id.startsWith('admin') ? ['nvr-admins'] : id.startsWith('viewer') ? ['nvr-viewers'] : []);
const provider = new Provider(issuer, {
  clients: [{
    client_id: 'keeppeek', client_secret: 'kp-client-secret',
    redirect_uris: redirects.map((r) => `${r}/api/oidc/callback`),
    post_logout_redirect_uris: redirects.map((r) => `${r}/`),
    grant_types: ['authorization_code'], response_types: ['code'],
  }],
  pkce: { required: () => true },
  jwks: { keys },
  cookies: { keys: ['kp-test-cookie-key'] },
  claims: { openid: ['sub'], profile: ['preferred_username', 'groups'] },
  conformIdTokenClaims: false,
  findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id, preferred_username: id, groups: groups(id) }) }),
});
provider.on('server_error', (ctx, err) => console.error('provider error', err));

const callback = provider.callback();
async function autoInteraction(req, res) {
  const details = await provider.interactionDetails(req, res);
  let result;
  if (details.prompt.name === 'login') {
    result = { login: { accountId: readFileSync(o.auto, 'utf8').trim() } };
  } else {
    const grant = new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    grant.addOIDCScope('openid profile email');
    result = { consent: { grantId: await grant.save() } };
  }
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: true });
}

const server = createServer({ cert: readFileSync(o.cert), key: readFileSync(o.key) }, (req, res) => {
  if (req.url.startsWith('/jwks') && o.jwks === 'slow') {
    setTimeout(() => callback(req, res), 8000);
    return;
  }
  if (req.url.startsWith('/jwks') && o.jwks === 'huge') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ keys: [], padding: 'x'.repeat(1 << 20) }));
    return;
  }
  if (o.auto && req.url.startsWith('/interaction/')) {
    autoInteraction(req, res).catch((e) => { res.statusCode = 500; res.end(String(e)); });
    return;
  }
  callback(req, res);
});
server.listen(Number(o.port), '127.0.0.1', () => {
  if (o.ready) writeFileSync(o.ready, 'ready');
  console.log(`oidc-provider at ${issuer}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
