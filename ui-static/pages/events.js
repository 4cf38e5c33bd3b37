// Events: what analysis services reported, newest first, with their snapshots; filter chips
// for camera, label and time and a word search; more as the list is scrolled; new events
// arrive at the top while the page is open. Each says what became of its footage: kept
// (held against retention until a day), gone and why, or never recorded. #/events/12 is one
// event: its snapshot with the boxes drawn, every revision, Play from the pre-roll, the clip
// to download, and for an admin, Delete (which releases its footage's hold).
import { h, confirmDialog } from '../lib/dom.js';
import { get, say, request, session, sayThenGo } from '../lib/api.js';
import { listCameras, streamOf } from '../lib/cameras.js';
import { US, nowUs, ago, dateTime, day, time } from '../lib/format.js';
import { Player } from '../lib/player.js';
import { icon } from '../lib/icons.js';

const PAGE = 30;
// The most items the list keeps (a page open for days stays bounded).
const KEPT = 600;
const NEWS_POLL_MS = 2000;
const TIMES = [['Last hour', US.h], ['Today', 'today'], ['7 days', 7 * US.day], ['Any time', 0]];

function picture(e, big = false) {
  if (e.snapshot) {
    return h('img', { src: e.snapshot.url, loading: big ? 'eager' : 'lazy', decoding: 'async',
      alt: `Snapshot from ${e.camera} at ${dateTime(e.time_us)}`, width: e.snapshot.width, height: e.snapshot.height });
  }
  // No snapshot: the keyframe recorded at the event, as a one-frame video.
  return h('video', { src: e.keyframe, muted: true, preload: big ? 'auto' : 'metadata', 'aria-label': `Picture recorded at ${dateTime(e.time_us)}` });
}

const GONE = {
  retention: 'deleted by retention', disk_full: 'deleted when the disk was full', deleted: 'deleted by an admin',
  power_cut: 'lost in a power cut', write_error: 'lost: it could not be written',
};

// What became of an event's footage, in words, and a state for its badge.
function footage(f) {
  if (!f) return null;
  if (f.state === 'on_disk') {
    if (f.held_until_us) return ['held', `Footage kept until ${day(f.held_until_us)}`];
    return ['kept', f.hold_lapsed ? 'Footage on disk; its hold lapsed (the held share was full)' : 'Footage on disk'];
  }
  if (f.state === 'gone') return ['gone', `Footage ${GONE[f.why] || 'gone'}`];
  return ['none', 'Nothing recorded then'];
}

function footageBadge(f) {
  const said = footage(f);
  return said && h('span.footage', { 'data-footage': said[0] }, said[1]);
}

function summary(e) {
  const score = e.score ? ` ${Math.round(e.score * 100)}%` : '';
  return `${(e.labels || []).join(', ') || 'event'}${score}`;
}

function card(e, fresh) {
  return h('li.event-card', { 'data-event': e.event, 'data-rev': e.rev, 'data-time-us': e.time_us, className: fresh ? 'event-card fresh' : 'event-card' },
    h('a', { href: `#/events/${e.event}` },
      h('div.thumb', {}, picture(e)),
      h('div.event-text', {},
        h('strong', {}, summary(e)),
        h('span', {}, `${e.camera} · ${ago(e.time_us)}`),
        e.text ? h('span.muted', {}, e.text) : null,
        e.rev > 1 ? h('span.muted', {}, `revision ${e.rev}`) : null,
        footageBadge(e.footage))));
}

