// Timeline: one camera's recordings over a day or down to seconds, with its events, and a
// player that plays from wherever the timeline is clicked or its playhead dragged. The
// window follows the present until it is moved; a date picker goes to other days.
// Footage the box no longer holds but its archive does (an S3 bucket) shows striped, and
// plays from the bucket in a plain <video> (the archive's export, read with range requests).
import { h } from '../lib/dom.js';
import { get, say } from '../lib/api.js';
import { listCameras, streamOf } from '../lib/cameras.js';
import { US, nowUs, dateInput, fromDateInput, dateTime, duration, time } from '../lib/format.js';
import { Player } from '../lib/player.js';
import { Timeline, SPAN_MAX_US } from '../lib/timeline.js';

// The events asked for at once, and the most kept for one window.
const EVENTS_PAGE = 200;
const EVENTS_KEPT = 2000;
const FOLLOW_MS = 3000;
// A tail fetch starts this much before the last one, so nothing between them is missed.
const TAIL_OVERLAP_US = 10 * US.s;
// Live notices a page keeps (it may stay open for days).
const NOTICES_KEPT = 500;
// Events listed under the timeline (the markers' keyboard way): at most this many.
const IN_VIEW_MAX = 12;

// The archive's stretches of a camera, longest first played for this long at a time.
const ARCHIVE_PLAY_US = 10 * 60 * US.s;

// `local` runs with the stretches of `archived` ones they do not cover, as kind 'archived',
// in order and without overlaps (what the timeline draws).
export function withArchived(local, archived) {
  const out = [...local];
  for (const a of archived) {
    let start = a.start_us;
    for (const r of local) {
      if (r.end_us <= start || r.start_us >= a.end_us) continue;
      if (r.start_us > start) out.push({ start_us: start, end_us: r.start_us, kind: 'archived' });
      start = Math.max(start, r.end_us);
    }
    if (start < a.end_us) out.push({ start_us: start, end_us: a.end_us, kind: 'archived' });
  }
  return out.sort((x, y) => x.start_us - y.start_us);
}

// `local` events with the `archived` ones the box no longer holds (the same id is the same
// event: this box's archive), by time.
export function withArchivedEvents(local, archived) {
  const held = new Set(local.map((e) => e.event));
  return [...local, ...archived.filter((e) => !held.has(e.event))].sort((x, y) => x.time_us - y.time_us);
}

export function runsOf(data, mode) {
  const kind = mode === 'events' ? 'event' : 'recorded';
  return data.runs.map((r) => ({ start_us: r.start_us, end_us: r.end_us, kind }));
}

// `old` runs with the `fresh` ones fetched for the newest stretch in place of what they
// cover (the box answers whole runs, so the first fresh run may begin before the stretch).
export function mergeTail(old, fresh) {
  if (!fresh.length) return old;
  const cut = fresh[0].start_us;
  const straddling = old.find((r) => r.start_us < cut && r.end_us >= cut);
  const first = straddling ? { ...fresh[0], start_us: straddling.start_us } : fresh[0];
  return [...old.filter((r) => r.end_us < cut), first, ...fresh.slice(1)];
}

async function eventsIn(camera, from, to) {
  const out = [];
  let before = null;
  while (out.length < EVENTS_KEPT) {
    const q = new URLSearchParams({ camera, from_us: String(Math.floor(from)), to_us: String(Math.ceil(to)), limit: String(EVENTS_PAGE) });
    if (before) q.set('before', before);
    const page = await get(`/api/events?${q}`);
    out.push(...page.events);
    if (!page.next) break;
    before = page.next;
  }
  return out.reverse();
}

