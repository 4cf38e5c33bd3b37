// Settings → Archive: the S3-compatible buckets recordings are copied to, so the footage
// outlives the box. Each target shows what it is doing (uploading, waiting and why, what
// waits and how old it is) and is added, changed or removed as a config change reviewed
// before it is applied and taken at once (the cameras record on). The secret key is never
// shown back, only that it is set. "What the bucket holds" lists every box that writes there.
import { h, field, confirmDialog } from '../lib/dom.js';
import { get } from '../lib/api.js';
import { snapshot, review } from '../lib/config.js';
import { ago, bytes } from '../lib/format.js';

const TEXT_FIELDS = [
  ['endpoint', 'Endpoint', 'https://s3.example.net, or http:// on your own network. No path.'],
  ['region', 'Region', 'us-east-1 unless your provider says otherwise.'],
  ['bucket', 'Bucket', 'It must exist already.'],
  ['prefix', 'Prefix', 'Every key this box writes starts with it: one prefix per box, so many boxes share a bucket. The box’s name unless given.'],
  ['access_key', 'Access key', ''],
  ['secret_key', 'Secret key', 'Leave empty to keep the one set.'],
];

const KINDS = {
  later: 'it will try again',
  credentials: 'check the access key and secret',
  clock: 'the box’s clock is wrong',
  full: 'the bucket is full',
  missing: 'it starts the upload again',
  refused: 'the server refused',
};

function statusOf(s) {
  if (!s) return h('p.muted.archive-status', {}, 'Not running yet.');
  const state = s.error
    ? h('span.badge.bad', {}, `waiting: ${KINDS[s.error_kind] || s.error_kind}`)
    : s.state === 'uploading' || s.backlog.objects ? h('span.badge.ok', {}, 'uploading') : h('span.badge', {}, 'up to date');
  const waiting = s.backlog.objects
    ? `${s.backlog.more ? 'at least ' : ''}${s.backlog.objects} recording${s.backlog.objects === 1 ? '' : 's'} (${bytes(s.backlog.bytes)}) waiting, the oldest from ${ago(s.backlog.oldest_us)}`
    : 'nothing waiting';
  const lines = [
    h('p', {}, state, ` ${s.uploaded_objects} recording${s.uploaded_objects === 1 ? '' : 's'} (${bytes(s.uploaded_bytes)}) and ${s.uploaded_events} event${s.uploaded_events === 1 ? '' : 's'} stored since the box started · ${waiting}`),
  ];
  if (s.error) lines.push(h('p.muted', {}, s.error));
  if (s.clock_off_s != null && s.error_kind === 'clock') {
    lines.push(h('p.muted', {}, `The box’s clock is ${Math.abs(s.clock_off_s)} s ${s.clock_off_s > 0 ? 'ahead of' : 'behind'} the server’s: set the time (or give the box NTP).`));
  }
  if (s.deleted_unarchived) {
    lines.push(h('p.muted', {}, `${s.deleted_unarchived} recording${s.deleted_unarchived === 1 ? ' was' : 's were'} deleted here before they were stored (the backlog was over its ceiling, or the disk was full).`));
  }
  return h('div.archive-status', { 'data-state': s.error ? 'waiting' : s.state }, ...lines);
}

