// Settings → Integrations → MQTT: the broker the box publishes events and its state to, and
// Home Assistant finds it through (discovery). Set, changed or removed as a config change
// reviewed before it is applied and taken at once (the cameras record on). The password is
// never shown back, only whether it is set. The connection's state is shown live: connected
// or the last failure, and the events waiting for the broker.
import { h, field, confirmDialog } from '../lib/dom.js';
import { get } from '../lib/api.js';
import { snapshot, review } from '../lib/config.js';

const FIELDS = [
  ['host', 'Broker', 'Its host name or address.'],
  ['port', 'Port', '1883, or 8883 with TLS, unless your broker says otherwise.'],
  ['username', 'User name', 'Leave empty for a broker that takes anyone.'],
  ['password', 'Password', 'Leave empty to keep the one set.'],
  ['prefix', 'Topic prefix', 'The box’s topics are under it (keeppeek/events, keeppeek/available, …).'],
  ['discovery_prefix', 'Home Assistant discovery prefix', 'homeassistant, unless you changed it in Home Assistant.'],
];

function statusLine(s) {
  if (!s || !s.configured) return h('p.muted', { id: 'mqtt-status' }, 'Not set up: nothing is published.');
  const waiting = s.outbox_waiting ? ` · ${s.outbox_waiting} event${s.outbox_waiting === 1 ? '' : 's'} waiting for it` : '';
  const dropped = s.outbox_dropped ? ` · ${s.outbox_dropped} dropped while it was away too long` : '';
  if (s.connected) return h('p', { id: 'mqtt-status' }, h('span.badge.ok', {}, 'connected'), ` to ${s.broker}${waiting}${dropped}`);
  return h('p', { id: 'mqtt-status' }, h('span.badge.bad', {}, 'not connected'),
    ` to ${s.broker}${s.last_error ? `: ${s.last_error}` : ''}${waiting}${dropped}`);
}

export async function mqttSection(onApplied) {
  const config = await snapshot();
  const current = config.settings.mqtt;
  const panel = h('div.plan-slot');
  const status = h('div', {}, statusLine(await get('/api/system/mqtt')));
  const timer = setInterval(async () => {
    if (!status.isConnected) { clearInterval(timer); return; }
    try { status.replaceChildren(statusLine(await get('/api/system/mqtt'))); } catch { /* shown next time */ }
  }, 3000);
  const inputs = {};
  for (const [key] of FIELDS) {
    const value = current ? (key === 'password' ? '' : String(current[key] ?? '')) : (key === 'prefix' ? 'keeppeek' : key === 'discovery_prefix' ? 'homeassistant' : '');
    inputs[key] = h('input', { name: key, value, type: key === 'password' ? 'password' : key === 'port' ? 'number' : 'text',
      autocomplete: 'off', required: key === 'host', min: key === 'port' ? 1 : null, max: key === 'port' ? 65535 : null,
      placeholder: key === 'port' ? 'default' : null });
  }
  const tls = h('input', { type: 'checkbox', name: 'tls', checked: Boolean(current && current.tls) });
  const ca = h('textarea', { name: 'ca_pem', rows: 3, placeholder: current && current.ca_pem === 'set' ? '(set: paste another to replace it)' : '-----BEGIN CERTIFICATE-----' });
  const form = h('form', { id: 'mqtt-form' },
    h('div.form-grid', {}, ...FIELDS.map(([key, label, hint]) => field(label, inputs[key], hint)),
      h('label.check', {}, tls, ' Over TLS'),
      field('Broker’s CA (PEM)', ca, 'Only with TLS, when its certificate is not from a public authority.')),
    h('div.toolbar', {}, h('button.primary', { type: 'submit' }, current ? 'Review the change' : 'Review and connect'),
      current ? h('button.danger', { type: 'button', id: 'mqtt-remove', onclick: async () => {
        if (!await confirmDialog('Stop publishing to MQTT?', 'Home Assistant’s entities for the box go unavailable; events waiting for the broker are dropped.', 'Stop')) return;
        if (await review(panel, (await snapshot()).rev, [{ op: 'set', key: 'mqtt', value: null }])) await onApplied();
      } }, 'Remove') : null));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const changes = [];
    for (const [key] of FIELDS) {
      const v = inputs[key].value.trim();
      if (key === 'password' && !v) continue;
      changes.push({ op: 'set', key: `mqtt.${key}`, value: key === 'port' ? (v ? Number(v) : null) : (v || null) });
    }
    changes.push({ op: 'set', key: 'mqtt.tls', value: tls.checked });
    if (ca.value.trim()) changes.push({ op: 'set', key: 'mqtt.ca_pem', value: ca.value.trim() });
    if (await review(panel, (await snapshot()).rev, changes, form)) await onApplied();
  });
  return h('section.card.wide', { 'aria-labelledby': 'mqtt-title', id: 'mqtt-settings' }, h('h2', { id: 'mqtt-title' }, 'MQTT and Home Assistant'),
    h('p.muted', {}, 'The box publishes each event once it is stored, its cameras’ state and its own to an MQTT broker. Home Assistant finds the cameras there by itself (MQTT discovery): a device per camera with its detections, latest snapshot, continuous recording switch and a button that marks an event. Events stored while the broker is away are delivered, in order, when it is back.'),
    status, form, panel);
}

// The cameras that report their own detections over ONVIF, and how their subscriptions go.
function followerRow(c) {
  const badge = c.state === 'subscribed' ? h('span.badge.ok', {}, 'subscribed')
    : c.state === 'failed' ? h('span.badge.bad', {}, 'not subscribed') : h('span.badge', {}, 'subscribing');
  const counts = [`${c.events} event${c.events === 1 ? '' : 's'}`];
  if (c.dropped) counts.push(`${c.dropped} dropped while the box was behind`);
  return h('li', { 'data-camera': c.camera, 'data-state': c.state }, h('strong', {}, c.camera), ' ', badge, ` · ${counts.join(' · ')}`,
    c.error ? h('div.muted', {}, c.error) : null);
}

function followerList(list) {
  if (!list.cameras.length) {
    return h('p.muted', { id: 'camera-events' }, 'No camera reports its own detections yet: a camera added from an ONVIF search in Settings → Cameras, with its user name and password, does.');
  }
  return h('ul.follow-list', { id: 'camera-events' }, ...list.cameras.map(followerRow));
}

export async function cameraEventsSection() {
  const slot = h('div', {}, followerList(await get('/api/system/camera-events')));
  const timer = setInterval(async () => {
    if (!slot.isConnected) { clearInterval(timer); return; }
    try { slot.replaceChildren(followerList(await get('/api/system/camera-events'))); } catch { /* shown next time */ }
  }, 3000);
  return h('section.card.wide', { 'aria-labelledby': 'camera-events-title', id: 'camera-events-card' }, h('h2', { id: 'camera-events-title' }, 'Cameras’ own detections'),
    h('p.muted', {}, 'Cameras found over ONVIF report their own motion and analytics (people, vehicles, line crossing …) to the box. Each detection is an event: it records with the pre-roll and reaches MQTT and Home Assistant like any other.'),
    slot);
}
