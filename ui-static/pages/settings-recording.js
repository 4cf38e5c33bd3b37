// Settings → Recording: the same policy on several cameras at once (how they record, the
// pre-roll and post-roll of event recordings, how long events' footage is kept, the
// transport, the sub streams), reviewed as
// a plan before it is applied. And the revisions of the settings: who changed what when,
// each one a rollback away.
import { h, field } from '../lib/dom.js';
import { get } from '../lib/api.js';
import { ago } from '../lib/format.js';
import { snapshot, review } from '../lib/config.js';

const KEEP = ['', 'Keep as it is'];

function select(name, options) {
  return h('select', { name }, ...[KEEP, ...options].map(([v, text]) => h('option', { value: v }, text)));
}

export async function recordingSection(onApplied) {
  const config = await snapshot();
  const boxes = config.cameras.map((c) => h('label.check', {}, h('input', { type: 'checkbox', value: c.name, name: 'camera' }), ` ${c.name} `,
    h('small.muted', {}, c.record)));
  const record = select('record', [['continuous', 'Always'], ['events', 'Around events'], ['off', 'Live only']]);
  const pre = h('input', { name: 'pre_roll_s', type: 'number', min: 0, max: 60, placeholder: 'keep', inputMode: 'numeric' });
  const post = h('input', { name: 'post_roll_s', type: 'number', min: 0, max: 300, placeholder: 'keep', inputMode: 'numeric' });
  const keep = h('input', { name: 'keep_event_footage_days', type: 'number', min: 0, max: 3650, placeholder: 'keep', inputMode: 'numeric' });
  const transport = select('transport', [['tcp', 'TCP'], ['udp', 'UDP']]);
  const sub = select('sub_record', [['continuous', 'Always'], ['events', 'Around events'], ['off', 'Not recorded']]);
  const panel = h('div.plan-slot');
  const all = h('button', { type: 'button', onclick: () => { const on = boxes.some((b) => !b.firstChild.checked); for (const b of boxes) b.firstChild.checked = on; } }, 'All or none');
  const form = h('form.bulk-form', { 'aria-label': 'Recording of several cameras' },
    h('fieldset', { name: 'cameras' }, h('legend', {}, 'Cameras'), ...boxes, all),
    h('div.form-grid', {}, field('Record', record), field('Seconds before an event', pre), field('Seconds after an event', post),
      field('Days to keep event footage', keep, 'Held against ordinary retention, within the share set under Storage. 0: not held.'),
      field('Transport', transport), field('Sub streams', sub)),
    h('div.toolbar', {}, h('button.primary', { type: 'submit' }, 'Review the change')), panel);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const cameras = boxes.map((b) => b.firstChild).filter((b) => b.checked).map((b) => b.value);
    const set = {};
    if (record.value) set.record = record.value;
    if (pre.value !== '') set.pre_roll_s = Number(pre.value);
    if (post.value !== '') set.post_roll_s = Number(post.value);
    if (keep.value !== '') set.keep_event_footage_days = Number(keep.value);
    if (transport.value) set.transport = transport.value;
    if (sub.value) set.sub_record = sub.value;
    const base = (await snapshot()).rev;
    if (await review(panel, base, [{ op: 'bulk', cameras, set }], form)) await onApplied();
  });
  return h('section.card', { 'aria-labelledby': 'recording-title' }, h('h2', { id: 'recording-title' }, 'Recording'),
    config.cameras.length ? form : h('p.empty', {}, 'Add a camera first.'));
}

export async function revisionsSection(onApplied) {
  const { revisions } = await get('/api/config/revisions');
  const panel = h('div.plan-slot');
  const rollBack = async (r) => {
    const current = revisions.find((x) => x.current);
    if (await review(panel, current.rev, [{ op: 'rollback', to: r.rev }])) await onApplied();
  };
  const list = h('ol.revisions-list', { 'aria-label': 'Revisions, newest first' }, ...revisions.map((r) => h('li', { 'data-rev': r.rev },
    h('div', {}, h('strong', {}, `Revision ${r.rev}`), h('span.muted', {}, ` · ${r.by} · ${ago(r.time_us)}`), r.current ? h('span.chip', {}, 'in use') : null),
    h('ul.diff', {}, ...r.summary.map((s) => h('li', {}, s))),
    r.current ? null : h('button', { type: 'button', onclick: () => rollBack(r) }, 'Roll back to this'))));
  return h('section.card', { 'aria-labelledby': 'revisions-title' }, h('h2', { id: 'revisions-title' }, 'Revisions'),
    h('p.muted', {}, 'Every change, from here or in the file, with who made it.'), panel, list);
}
