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
}

async function cameras() {
  const r = await api('GET', '/api/cameras');
  const body = $('#cameras tbody');
  body.replaceChildren();
  $('#day-stream').replaceChildren();
  for (const c of r.data || []) {
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

// Live view: a WHEP session (an SDP offer POSTed, the answer back, DELETE to end it). The
// box is ICE-lite with a candidate on each of its LAN addresses: no STUN server is needed.
let live = null;

async function startLive(camera, stream) {
  await stopLive();
  const pc = new RTCPeerConnection();
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.createDataChannel('control');
  const session = { pc, location: null, name: `${camera}/${stream}` };
  live = session;
  const video = $('#live-video');
  pc.ontrack = (e) => { video.srcObject = e.streams[0] || new MediaStream([e.track]); };
  pc.onconnectionstatechange = () => {
    $('#live-state').textContent = `${session.name}: ${pc.connectionState}`;
  };
  await pc.setLocalDescription(await pc.createOffer());
  const headers = { 'content-type': 'application/sdp' };
  if (csrf) headers['x-csrf-token'] = csrf;
  const r = await fetch(`/api/whep/${camera}/${stream}`, { method: 'POST', headers, body: pc.localDescription.sdp });
  if (r.status !== 201) {
    let message = `live view failed (${r.status})`;
    try { message = (await r.json()).message; } catch (_) { /* not JSON */ }
    pc.close();
    live = null;
    throw new Error(message);
  }
  session.location = r.headers.get('location');
  await pc.setRemoteDescription({ type: 'answer', sdp: await r.text() });
  $('#live-title').textContent = `Live: ${session.name}`;
  $('#live').hidden = false;
  $('#live-stop').focus();
}

async function stopLive() {
  const session = live;
  live = null;
  if (!session) return;
  session.pc.close();
  $('#live-video').srcObject = null;
  $('#live').hidden = true;
  if (session.location) {
    const headers = csrf ? { 'x-csrf-token': csrf } : {};
    await fetch(session.location, { method: 'DELETE', headers });
  }
}

$('#live-stop').addEventListener('click', () => stopLive());

$('#logout').addEventListener('click', async () => {
  await stopLive();
  await api('POST', '/api/logout');
  csrf = null;
  $('#who').textContent = '';
  await start();
});

start();