async function list(view, query) {
  const cameras = await listCameras();
  const filters = { camera: query.get('camera') || '', label: query.get('label') || '', time: query.get('time') || '', q: query.get('q') || '' };
  const items = h('ol.event-list', { 'aria-label': 'Events, newest first' });
  const sentinel = h('p.more', { 'aria-live': 'polite' });
  const news = h('p.news', { 'aria-live': 'polite' });
  const words = h('input', { type: 'search', placeholder: 'Words in the events', 'aria-label': 'Search words', value: filters.q });
  const chipRow = (label, options, key) => h('div.chips', { role: 'group', 'aria-label': label },
    ...options.map(([text, value]) => h('button.chip', { type: 'button', 'aria-pressed': String(filters[key] === value),
      onclick: () => setFilter(key, filters[key] === value && value ? '' : value) }, text)));
  const labelsRow = h('div');
  view.append(h('div.page-head', {}, h('h1', {}, 'Events')),
    h('div.filters', {},
      chipRow('Camera', [['All cameras', ''], ...cameras.map((c) => [c.camera, c.camera])], 'camera'),
      chipRow('Time', TIMES.map(([t, v]) => [t, String(v)]), 'time'),
      labelsRow,
      h('form.search', { role: 'search', onsubmit: (e) => { e.preventDefault(); setFilter('q', words.value.trim()); } }, words,
        h('button', { type: 'submit' }, 'Search'))),
    news, items, sentinel);

  // The filters live in the URL: Back and reload keep them.
  function setFilter(key, value) {
    filters[key] = value;
    const q = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
    location.hash = `#/events${q.size ? `?${q}` : ''}`;
  }

  const seenLabels = new Set(filters.label ? [filters.label] : []);
  let labelsShown = -1;
  function showLabels(events) {
    for (const e of events) for (const l of e.labels || []) seenLabels.add(l);
    if (!seenLabels.size || seenLabels.size === labelsShown) return;
    labelsShown = seenLabels.size;
    // Redrawn only when a label is new; the chip that had the focus keeps it.
    const focused = labelsRow.contains(document.activeElement) ? document.activeElement.textContent : null;
    labelsRow.replaceChildren(chipRow('Label', [['All labels', ''], ...[...seenLabels].sort().map((l) => [l, l])], 'label'));
    if (focused !== null) [...labelsRow.querySelectorAll('button')].find((b) => b.textContent === focused)?.focus();
  }

  function params() {
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (filters.camera) q.set('camera', filters.camera);
    if (filters.label) q.set('label', filters.label);
    if (filters.q) q.set('q', filters.q);
    if (filters.time === 'today') { const d = new Date(); d.setHours(0, 0, 0, 0); q.set('from_us', String(d.getTime() * 1000)); }
    else if (Number(filters.time)) q.set('from_us', String(Math.floor(nowUs() - Number(filters.time))));
    return q;
  }

  // (event, rev) pairs shown, so a poll adds only what is new.
  const shown = new Map();
  let next = null;
  let busy = false;
  let done = false;
  let left = false;
  // Drops the oldest cards beyond what the list keeps.
  function trim() {
    while (items.children.length > KEPT) {
      shown.delete(Number(items.lastElementChild.dataset.event));
      items.lastElementChild.remove();
    }
  }
  async function more() {
    if (busy || done || left) return;
    busy = true;
    let failed = false;
    sentinel.textContent = 'Loading…';
    try {
      const q = params();
      if (next) q.set('before', next);
      const page = await get(`/api/events?${q}`);
      for (const e of page.events) {
        if (shown.has(e.event)) continue;
        shown.set(e.event, e.rev);
        items.append(card(e, false));
      }
      showLabels(page.events);
      next = page.next;
      done = !next || items.children.length >= KEPT;
      sentinel.textContent = done ? (items.children.length ? 'That is all.' : 'No events match.') : '';
    } catch (e) {
      failed = true;
      sentinel.replaceChildren(`${e.message}. `, h('button', { type: 'button', onclick: () => more() }, 'Try again'));
    }
    busy = false;
    // Still on screen after a short page: go on (not after an error, nor once the page is left).
    if (!done && !failed && !left && inView()) more();
  }

  let fresh = 0;
  async function poll() {
    try {
      const page = await get(`/api/events?${params()}`);
      const newer = page.events.filter((e) => shown.get(e.event) !== e.rev).reverse();
      for (const e of newer) {
        shown.set(e.event, e.rev);
        items.querySelector(`[data-event="${e.event}"]`)?.remove();
        items.prepend(card(e, true));
        fresh++;
      }
      trim();
      if (newer.length) { news.textContent = `${fresh} new while you were here`; showLabels(newer); }
    } catch (_) { /* the next poll tries again */ }
  }

  // An observation may have been made before the page it reports on arrived (the list was
  // empty then): the sentinel's place now decides.
  const inView = () => sentinel.isConnected && sentinel.getBoundingClientRect().top < innerHeight;
  const observer = new IntersectionObserver((entries) => { if (entries.some((e) => e.isIntersecting) && inView()) more(); });
  observer.observe(sentinel);
  await more();
  const timer = setInterval(poll, NEWS_POLL_MS);
  return () => { left = true; clearInterval(timer); observer.disconnect(); };
}

// The snapshot with the revision's boxes drawn over it (boxes are shares of the picture).
function annotated(e) {
  const boxes = h('div.boxes', { 'aria-hidden': 'true' }, ...(e.boxes || []).map((b) => h('span.box', {
    style: { left: `${b.x * 100}%`, top: `${b.y * 100}%`, width: `${b.w * 100}%`, height: `${b.h * 100}%` } },
  h('span.box-label', {}, `${b.label || ''}${b.score ? ` ${Math.round(b.score * 100)}%` : ''}`))));
  return h('div.snapshot', {}, picture(e, true), boxes);
}

