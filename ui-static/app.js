// KeepPeek's web face: ES modules, no build step, nothing from outside the box. This module
// signs the person in (first-time setup or login) and routes the URL hash to a page:
// #/live, #/timeline/porch, #/events/12 … so Back, reload and links work.
import { h, $, field, showFieldError } from './lib/dom.js';
import { request, session, say, clearSay, ApiError } from './lib/api.js';
import { closeAll, openSessions } from './lib/whep.js';
import { icon } from './lib/icons.js';
import live from './pages/live.js';
import timeline from './pages/timeline.js';
import events from './pages/events.js';
import health from './pages/health.js';
import settings from './pages/settings.js';
import system from './pages/system.js';

const PAGES = [live, timeline, events, health, settings, system];
// What tests and the benchmark read of the running page.
window.keeppeek = { pages: PAGES.map((p) => p.id), sessions: openSessions };

let current = null;
// Counts navigations: a show() overtaken by a newer one while it waited stops there.
let navigation = 0;

function nav() {
  const links = PAGES.filter((p) => !p.admin || session.role === 'admin')
    .map((p) => h('a', { href: `#/${p.id}`, 'data-page': p.id }, icon(p.icon), h('span.nav-text', {}, p.title)));
  $('#nav').replaceChildren(...links);
  $('#nav').hidden = false;
  $('#who').textContent = `${session.user} · ${session.role}`;
  $('#logout').hidden = false;
}

// Parses "#/page/a/b?x=1" into { id, args, query }.
function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [path, q = ''] = hash.split('?');
  const [id, ...args] = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { id: id || 'live', args, query: new URLSearchParams(q) };
}

async function show() {
  if (!session.user) return;
  const r = route();
  const page = PAGES.find((p) => p.id === r.id && (!p.admin || session.role === 'admin')) || live;
  const mine = { page, navigation: ++navigation };
  if (current) {
    // Not awaited: the page's sessions are given back (DELETE) while the next one draws.
    const cleanup = current.cleanup;
    current = null;
    Promise.resolve().then(cleanup).catch(() => { /* the page is going anyway */ });
  }
  clearSay();
  // Each page draws into an element of its own: a page left while it was still being drawn
  // (two quick clicks) takes its drawing away with it.
  const view = h('div.page');
  $('#view').replaceChildren(view);
  $('#view').dataset.page = page.id;
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.page === page.id) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  document.title = `${page.title} · KeepPeek`;
  current = mine;
  try {
    mine.cleanup = await page.mount(view, r.args, r.query);
  } catch (e) {
    say(e instanceof ApiError && e.status === 401 ? 'Your session ended: log in again.' : String(e.message || e));
    if (e instanceof ApiError && e.status === 401) return start();
  }
  // A page that was left while it was being mounted cleans up at once.
  if (current !== mine) {
    view.remove();
    if (mine.cleanup) mine.cleanup();
  }
}

window.addEventListener('hashchange', show);

// The skip link moves focus to the page instead of changing the route.
document.querySelector('.skip').addEventListener('click', (e) => {
  e.preventDefault();
  $('#view').focus();
});

function signIn(kind) {
  const setup = kind === 'setup';
  const username = h('input', { name: 'username', autocomplete: 'username', required: true, id: `${kind}-username` });
  const password = h('input', { name: 'password', type: 'password', id: `${kind}-password`, required: true,
    autocomplete: setup ? 'new-password' : 'current-password', minLength: setup ? 8 : undefined, maxLength: 128 });
  const token = setup ? h('input', { name: 'setup_token', id: 'setup-token', autocomplete: 'off' }) : null;
  const form = h('form.card.signin', { id: `${kind}-form` },
    h('h1', {}, setup ? 'Welcome to KeepPeek' : 'Log in'),
    setup ? h('p', {}, 'There is no default password. Choose the admin’s name and password.') : null,
    field('User name', username),
    field('Password', password, setup ? 'At least 8 characters.' : null),
    setup ? field('Setup token', token, 'Only when you set up from another machine: it is in the box’s log.') : null,
    h('button.primary', { type: 'submit' }, setup ? 'Create admin' : 'Log in'));
  // Single sign-on: a button per provider; a refused sign-in comes back with its reason.
  if (!setup) {
    const providers = h('div.sso', { id: 'sso' });
    form.append(providers);
    request('GET', '/api/oidc/providers').then((r) => {
      if (!Array.isArray(r.data) || !r.data.length) return;
      providers.append(h('p.muted', {}, 'or'), ...r.data.map((p) => h('a.button', {
        href: `/api/oidc/${encodeURIComponent(p.id)}/login`, 'data-provider': p.id }, `Sign in with ${p.name}`)));
    });
    const refused = new URLSearchParams(location.hash.split('?')[1] || '').get('sso_error');
    if (refused) {
      say(`Single sign-on refused: ${refused}`);
      history.replaceState(null, '', location.pathname);
    }
  }
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { username: username.value, password: password.value };
    if (token && token.value) body.setup_token = token.value;
    const r = await request('POST', setup ? '/api/setup' : '/api/login', body);
    if (r.status === (setup ? 201 : 200)) {
      // The first run: a box with no camera yet goes on to adding one.
      if (setup && !(await request('GET', '/api/cameras')).data?.length) history.replaceState(null, '', '#/settings');
      return start();
    }
    const message = (r.data && r.data.message) || `refused (${r.status})`;
    if (!showFieldError(form, r.data && r.data.field, message)) say(message);
  });
  $('#view').replaceChildren(form);
  $('#view').dataset.page = kind;
  username.focus();
}

async function start() {
  await closeAll();
  session.user = null;
  $('#nav').hidden = true;
  $('#logout').hidden = true;
  $('#who').textContent = '';
  const setup = await request('GET', '/api/setup');
  if (setup.data && setup.data.needed) return signIn('setup');
  const me = await request('GET', '/api/me');
  if (me.status !== 200) return signIn('login');
  Object.assign(session, { csrf: me.data.csrf, role: me.data.role, user: me.data.user });
  nav();
  await show();
}

$('#logout').addEventListener('click', async () => {
  if (current) { await current.cleanup?.(); current = null; }
  const r = await request('POST', '/api/logout');
  session.csrf = null;
  // Signed in by a provider: its own session ends too, and it sends the browser back here.
  if (r.data && r.data.end_session) {
    location.assign(r.data.end_session);
    return;
  }
  await start();
});

start();
