// Recording health: every camera's streams with how much of the last 24 hours, 7 days and
// 30 days was recorded, the gaps of the last day, the last error, the bytes stored and how
// far back the footage reaches. 25 rows a page: the page stays small with 127 cameras.
import { h } from '../lib/dom.js';
import { get } from '../lib/api.js';
import { bytes, percent, ago, duration, nowUs } from '../lib/format.js';

export const ROWS = 25;
const WINDOWS = [['24 h', 'day'], ['7 days', 'week'], ['30 days', 'month']];

function meter(share, label) {
  return h('span.meter', { role: 'img', 'aria-label': `${label}: ${percent(share)} recorded`, 'data-share': String(share) },
    h('span.meter-fill', { style: { width: `${Math.min(100, share * 100)}%` } }), h('span.meter-text', {}, percent(share)));
}

function row(r) {
  const state = r.connected ? 'ok' : 'offline';
  return h('tr', { 'data-stream': `${r.camera}/${r.stream}` },
    h('th', { scope: 'row' }, h('a', { href: `#/timeline/${encodeURIComponent(r.camera)}` }, r.camera), h('span.muted', {}, ` ${r.stream}`)),
    h('td', {}, h('span.chip.state', { 'data-state': r.connected ? (r.record_mode === 'continuous' ? 'recording' : 'live') : 'offline' },
      r.connected ? (r.record_mode === 'off' ? 'not recorded' : r.record_mode) : 'offline')),
    ...WINDOWS.map(([label, key]) => h('td', {}, r.recorded ? meter(r.coverage[key], label) : h('span.muted', {}, '—'))),
    h('td', {}, r.recorded ? String(r.gaps_day) : '—'),
    h('td', {}, r.bytes ? bytes(r.bytes) : '—'),
    h('td', {}, r.oldest_us ? `${duration(nowUs() - r.oldest_us)}` : '—'),
    h('td.error-cell', { 'data-state': state }, r.last_error || ''));
}

async function mount(view, args, query) {
  const offset = Math.max(0, Number(query.get('from')) || 0);
  const data = await get(`/api/health?offset=${offset}&limit=${ROWS}`);
  const last = Math.min(data.total, offset + data.rows.length);
  const pageLink = (to, text, label) => h('a.button', { href: `#/health?from=${to}`, 'aria-label': label }, text);
  const pager = h('nav.pager', { 'aria-label': 'Pages of streams' },
    offset > 0 ? pageLink(Math.max(0, offset - ROWS), '← Previous', 'Previous streams') : null,
    h('span', {}, data.total ? `${offset + 1}–${last} of ${data.total} streams` : 'No streams'),
    last < data.total ? pageLink(offset + ROWS, 'Next →', 'Next streams') : null);
  const table = h('table.health', {},
    h('caption.visually-hidden', {}, 'Recording health of each stream'),
    h('thead', {}, h('tr', {}, ...['Stream', 'State', 'Last 24 h', '7 days', '30 days', 'Gaps (24 h)', 'Stored', 'Reaches back', 'Last error']
      .map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, ...data.rows.map(row)));
  view.append(h('div.page-head', {}, h('h1', {}, 'Recordings'), h('span.muted', {}, `checked ${ago(data.now_us)}`)),
    h('div.table-scroll', { tabIndex: 0, role: 'region', 'aria-label': 'Recording health table' }, table), pager);
  return null;
}

export default { id: 'health', title: 'Recordings', icon: 'health', mount };
