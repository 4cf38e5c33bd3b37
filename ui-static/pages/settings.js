// Settings, in tabs: Cameras (#/settings: found on the network, add, test, change, remove),
// Recording (several cameras at once), Storage (the disk, retention, how far back footage
// reaches), Revisions (every change, each a rollback away), Archive (S3 buckets the
// footage is copied to), Integrations (MQTT and Home Assistant) and Accounts (users and API tokens, and the single sign-on providers).
// Every change to the cameras is reviewed as a plan before it is applied; removing asks
// first; the box's refusals are shown next to the field they name.
import { h, field, showFieldError, confirmDialog } from '../lib/dom.js';
import { api, get, request, say, session } from '../lib/api.js';
import { ago } from '../lib/format.js';
import { camerasSection } from './settings-cameras.js';
import { storageSection } from './settings-storage.js';
import { recordingSection, revisionsSection } from './settings-recording.js';
import { signInSection } from './settings-signin.js';
import { mqttSection, cameraEventsSection } from './settings-mqtt.js';
import { archiveSection } from './settings-archive.js';

const TABS = [['cameras', 'Cameras'], ['recording', 'Recording'], ['storage', 'Storage'], ['revisions', 'Revisions'], ['archive', 'Archive'], ['integrations', 'Integrations'], ['accounts', 'Accounts']];

const SCOPES = [['view', 'watch and search'], ['events:write', 'send events'], ['metrics', 'read metrics'], ['admin', 'everything']];

// Runs `fn`; a refusal goes next to its field in `form`, or to the page's notice.
async function submit(form, fn) {
  try {
    await fn();
    for (const e of form.querySelectorAll('.field-error')) e.textContent = '';
    return true;
  } catch (e) {
    if (!showFieldError(form, e.field, e.message)) say(e.message);
    return false;
  }
}

async function usersSection() {
  const list = h('ul.rows', { 'aria-label': 'Users' });
  const refresh = async () => {
    const users = await get('/api/users');
    list.replaceChildren(...users.map((u) => h('li', {}, h('span', {}, h('strong', {}, u.username), ` · ${u.role}`),
      u.username === session.user ? h('span.muted', {}, 'you') : h('button.danger', { type: 'button', 'aria-label': `Remove ${u.username}`, onclick: async () => {
        if (!await confirmDialog(`Remove ${u.username}?`, 'Their sessions end at once.', 'Remove')) return;
        const r = await request('DELETE', `/api/users/${encodeURIComponent(u.username)}`);
        if (r.status >= 300) say(r.data ? r.data.message : `refused (${r.status})`);
        await refresh();
      } }, 'Remove'))));
  };
  const username = h('input', { name: 'username', required: true, autocomplete: 'off' });
  const password = h('input', { name: 'password', type: 'password', required: true, minLength: 8, autocomplete: 'new-password' });
  const role = h('select', { name: 'role' }, h('option', { value: 'viewer' }, 'viewer: watch and search'), h('option', { value: 'admin' }, 'admin: everything'));
  const form = h('form.inline-form', { id: 'user-form' }, field('User name', username), field('Password', password), field('Role', role),
    h('button', { type: 'submit' }, 'Add user'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (await submit(form, () => api('POST', '/api/users', { username: username.value, password: password.value, role: role.value }))) {
      form.reset();
      await refresh();
    }
  });
  await refresh();
  return h('section.card', { 'aria-labelledby': 'users-title' }, h('h2', { id: 'users-title' }, 'Users'), list,
    h('h3', {}, 'Add a user, or set a user’s new password'), form);
}

