// Live view and playback over WebRTC: a WHEP session (an SDP offer POSTed, the answer back,
// DELETE to end it). The box is ICE-lite with a candidate on each of its LAN addresses, so
// no STUN server is needed. With `control`, the session carries the protobuf control
// channel (/control_pb.js, generated from the box's own .proto): playback of recordings,
// the timeline and event notices. The offer asks for sound too: the box sends a camera's
// G.711 or Opus as it comes (`hasAudio` once answered); the page starts muted, as browsers
// require, and a button unmutes it.
import { session as auth } from './api.js';
import { icon } from './icons.js';

// Every session this page holds, so a page change or logout can end them all.
const open = new Set();
// How long the control channel may take to open before the session counts as failed.
const OPEN_TIMEOUT_MS = 15000;
// How long a connection may stay "disconnected" (no packets) before it counts as lost.
const DISCONNECTED_MS = 5000;

export class WhepSession {
  // Opens `stream` ("camera/main") and shows it in `video`. Throws with the box's message
  // when it refuses (no such camera, not connected yet, too many sessions …).
  static async open(stream, video, { control = false, onMessage = null } = {}) {
    const s = new WhepSession(stream, video);
    try {
      await s.start(control, onMessage);
    } catch (e) {
      s.close();
      throw e;
    }
    return s;
  }

  constructor(stream, video) {
    this.stream = stream;
    this.video = video;
    this.pc = new RTCPeerConnection();
    this.location = null;
    this.channel = null;
    this.nextRequest = 1;
    this.closed = false;
    this.opened = Promise.resolve();
    // Called once when the connection fails or goes silent; the owner reopens or offers to.
    this.onLost = null;
    this.failOpen = null;
    let silence = 0;
    this.pc.onconnectionstatechange = () => {
      const state = this.pc.connectionState;
      clearTimeout(silence);
      if (state === 'failed') this.lose('the connection failed');
      else if (state === 'disconnected') silence = setTimeout(() => this.lose('the connection went silent'), DISCONNECTED_MS);
    };
    open.add(this);
  }

  lose(why) {
    if (this.closed || this.lost) return;
    this.lost = true;
    if (this.failOpen) this.failOpen(new Error(`Live view stopped: ${why}`));
    if (this.onLost) this.onLost(why);
  }

  async start(control, onMessage) {
    this.pc.addTransceiver('video', { direction: 'recvonly' });
    this.pc.addTransceiver('audio', { direction: 'recvonly' });
    if (control) {
      this.channel = this.pc.createDataChannel('control');
      this.channel.binaryType = 'arraybuffer';
      this.channel.onmessage = (e) => onMessage && onMessage(KeepPeekControl.decode('ServerMessage', e.data));
      this.opened = new Promise((ok, fail) => {
        this.channel.onopen = ok;
        this.failOpen = fail;
        setTimeout(() => fail(new Error('The box did not answer in time')), OPEN_TIMEOUT_MS);
      });
      this.opened.catch(() => {});
    }
    // Picture and sound in one stream, which the browser plays in step.
    this.media = new MediaStream();
    this.pc.ontrack = (e) => {
      if (this.closed) return;
      this.media.addTrack(e.track);
      if (this.video.srcObject !== this.media) this.video.srcObject = this.media;
    };
    await this.pc.setLocalDescription(await this.pc.createOffer());
    const headers = { 'content-type': 'application/sdp' };
    if (auth.csrf) headers['x-csrf-token'] = auth.csrf;
    const r = await fetch(`/api/whep/${this.stream}`, { method: 'POST', headers, body: this.pc.localDescription.sdp });
    if (r.status !== 201) {
      let message = `live view failed (${r.status})`;
      try { message = (await r.json()).message; } catch (_) { /* not JSON */ }
      throw new Error(message);
    }
    this.location = r.headers.get('location');
    if (this.closed) return this.release();
    const answer = await r.text();
    this.hasAudio = hasSound(answer);
    await this.pc.setRemoteDescription({ type: 'answer', sdp: answer });
  }

  // Sends a control command ({ play_stored: {…} }, { pause: {} } …) on track 0.
  send(command) {
    if (!this.channel || this.channel.readyState !== 'open') return false;
    this.channel.send(KeepPeekControl.encode('ClientMessage', { request_id: this.nextRequest++, track: 0, ...command }));
    return true;
  }

  close() {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    open.delete(this);
    this.pc.close();
    if (this.video.srcObject) this.video.srcObject = null;
    return this.release();
  }

  release() {
    if (!this.location) return Promise.resolve();
    const location = this.location;
    this.location = null;
    const headers = auth.csrf ? { 'x-csrf-token': auth.csrf } : {};
    return fetch(location, { method: 'DELETE', headers, keepalive: true }).catch(() => {});
  }
}

// Whether an answer sends sound: an audio line the box took (a port, not inactive).
function hasSound(sdp) {
  return sdp.split(/\r?\nm=/).slice(1).some((m) => /^audio [1-9]/.test(m) && !/\na=inactive/.test(m));
}

// A button that mutes and unmutes `video`, named for `what`; muted to begin with, as
// browsers require.
export function soundButton(video, what) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'sound';
  const show = () => {
    const label = video.muted ? `Unmute ${what}` : `Mute ${what}`;
    b.setAttribute('aria-label', label);
    b.title = label;
    b.setAttribute('aria-pressed', String(!video.muted));
    b.dataset.sound = video.muted ? 'muted' : 'on';
    b.replaceChildren(icon(video.muted ? 'muted' : 'sound'));
  };
  b.addEventListener('click', (e) => {
    e.stopPropagation();
    video.muted = !video.muted;
    if (!video.muted) video.play().catch(() => {});
    show();
  });
  b.addEventListener('dblclick', (e) => e.stopPropagation());
  video.muted = true;
  show();
  return b;
}

// The sessions this page holds (what tests read their statistics from).
export function openSessions() {
  return [...open];
}

export function closeAll() {
  return Promise.all([...open].map((s) => s.close()));
}

// A closed tab ends its sessions at once rather than when the box notices the silence.
window.addEventListener('pagehide', () => { closeAll(); });
