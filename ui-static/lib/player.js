// A player: one stream's video with its controls, live or recorded. Recorded playback,
// pause, step, speed and seek go over the session's control channel; the box answers with
// the position and the state, which the player shows (and hands to `on.position`, so a
// timeline can follow).
import { h } from './dom.js';
import { dateTime } from './format.js';
import { WhepSession, soundButton } from './whep.js';
import { icon } from './icons.js';

export class Player {
  // `on`: position(wallUs), state(stored, paused), event(notice), message(m), error(text).
  constructor(root, stream, on = {}) {
    this.stream = stream;
    this.on = on;
    this.session = null;
    this.destroyed = false;
    this.stored = false;
    this.paused = false;
    this.video = h('video.player-video', { muted: true, autoplay: true, playsInline: true, 'aria-label': `${stream}, live` });
    this.badge = h('span.player-badge', { 'data-mode': 'live' }, 'Live');
    this.state = h('p.player-state', { 'aria-live': 'polite', 'data-mode': 'live' });
    this.position = h('output.player-position', { 'aria-live': 'off' }, 'live');
    const button = (cls, content, label, onclick) => h(`button.${cls}`, { type: 'button', 'aria-label': label, title: label, onclick }, content);
    this.pauseButton = button('pause', icon('pause'), 'Pause (space)', () => this.togglePause());
    this.rate = h('select.rate', { 'aria-label': 'Speed', onchange: () => this.send({ set_rate: { rate: Number(this.rate.value) } }) },
      ...[0.5, 1, 2, 4, 8].map((r) => h('option', { value: String(r), selected: r === 1 }, `${r}×`)));
    this.frame = h('div.player-frame', {}, this.video, this.badge);
    this.controls = h('div.player-controls', {},
      button('live', 'Live', 'Back to live (L)', () => this.live()),
      this.pauseButton,
      button('step', icon('step'), 'Next frame', () => this.send({ step: {} })),
      this.rate,
      this.soundSlot = h('span.player-sound'),
      this.position,
      button('fullscreen', icon('fullscreen'), 'Full screen', () => this.fullscreen()));
    this.root = h('div.player', {}, this.frame, this.controls, this.state);
    this.video.addEventListener('dblclick', () => this.fullscreen());
    root.append(this.root);
  }

  // Connects; a player destroyed meanwhile closes what it opened. When the connection is
  // lost later, `on.lost(why)` is told (the page offers to try again).
  async start() {
    if (this.session) await this.session.close();
    this.session = null;
    this.state.textContent = `Connecting to ${this.stream}…`;
    const s = await WhepSession.open(this.stream, this.video, { control: true, onMessage: (m) => this.message(m) });
    if (this.destroyed) { s.close(); throw new Error('closed'); }
    this.session = s;
    this.soundSlot.replaceChildren(...(s.hasAudio ? [soundButton(this.video, this.stream)] : []));
    s.onLost = (why) => { if (this.session === s && this.on.lost) this.on.lost(why); };
    try {
      await s.opened;
    } catch (e) {
      if (this.session === s) this.session = null;
      s.close();
      throw e;
    }
    if (this.destroyed) throw new Error('closed');
    this.state.textContent = '';
    return this;
  }

  // Offers to connect again after `message` (a failed start or a lost connection).
  offerRetry(message, retry) {
    this.state.replaceChildren(`${message}. `, h('button.retry', { type: 'button', onclick: retry }, 'Try again'));
  }

  send(command) { return this.session ? this.session.send(command) : false; }

  // Plays the recording from `wallUs` (the keyframe at or before it): a seek once playing
  // recorded video, so the cursor is kept.
  play(wallUs) {
    wallUs = Math.max(0, Math.round(wallUs));
    return this.send(this.stored ? { seek: { wall_us: wallUs } } : { play_stored: { stream: this.stream, wall_us: wallUs } });
  }

  live() { return this.send({ play_live: { stream: '' } }); }

  togglePause() { return this.send(this.paused ? { resume: {} } : { pause: {} }); }

  fullscreen() {
    if (document.fullscreenElement) document.exitFullscreen();
    else if (this.frame.requestFullscreen) this.frame.requestFullscreen().catch(() => {});
  }

  message(m) {
    if (m.position) {
      this.position.dataset.wallUs = String(m.position.wall_us);
      this.position.textContent = dateTime(m.position.wall_us);
      if (this.on.position) this.on.position(m.position.wall_us);
    }
    if (m.state) {
      this.stored = m.state.mode === KeepPeekControl.ENUMS.Mode.MODE_STORED;
      this.paused = Boolean(m.state.paused);
      const mode = this.stored ? 'stored' : 'live';
      this.state.dataset.mode = mode;
      this.state.dataset.paused = String(this.paused);
      this.badge.dataset.mode = mode;
      this.badge.textContent = this.stored ? (this.paused ? 'Paused' : `Recorded ${m.state.rate}×`) : 'Live';
      this.pauseButton.replaceChildren(icon(this.paused ? 'play' : 'pause'));
      this.pauseButton.setAttribute('aria-label', this.paused ? 'Play (space)' : 'Pause (space)');
      this.state.textContent = this.stored ? `Recorded, ${this.paused ? 'paused' : `${m.state.rate}×`}` : 'Live';
      if (!this.stored) {
        this.position.textContent = 'live';
        delete this.position.dataset.wallUs;
        if (this.on.position) this.on.position(null);
      }
      if (this.on.state) this.on.state(this.stored, this.paused);
    }
    if (m.event && this.on.event) this.on.event(m.event);
    if (m.error) {
      this.state.textContent = m.error.message;
      if (this.on.error) this.on.error(`${m.error.message}`);
    }
    if (this.on.message) this.on.message(m);
  }

  destroy() {
    this.destroyed = true;
    if (document.fullscreenElement === this.frame) document.exitFullscreen().catch(() => {});
    const s = this.session;
    this.session = null;
    this.root.remove();
    return s ? s.close() : Promise.resolve();
  }
}
