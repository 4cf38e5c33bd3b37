// System: the firmware (both slots, the version running, the last update), installing an
// update with its upload's progress, the HTTPS certificate (its fingerprint to check the
// browser's warning against, an admin's own certificate uploaded, or the box's own again),
// what the box writes to its disk (flash wears with it), the support bundle, restart and
// factory reset, each destructive step confirmed first.
import { h, confirmDialog, field } from '../lib/dom.js';
import { get, request, upload, say, api } from '../lib/api.js';
import { bytes, duration, percent } from '../lib/format.js';
import { snapshot, review } from '../lib/config.js';

function facts(s) {
  const dl = h('dl.facts', { id: 'system-status' });
  const row = (k, v) => dl.append(h('dt', {}, k), h('dd', {}, v));
  if (!s.firmware) {
    row('Firmware', `not a KeepPeek image (binary ${s.binary_version || '?'})`);
    return dl;
  }
  row('Board', s.board);
  row('Running', `slot ${s.running_slot}, version ${s.version}`);
  for (const slot of ['a', 'b']) {
    const x = s.slots[slot];
    row(`Slot ${slot.toUpperCase()}`, `${x.version || 'empty'} (${x.good ? 'good' : x.on_trial ? 'on trial' : 'not bootable'})`);
  }
  row('Next boot', `slot ${s.next_boot}`);
  if (s.data) row('Storage', `${bytes(s.data.bytes)}, ${bytes(s.data.free_bytes)} free`);
  const u = s.last_update;
  row('Last update', u ? `${u.result}: ${u.version || ''} ${u.detail}` : 'none');
  if (s.update_key === 'development') row('Update key', 'development key: anyone with the source can sign updates');
  return dl;
}

// Bytes written since keeppeek started, by what wrote them, and a day's worth at that pace.
function wearSection(w) {
  const dl = h('dl.facts', { id: 'wear' });
  const row = (k, total, day) => dl.append(h('dt', {}, k), h('dd', {}, `${bytes(total)}${day === undefined ? '' : ` · about ${bytes(day)} a day`}`));
  row('Recordings', w.recording_bytes, w.per_day.recording_bytes);
  row('Catalog', w.catalog_bytes, w.per_day.catalog_bytes);
  row('Event snapshots', w.event_snapshot_bytes, w.per_day.event_snapshot_bytes);
  row('In all', w.recording_bytes + w.catalog_bytes + w.event_snapshot_bytes, w.per_day.total_bytes);
  dl.append(h('dt', {}, 'Early saves'), h('dd', {},
    `${bytes(w.early_flush_bytes)} (${percent(w.early_flush_share)} of all writes) in ${w.early_flushes} for events`));
  dl.append(h('dt', {}, 'Storing events'), h('dd', {}, `${bytes(w.event_catalog_bytes)} of the catalog’s writes`));
  return h('section.card', { 'aria-labelledby': 'wear-title' }, h('h2', { id: 'wear-title' }, 'Disk writes'),
    h('p.muted', {}, `Since KeepPeek started ${duration(w.since_us)} ago. An SD card or eMMC wears with what is written to it.`), dl);
}

