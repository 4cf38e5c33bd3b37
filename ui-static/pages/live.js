// Live: a wall of every camera, laid out for the screen (1, 2×2, 3×3 …), each tile its sub
// stream when there is one, with name and state, and a poster (the stream's latest
// recorded keyframe) while it connects. Only tiles on screen hold a WebRTC session: one
// scrolled away releases it. Click a tile for the camera's main stream with the playback
// controls (#/live/porch); double-click for full screen.
import { h } from '../lib/dom.js';
import { say, sayThenGo, session } from '../lib/api.js';
import { listCameras, smallStream, streamOf, streamState } from '../lib/cameras.js';
import { WhepSession, soundButton } from '../lib/whep.js';
import { Player } from '../lib/player.js';
import { icon } from '../lib/icons.js';

// How often the tiles' states are asked for again.
const STATE_POLL_MS = 4000;
// A tile must stay on (or off) screen this long before its session opens (or closes), so
// scrolling past does not open and close sessions.
const SETTLE_MS = 300;

function posterUrl(stream) { return `/api/streams/${stream}/poster.mp4`; }

class Tile {
  constructor(camera) {
    this.camera = camera.camera;
    this.kind = smallStream(camera);
    this.stream = `${this.camera}/${this.kind}`;
    this.session = null;
    this.visible = false;
    this.timer = 0;
    this.video = h('video', { muted: true, autoplay: true, playsInline: true, preload: 'auto', src: posterUrl(this.stream),
      'data-stream': this.stream, 'aria-hidden': 'true' });
    this.chip = h('span.chip.state');
    this.error = h('span.tile-error');
    this.link = h('a.tile-name', { href: `#/live/${encodeURIComponent(this.camera)}` }, this.camera);
    this.sound = h('span.tile-sound');
    this.el = h('figure.tile', { 'data-camera': this.camera }, this.video,
      h('figcaption', {}, this.link, this.chip, this.sound, this.error));
    // One click opens the camera; two make the tile full screen.
    let clicks = 0;
    this.el.addEventListener('click', (e) => {
      if (e.target === this.link) return;
      clicks++;
      setTimeout(() => { if (clicks === 1) location.hash = this.link.getAttribute('href'); clicks = 0; }, 250);
    });
    this.el.addEventListener('dblclick', () => {
      if (document.fullscreenElement) document.exitFullscreen(); else this.el.requestFullscreen?.().catch(() => {});
    });
    this.update(camera);
  }

  update(camera) {
    const s = streamOf(camera, this.kind);
    this.status = s;
    const st = streamState(s);
    this.chip.textContent = this.session && this.session.video.srcObject ? (st.key === 'recording' ? 'Live · REC' : 'Live') : st.text.split(':')[0];
    this.chip.dataset.state = st.key;
    this.error.textContent = s.connected ? '' : (s.last_error || '');
    this.el.dataset.state = st.key;
    this.el.setAttribute('aria-label', `${this.camera}: ${st.text}`);
    if (this.visible && !this.session && s.connected) this.open();
  }

  // Called by the wall's observer.
  seen(visible) {
    this.visible = visible;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => (this.visible ? this.open() : this.close()), SETTLE_MS);
  }

  async open() {
    if (this.session || this.opening || !this.visible || (this.status && !this.status.connected)) return;
    this.opening = true;
    try {
      const s = await WhepSession.open(this.stream, this.video);
      this.session = s;
      this.el.dataset.session = 'open';
      // Sound, when the camera sends some the browser can play.
      this.sound.replaceChildren(...(s.hasAudio ? [soundButton(this.video, this.camera)] : []));
      // A lost connection gives the session back: the next state poll opens a new one.
      s.onLost = (why) => { if (this.session === s) { this.error.textContent = `Reconnecting: ${why}`; this.close(); } };
      this.video.addEventListener('playing', () => this.update({ camera: this.camera, streams: [this.status] }), { once: true });
    } catch (e) {
      this.error.textContent = e.message;
    } finally {
      this.opening = false;
    }
    if (!this.visible) this.close();
  }

  async close() {
    const s = this.session;
    if (!s) return;
    this.session = null;
    delete this.el.dataset.session;
    this.sound.replaceChildren();
    this.video.muted = true;
    await s.close();
    // Back to the poster.
    this.video.src = posterUrl(this.stream);
    this.update({ camera: this.camera, streams: [this.status] });
  }
}

