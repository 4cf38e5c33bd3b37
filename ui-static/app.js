// KeepPeek's web face: plain JavaScript, no build step, nothing from outside the box.
'use strict';

const $ = (s) => document.querySelector(s);
let csrf = null;
let role = null;

async function api(method, path, body) {
  const headers = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (csrf && method !== 'GET') headers['x-csrf-token'] = csrf;
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin' });
  let data = null;
  try { data = JSON.parse(await r.text()); } catch (_) { /* not JSON */ }
  return { status: r.status, data };
}

function say(text) { $('#message').textContent = text || ''; }

function show(id) {
  for (const s of ['#setup', '#login', '#main']) $(s).hidden = s !== id;
  $('#logout').hidden = id !== '#main';
  const first = $(id).querySelector('input, select, button');
  if (first) first.focus();
}

// Local date/time ↔ UTC µs: the API speaks UTC µs, people read local time.
const toUs = (d) => d.getTime() * 1000;
function localInput(d) {
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

async function start() {
  say('');
  const setup = await api('GET', '/api/setup');
  if (setup.data && setup.data.needed) return show('#setup');
  const me = await api('GET', '/api/me');
  if (me.status !== 200) return show('#login');
  csrf = me.data.csrf;
  role = me.data.role;
  $('#who').textContent = `${me.data.user} (${role})`;
  show('#main');
  await cameras();
  const today = new Date();
  $('#day-date').value = localInput(today).slice(0, 10);
  $('#export-from').value = localInput(new Date(today.getTime() - 60_000));
  $('#export-to').value = localInput(today);
  $('#admin').hidden = role !== 'admin';
  if (role === 'admin') await adminLists();
  await systemStatus();
  await searchEvents(false);
}

async function cameras() {
  const r = await api('GET', '/api/cameras');
  const body = $('#cameras tbody');
  body.replaceChildren();
  $('#day-stream').replaceChildren();
  $('#events-camera').replaceChildren(new Option('all', ''));
  for (const c of r.data || []) {
    $('#events-camera').append(new Option(c.camera, c.camera));
    const main = c.streams.find((s) => s.stream === 'main');
    preRollUs.set(c.camera, main ? main.pre_roll_ms * 1000 : 0);
    for (const s of c.streams) {
      const tr = document.createElement('tr');
      const cells = [c.camera, s.stream, s.connected ? 'connected' : 'disconnected', s.codec || '', s.width ? `${s.width}×${s.height}` : '',
        s.fps ? s.fps.toFixed(1) : '', s.bitrate_bps ? Math.round(s.bitrate_bps / 1000) : '', s.last_error || ''];
      for (const v of cells) { const td = document.createElement('td'); td.textContent = v; tr.append(td); }
      const watch = document.createElement('button');
      watch.type = 'button';
      watch.textContent = 'Watch';
      watch.setAttribute('aria-label', `Watch ${c.camera} ${s.stream} live`);
      watch.addEventListener('click', () => startLive(c.camera, s.stream).catch((e) => say(String(e))));
      const td = document.createElement('td');
      td.append(watch);
      tr.append(td);
      body.append(tr);
      const o = document.createElement('option');
      o.value = `${c.camera}/${s.stream}`;
      o.textContent = o.value;
      $('#day-stream').append(o);
    }
  }
}

async function coverage() {
  const [y, m, d] = $('#day-date').value.split('-').map(Number);
  const from = new Date(y, m - 1, d);
  const to = new Date(y, m - 1, d + 1);
  const stream = $('#day-stream').value;
  const r = await api('GET', `/api/streams/${stream}/coverage?from_us=${toUs(from)}&to_us=${toUs(to)}`);
  const list = $('#coverage');
  list.replaceChildren();
  if (r.status === 404) { say('Nothing recorded on that stream yet.'); return; }
  const byStart = new Map((r.data ? r.data.buckets : []).map((b) => [b.start_us, b]));
  const size = r.data ? r.data.bucket_us : 6 * 3600e6;
  for (let t = Math.floor(toUs(from) / size) * size; t < toUs(to); t += size) {
    const b = byStart.get(t);
    const share = b ? Math.min(100, (100 * b.recorded_us) / size) : 0;
    const li = document.createElement('li');
    const start = new Date(t / 1000);
    li.textContent = `${start.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })}: ${share.toFixed(share > 0 && share < 1 ? 2 : 0)}% recorded`;
    li.dataset.share = share.toFixed(3);
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.style.width = `${share}%`;
    li.append(bar);
    list.append(li);
  }
}

function exportLinks() {
  const stream = $('#day-stream').value;
  const from = toUs(new Date($('#export-from').value));
  const to = toUs(new Date($('#export-to').value));
  if (!(from < to)) { say('The export must end after it starts.'); return; }
  const q = `?from_us=${from}&to_us=${to}`;
  const mp4 = $('#export-mp4');
  mp4.href = `/api/streams/${stream}/export.mp4${q}`;
  mp4.hidden = false;
  const hls = $('#export-hls');
  hls.href = `/api/streams/${stream}/export.m3u8${q}`;
  hls.hidden = false;
  mp4.focus();
}

async function adminLists() {
  const users = await api('GET', '/api/users');
  $('#users').replaceChildren(...(users.data || []).map((u) => {
    const li = document.createElement('li');
    li.textContent = `${u.username} (${u.role})`;
    return li;
  }));
  const tokens = await api('GET', '/api/tokens');
  $('#tokens').replaceChildren(...(tokens.data || []).map((t) => {
    const li = document.createElement('li');
    li.textContent = `${t.name} #${t.id}: ${t.scopes.join(', ')}`;
    return li;
  }));
}

function on(id, handler) {
  $(id).addEventListener('submit', async (e) => {
    e.preventDefault();
    say('');
    try { await handler(); } catch (err) { say(String(err)); }
  });
}

on('#setup-form', async () => {
  const body = { username: $('#setup-username').value, password: $('#setup-password').value };
  if ($('#setup-token').value) body.setup_token = $('#setup-token').value;
  const r = await api('POST', '/api/setup', body);
  if (r.status !== 201) return say(r.data ? r.data.message : `setup failed (${r.status})`);
  await start();
});

on('#login-form', async () => {
  const r = await api('POST', '/api/login', { username: $('#login-username').value, password: $('#login-password').value });
  if (r.status !== 200) return say(r.data ? r.data.message : `login failed (${r.status})`);
  await start();
});

on('#day-form', coverage);
on('#export-form', async () => exportLinks());

on('#user-form', async () => {
  const r = await api('POST', '/api/users', { username: $('#user-username').value, password: $('#user-password').value, role: $('#user-role').value });
  if (r.status !== 201) return say(r.data ? r.data.message : `failed (${r.status})`);
  await adminLists();
});

on('#token-form', async () => {
  const scopes = [...document.querySelectorAll('#token-form input[type=checkbox]:checked')].map((c) => c.value);
  const r = await api('POST', '/api/tokens', { name: $('#token-name').value, scopes });
  if (r.status !== 201) return say(r.data ? r.data.message : `failed (${r.status})`);
  $('#new-token').textContent = `New token (shown once): ${r.data.token}`;
  await adminLists();
});

// Events: a search over the box's indexes (newest first, in pages), each with its snapshot
// and a button that plays the recording from the pre-roll before it. While a live view is
// open the session is subscribed, and new events come in on its control channel.
const preRollUs = new Map();
// Every event notice received live (the tests read it).
const eventNotices = [];
let eventsNext = null;

function eventItem(e, fresh) {
  const li = document.createElement('li');
  li.dataset.event = String(e.event);
  li.dataset.rev = String(e.rev);
  li.dataset.timeUs = String(e.time_us);
  if (fresh) li.className = 'live';
  const when = new Date(e.time_us / 1000).toLocaleString();
  if (e.snapshot_url) {
    const img = document.createElement('img');
    img.src = e.snapshot_url;
    img.loading = 'lazy';
    img.alt = `Snapshot of ${e.camera} at ${when}`;
    li.append(img);
  } else {
    // No snapshot: the keyframe recorded at the event, as a one-frame video.
    const still = document.createElement('video');
    still.src = `/api/events/${e.event}/keyframe`;
    still.muted = true;
    still.preload = 'auto';
    still.setAttribute('aria-label', `Picture recorded at ${when}`);
    li.append(still);
  }
  const text = document.createElement('div');
  const head = document.createElement('div');
  head.className = 'when';
  head.textContent = `${when} · ${e.camera}`;
  const what = document.createElement('div');
  const score = e.score ? ` (${Math.round(e.score * 100)}%)` : '';
  what.textContent = `${(e.labels || []).join(', ')}${score}${e.text ? ` — ${e.text}` : ''}${e.rev > 1 ? ` · revision ${e.rev}` : ''}`;
  text.append(head, what);
  const play = document.createElement('button');
  play.type = 'button';
  play.textContent = 'Play';
  play.setAttribute('aria-label', `Play ${e.camera} from before the event at ${when}`);
  play.addEventListener('click', () => playEvent(e).catch((err) => say(String(err))));
  li.append(text, play);
  return li;
}

// The API's JSON and the channel's notice in one shape.
function fromApi(e) {
  return { event: e.event, rev: e.rev, camera: e.camera, time_us: e.time_us, labels: e.labels, score: e.score, text: e.text,
    snapshot_url: e.snapshot ? e.snapshot.url : '' };
}
function fromNotice(n) {
  return { event: n.id, rev: n.rev, camera: n.camera, time_us: n.time_us, labels: n.labels, score: n.score, text: n.text,
    snapshot_url: n.snapshot_url };
}

function eventsQuery() {
  const q = new URLSearchParams();
  if ($('#events-camera').value) q.set('camera', $('#events-camera').value);
  if ($('#events-label').value.trim()) q.set('label', $('#events-label').value.trim());
  if ($('#events-q').value.trim()) q.set('q', $('#events-q').value.trim());
  const from = new Date($('#events-from').value);
  const to = new Date($('#events-to').value);
  if (Number.isFinite(from.getTime())) q.set('from_us', String(toUs(from)));
  if (Number.isFinite(to.getTime())) q.set('to_us', String(toUs(to)));
  q.set('limit', '50');
  return q;
}

// The filters of the page being continued: "More" goes on with those, not with what the
// form says since.
let eventsFilters = null;

async function searchEvents(more) {
  if (!more || !eventsFilters) eventsFilters = eventsQuery();
  const q = new URLSearchParams(eventsFilters);
  if (more && eventsNext) q.set('before', eventsNext);
  const r = await api('GET', `/api/events?${q}`);
  if (r.status !== 200) return say(r.data ? r.data.message : `search failed (${r.status})`);
  const list = $('#events-list');
  if (!more) list.replaceChildren();
  for (const e of r.data.events) list.append(eventItem(fromApi(e), false));
  eventsNext = r.data.next;
  $('#events-more').hidden = !eventsNext;
  if (!more && !r.data.events.length && !eventsNext) $('#events-live').textContent = 'No events found.';
}

on('#events-form', async () => { $('#events-live').textContent = ''; await searchEvents(false); });
$('#events-more').addEventListener('click', () => searchEvents(true).catch((e) => say(String(e))));

// A page may stay open for days: what it keeps of live notices is bounded.
const NOTICES_KEPT = 500;

function onEventNotice(n) {
  const e = fromNotice(n);
  eventNotices.push(e);
  if (eventNotices.length > NOTICES_KEPT) eventNotices.shift();
  const list = $('#events-list');
  list.prepend(eventItem(e, true));
  while (list.children.length > NOTICES_KEPT) list.lastElementChild.remove();
  $('#events-live').textContent = `${eventNotices.length} new event${eventNotices.length === 1 ? '' : 's'} while watching`;
  if (timeline.stream && timeline.stream.startsWith(`${e.camera}/`)) {
    timeline.events.push(e);
    if (timeline.events.length > 200) timeline.events.shift();
    drawTimeline();
  }
}

// Plays the camera's main stream from the pre-roll before the event (its recording starts
// at the keyframe at or before that).
async function playEvent(e) {
  const name = `${e.camera}/main`;
  if (!live || live.name !== name) await startLive(e.camera, 'main');
  await live.opened;
  sendControl({ play_stored: { stream: name, wall_us: Math.max(0, e.time_us - (preRollUs.get(e.camera) || 0)) } });
  $('#live-video').scrollIntoView({ block: 'nearest' });
}

// Live view: a WHEP session (an SDP offer POSTed, the answer back, DELETE to end it). The
// box is ICE-lite with a candidate on each of its LAN addresses: no STUN server is needed.
let live = null;

// Opens a WHEP session for `camera/stream` shown in `video`; returns it (pc, channel,
// location). Throws with the box's message when it is refused.
async function openWhep(camera, stream, video) {
  const pc = new RTCPeerConnection();
  pc.addTransceiver('video', { direction: 'recvonly' });
  const channel = pc.createDataChannel('control');
  channel.binaryType = 'arraybuffer';
  const session = { pc, channel, location: null, name: `${camera}/${stream}`, nextRequest: 1 };
  pc.ontrack = (e) => { video.srcObject = e.streams[0] || new MediaStream([e.track]); };
  await pc.setLocalDescription(await pc.createOffer());
  const headers = { 'content-type': 'application/sdp' };
  if (csrf) headers['x-csrf-token'] = csrf;
  const r = await fetch(`/api/whep/${camera}/${stream}`, { method: 'POST', headers, body: pc.localDescription.sdp });
  if (r.status !== 201) {
    let message = `live view failed (${r.status})`;
    try { message = (await r.json()).message; } catch (_) { /* not JSON */ }
    pc.close();
    throw new Error(message);
  }
  session.location = r.headers.get('location');
  await pc.setRemoteDescription({ type: 'answer', sdp: await r.text() });
  return session;
}

async function closeWhep(session) {
  session.pc.close();
  if (session.location) {
    const headers = csrf ? { 'x-csrf-token': csrf } : {};
    await fetch(session.location, { method: 'DELETE', headers });
  }
}

async function startLive(camera, stream) {
  await stopGrid();
  await stopLive();
  const session = await openWhep(camera, stream, $('#live-video'));
  live = session;
  session.channel.onmessage = (e) => onControl(KeepPeekControl.decode('ServerMessage', e.data));
  session.opened = new Promise((ok) => {
    session.channel.onopen = () => {
      timeline.stream = session.name;
      timeline.events = [];
      queryTimeline();
      sendControl({ subscribe_events: { cameras: [] } });
      ok();
    };
  });
  session.pc.onconnectionstatechange = () => {
    $('#live-state').textContent = `${session.name}: ${session.pc.connectionState}`;
  };
  $('#live-title').textContent = `Live: ${session.name}`;
  $('#playback-from').value = localInput(new Date(Date.now() - 60_000));
  $('#live').hidden = false;
  $('#live-stop').focus();
}

// The live grid: every camera at once, each from its sub stream when it has one (a grid
// tile is small; the main stream is for one camera at a time).
let grid = [];

async function startGrid() {
  await stopLive();
  await stopGrid();
  const r = await api('GET', '/api/cameras');
  const tiles = $('#grid-tiles');
  tiles.replaceChildren();
  for (const c of r.data || []) {
    const stream = c.streams.some((s) => s.stream === 'sub') ? 'sub' : 'main';
    const figure = document.createElement('figure');
    const video = document.createElement('video');
    video.muted = true; video.autoplay = true; video.playsInline = true;
    video.dataset.stream = `${c.camera}/${stream}`;
    const caption = document.createElement('figcaption');
    caption.textContent = `${c.camera} (${stream})`;
    figure.append(video, caption);
    tiles.append(figure);
    try { grid.push(await openWhep(c.camera, stream, video)); } catch (e) { caption.textContent += `: ${e.message}`; }
  }
  $('#grid').hidden = false;
  $('#grid-stop').focus();
}

async function stopGrid() {
  const sessions = grid;
  grid = [];
  await Promise.all(sessions.map(closeWhep));
  $('#grid-tiles').replaceChildren();
  $('#grid').hidden = true;
}

$('#grid-start').addEventListener('click', () => startGrid().catch((e) => say(String(e))));
$('#grid-stop').addEventListener('click', () => stopGrid());

async function stopLive() {
  const session = live;
  live = null;
  if (!session) return;
  $('#live-video').srcObject = null;
  $('#live').hidden = true;
  await closeWhep(session);
}

$('#live-stop').addEventListener('click', () => stopLive());

// The control channel (protobuf, /control_pb.js generated from the same .proto as the box's).
function sendControl(command) {
  if (!live || live.channel.readyState !== 'open') return;
  const m = { request_id: live.nextRequest++, track: 0, ...command };
  live.channel.send(KeepPeekControl.encode('ClientMessage', m));
}

function onControl(m) {
  if (m.position) {
    const out = $('#playback-position');
    out.dataset.wallUs = String(m.position.wall_us);
    out.textContent = new Date(m.position.wall_us / 1000).toLocaleString();
    timeline.position = m.position.wall_us;
    drawTimeline();
  }
  if (m.state) {
    const stored = m.state.mode === KeepPeekControl.ENUMS.Mode.MODE_STORED;
    $('#live-state').textContent = stored
      ? `${m.state.stream}: recorded, ${m.state.paused ? 'paused' : `${m.state.rate}×`}`
      : `${m.state.stream || live.name}: live`;
    $('#live-state').dataset.mode = stored ? 'stored' : 'live';
    $('#live-state').dataset.paused = String(m.state.paused);
    if (!stored) { $('#playback-position').textContent = 'live'; delete $('#playback-position').dataset.wallUs; timeline.position = null; }
  }
  if (m.timeline) { timeline.runs = m.timeline.runs; drawTimeline(); }
  if (m.event) onEventNotice(m.event);
  if (m.subscribed) $('#events-live').dataset.subscribed = String(m.subscribed.cameras.length > 0);
  if (m.error) say(`${m.error.code}: ${m.error.message}`);
}

on('#playback-form', async () => {
  const wall = toUs(new Date($('#playback-from').value));
  if (!Number.isFinite(wall)) return say('Choose a time to play from.');
  sendControl({ play_stored: { stream: live ? live.name : '', wall_us: wall } });
});
$('#play-live').addEventListener('click', () => sendControl({ play_live: { stream: '' } }));
$('#pause').addEventListener('click', () => sendControl({ pause: {} }));
$('#resume').addEventListener('click', () => sendControl({ resume: {} }));
$('#step').addEventListener('click', () => sendControl({ step: {} }));
$('#rate').addEventListener('change', () => sendControl({ set_rate: { rate: Number($('#rate').value) } }));

// The timeline: runs of recording in the visible window only (asked for again as it moves),
// gaps left blank; click or drag plays from that time; + and - zoom from minutes to days.
const SPANS_US = [5 * 60e6, 30 * 60e6, 3 * 3600e6, 12 * 3600e6, 24 * 3600e6, 7 * 24 * 3600e6];
const timeline = { stream: null, span: 0, end: 0, runs: [], events: [], position: null };
// The visible window follows the present while nobody moved it.
setInterval(() => { if (live && !timeline.end) queryTimeline(); }, 5000);

function timelineWindow() {
  const span = SPANS_US[timeline.span];
  const end = timeline.end || Date.now() * 1000;
  return [end - span, end];
}

function queryTimeline() {
  if (!timeline.stream) return;
  const [from, to] = timelineWindow();
  sendControl({ timeline: { stream: timeline.stream, from_us: Math.floor(from), to_us: Math.ceil(to) } });
  // The window's events, as markers.
  const camera = timeline.stream.split('/')[0];
  const q = new URLSearchParams({ camera, from_us: String(Math.floor(from)), to_us: String(Math.ceil(to)), limit: '200' });
  api('GET', `/api/events?${q}`).then((r) => {
    if (r.status === 200) { timeline.events = r.data.events.map(fromApi); drawTimeline(); }
  });
  $('#timeline-span').textContent = `${new Date(from / 1000).toLocaleString()} – ${new Date(to / 1000).toLocaleString()}`;
}

function drawTimeline() {
  const c = $('#timeline');
  const g = c.getContext('2d');
  const [from, to] = timelineWindow();
  const x = (t) => ((t - from) / (to - from)) * c.width;
  g.fillStyle = '#eee';
  g.fillRect(0, 0, c.width, c.height);
  g.fillStyle = '#2a7';
  for (const r of timeline.runs) {
    const a = Math.max(0, x(r.start_us));
    const b = Math.min(c.width, x(r.end_us));
    if (b > a) g.fillRect(a, 8, Math.max(1, b - a), c.height - 16);
  }
  g.fillStyle = '#e80';
  let shown = 0;
  for (const e of timeline.events) {
    const at = x(e.time_us);
    if (at < 0 || at > c.width) continue;
    g.fillRect(at - 1, 0, 3, 10);
    shown++;
  }
  c.dataset.events = String(shown);
  if (timeline.position !== null) {
    g.fillStyle = '#c00';
    g.fillRect(x(timeline.position) - 1, 0, 2, c.height);
  }
}

function playAtCanvas(clientX) {
  const c = $('#timeline');
  const rect = c.getBoundingClientRect();
  const [from, to] = timelineWindow();
  const wall = Math.round(from + ((clientX - rect.left) / rect.width) * (to - from));
  // On an event's marker: from its pre-roll.
  const near = timeline.events.find((e) => Math.abs(e.time_us - wall) < ((to - from) * 4) / rect.width);
  if (near) return playEvent(near).catch((err) => say(String(err)));
  sendControl({ play_stored: { stream: live ? live.name : '', wall_us: wall } });
}

let dragging = false;
$('#timeline').addEventListener('pointerdown', (e) => { dragging = true; playAtCanvas(e.clientX); });
$('#timeline').addEventListener('pointerup', () => { dragging = false; });
$('#timeline').addEventListener('pointermove', (e) => { if (dragging && e.buttons) playAtCanvas(e.clientX); });
function zoom(by) {
  timeline.span = Math.min(SPANS_US.length - 1, Math.max(0, timeline.span + by));
  queryTimeline();
  drawTimeline();
}
$('#zoom-in').addEventListener('click', () => zoom(-1));
$('#zoom-out').addEventListener('click', () => zoom(1));
$('#timeline').addEventListener('keydown', (e) => {
  const step = SPANS_US[timeline.span] / 10;
  const [, to] = timelineWindow();
  if (e.key === '+') zoom(-1);
  else if (e.key === '-') zoom(1);
  else if (e.key === 'ArrowLeft') { timeline.end = to - step; queryTimeline(); }
  else if (e.key === 'ArrowRight') { timeline.end = Math.min(Date.now() * 1000, to + step); queryTimeline(); }
  else return;
  e.preventDefault();
});

// ---- firmware: slots, updates, restart, factory reset ----

async function systemStatus() {
  const r = await api('GET', '/api/system');
  const s = r.data || {};
  $('#system').hidden = role !== 'admin';
  const dl = $('#system-status');
  dl.replaceChildren();
  const row = (k, v) => { dl.append(Object.assign(document.createElement('dt'), { textContent: k }), Object.assign(document.createElement('dd'), { textContent: v })); };
  if (!s.firmware) {
    row('Firmware', `not a KeepPeek image (binary ${s.binary_version || '?'})`);
    for (const f of ['#update-form', '#reset-form', '#reboot']) $(f).hidden = true;
    return;
  }
  row('Board', s.board);
  row('Running', `slot ${s.running_slot}, version ${s.version}`);
  for (const slot of ['a', 'b']) {
    const x = s.slots[slot];
    const state = x.good ? 'good' : x.on_trial ? 'on trial' : 'not bootable';
    row(`Slot ${slot}`, `${x.version || 'empty'} (${state})`);
  }
  row('Next boot', `slot ${s.next_boot}`);
  if (s.data) {
    const gib = (b) => `${(b / 2 ** 30).toFixed(1)} GiB`;
    row('Storage', `${gib(s.data.bytes)}, ${gib(s.data.free_bytes)} free`);
  }
  const u = s.last_update;
  row('Last update', u ? `${u.result}: ${u.version || ''} ${u.detail}` : 'none');
  if (s.update_key === 'development') row('Update key', 'development key: anyone with the repository can sign updates');
  if (s.config_problem) { row('Config problem', s.config_problem); say(s.config_problem); }
}

$('#update-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const file = $('#update-file').files[0];
  if (!file) return;
  $('#update-result').textContent = `Uploading ${file.name}…`;
  const q = `?reboot=1${$('#update-force').checked ? '&force=1' : ''}`;
  const r = await fetch(`/api/system/update${q}`, { method: 'POST', headers: { 'x-csrf-token': csrf, 'content-type': 'application/octet-stream' }, body: file, credentials: 'same-origin' });
  let data = {};
  try { data = await r.json(); } catch (_) { /* not JSON */ }
  $('#update-result').textContent = r.ok
    ? `Installed ${data.version} into slot ${data.slot}; restarting. Reload this page in a minute.`
    : `Refused: ${data.message || r.status}`;
  await systemStatus();
});

$('#reboot').addEventListener('click', async () => {
  const r = await api('POST', '/api/system/reboot');
  say(r.status === 202 ? 'Restarting: reload this page in a minute.' : (r.data && r.data.message) || 'Restart refused');
});

$('#reset-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const keep = [...$('#reset-form').querySelectorAll('input:checked')].map((i) => i.value);
  if (!window.confirm(`Erase everything${keep.length ? ` but ${keep.join(' and ')}` : ''} and restart?`)) return;
  const r = await api('POST', '/api/system/factory-reset', { keep });
  say(r.status === 202 ? 'Resetting and restarting.' : (r.data && r.data.message) || 'Reset refused');
});

$('#logout').addEventListener('click', async () => {
  await stopLive();
  await stopGrid();
  await api('POST', '/api/logout');
  csrf = null;
  $('#who').textContent = '';
  await start();
});

start();