// The certificate served over HTTPS: what it is, and changing it. `c` is /api/system/https.
function httpsSection(c) {
  const card = h('section.card', { 'aria-labelledby': 'https-title', id: 'https' });
  const draw = (c) => {
    card.replaceChildren(h('h2', { id: 'https-title' }, c.enabled ? 'HTTPS certificate' : 'HTTPS'));
    if (!c.enabled) {
      card.append(h('p.muted', {}, 'HTTPS is off: this box answers plain HTTP only, so passwords and sessions cross the network in clear.'));
      card.append(portForm());
      return;
    }
    const own = c.source === 'own';
    card.append(h('p.muted', {}, own
      ? 'Made by this box for its names and addresses. Browsers do not know it, so they warn once: check that the fingerprint they show is this one (the box also prints it on its console), then accept it.'
      : 'Your own certificate. Browsers that trust its issuer open the box without a warning.'));
    const dl = h('dl.facts', { id: 'https-facts' });
    const row = (k, v, props = {}) => dl.append(h('dt', {}, k), h('dd', props, v));
    // Broken only between bytes on a narrow screen (a <wbr> adds no text).
    const bytePairs = c.fingerprint.split(':').flatMap((b, i) => (i ? [':', h('wbr'), b] : [b]));
    row('Fingerprint (SHA-256)', bytePairs, { id: 'https-fingerprint', className: 'code' });
    row('Key pin', c.pin, { id: 'https-pin', className: 'code' });
    row('Names', c.names.join(', ') || 'none');
    row('Valid', `${c.not_before} to ${c.not_after} UTC`);
    if (!own) row('Issued by', c.issuer);
    if (own && c.made_because) row('Last made', `because ${c.made_because}`);
    card.append(dl);
    const cert = h('input', { type: 'file', name: 'certificate', accept: '.pem,.crt,.cer', required: true });
    const key = h('input', { type: 'file', name: 'key', accept: '.pem,.key', required: true });
    const result = h('p', { role: 'status', id: 'https-result' });
    const form = h('form', { id: 'https-form' },
      field('Certificate chain (PEM, the box’s certificate first)', cert),
      field('Private key (PEM)', key),
      h('button', { type: 'submit' }, 'Use this certificate'), result);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (!cert.files[0] || !key.files[0]) return;
      result.textContent = 'Checking…';
      try {
        const body = { certificate: await cert.files[0].text(), key: await key.files[0].text() };
        const now = await api('POST', '/api/system/https', body);
        draw(now);
        say('The box serves your certificate from now on.', 'ok');
      } catch (err) {
        result.textContent = `Refused: ${err.message}`;
      }
    });
    card.append(h('details', { open: !own }, h('summary', {}, own ? 'Use a certificate of your own' : 'Replace it'), form));
    if (!own) {
      card.append(h('p', {}, h('button', { type: 'button', id: 'https-reset', onclick: async () => {
        if (!await confirmDialog('Go back to the box’s own certificate?', 'Browsers will warn about it again until you accept it.', 'Use the box’s own')) return;
        try {
          draw(await api('DELETE', '/api/system/https'));
        } catch (err) {
          say(err.message);
        }
      } }, 'Use the box’s own certificate')));
    }
  };
  // Turns HTTPS on (a port of its own; plain HTTP then sends browsers there) or off, as a
  // config change reviewed before it is applied. Not offered without a config file (the demo).
  const portForm = () => {
    const port = h('input', { type: 'number', name: 'https.listen', min: 1, max: 65535, value: 8443, required: true });
    const panel = h('div');
    const form = h('form', { id: 'https-on' }, field('HTTPS port', port, 'The box makes its own certificate for it.'),
      h('button.primary', { type: 'submit' }, 'Turn HTTPS on…'), panel);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      let base;
      try {
        base = (await snapshot()).rev;
      } catch (err) {
        say(`HTTPS cannot be turned on here: ${err.message}`);
        return;
      }
      const done = await review(panel, base, [{ op: 'set', key: 'https.listen', value: `0.0.0.0:${port.value}` }], form);
      if (done) say(`HTTPS is on: KeepPeek is restarting. Open https://${location.hostname}:${port.value}/ in a few seconds and accept its certificate after checking its fingerprint.`, 'ok');
    });
    return form;
  };
  draw(c);
  return card;
}

