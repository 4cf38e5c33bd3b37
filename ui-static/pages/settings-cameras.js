// Settings → Cameras: the cameras plugged into the box's camera port (each new lease asked
// over ONVIF and RTSP by the box), the cameras found on the network (ONVIF WS-Discovery),
// their stream addresses read over ONVIF with their credentials; every camera with its latest keyframe,
// added with its credentials after a probe says what it sends, changed, or removed (asked
// first). Every change is a plan reviewed before it is applied (lib/config.js); cameras not
// changed record on.
import { h, field, confirmDialog } from '../lib/dom.js';
import { api } from '../lib/api.js';
import { snapshot, review, refuse } from '../lib/config.js';

// The camera port's form: which interface, the box's address there, the addresses cameras
// get; a config change reviewed before it is applied (its servers start again, the cameras
// keep their addresses).
function portForm(current, interfaces, onDone) {
  const choices = interfaces.filter((i) => !i.lan || (current && current.interface === i.name));
  const iface = h('select', { name: 'camera_port.interface', required: true },
    ...choices.map((i) => h('option', { value: i.name, selected: current ? current.interface === i.name : false },
      `${i.name}${i.carrier ? ', cable in' : ', no cable'}${i.addresses.length ? `, ${i.addresses.join(', ')}` : ''}`)));
  const address = h('input', { name: 'camera_port.address', required: true, autocomplete: 'off',
    value: current ? current.address : '10.71.0.1/24', pattern: '\\d+\\.\\d+\\.\\d+\\.\\d+/\\d+' });
  const pool = h('input', { name: 'camera_port.pool', autocomplete: 'off', value: current ? current.pool : '',
    placeholder: 'unless you say: from .100 on' });
  const lease = h('select', { name: 'camera_port.lease_time_s' },
    ...[[600, '10 minutes'], [3600, 'An hour'], [86400, 'A day'], ...(current && ![600, 3600, 86400].includes(current.lease_time_s)
      ? [[current.lease_time_s, `${current.lease_time_s} s`]] : [])].map(([v, t]) => h('option', { value: v,
      selected: (current ? current.lease_time_s : 3600) === v }, t)));
  const router = h('input', { type: 'checkbox', name: 'camera_port.router', checked: Boolean(current && current.router) });
  const web = h('input', { type: 'checkbox', name: 'camera_port.web', checked: Boolean(current && current.web) });
  const panel = h('div.plan-slot');
  const form = h('form.camera-form', { 'aria-label': 'Camera port' },
    h('h3', {}, current ? 'Change the camera port' : 'Set up a camera port'),
    choices.length ? null : h('p.field-error', {}, 'This box has no network interface besides the one to your network.'),
    h('div.form-grid', {},
      field('Interface', iface, 'The port the cameras are plugged into, never the one to your network.'),
      field('The box’s address there', address, 'And the size of the cameras’ network: 10.71.0.1/24 suits most.'),
      field('Addresses for cameras', pool, 'First and last, as 10.71.0.100-10.71.0.199.'),
      field('Cameras renew their address', lease)),
    h('div.checks', {},
      h('label.check', {}, router, ' Tell cameras the box is their router (for cameras that insist on one; nothing is forwarded)'),
      h('label.check', {}, web, ' Show this web page on the camera port too')),
    h('div.toolbar', {},
      h('button.primary', { type: 'submit', disabled: !choices.length }, current ? 'Review the change' : 'Review and set up'),
      current ? h('button.danger', { type: 'button', onclick: async () => {
        if (!await confirmDialog('Remove the camera port?', 'Cameras plugged into it keep their address until their lease ends, then lose it; cameras added from it stop recording when they do.', 'Remove')) return;
        if (await review(panel, (await snapshot()).rev, [{ op: 'set', key: 'camera_port', value: null }])) onDone(true);
      } }, 'Remove') : null,
      h('button', { type: 'button', onclick: () => onDone(false) }, 'Cancel')),
    panel);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const changes = [
      { op: 'set', key: 'camera_port.interface', value: iface.value },
      { op: 'set', key: 'camera_port.address', value: address.value.trim() },
      { op: 'set', key: 'camera_port.pool', value: pool.value.trim() || null },
      { op: 'set', key: 'camera_port.lease_time_s', value: Number(lease.value) },
      { op: 'set', key: 'camera_port.router', value: router.checked },
      { op: 'set', key: 'camera_port.web', value: web.checked },
    ];
    if (await review(panel, (await snapshot()).rev, changes, form)) onDone(true);
  });
  return form;
}

