// Settings → Storage: how full the disk is, how far back each stream's footage reaches, and
// the retention caps that decide it, changed as a plan reviewed before it is applied.
import { h, field } from '../lib/dom.js';
import { get } from '../lib/api.js';
import { bytes, duration, nowUs, percent } from '../lib/format.js';
import { snapshot, review } from '../lib/config.js';

const GB = 1e9;

// Every row of the recording health list, a page at a time.
async function allStreams() {
  const rows = [];
  let page = await get('/api/health?offset=0&limit=100');
  rows.push(...page.rows);
  while (rows.length < page.total && page.rows.length) {
    page = await get(`/api/health?offset=${rows.length}&limit=100`);
    rows.push(...page.rows);
  }
  return { rows, disk: page.disk };
}

export async function storageSection(onApplied) {
  const [config, { rows, disk }] = await Promise.all([snapshot(), allStreams()]);
  const caps = config.settings.retention;
  const stored = rows.reduce((sum, r) => sum + (r.bytes || 0), 0);

  const used = disk ? disk.total_bytes - disk.free_bytes : 0;
  const diskCard = h('section.card', { 'aria-labelledby': 'disk-title' }, h('h2', { id: 'disk-title' }, 'Disk'),
    disk ? [
      h('meter.disk-meter', { min: 0, max: disk.total_bytes, value: used, high: disk.total_bytes - disk.reserve_bytes,
        'aria-label': `Disk ${percent(used / disk.total_bytes)} full` }),
      h('p', {}, `${bytes(used)} used of ${bytes(disk.total_bytes)} · ${bytes(disk.free_bytes)} free · recordings ${bytes(stored)}.`),
      h('p.muted', {}, `KeepPeek keeps ${bytes(disk.reserve_bytes)} free: when the disk is fuller, the oldest footage goes first, whatever the caps say.`),
    ] : h('p.muted', {}, 'The disk’s size could not be read.'));

  // The caps in GB as the fields show them, to a megabyte (1 GiB reads 1.074).
  const inGb = (n) => String(+(n / GB).toFixed(3));
  const streamCap = h('input', { name: 'retention.stream_max_bytes', type: 'number', min: 0.001, step: 'any', required: true,
    defaultValue: inGb(caps.stream_max_bytes) });
  const totalCap = h('input', { name: 'retention.total_max_bytes', type: 'number', min: 0.001, step: 'any', required: true,
    defaultValue: inGb(caps.total_max_bytes) });
  const heldShare = h('input', { name: 'retention.held_max_percent', type: 'number', min: 0, max: 90, step: 1, required: true,
    defaultValue: String(caps.held_max_percent), inputMode: 'numeric' });
  const panel = h('div.plan-slot');
  const form = h('form.caps-form', { 'aria-label': 'Retention caps' },
    h('div.form-grid', {},
      field('Each stream keeps at most (GB)', streamCap, `Now ${inGb(caps.stream_max_bytes)} GB. A stream’s oldest footage goes past it.`),
      field('All recordings at most (GB)', totalCap, `Now ${inGb(caps.total_max_bytes)} GB. The oldest footage of any stream goes past it.`),
      field('Events may hold (% of a stream’s cap)', heldShare,
        `Now ${caps.held_max_percent} %${disk ? `, ${bytes(disk.held_bytes || 0)} held` : ''}. Event footage goes last; past this share the oldest holds lapse.`)),
    h('div.toolbar', {}, h('button.primary', { type: 'submit' }, 'Review the change')),
    panel);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const changes = [];
    // Only what the person changed: the fields show the caps rounded to a megabyte.
    for (const input of [streamCap, totalCap]) {
      if (input.value !== input.defaultValue) changes.push({ op: 'set', key: input.name, value: Math.round(Number(input.value) * GB) });
    }
    if (heldShare.value !== heldShare.defaultValue) changes.push({ op: 'set', key: heldShare.name, value: Number(heldShare.value) });
    if (!changes.length) {
      panel.replaceChildren(h('p.muted', {}, 'Nothing changed.'));
      return;
    }
    if (await review(panel, (await snapshot()).rev, changes, form)) await onApplied();
  });
  const capsCard = h('section.card', { 'aria-labelledby': 'caps-title' }, h('h2', { id: 'caps-title' }, 'Retention'), form);

  const now = nowUs();
  const table = h('table.reach', {},
    h('thead', {}, h('tr', {}, ...['Stream', 'Stored', 'Of its cap', 'Reaches back'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, ...rows.map((r) => h('tr', { 'data-stream': `${r.camera}/${r.stream}` },
      h('th', { scope: 'row' }, r.camera, h('span.muted', {}, ` ${r.stream}`)),
      h('td', {}, r.bytes ? bytes(r.bytes) : '—'),
      h('td', {}, r.bytes ? percent(r.bytes / caps.stream_max_bytes) : '—'),
      h('td', {}, r.oldest_us ? duration(now - r.oldest_us) : 'nothing yet')))));
  const reachCard = h('section.card.wide', { 'aria-labelledby': 'reach-title' }, h('h2', { id: 'reach-title' }, 'Footage kept'),
    h('p.muted', {}, 'How far back each stream’s footage reaches, and its share of the stream cap.'),
    rows.length ? h('div.table-scroll', { tabIndex: 0, role: 'region', 'aria-label': 'Footage kept per stream' }, table)
      : h('p.empty', {}, 'No camera yet.'));
  return [diskCard, capsCard, reachCard];
}