// The form of target `t` (none: a new one), for cameras `cameras`.
function targetForm(t, cameras, panel, onApplied) {
  const inputs = {};
  const id = h('input', { name: 'id', value: t ? t.id : 'offsite', required: true, pattern: '[a-z0-9-]+', disabled: Boolean(t),
    autocomplete: 'off' });
  for (const [key] of TEXT_FIELDS) {
    const value = t && key !== 'secret_key' ? String(t[key] ?? '') : (key === 'region' ? 'us-east-1' : '');
    inputs[key] = h('input', { name: key, value, type: key === 'secret_key' ? 'password' : key === 'endpoint' ? 'url' : 'text',
      autocomplete: 'off', required: ['endpoint', 'bucket', 'access_key'].includes(key) || (!t && key === 'secret_key') });
  }
  const pathStyle = h('input', { type: 'checkbox', name: 'path_style', checked: t ? t.path_style : true });
  const picked = new Set(t ? t.cameras : []);
  const cameraBoxes = cameras.map((c) => h('input', { type: 'checkbox', name: 'cameras', value: c.name, checked: picked.has(c.name) }));
  const streams = h('select', { name: 'streams' }, ...['main', 'sub', 'both'].map((s) =>
    h('option', { value: s, selected: (t ? t.streams : 'main') === s }, s === 'both' ? 'main and sub' : s)));
  const what = h('select', { name: 'what' },
    h('option', { value: 'all', selected: !t || t.what === 'all' }, 'everything recorded'),
    h('option', { value: 'events', selected: t && t.what === 'events' }, 'only footage around events'));
  const keepDays = h('input', { name: 'keep_days', type: 'number', min: 1, value: t && t.keep_days ? String(t.keep_days) : '', placeholder: 'forever' });
  const kbit = h('input', { name: 'max_kbit_s', type: 'number', min: 1, value: t && t.max_kbit_s ? String(t.max_kbit_s) : '', placeholder: 'no cap' });
  const beforeDelete = h('input', { type: 'checkbox', name: 'before_delete', checked: Boolean(t && t.before_delete) });
  const backlogMib = String(Math.round((t ? t.backlog_max_bytes : 16 * 2 ** 30) / 2 ** 20));
  const backlogGb = h('input', { name: 'backlog_max', type: 'number', min: 1, step: 1, value: backlogMib });
  const ca = h('textarea', { name: 'ca_pem', rows: 2, placeholder: t && t.ca_pem === 'set' ? '(set: paste another to replace it)' : '-----BEGIN CERTIFICATE----- (only for a server whose certificate is not from a public authority)' });
  const form = h('form.archive-form', { 'data-target': t ? t.id : '' },
    h('div.form-grid', {},
      field('Name', id, 'Lower-case letters, digits and -.'),
      ...TEXT_FIELDS.map(([key, label, hint]) => field(label, inputs[key], hint)),
      h('label.check', {}, pathStyle, ' Path-style addressing (endpoint/bucket/key: MinIO, Garage, Ceph…)'),
      h('fieldset.cameras-pick', {}, h('legend', {}, 'Cameras (none ticked: all)'),
        ...cameraBoxes.map((b) => h('label.check', {}, b, ` ${b.value}`))),
      field('Streams', streams),
      field('What', what),
      field('Keep in the bucket, days', keepDays, 'Older days are deleted from the bucket.'),
      field('Upload cap, kbit/s', kbit, 'So the uploads leave room on a slow link.'),
      h('label.check', {}, beforeDelete, ' Keep footage on this box until it is stored'),
      field('…unless this much waits, MiB', backlogGb, 'Then the oldest goes anyway (counted here); a full disk always wins.'),
      field('Server’s CA (PEM)', ca)),
    h('div.toolbar', {}, h('button.primary', { type: 'submit' }, t ? 'Review the change' : 'Review and start'),
      t ? h('button.danger', { type: 'button', onclick: async () => {
        if (!await confirmDialog(`Stop archiving to ${t.id}?`, 'What it stored stays in the bucket; what waits is not sent.', 'Stop')) return;
        if (await review(panel, (await snapshot()).rev, [{ op: 'set', key: `archive.${t.id}`, value: null }])) await onApplied();
      } }, 'Remove') : null));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const name = t ? t.id : id.value.trim();
    const set = (key, value) => ({ op: 'set', key: `archive.${name}.${key}`, value });
    const changes = [];
    for (const [key] of TEXT_FIELDS) {
      const v = inputs[key].value.trim();
      if (key === 'secret_key' && !v) continue;
      changes.push(set(key, v || null));
    }
    changes.push(set('path_style', pathStyle.checked));
    changes.push(set('cameras', cameraBoxes.filter((b) => b.checked).map((b) => b.value)));
    changes.push(set('streams', streams.value), set('what', what.value));
    changes.push(set('keep_days', keepDays.value ? Number(keepDays.value) : null));
    changes.push(set('max_kbit_s', kbit.value ? Number(kbit.value) : null));
    changes.push(set('before_delete', beforeDelete.checked));
    if (!t || backlogGb.value !== backlogMib) changes.push(set('backlog_max', `${Number(backlogGb.value) || 16384} MiB`));
    if (ca.value.trim()) changes.push(set('ca_pem', ca.value.trim()));
    if (await review(panel, (await snapshot()).rev, changes, form)) await onApplied();
  });
  return form;
}