const MODES = [['continuous', 'Always'], ['events', 'Around events'], ['off', 'Live only']];

function select(name, options, value) {
  return h('select', { name }, ...options.map(([v, text]) => h('option', { value: v, selected: v === value }, text)));
}

// A camera's name from what it calls itself: lower case letters, digits, - and _.
function nameOf(text) {
  return (text || '').toLowerCase().replace(/[^a-z0-9_-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 32);
}

// The camera form: empty to add one, filled to change `camera`; for a camera `found` on the
// network, its streams are read over ONVIF once its credentials are typed.
function cameraForm(camera, onDone, found) {
  const adding = !camera;
  const name = h('input', { name: 'name', required: true, autocomplete: 'off', pattern: '[a-z0-9_][a-z0-9_\\-]*', maxLength: 32,
    value: camera ? camera.name : nameOf(found && found.name), readOnly: !adding });
  const url = h('input', { name: 'main.url', required: true, type: 'url', placeholder: 'rtsp://192.168.1.20:554/stream1',
    value: camera ? camera.main.url : (found && found.rtsp_url) || '', autocomplete: 'off' });
  const subUrl = h('input', { name: 'sub.url', type: 'url', placeholder: 'optional: rtsp://192.168.1.20:554/stream2',
    value: camera && camera.sub ? camera.sub.url : '', autocomplete: 'off' });
  const transport = select('main.transport', [['tcp', 'TCP (works everywhere)'], ['udp', 'UDP (less delay on a good LAN)']],
    camera ? camera.main.transport || 'tcp' : 'tcp');
  const username = h('input', { name: 'username', autocomplete: 'off', value: camera && camera.username ? camera.username : '' });
  const password = h('input', { name: 'password', type: 'password', autocomplete: 'new-password',
    placeholder: camera && camera.password === 'set' ? 'unchanged' : '' });
  const record = select('record', MODES, camera ? camera.record : 'continuous');
  const keepDays = camera ? camera.keep_event_footage_days : 14;
  const keep = h('input', { name: 'keep_event_footage_days', type: 'number', min: 0, max: 3650, required: true, inputMode: 'numeric',
    value: String(keepDays) });
  const result = h('p.probe-result', { role: 'status' });
  const panel = h('div.plan-slot');
  const title = found ? `Add ${found.name || found.address}` : adding ? 'Add a camera' : `Change ${camera.name}`;
  const form = h('form.camera-form', { 'aria-label': title },
    h('h3', {}, title),
    found ? h('p.muted', {}, `${found.port ? 'Plugged into the camera port' : 'Found on your network'} at ${found.address}${found.hardware ? ` (${found.hardware})` : ''}. `
      + (found.device_url ? 'Type its user name and password, then read its streams.'
        : 'It did not answer over ONVIF: type the path of its stream after the address, its user name and password, then test it.')) : null,
    h('div.form-grid', {},
      field('Name', name, adding ? 'Lower case letters, digits, - and _: it names its folder.' : null),
      field('Stream address', url, 'The main stream’s RTSP address, without user name or password.'),
      field('Sub stream address', subUrl, 'A smaller stream for the live wall, if the camera has one.'),
      field('Transport', transport),
      field('User name', username),
      field('Password', password, camera && camera.password === 'set' ? 'Leave empty to keep the current one.' : null),
      field('Record', record),
      field('Days to keep event footage', keep, 'What each event shows is kept this long against ordinary retention. 0: not held.')),
    result,
    h('div.toolbar', {},
      found && found.device_url ? h('button', { type: 'button', onclick: () => readStreams() }, 'Read its streams') : null,
      h('button', { type: 'button', onclick: () => test() }, 'Test connection'),
      h('button.primary', { type: 'submit' }, adding ? 'Review and add' : 'Review the change'),
      h('button', { type: 'button', onclick: () => onDone(false) }, 'Cancel')),
    panel);

  const clearErrors = () => {
    for (const e of form.querySelectorAll('.field-error')) e.textContent = '';
    for (const e of form.querySelectorAll('[aria-invalid]')) e.removeAttribute('aria-invalid');
  };

  // Asks the box to reach the camera: what it sends, or why it cannot.
  async function test() {
    clearErrors();
    result.dataset.ok = '';
    result.textContent = 'Connecting to the camera…';
    const body = { url: url.value.trim(), transport: transport.value };
    if (username.value) Object.assign(body, { username: username.value, password: password.value });
    try {
      const r = await api('POST', '/api/cameras/probe', body);
      if (r.ok) {
        const f = r.found;
        result.dataset.ok = 'true';
        result.textContent = `Found: ${f.codec} ${f.width}×${f.height}${f.fps ? ` at ${Math.round(f.fps)} fps` : ''}${f.audio ? `, audio ${f.audio === 'mpeg4-generic' ? 'AAC' : f.audio}` : ', no audio'}.`;
      } else {
        result.dataset.ok = 'false';
        result.textContent = '';
        refuse({ field: r.field === 'url' ? 'main.url' : r.field, message: r.message }, form);
      }
      return r.ok;
    } catch (e) {
      result.textContent = '';
      refuse({ field: e.field === 'url' ? 'main.url' : e.field, message: e.message }, form);
      return false;
    }
  }

  // Asks the box to read the found camera's stream addresses over ONVIF, then tests them.
  async function readStreams() {
    clearErrors();
    result.dataset.ok = '';
    result.textContent = 'Reading the camera’s streams…';
    try {
      const r = await api('POST', '/api/cameras/onvif', { address: found.device_url, username: username.value, password: password.value });
      if (!r.ok) {
        result.dataset.ok = 'false';
        result.textContent = '';
        refuse({ field: r.field === 'address' ? 'main.url' : r.field, message: r.message }, form);
        return;
      }
      url.value = r.streams.main;
      subUrl.value = r.streams.sub || '';
      const d = r.streams.device;
      result.textContent = `${[d.manufacturer, d.model].filter(Boolean).join(' ') || 'The camera'}: ${r.streams.profiles.length} profiles. Testing its main stream…`;
      await test();
    } catch (e) {
      result.textContent = '';
      refuse({ field: e.field === 'address' ? 'main.url' : e.field, message: e.message }, form);
    }
  }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clearErrors();
    const set = {};
    const main = {};
    if (adding || url.value.trim() !== camera.main.url) main.url = url.value.trim();
    if (adding || transport.value !== (camera.main.transport || 'tcp')) main.transport = transport.value;
    if (Object.keys(main).length) set.main = main;
    const sub = subUrl.value.trim();
    if (sub && (!camera || !camera.sub || camera.sub.url !== sub)) set.sub = { url: sub };
    if (!sub && camera && camera.sub) set.sub = null;
    const user = username.value.trim();
    if (adding ? user : user !== (camera.username || '')) set.username = user || null;
    if (password.value) set.password = password.value;
    else if (!user && camera && camera.password === 'set') set.password = null;
    // A camera found over ONVIF keeps its device service: its own events are followed there.
    if (adding && found && found.device_url) set.onvif = found.device_url;
    if (adding || record.value !== camera.record) set.record = record.value;
    if (Number(keep.value) !== keepDays) set.keep_event_footage_days = Number(keep.value);
    const change = adding ? { op: 'add_camera', name: name.value.trim(), set } : { op: 'change_camera', name: camera.name, set };
    const base = (await snapshot()).rev;
    const done = await review(panel, base, [change], form);
    if (done) onDone(true);
  });
  return form;
}

