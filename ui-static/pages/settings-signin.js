// Settings → Accounts → Single sign-on: the OpenID providers people may sign in with (at most
// four), each added, changed or removed as a config change reviewed before it is applied and
// taken at once (no restart). The address to register at the provider is shown; the client
// secret is never shown back, only whether it is set.
import { h, field, confirmDialog } from '../lib/dom.js';
import { snapshot, review } from '../lib/config.js';

const FIELDS = [
  ['name', 'Button label', 'What the login page’s button says.'],
  ['issuer', 'Issuer', 'The provider’s address, exactly as it names itself (https://…).'],
  ['client_id', 'Client id', 'What the provider calls this box.'],
  ['client_secret', 'Client secret', 'Leave empty to keep the one set.'],
  ['role_claim', 'Role claim', 'The id token’s claim that holds groups or roles (often groups).'],
  ['admin_values', 'Admin values', 'Values of that claim that make an admin, separated by commas.'],
  ['viewer_values', 'Viewer values', 'Values that make a viewer; * lets anyone the provider signs in watch.'],
];

export async function signInSection(onApplied) {
  const config = await snapshot();
  const providers = config.settings.oidc || [];
  const callback = `${location.origin}/api/oidc/callback`;
  const panel = h('div.plan-slot');
  const list = h('ul.rows', { 'aria-label': 'Sign-in providers', id: 'sso-providers' }, ...providers.map((p) => h('li', {},
    h('span', {}, h('strong', {}, p.name), ` · ${p.issuer}`),
    h('span', {}, h('button', { type: 'button', onclick: () => open(p) }, 'Change'), ' ',
      h('button.danger', { type: 'button', onclick: async () => {
        if (!await confirmDialog(`Remove ${p.name}?`, 'People stop signing in with it; sessions already open go on until they end.', 'Remove')) return;
        if (await review(panel, config.rev, [{ op: 'set', key: `oidc.${p.id}`, value: null }])) await onApplied();
      } }, 'Remove')))));
  if (!providers.length) list.append(h('li.muted', {}, 'None yet: only the box’s own accounts sign in.'));
  const formSlot = h('div');
  const open = (p) => {
    const inputs = {};
    const id = h('input', { name: 'id', required: true, pattern: '[a-z0-9-]{1,32}', value: p ? p.id : '', readOnly: Boolean(p) });
    for (const [key] of FIELDS) {
      const value = p ? (key.endsWith('_values') ? p[key].join(', ') : key === 'client_secret' ? '' : p[key]) : (key === 'role_claim' ? 'groups' : '');
      inputs[key] = h('input', { name: key, value, type: key === 'client_secret' ? 'password' : 'text',
        autocomplete: 'off', required: !p && ['issuer', 'client_id'].includes(key) });
    }
    const ca = h('textarea', { name: 'ca_pem', rows: 3, placeholder: p && p.ca_pem === 'set' ? '(set: paste another to replace it)' : '-----BEGIN CERTIFICATE-----' });
    const form = h('form', { id: 'sso-form' },
      h('div.form-grid', {}, field('Id (in the config and URLs)', id, 'Lower-case letters, digits and -.'),
        ...FIELDS.map(([key, label, hint]) => field(label, inputs[key], hint)),
        field('Provider’s CA (PEM)', ca, 'Only when its certificate is not from a public authority.')),
      h('div.toolbar', {}, h('button.primary', { type: 'submit' }, 'Review the change'),
        h('button', { type: 'button', onclick: () => formSlot.replaceChildren() }, 'Cancel')));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const changes = [];
      for (const [key] of FIELDS) {
        const v = inputs[key].value.trim();
        if (key === 'client_secret' && !v) continue;
        changes.push({ op: 'set', key: `oidc.${id.value}.${key}`, value: v || null });
      }
      if (ca.value.trim()) changes.push({ op: 'set', key: `oidc.${id.value}.ca_pem`, value: ca.value.trim() });
      if (await review(panel, (await snapshot()).rev, changes, form)) await onApplied();
    });
    formSlot.replaceChildren(form);
    id.focus();
  };
  return h('section.card.wide', { 'aria-labelledby': 'sso-title', id: 'sso-settings' }, h('h2', { id: 'sso-title' }, 'Single sign-on'),
    h('p.muted', {}, 'People may sign in with an OpenID Connect provider (Authentik, Keycloak, Google, …); the box’s own accounts still work. Register this address at the provider as the redirect URI: ',
      h('code', { id: 'sso-callback' }, callback)),
    list, providers.length < 4 ? h('p', {}, h('button', { type: 'button', id: 'sso-add', onclick: () => open(null) }, 'Add a provider')) : null,
    formSlot, panel);
}