function updateSection() {
  const file = h('input', { type: 'file', accept: '.bundle', required: true, name: 'bundle', id: 'update-file' });
  const force = h('input', { type: 'checkbox', id: 'update-force' });
  const progress = h('progress', { max: 1, value: 0, hidden: true, 'aria-label': 'Upload' });
  const result = h('p', { role: 'status', id: 'update-result' });
  const form = h('form', { id: 'update-form' }, h('label.field', {}, h('span.field-label', {}, 'Update bundle'), file),
    h('label.check', {}, force, ' install an older or the same version'), progress,
    h('button.primary', { type: 'submit' }, 'Install and restart'), result);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = file.files[0];
    if (!f) return;
    progress.hidden = false;
    result.textContent = `Uploading ${f.name} (${bytes(f.size)})…`;
    try {
      const done = await upload(`/api/system/update?reboot=1${force.checked ? '&force=1' : ''}`, f, (share) => {
        progress.value = share;
        result.textContent = `Uploading ${f.name}: ${Math.round(share * 100)}%`;
      });
      result.textContent = `Installed ${done.version} into slot ${done.slot}; restarting. Reload this page in a minute.`;
    } catch (err) {
      result.textContent = `Refused: ${err.message}`;
    }
    progress.hidden = true;
  });
  return h('section.card', { 'aria-labelledby': 'update-title' }, h('h2', { id: 'update-title' }, 'Update'),
    h('p.muted', {}, 'A signed update bundle goes into the other slot; the box restarts into it and goes back by itself if it does not come up.'), form);
}

function maintenanceSection(image) {
  const keep = [['config', 'the config'], ['recordings', 'recordings, events and accounts']]
    .map(([v, t]) => h('label.check', {}, h('input', { type: 'checkbox', value: v }), ` keep ${t}`));
  const reset = h('form', { id: 'reset-form' }, h('fieldset', {}, h('legend', {}, 'Factory reset'), ...keep),
    h('button.danger', { type: 'submit' }, 'Reset and restart'));
  reset.addEventListener('submit', async (e) => {
    e.preventDefault();
    const kept = [...reset.querySelectorAll('input:checked')].map((i) => i.value);
    const what = kept.length ? `Everything but ${kept.join(' and ')} is erased.` : 'Every recording, event, account and setting is erased.';
    if (!await confirmDialog('Reset the box?', `${what} This cannot be undone.`, 'Erase and restart')) return;
    const r = await request('POST', '/api/system/factory-reset', { keep: kept });
    say(r.status === 202 ? 'Resetting and restarting.' : (r.data && r.data.message) || 'Reset refused', r.status === 202 ? 'ok' : 'error');
  });
  const restart = h('button', { type: 'button', id: 'reboot', onclick: async () => {
    if (!await confirmDialog('Restart the box?', 'Recording stops for about a minute.', 'Restart')) return;
    const r = await request('POST', '/api/system/reboot');
    say(r.status === 202 ? 'Restarting: reload this page in a minute.' : (r.data && r.data.message) || 'Restart refused', r.status === 202 ? 'ok' : 'error');
  } }, 'Restart');
  return h('section.card', { 'aria-labelledby': 'care-title' }, h('h2', { id: 'care-title' }, 'Maintenance'),
    h('p', {}, h('a.button', { id: 'support-bundle', href: '/api/system/support-bundle', download: '' }, 'Download a support bundle'),
      h('span.muted', {}, ' Logs, status and the config with its secrets replaced.')),
    image ? h('p', {}, restart) : null, image ? reset : null);
}

async function mount(view) {
  const [s, https] = await Promise.all([get('/api/system'), get('/api/system/https')]);
  if (s.config_problem) say(s.config_problem);
  view.append(h('div.page-head', {}, h('h1', {}, 'System')),
    h('div.cards', {}, h('section.card', { 'aria-labelledby': 'firmware-title' }, h('h2', { id: 'firmware-title' }, 'Firmware'), facts(s)),
      httpsSection(https),
      s.wear ? wearSection(s.wear) : null,
      s.firmware ? updateSection() : null, maintenanceSection(Boolean(s.firmware))));
  return null;
}

export default { id: 'system', title: 'System', icon: 'system', admin: true, mount };