// The host a camera's stream address names.
function hostOf(address) {
  try { return new URL(address).hostname.replace(/^\[|\]$/g, ''); } catch { return null; }
}

// How long ago `us` was, in words.
function ago(us) {
  const s = Math.max(0, Math.round((Date.now() * 1000 - us) / 1e6));
  if (s < 90) return 'just now';
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 129600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} days ago`;
}

// The cameras plugged into the camera port, as the box found them: each with what it said
// over ONVIF and RTSP, plugged in or unplugged, and added or ready to add. Asked again every
// few seconds while it is shown, so a camera plugged in appears by itself.
function portBlock(open, cameras) {
  const block = h('div.found.camera-port', { hidden: true });
  const head = h('p.muted', {});
  const list = h('ul.found-list', { 'aria-label': 'Cameras plugged into the camera port' });
  const formSlot = h('div.form-slot');
  const setUp = h('button', { type: 'button', onclick: () => openForm() }, 'Set up');
  const title = h('h3', {}, 'Camera port');
  const top = h('div.section-head', {}, title, setUp);
  block.append(top, head, list, formSlot);
  let last = null;
  async function openForm() {
    const current = (await snapshot()).settings.camera_port;
    setUp.hidden = true;
    head.hidden = true;
    top.hidden = true;
    formSlot.replaceChildren(portForm(current, last ? last.interfaces : [], async (changed) => {
      formSlot.replaceChildren();
      setUp.hidden = false;
      head.hidden = false;
      top.hidden = false;
      if (changed) await poll();
    }));
    formSlot.querySelector('select, input').focus();
  }
  let shownKey = '';
  let shownAt = 0;
  function show(r) {
    last = r;
    // Drawn again when something changed (or a minute on, for "plugged in … ago"): a list
    // drawn anew every poll would take the keyboard's focus off its buttons.
    const key = JSON.stringify([r, cameras().map((c) => [c.name, c.main.url, c.sub && c.sub.url])]);
    if (key === shownKey && Date.now() - shownAt < 60000) return;
    shownKey = key;
    shownAt = Date.now();
    // A box with only its LAN interface has no camera port to set up.
    block.hidden = !r.config && !r.interfaces.some((i) => !i.lan);
    setUp.textContent = r.config ? 'Change' : 'Set up';
    setUp.setAttribute('aria-label', r.config ? 'Change the camera port' : 'Set up a camera port');
    title.textContent = r.config ? 'Plugged into the camera port' : 'Camera port';
    if (!r.config) {
      head.replaceChildren('Does the box have a second network port? Plug your cameras into it and set it up here: the box gives them addresses and the time, finds them, and keeps them off your network.');
      list.replaceChildren();
      return;
    }
    const c = r.config;
    const [first, lastIp] = c.pool.split('-');
    head.replaceChildren(
      r.problem ? h('span.badge.bad', {}, 'Not serving') : h('span.badge.ok', {}, 'Serving'), ' ',
      r.problem ? `${r.problem} The box tries again every few seconds.`
        : `Cameras plugged into ${c.interface} get an address from the box (${first === lastIp ? first : `${first} to ${lastIp}`}) and its time; they never reach the internet.`,
      // A camera that asked when every address was taken: the pool is too small.
      r.dhcp && r.dhcp.counts.exhausted
        ? h('span.field-error.pool-full', {}, ` ${r.dhcp.counts.exhausted === 1 ? 'A request' : `${r.dhcp.counts.exhausted} requests`} found every address taken: give the cameras more addresses (Change).`)
        : '');
    const shown = r.cameras.slice().sort((a, b) => (b.plugged_in - a.plugged_in) || (b.since_us - a.since_us));
    list.replaceChildren(...shown.map((p) => {
      const name = (p.onvif && p.onvif.name) || p.hostname || 'Camera';
      const added = cameras().find((cam) => [cam.main, cam.sub].some((s) => s && hostOf(s.url) === p.address));
      const answered = [p.onvif ? 'ONVIF' : null, p.rtsp_url ? 'RTSP' : null].filter(Boolean);
      const facts = [p.onvif && p.onvif.hardware, p.address,
        p.plugged_in ? `plugged in ${ago(p.since_us)}` : `unplugged ${ago(p.since_us)}`,
        !p.plugged_in ? null : p.checking ? 'asking it…' : answered.length ? `answers ${answered.join(' and ')}` : 'answers neither ONVIF nor RTSP'];
      const found = { name, hardware: p.onvif && p.onvif.hardware, address: p.address,
        device_url: p.onvif && p.onvif.device_url, rtsp_url: p.rtsp_url, port: true };
      let action;
      if (added) action = h('span.badge', {}, `Added as ${added.name}`);
      else if (p.plugged_in) action = h('button', { type: 'button', 'aria-label': `Add ${name}`, onclick: () => open(null, found) }, 'Add');
      return h('li.found-row', { 'data-mac': p.mac, 'data-state': p.plugged_in ? 'plugged-in' : 'unplugged' },
        h('div.camera-text', {}, h('strong', {}, name, ' ',
          p.plugged_in ? h('span.badge.ok', {}, 'Plugged in') : h(added ? 'span.badge.bad' : 'span.badge.off', {}, 'Unplugged')),
          h('span.muted', {}, facts.filter(Boolean).join(' · '))),
        action || null);
    }));
    if (!shown.length) list.append(h('li.empty', {}, 'No camera plugged in yet. Plug one in: it appears here by itself.'));
  }
  async function poll() {
    try { show(await api('GET', '/api/system/camera-port')); } catch { /* shown again at the next poll */ }
  }
  // Asks again 3 s after each answer (never two requests at once: a late answer would
  // overwrite a newer one), until the block leaves the page.
  function watch() {
    setTimeout(async () => {
      if (!block.isConnected) return;
      await poll();
      watch();
    }, 3000);
  }
  return { block, poll, watch, redraw: () => { shownKey = ''; if (last) show(last); } };
}

export async function camerasSection() {
  const section = h('section.card.wide', { 'aria-labelledby': 'cameras-title' });
  const list = h('ul.camera-list', { 'aria-label': 'Cameras' });
  const slot = h('div.form-slot');
  const addButton = h('button.primary', { type: 'button', onclick: () => open(null) }, 'Add a camera');
  const foundList = h('ul.found-list', { 'aria-label': 'Cameras found on your network' });
  const searchState = h('p.muted.search-state', { role: 'status' });
  const searchButton = h('button', { type: 'button', onclick: () => search() }, 'Search the network');
  let found = [];
  let cameras = [];
  const port = portBlock((c, f) => open(c, f), () => cameras);
  // The cameras found, each marked when a camera of the config is at its address.
  function showFound() {
    foundList.replaceChildren(...found.map((f) => {
      const added = cameras.find((c) => [c.main, c.sub].some((s) => s && hostOf(s.url) === f.address));
      return h('li.found-row', { 'data-address': f.address },
        h('div.camera-text', {}, h('strong', {}, f.name || 'ONVIF camera'),
          h('span.muted', {}, [f.hardware, f.address].filter(Boolean).join(' · '))),
        added ? h('span.badge', {}, `Added as ${added.name}`)
          : h('button', { type: 'button', 'aria-label': `Add ${f.name || f.address}`, onclick: () => open(null, f) }, 'Add'));
    }));
  }
  async function search() {
    searchButton.disabled = true;
    searchState.textContent = 'Searching your network for cameras…';
    try {
      const r = await api('POST', '/api/cameras/discover');
      found = r.found;
      showFound();
      searchState.textContent = found.length ? `${found.length === 1 ? 'One camera' : `${found.length} cameras`} answered.`
        : 'No camera answered. Cameras without ONVIF, or on another network, are added by their address.';
    } catch (e) {
      searchState.textContent = e.message;
    } finally {
      searchButton.disabled = false;
    }
  }
  async function refresh() {
    const config = await snapshot();
    cameras = config.cameras;
    showFound();
    port.redraw();
    list.replaceChildren(...config.cameras.map((c) => h('li.camera-row', { 'data-camera': c.name },
      h('video.thumb', { src: `/api/streams/${encodeURIComponent(c.name)}/main/poster.mp4`, muted: true, preload: 'metadata', 'aria-hidden': 'true' }),
      h('div.camera-text', {}, h('strong', {}, c.name), h('span.muted', {}, c.main.url),
        h('span.muted', {}, `Records: ${(MODES.find(([m]) => m === c.record) || [, c.record])[1]}${c.sub ? ' · has a sub stream' : ''}${c.password === 'set' ? ' · password set' : ''}`)),
      h('div.toolbar', {},
        h('button', { type: 'button', 'aria-label': `Change ${c.name}`, onclick: () => open(c) }, 'Change'),
        h('button.danger', { type: 'button', 'aria-label': `Remove ${c.name}`, onclick: () => remove(c, config.rev) }, 'Remove')))));
    if (!config.cameras.length) list.append(h('li.empty', {}, 'No cameras yet: add the first one.'));
    return config;
  }
  function open(camera, foundCamera) {
    slot.replaceChildren(cameraForm(camera, async (changed) => {
      slot.replaceChildren();
      addButton.hidden = false;
      if (changed) await refresh();
    }, foundCamera));
    addButton.hidden = true;
    slot.querySelector(foundCamera ? '[name=username]' : 'input:not([readonly])').focus();
    slot.scrollIntoView({ block: 'nearest' });
  }
  async function remove(c, rev) {
    if (!await confirmDialog(`Remove ${c.name}?`, 'It stops recording now. What it recorded stays until retention takes it.', 'Remove')) return;
    const panel = h('div.plan-slot');
    slot.replaceChildren(panel);
    if (await review(panel, rev, [{ op: 'remove_camera', name: c.name }])) await refresh();
  }
  section.append(h('div.section-head', {}, h('h2', { id: 'cameras-title' }, 'Cameras'), addButton),
    port.block,
    h('div.found', {}, h('div.section-head', {}, h('h3', {}, 'Found on your network'), searchButton), searchState, foundList),
    list, slot);
  const config = await refresh();
  await port.poll();
  port.watch();
  // A box with no camera yet looks for some at once.
  if (!config.cameras.length) search();
  return { section, config, open };
}