// Every box in the target's bucket, with its streams and the days they reach.
async function bucketListing(slot) {
  slot.replaceChildren(h('p.muted', {}, 'Reading the bucket…'));
  try {
    const { targets } = await get('/api/archive');
    slot.replaceChildren(...targets.map((t) => h('div', { 'data-target': t.id },
      h('h3', {}, t.id),
      t.error ? h('p.muted', {}, t.error) : null,
      h('ul.rows.archive-boxes', {}, ...t.boxes.map((b) => h('li', { 'data-box': b.prefix },
        h('span', {}, h('strong', {}, b.prefix), b.prefix === t.prefix ? h('span.muted', {}, ' (this box)') : null),
        h('span.muted', {}, b.streams.map((s) => `${s.stream}: ${s.days.length} day${s.days.length === 1 ? '' : 's'}${s.days.length ? ` to ${s.days[s.days.length - 1]}` : ''}`).join(' · '))))))));
  } catch (e) {
    slot.replaceChildren(h('p.muted', {}, e.message));
  }
}

export async function archiveSection(onApplied) {
  const config = await snapshot();
  const targets = config.settings.archive || [];
  const statusSlots = new Map();
  const refresh = async () => {
    const { targets: running } = await get('/api/system/archive');
    for (const [id, slot] of statusSlots) slot.replaceChildren(statusOf(running.find((s) => s.id === id)));
  };
  const cards = targets.map((t) => {
    const panel = h('div.plan-slot');
    const slot = h('div', { 'data-status': t.id });
    statusSlots.set(t.id, slot);
    return h('section.card.wide', { 'aria-labelledby': `archive-${t.id}`, 'data-archive-target': t.id },
      h('h2', { id: `archive-${t.id}` }, `Archive: ${t.id}`),
      h('p.muted', {}, `${t.endpoint}/${t.bucket}/${t.prefix}`),
      slot,
      h('details', {}, h('summary', {}, 'Change'), targetForm(t, config.cameras, panel, onApplied)),
      panel);
  });
  await refresh().catch(() => {});
  const timer = setInterval(async () => {
    if (!cards.length || !cards[0].isConnected) { clearInterval(timer); return; }
    try { await refresh(); } catch { /* shown next time */ }
  }, 3000);
  const addPanel = h('div.plan-slot');
  const add = h('section.card.wide', { 'aria-labelledby': 'archive-add', id: 'archive-add-card' },
    h('h2', { id: 'archive-add' }, targets.length ? 'Add another archive' : 'Archive to a bucket'),
    h('p.muted', {}, 'Recordings, once closed, and events with their snapshots are copied to storage that outlives this box: any S3-compatible bucket (AWS, Backblaze, Wasabi, MinIO, Garage, Ceph…). Many boxes can share one bucket, each under its own prefix, and each can play the others’ footage.'),
    h('details', { open: !targets.length }, h('summary', {}, 'Set one up'), targetForm(null, config.cameras, addPanel, onApplied)),
    addPanel);
  const listing = h('div');
  const holds = targets.length ? h('section.card.wide', { 'aria-labelledby': 'archive-holds' },
    h('h2', { id: 'archive-holds' }, 'What the bucket holds'),
    h('button', { type: 'button', id: 'archive-list', onclick: () => bucketListing(listing) }, 'Show every box in it'),
    listing) : null;
  return [...cards, add, holds].filter(Boolean);
}