async function mount(view, args, query) {
  const cameras = await listCameras();
  if (!cameras.length) { view.append(h('h1', {}, 'Timeline'), h('p.empty', {}, 'No cameras yet.')); return null; }
  const camera = cameras.find((c) => c.camera === args[0]) || cameras[0];
  const name = camera.camera;
  const main = streamOf(camera, 'main') || camera.streams[0];
  const stream = `${name}/${main.stream}`;
  const preRollUs = (main.pre_roll_ms || 0) * 1000;

  const picker = h('nav.chips', { 'aria-label': 'Camera' }, ...cameras.map((c) => h('a.chip', {
    href: `#/timeline/${encodeURIComponent(c.camera)}`, 'aria-current': c.camera === name ? 'true' : null }, c.camera)));
  const date = h('input', { type: 'date', 'aria-label': 'Day', value: dateInput(nowUs()), max: dateInput(nowUs()) });
  const labelsBox = h('div.chips.labels', { role: 'group', 'aria-label': 'Show events labelled' });
  const spanText = h('span.muted.tl-span');
  const exportLink = h('a.button', { download: '' }, 'Download window');
  const archivedLegend = h('span.muted.tl-legend', { hidden: true }, h('span.tl-swatch'), ' in the archive only');
  const toolbar = h('div.toolbar', {},
    h('button', { type: 'button', 'aria-label': 'Zoom out', title: 'Zoom out (−)', onclick: () => tl.zoom(2, tl.position ?? undefined) }, '−'),
    h('button', { type: 'button', 'aria-label': 'Zoom in', title: 'Zoom in (+)', onclick: () => tl.zoom(0.5, tl.position ?? undefined) }, '+'),
    h('button', { type: 'button', onclick: () => followNow() }, 'Now'),
    date, spanText, exportLink, archivedLegend);
  const stage = h('div.tl-stage');
  const box = h('div.tl-player');
  const lane = h('div.tl-lane');
  // Archived footage plays here, in place of the player.
  // (Classes of their own: the live player's are what its tests and scripts find.)
  const archivedVideo = h('video.archived-video', { muted: true, playsInline: true, controls: true, 'aria-label': `${stream}, from the archive` });
  const archivedState = h('p.archived-state', { 'aria-live': 'polite' });
  const archivedBox = h('div.tl-player.tl-archived', { hidden: true },
    h('div.player-frame', {}, archivedVideo, h('span.player-badge', { 'data-mode': 'archived' }, 'Archive')), archivedState,
    h('div.player-controls', {}, h('button', { type: 'button', onclick: () => { stopArchived(); player.live(); followNow(); } }, 'Back to live')));
  stage.append(box, archivedBox, lane);
  // The box's archive target, when it has one: its footage beyond the disk shows too.
  const archive = await get('/api/archive?boxes=0').then((a) => (a.targets[0] ? a.targets[0].id : null)).catch(() => null);
  let archivedFrom = null;
  // The events in the window as buttons: what the markers are, for keyboards and screen
  // readers (the markers themselves are drawn for the pointer).
  const inView = h('ul.tl-in-view', { 'aria-label': 'Events in view' });
  view.append(h('div.page-head', {}, h('h1', {}, 'Timeline'), picker), stage, toolbar, labelsBox, inView);

  let following = !query.get('t');
  let loaded = { from: 0, to: 0 };
  let loading = null;
  const player = new Player(box, stream, {
    position: (us) => {
      if (archivedFrom !== null) return;
      const was = tl.position;
      tl.setPosition(us);
      // Playback ran off the window's end: the window moves on with it (not when a person
      // moved the window away from the playhead).
      if (us !== null && was !== null && !following && was >= tl.from && was <= tl.to && us > tl.to) {
        tl.setWindow(us - tl.span * 0.1, us + tl.span * 0.9);
      }
    },
    event: (n) => notice(n),
    message: (m) => { if (m.subscribed) lane.dataset.subscribed = String(m.subscribed.cameras.length > 0); },
    error: (t) => say(t),
  });
  window.keeppeek.player = player;
  const archivedAt = (at) => tl.runs.find((r) => r.kind === 'archived' && r.start_us <= at && at < r.end_us);
  function stopArchived() {
    if (archivedFrom === null) return;
    archivedFrom = null;
    archivedVideo.pause();
    archivedVideo.removeAttribute('src');
    archivedVideo.load();
    archivedBox.hidden = true;
    box.hidden = false;
  }
  // Plays from `t` within an archived stretch: the bucket's export from there on (past the
  // stretch too: what follows may be in the bucket as well, and a stretch may be a sliver
  // between two runs of the box's).
  function playArchived(t) {
    const from = Math.floor(t);
    const to = Math.ceil(Math.min(nowUs(), t + ARCHIVE_PLAY_US));
    const q = new URLSearchParams({ stream, from_us: String(from), to_us: String(to) });
    archivedFrom = from;
    // The live player pauses behind it (its sound too).
    if (!player.paused) player.togglePause();
    box.hidden = true;
    archivedBox.hidden = false;
    archivedState.textContent = `From the archive (${archive}), ${dateTime(from)}: this box no longer holds it.`;
    archivedVideo.src = `/api/archive/${encodeURIComponent(archive)}/export.mp4?${q}`;
    archivedVideo.play().catch(() => {});
  }
  archivedVideo.addEventListener('timeupdate', () => {
    if (archivedFrom !== null) tl.setPosition(archivedFrom + archivedVideo.currentTime * 1e6);
  });
  archivedVideo.addEventListener('ended', () => {
    if (archivedFrom !== null) archivedState.textContent = 'The end of what the archive holds from there: click the timeline to go on.';
  });
  archivedVideo.addEventListener('error', () => {
    if (archivedFrom !== null) archivedState.textContent = 'The archive could not be read: try again in a moment.';
  });
  const seek = (at) => {
    const t = Math.min(at, nowUs());
    tl.setPosition(t);
    following = false;
    const run = archive ? archivedAt(t) : null;
    if (run) { playArchived(t); return; }
    stopArchived();
    player.play(t);
  };
  const tl = new Timeline(lane, {
    seek: (at, final) => { if (final || player.stored) seek(at); },
    event: (e) => seek(e.time_us - preRollUs),
    window: (from, to, byUser) => {
      if (byUser) following = false;
      spanText.textContent = `${dateTime(from)} – ${duration(to - from)}`;
      // (A window in the future exports the last second before now: nothing later exists.)
      const end = Math.ceil(Math.min(to, nowUs()));
      exportLink.href = `/api/streams/${stream}/export.mp4?from_us=${Math.floor(Math.min(from, end - US.s))}&to_us=${end}`;
      load();
      listInView();
    },
    step: (dir) => {
      const jump = Math.max(US.s, tl.span / 50);
      const from = tl.position ?? nowUs();
      if (dir > 0 && player.paused) player.send({ step: {} });
      else seek(from + dir * jump);
    },
    pause: () => {
      if (archivedFrom === null) { player.togglePause(); return; }
      if (archivedVideo.paused) archivedVideo.play().catch(() => {}); else archivedVideo.pause();
    },
    live: () => { stopArchived(); player.live(); followNow(); },
    shown: () => listInView(),
  });
  window.keeppeek.timeline = tl;
  let listing = 0;
  const listInView = () => {
    clearTimeout(listing);
    listing = setTimeout(() => {
      const shown = tl.shown.filter((e) => e.time_us >= tl.from && e.time_us <= tl.to);
      inView.replaceChildren(...shown.slice(0, IN_VIEW_MAX).map((e) => h('li', {}, h('button.chip', {
        type: 'button', 'data-event': e.event, 'data-archived': e.archived ? 'true' : null, onclick: () => seek(e.time_us - preRollUs),
        // Its name is what it shows; the title says what it does.
        title: `Play ${(e.labels || []).join(', ') || 'event'} at ${dateTime(e.time_us)} from before it${e.archived ? ', from the archive' : ''}` },
      `${time(e.time_us)} · ${(e.labels || []).join(', ') || 'event'}${e.archived ? ' · archive' : ''}`))),
      ...(shown.length > IN_VIEW_MAX ? [h('li.muted', {}, `and ${shown.length - IN_VIEW_MAX} more: zoom in`)] : []));
    }, 150);
  };
  const narrow = matchMedia('(max-width: 700px)');
  const orient = () => tl.setVertical(narrow.matches);
  orient();
  narrow.addEventListener('change', orient);

  // The archive's recordings between `from` and `to` (none when it cannot be read: the
  // local ones still show).
  const archivedIn = (from, to) => {
    if (!archive) return Promise.resolve([]);
    const q = new URLSearchParams({ stream, from_us: String(Math.floor(from)), to_us: String(Math.ceil(to)) });
    return get(`/api/archive/${encodeURIComponent(archive)}/recordings?${q}`)
      .then((d) => d.recordings.map((r) => ({ start_us: r.wall_start_us, end_us: r.wall_end_us })))
      .catch(() => []);
  };
  // The archive's events of this camera between `from` and `to`, as the timeline keeps
  // events (their snapshots read from the bucket).
  const archivedEventsIn = (from, to) => {
    if (!archive) return Promise.resolve([]);
    const q = new URLSearchParams({ camera: name, from_us: String(Math.floor(from)), to_us: String(Math.ceil(to)) });
    const snapshot = (e) => {
      const s = new URLSearchParams({ camera: name, day: new Date(e.time_us / 1000).toISOString().slice(0, 10), event: String(e.id) });
      return { url: `/api/archive/${encodeURIComponent(archive)}/snapshot.jpg?${s}` };
    };
    return get(`/api/archive/${encodeURIComponent(archive)}/events?${q}`)
      .then((d) => d.events.map((e) => ({ event: e.id, rev: e.rev, camera: name, time_us: e.time_us, labels: e.labels,
        score: e.score, text: e.text, archived: true, snapshot: e.snapshot ? snapshot(e) : null })))
      .catch(() => []);
  };
  // The runs and events between `from` and `to`.
  // (Following the present, the newest stretch is on the box: the bucket is not asked.)
  const fetchRange = (from, to, tail = false) => Promise.all([
    Promise.all([
      get(`/api/streams/${stream}/recordings?from_us=${Math.floor(from)}&to_us=${Math.ceil(to)}`)
        .then((d) => runsOf(d, main.record_mode)).catch((e) => (e.status === 404 ? [] : Promise.reject(e))),
      tail ? Promise.resolve([]) : archivedIn(from, to),
    ]).then(([local, archived]) => {
      const runs = withArchived(local, archived);
      if (runs.some((r) => r.kind === 'archived')) archivedLegend.hidden = false;
      return runs;
    }),
    Promise.all([eventsIn(name, from, to), tail ? Promise.resolve([]) : archivedEventsIn(from, to)])
      .then(([local, archived]) => withArchivedEvents(local, archived)),
  ]);

  // One fetch at a time: a window moved meanwhile is loaded after it.
  async function fetching(work) {
    loading = { again: false };
    try { await work(); } catch (e) { say(e.message); }
    const again = loading.again;
    loading = null;
    if (again) load();
  }

  // Runs and events of the window and a window either side, fetched again when the window
  // leaves what was fetched.
  async function load(force = false) {
    const [from, to] = [tl.from, tl.to];
    if (!force && from >= loaded.from && to <= loaded.to) return;
    if (loading) { loading.again = true; return; }
    // Nothing after now exists: a window in the future asks for the stretch before now.
    const now = nowUs();
    const wantFrom = Math.min(from - tl.span, now - tl.span);
    const want = { from: wantFrom, to: Math.max(wantFrom + US.s, Math.min(to + tl.span, now + tl.span)) };
    await fetching(async () => {
      const [runs, events] = await fetchRange(want.from, want.to);
      tl.setRuns(runs);
      tl.setEvents(events);
      labels(events);
      loaded = want;
      tailAt = now;
    });
  }

  // While following the present, only the newest stretch is fetched again: from the start
  // of the newest run (it grows) or the last fetch, whichever is earlier.
  let tailAt = 0;
  async function loadTail() {
    if (loading) return;
    const now = nowUs();
    const last = tl.runs[tl.runs.length - 1];
    const from = Math.max(loaded.from, Math.min(last ? last.start_us : Infinity, tailAt - TAIL_OVERLAP_US));
    await fetching(async () => {
      const [runs, events] = await fetchRange(from, now + US.s, true);
      tl.setRuns(mergeTail(tl.runs, runs));
      tl.setEvents([...tl.events.filter((e) => e.time_us < from), ...events].slice(-EVENTS_KEPT));
      labels(tl.events);
      tailAt = now;
    });
  }

  const active = new Set();
  let labelsShown = '';
  function labels(events) {
    const all = new Set(events.flatMap((e) => e.labels || []));
    for (const l of active) all.add(l);
    // Redrawn only when the labels change (a chip with the focus keeps it).
    const key = [...all].sort().join('\n');
    if (key === labelsShown) return;
    labelsShown = key;
    labelsBox.replaceChildren(...[...all].sort().map((l) => h('button.chip', {
      type: 'button', 'aria-pressed': String(active.has(l)),
      onclick: (e) => {
        if (active.has(l)) active.delete(l); else active.add(l);
        e.currentTarget.setAttribute('aria-pressed', String(active.has(l)));
        tl.setLabels(active);
      } }, l)));
    if (all.size) labelsBox.prepend(h('span.muted', {}, 'Labels:'));
  }

  function followNow() {
    following = true;
    const now = nowUs();
    const span = Math.min(tl.span, SPAN_MAX_US);
    tl.setWindow(now - span * 0.9, now + span * 0.1);
    date.value = dateInput(now);
  }

  date.addEventListener('change', () => {
    if (!date.value) return;
    following = false;
    const start = fromDateInput(date.value);
    tl.setWindow(start, start + US.day, true);
  });

  const t = Number(query.get('t'));
  if (t) tl.setWindow(t - 5 * US.min, t + 5 * US.min); else { tl.setWindow(nowUs() - US.h, nowUs()); followNow(); }
  // A hidden tab asks for nothing; back in view, it fetches its whole window again.
  let wasHidden = false;
  const tick = setInterval(() => {
    if (document.hidden) { wasHidden = true; return; }
    const now = nowUs();
    tl.setNow(now);
    date.max = dateInput(now);
    if (following) {
      tl.setWindow(now - tl.span * 0.9, now + tl.span * 0.1);
      if (wasHidden) load(true); else loadTail();
    }
    wasHidden = false;
  }, FOLLOW_MS);
  tl.setNow(nowUs());

  // Events of this camera arrive on the control channel as they are stored (each revision),
  // and join the timeline.
  const notices = [];
  window.keeppeek.notices = notices;
  function notice(n) {
    const e = { event: n.id, rev: n.rev, camera: n.camera, time_us: n.time_us, labels: n.labels, score: n.score, text: n.text,
      snapshot: n.snapshot_url ? { url: n.snapshot_url } : null };
    notices.push(e);
    if (notices.length > NOTICES_KEPT) notices.shift();
    const list = tl.events.filter((x) => x.event !== e.event);
    const at = list.findIndex((x) => x.time_us > e.time_us);
    list.splice(at < 0 ? list.length : at, 0, e);
    tl.setEvents(list.slice(-EVENTS_KEPT));
  }

  try {
    await player.start();
    player.send({ subscribe_events: { cameras: [name] } });
    if (t) seek(t);
  } catch (e) {
    player.state.textContent = `${e.message}: the timeline still shows what was recorded.`;
  }
  return () => {
    stopArchived();
    clearInterval(tick);
    narrow.removeEventListener('change', orient);
    window.keeppeek.player = null;
    window.keeppeek.timeline = null;
    return player.destroy();
  };
}

export default { id: 'timeline', title: 'Timeline', icon: 'timeline', mount };
