// The box's config as the web face changes it. A change set is planned first: the box
// answers what would change (per camera and field, never a password), the memory it needs
// and what restarts; the person reviews that and applies it, or not. A refusal names the
// field it is about: `fieldOf` turns the box's key path (changes[0].set.main.url,
// cameras[3].main.url) into the form's field name (main.url).
import { h } from './dom.js';
import { api, request, say, ApiError } from './api.js';
import { bytes } from './format.js';

// The whole config: settings, every camera (fetched page by page) and its revision.
export async function snapshot() {
  const first = await api('GET', '/api/config');
  const cameras = [...first.cameras];
  for (let next = first.next; next != null;) {
    const page = await api('GET', `/api/config?offset=${next}`);
    cameras.push(...page.cameras);
    next = page.next;
  }
  return { ...first, cameras };
}

async function send(path, base, changes) {
  const r = await request('POST', path, { base, changes });
  if (r.status !== 200) throw new ApiError(r.status, r.data);
  return r.data;
}

export const plan = (base, changes) => send('/api/config/plan', base, changes);
export const apply = (base, changes) => send('/api/config/apply', base, changes);

export function fieldOf(key) {
  return (key || '').replace(/^changes\[\d+\]\.(set\.)?/, '').replace(/^cameras\[\d+\]\./, '').replace(/^archive\.[a-z0-9-]+\./, '');
}

// One line per change of a plan's diff, for people.
export function describe(diff) {
  const show = (v, f) => (v == null ? 'none' : /_bytes$/.test(f) && /^\d+$/.test(v) ? bytes(Number(v)) : v);
  return diff.flatMap((d) => {
    const who = d.camera ? `${d.camera}: ` : 'Settings: ';
    if (d.what === 'added') return [`${who}added (${d.fields.map(([f, , to]) => `${f} ${show(to, f)}`).join(', ')})`];
    if (d.what === 'removed') return [`${who}removed (its recordings stay until retention takes them)`];
    return d.fields.map(([f, from, to]) => `${who}${f} ${show(from, f)} → ${show(to, f)}`);
  });
}

function effects(e) {
  const out = [];
  if (e.live.length) out.push(`Taken at once, with no camera paused: ${e.live.join(', ')}.`);
  if (e.restart_box.length) out.push(`KeepPeek restarts to apply ${e.restart_box.join(', ')}: every camera pauses for a few seconds.`);
  if (e.restart.length) out.push(`Restart: ${e.restart.join(', ')} (the others record on).`);
  if (e.start.length) out.push(`Start: ${e.start.join(', ')}.`);
  if (e.stop.length) out.push(`Stop: ${e.stop.join(', ')}.`);
  return out;
}

// Plans `changes` on revision `base` and shows the plan in `panel` with Apply and Cancel.
// Resolves to the apply's answer, or null when cancelled or refused (a refusal goes next
// to its field in `form` when it names one there, else to the page's notice).
export async function review(panel, base, changes, form = null) {
  let p;
  try {
    p = await plan(base, changes);
  } catch (e) {
    refuse(e, form);
    return null;
  }
  if (p.changes_nothing) {
    panel.replaceChildren(h('p.muted', {}, 'That changes nothing.'));
    return null;
  }
  const b = p.budget;
  return new Promise((done) => {
    const applyButton = h('button.primary', { type: 'button', onclick: async () => {
      applyButton.disabled = true;
      try {
        const answer = await apply(base, changes);
        panel.replaceChildren();
        say(`Applied: revision ${answer.rev}.${answer.restarting ? ' KeepPeek is restarting: log in again in a few seconds.' : ''}`, 'ok');
        done(answer);
      } catch (e) {
        applyButton.disabled = false;
        if (e.status === 409) say('Someone changed the settings meanwhile: review the change again.');
        else refuse(e, form);
        panel.replaceChildren();
        done(null);
      }
    } }, 'Apply');
    panel.replaceChildren(h('div.plan', { role: 'region', 'aria-label': 'The change, before it is applied' },
      h('h3', {}, 'Review the change'),
      h('ul.diff', {}, ...describe(p.diff).map((line) => h('li', {}, line))),
      ...effects(p.effect).map((t) => h('p.effect', {}, t)),
      h('p.muted.budget', {}, `Memory: ${bytes(b.after_bytes)} of the ${bytes(b.allowed_bytes)} this box allows (now ${bytes(b.before_bytes)}).`),
      h('div.toolbar', {}, applyButton,
        h('button', { type: 'button', onclick: () => { panel.replaceChildren(); done(null); } }, 'Cancel'))));
    applyButton.focus();
  });
}

// Shows a refusal next to its field in `form`, or as the page's notice.
export function refuse(e, form) {
  const field = fieldOf(e.field);
  const input = form && field && form.querySelector(`[name="${CSS.escape(field)}"]`);
  if (input) {
    const slot = input.closest('.field').querySelector('.field-error');
    slot.textContent = e.message;
    input.setAttribute('aria-invalid', 'true');
    input.focus();
  } else {
    say(e.field ? `${e.field}: ${e.message}` : e.message);
  }
}