async function tokensSection() {
  const list = h('ul.rows', { 'aria-label': 'API tokens' });
  const secret = h('div.secret', { role: 'status' });
  const refresh = async () => {
    const tokens = await get('/api/tokens');
    list.replaceChildren(...tokens.map((t) => h('li', {},
      h('span', {}, h('strong', {}, t.name), ` · ${t.scopes.join(', ')}`, t.created_us ? h('span.muted', {}, ` · made ${ago(t.created_us)}`) : null),
      h('button.danger', { type: 'button', 'aria-label': `Revoke token ${t.name}`, onclick: async () => {
        if (!await confirmDialog(`Revoke ${t.name}?`, 'Whatever uses it is refused from now on.', 'Revoke')) return;
        await request('DELETE', `/api/tokens/${t.id}`);
        await refresh();
      } }, 'Revoke'))));
    if (!tokens.length) list.append(h('li.muted', {}, 'No tokens.'));
  };
  const name = h('input', { name: 'name', required: true, autocomplete: 'off' });
  const boxes = SCOPES.map(([s, text]) => h('label.check', {}, h('input', { type: 'checkbox', value: s, checked: s === 'view' }), ` ${s} `, h('small.muted', {}, text)));
  const form = h('form.inline-form', { id: 'token-form' }, field('Token name', name),
    h('fieldset', { name: 'scopes' }, h('legend', {}, 'It may'), ...boxes), h('button', { type: 'submit' }, 'Create token'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const scopes = [...form.querySelectorAll('input[type=checkbox]:checked')].map((c) => c.value);
    let made = null;
    if (await submit(form, async () => { made = await api('POST', '/api/tokens', { name: name.value, scopes }); })) {
      const value = h('code.token', {}, made.token);
      secret.replaceChildren(h('p', {}, `Token “${name.value}”: copy it now, it is not shown again.`), value,
        h('button', { type: 'button', onclick: () => navigator.clipboard?.writeText(made.token).then(() => say('Copied.', 'ok')) }, 'Copy'));
      form.reset();
      await refresh();
    }
  });
  await refresh();
  return h('section.card', { 'aria-labelledby': 'tokens-title' }, h('h2', { id: 'tokens-title' }, 'API tokens'),
    h('p.muted', {}, 'For analysis services that send events, and for metrics.'), list, form, secret);
}

async function mount(view, args, query) {
  const tab = TABS.some(([id]) => id === args[0]) ? args[0] : 'cameras';
  const tabs = h('nav.tabs', { 'aria-label': 'Settings' }, ...TABS.map(([id, text]) => h('a', {
    href: id === 'cameras' ? '#/settings' : `#/settings/${id}`, 'aria-current': id === tab ? 'page' : null }, text)));
  const body = h('div.cards');
  view.append(h('div.page-head', {}, h('h1', {}, 'Settings')), tabs, body);
  if (tab !== 'accounts' && !(await request('GET', '/api/config?limit=1')).data?.settings) {
    // The demo runs without a config file: there is nothing to change.
    body.append(h('section.card', {}, h('h2', {}, 'Cameras'), h('p.empty', {},
      'This box runs the demo, whose camera is built in. Run keeppeek with a config file to add and change cameras here.')));
  } else if (tab === 'cameras') {
    const { section, config, open } = await camerasSection();
    body.append(section);
    // The first run (or a link that asks): the form to add a camera, open.
    if (query.get('add') || !config.cameras.length) open(null);
  } else if (tab === 'recording') {
    const redraw = async () => body.replaceChildren(await recordingSection(redraw));
    await redraw();
  } else if (tab === 'storage') {
    const redraw = async () => body.replaceChildren(...await storageSection(redraw));
    await redraw();
  } else if (tab === 'revisions') {
    const redraw = async () => body.replaceChildren(await revisionsSection(redraw));
    await redraw();
  } else if (tab === 'archive') {
    const redraw = async () => body.replaceChildren(...await archiveSection(redraw));
    await redraw();
  } else if (tab === 'integrations') {
    const redraw = async () => body.replaceChildren(await mqttSection(redraw), await cameraEventsSection());
    await redraw();
  } else {
    body.append(await usersSection(), await tokensSection());
    // Providers live in the config: the demo, which has no file, has none.
    if ((await request('GET', '/api/config?limit=1')).data?.settings) {
      const redraw = async () => body.replaceChildren(await usersSection(), await tokensSection(), await signInSection(redraw));
      body.append(await signInSection(redraw));
    }
  }
  return null;
}

export default { id: 'settings', title: 'Settings', icon: 'settings', admin: true, mount };