// Columns for n tiles on this screen: a square (1, 2×2, 3×3 …), fewer on a narrow one.
function columns(n, width) {
  const square = Math.ceil(Math.sqrt(Math.max(1, n)));
  const fit = Math.max(1, Math.floor(width / 300));
  return Math.min(square, fit);
}

async function wall(view) {
  const cameras = await listCameras();
  const grid = h('div.wall', { role: 'list', 'aria-label': 'Cameras' });
  const tiles = new Map();
  const empty = h('p.empty', {}, 'No cameras yet. ', session.role === 'admin' ? h('a', { href: '#/settings?add=1' }, 'Add the first camera') : 'An admin adds them.');
  view.append(h('div.page-head', {}, h('h1', {}, 'Live'), h('span.muted', {}, `${cameras.length} camera${cameras.length === 1 ? '' : 's'}`)),
    cameras.length ? grid : empty);
  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) tiles.get(e.target)?.seen(e.isIntersecting);
  }, { threshold: 0.2 });
  for (const c of cameras) {
    const t = new Tile(c);
    t.el.setAttribute('role', 'listitem');
    tiles.set(t.el, t);
    grid.append(t.el);
    observer.observe(t.el);
  }
  // The wall fits the screen's height on a wide screen (a phone scrolls through it).
  const layout = () => {
    const cols = columns(cameras.length, view.clientWidth || innerWidth);
    const rows = Math.ceil(cameras.length / cols);
    const room = innerHeight - grid.getBoundingClientRect().top - 16;
    grid.style.setProperty('--cols', String(cols));
    grid.style.maxWidth = innerWidth > 700 ? `${Math.max(320, Math.floor((room * 16 * cols) / (9 * rows)))}px` : '';
  };
  layout();
  window.addEventListener('resize', layout);
  const poll = setInterval(async () => {
    try {
      for (const c of await listCameras()) for (const t of tiles.values()) if (t.camera === c.camera) t.update(c);
    } catch (_) { /* the next poll tries again */ }
  }, STATE_POLL_MS);
  return async () => {
    clearInterval(poll);
    observer.disconnect();
    window.removeEventListener('resize', layout);
    await Promise.all([...tiles.values()].map((t) => { clearTimeout(t.timer); t.visible = false; return t.close(); }));
  };
}

// One camera's main stream, large, with the playback controls.
async function focus(view, name) {
  const cameras = await listCameras();
  const camera = cameras.find((c) => c.camera === name);
  if (!camera) { sayThenGo(`There is no camera named ${name}.`, '#/live'); return null; }
  const st = streamState(streamOf(camera, 'main'));
  view.append(h('div.page-head', {},
    h('a.back', { href: '#/live', 'aria-label': 'Back to all cameras' }, icon('back')),
    h('h1', {}, name), h('span.chip.state', { 'data-state': st.key }, st.text),
    h('a.button', { href: `#/timeline/${encodeURIComponent(name)}` }, 'Timeline')));
  const box = h('div.focus');
  view.append(box);
  const player = new Player(box, `${name}/main`, { error: (t) => say(t), lost: (why) => player.offerRetry(`Live view stopped: ${why}`, connect) });
  window.keeppeek.player = player;
  const keys = (e) => {
    // Not while typing, nor with a modifier; space on a button or link presses that instead.
    if (e.ctrlKey || e.metaKey || e.altKey || e.target.closest('input, select, textarea, [role=slider]')) return;
    if (e.key === ' ' && !e.target.closest('button, a')) { player.togglePause(); e.preventDefault(); } else if (e.key === 'l' || e.key === 'L') player.live();
  };
  document.addEventListener('keydown', keys);
  const connect = async () => {
    try {
      await player.start();
    } catch (e) {
      if (!player.destroyed) player.offerRetry(e.message, connect);
    }
  };
  await connect();
  return () => { document.removeEventListener('keydown', keys); window.keeppeek.player = null; return player.destroy(); };
}

export default {
  id: 'live', title: 'Live', icon: 'live',
  mount(view, args) { return args[0] ? focus(view, args[0]) : wall(view); },
};