async function detail(view, id) {
  const data = await get(`/api/events/${encodeURIComponent(id)}`);
  const revisions = data.revisions;
  let latest = revisions[revisions.length - 1];
  const cameras = await listCameras();
  const camera = cameras.find((c) => c.camera === latest.camera);
  const main = camera && streamOf(camera, 'main');
  const postRollUs = ((main && main.post_roll_ms) || 10_000) * 1000;
  const from = latest.play.from_us;
  const to = Math.max(latest.end_us || latest.time_us, latest.time_us) + postRollUs;
  const stage = h('div.event-stage');
  const meta = h('dl.meta');
  const revs = h('ol.revisions', { 'aria-label': 'Revisions' });
  let player = null;
  const play = h('button.primary', { type: 'button', onclick: async () => {
    if (!player) {
      stage.replaceChildren();
      const p = new Player(stage, latest.play.stream, { error: (t) => say(t), lost: (why) => p.offerRetry(`Playback stopped: ${why}`, () => {
        p.destroy();
        if (player === p) player = null;
        play.click();
      }) });
      player = p;
      window.keeppeek.player = p;
      try { await p.start(); } catch (e) { if (!p.destroyed) say(e.message); if (player === p) player = null; return; }
      // Another revision shown (or the page left) while it connected.
      if (player !== p) return;
    }
    player.play(from);
  } }, icon('play'), 'Play from before');
  const showRev = (r) => {
    latest = r;
    if (player) { player.destroy(); player = null; window.keeppeek.player = null; }
    stage.replaceChildren(annotated(r));
    meta.replaceChildren(
      h('dt', {}, 'Camera'), h('dd', {}, h('a', { href: `#/timeline/${encodeURIComponent(r.camera)}?t=${r.time_us}` }, r.camera)),
      h('dt', {}, 'When'), h('dd', {}, dateTime(r.time_us)),
      h('dt', {}, 'What'), h('dd', {}, summary(r)),
      ...(r.text ? [h('dt', {}, 'Text'), h('dd', {}, r.text)] : []),
      h('dt', {}, 'From'), h('dd', {}, r.from || ''),
      ...(data.footage ? [h('dt', {}, 'Footage'), h('dd', {}, footageBadge(data.footage))] : []),
      h('dt', {}, 'Revision'), h('dd', {}, `${r.rev} of ${revisions.length}, received ${time(r.received_us)}`));
    for (const b of revs.querySelectorAll('button')) b.setAttribute('aria-pressed', String(Number(b.dataset.rev) === r.rev));
  };
  revs.append(...revisions.map((r) => h('li', {}, h('button.chip', { type: 'button', 'data-rev': r.rev, onclick: () => showRev(r) },
    `${r.rev} · ${time(r.received_us)}`))));
  const clip = h('a.button', { href: `/api/streams/${latest.play.stream}/export.mp4?from_us=${from}&to_us=${to}`, download: '' }, 'Download clip');
  const remove = session.role === 'admin' ? h('button.danger', { type: 'button', onclick: async () => {
    const held = data.footage && data.footage.held_until_us;
    const what = held ? ' Its footage is no longer held: ordinary retention takes it in turn.' : '';
    if (!await confirmDialog('Delete this event?', `Every revision and snapshot goes.${what}`, 'Delete')) return;
    const r = await request('DELETE', `/api/events/${encodeURIComponent(id)}`);
    if (r.status === 200) sayThenGo('Event deleted.', '#/events');
    else say((r.data && r.data.message) || `Deleting failed (${r.status}).`);
  } }, 'Delete event') : null;
  view.append(h('div.page-head', {}, h('a.back', { href: '#/events', 'aria-label': 'Back to the events' }, icon('back')),
    h('h1', {}, `${summary(latest)} · ${latest.camera}`)),
  h('div.event-detail', {}, stage, h('div.event-side', {}, h('div.toolbar', {}, play, clip, remove), meta,
    h('h2', {}, 'Revisions'), revs)));
  showRev(latest);
  return () => { window.keeppeek.player = null; return player && player.destroy(); };
}

export default {
  id: 'events', title: 'Events', icon: 'events',
  mount(view, args, query) { return args[0] ? detail(view, args[0]) : list(view, query); },
};
