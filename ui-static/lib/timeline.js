// The timeline: one stream's recorded runs, gaps, event markers and a playhead over a time
// window, horizontal on wide screens and vertical (newest at the top) on phones.
//
// It stays fast with a day of dense data because only the visible window and half a window
// either side are in the DOM: runs closer than a pixel are drawn as one, event markers
// closer than CLUSTER_PX become one cluster with a count, and both are found by binary
// search, so data outside the window costs nothing. Elements are kept and reused between
// renders; a render is one pass of style writes, at most once per animation frame.
//
// Input: click the track to play from that time (on a marker: from that event; on a
// cluster: zoom into it), drag the playhead to seek, drag or swipe elsewhere to pan, wheel
// or pinch or +/- to zoom, arrow keys to step, space to pause, L for live.
import { h } from './dom.js';
import { US, time, day, dateTime } from './format.js';

export const SPAN_MIN_US = 10 * US.s;
export const SPAN_MAX_US = US.day;
// Markers closer than this become a cluster.
const CLUSTER_PX = 16;
// A press that moves less than this is a click, not a drag.
const CLICK_PX = 5;
// Tick steps, smallest first; the first that leaves room for a label is used.
const TICK_STEPS_US = [1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400].map((s) => s * US.s);

// Index of the first item whose `key(item)` is >= t (items sorted by key).
function lowerBound(items, t, key) {
  let lo = 0;
  let hi = items.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (key(items[mid]) < t) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// A layer of absolutely placed elements, kept between renders and reused in order.
class Layer {
  constructor(parent, className, make) {
    this.el = h(`div.${className}`, { 'aria-hidden': 'true' });
    parent.append(this.el);
    this.make = make;
    this.used = 0;
    this.pool = [];
  }
  begin() { this.used = 0; }
  next() {
    if (this.used === this.pool.length) {
      const el = this.make();
      this.pool.push(el);
      this.el.append(el);
    }
    const el = this.pool[this.used++];
    el.hidden = false;
    return el;
  }
  // Extra elements go from the DOM (the count in the DOM is what the window needs).
  end() {
    while (this.pool.length > this.used) this.pool.pop().remove();
  }
}

export class Timeline {
  // `on`: seek(wallUs, final), event(e), window(from, to, byUser), step(dir), pause(),
  // live(), shown() (the events shown changed: new events or labels); each optional.
  constructor(root, on = {}) {
    this.on = on;
    this.vertical = false;
    this.from = Date.now() * 1000 - US.h;
    this.to = Date.now() * 1000;
    this.runs = [];
    this.events = [];
    this.shown = [];
    this.labels = null;
    this.position = null;
    this.nowUs = null;
    this.pending = 0;
    this.track = h('div.tl-track', {
      tabIndex: 0, role: 'slider', 'aria-label': 'Timeline: click or drag to play from a time, arrow keys step, + and − zoom, space pauses, L goes live',
      'aria-valuemin': 0, 'aria-valuemax': 100,
    });
    this.root = h('div.timeline', {}, this.track);
    root.append(this.root);
    this.ticks = new Layer(this.track, 'tl-ticks', () => h('span.tl-tick'));
    this.runLayer = new Layer(this.track, 'tl-runs', () => h('span.tl-run'));
    this.eventLayer = new Layer(this.track, 'tl-events', () => h('span.tl-marker'));
    this.nowLine = h('span.tl-now', { 'aria-hidden': 'true' });
    this.playhead = h('span.tl-playhead', { hidden: true }, h('span.tl-handle', { title: 'Drag to seek' }));
    this.track.append(this.nowLine, this.playhead);
    this.bindInput();
  }

  get span() { return this.to - this.from; }

  // Pixels along the time axis.
  length() {
    const r = this.track.getBoundingClientRect();
    return Math.max(1, this.vertical ? r.height : r.width);
  }

  // Share of the axis (0 at the window's start or, vertical, its top) of time `t`.
  at(t) { return this.vertical ? (this.to - t) / this.span : (t - this.from) / this.span; }

  // The time at a client point.
  timeAt(clientX, clientY) {
    const r = this.track.getBoundingClientRect();
    const share = this.vertical ? (clientY - r.top) / r.height : (clientX - r.left) / r.width;
    return this.vertical ? this.to - share * this.span : this.from + share * this.span;
  }

  setVertical(v) {
    this.vertical = v;
    this.root.classList.toggle('vertical', v);
    this.track.setAttribute('aria-orientation', v ? 'vertical' : 'horizontal');
    this.schedule();
  }

  setWindow(from, to, byUser = false) {
    let span = Math.min(SPAN_MAX_US, Math.max(SPAN_MIN_US, to - from));
    const mid = (from + to) / 2;
    this.from = mid - span / 2;
    this.to = mid + span / 2;
    if (this.on.window) this.on.window(this.from, this.to, byUser);
    this.schedule();
  }

  // Runs sorted by start, not overlapping: { start_us, end_us, kind: 'recorded' | 'event' |
  // 'archived' } (archived: in the archive only, no longer on the box).
  setRuns(runs) { this.runs = runs; this.schedule(); }

  // Events sorted by time: { event, time_us, labels, … }.
  setEvents(events) { this.events = events; this.filter(); }

  // Only events with one of `labels` (a Set; null for all).
  setLabels(labels) { this.labels = labels && labels.size ? labels : null; this.filter(); }

  filter() {
    const l = this.labels;
    this.shown = l ? this.events.filter((e) => (e.labels || []).some((x) => l.has(x))) : this.events;
    if (this.on.shown) this.on.shown();
    this.schedule();
  }

  setPosition(us) { this.position = us; this.schedule(); }

  // The present: nothing after it can be recorded (a line marks it).
  setNow(us) { this.nowUs = us; this.schedule(); }

  schedule() {
    if (!this.pending) this.pending = requestAnimationFrame(() => { this.pending = 0; this.render(); });
  }

  // Places `el` over [a, b] (shares of the axis) along the axis.
  place(el, a, b) {
    const s = el.style;
    if (this.vertical) { s.top = `${a * 100}%`; s.height = `${(b - a) * 100}%`; s.left = ''; s.width = ''; }
    else { s.left = `${a * 100}%`; s.width = `${(b - a) * 100}%`; s.top = ''; s.height = ''; }
  }

  render() {
    const px = this.length();
    const usPerPx = this.span / px;
    // What is drawn: the window and half a window either side.
    const lo = this.from - this.span / 2;
    const hi = this.to + this.span / 2;
    const axis = (t) => this.at(t);
    const span = (a, b) => (this.vertical ? [axis(b), axis(a)] : [axis(a), axis(b)]);

    // Ticks with labels: a step that leaves ~90 px (horizontal) or ~44 px (vertical) each.
    const room = (this.vertical ? 44 : 90) * usPerPx;
    const step = TICK_STEPS_US.find((s) => s >= room) || TICK_STEPS_US[TICK_STEPS_US.length - 1];
    // The zone's offset at each tick: a window across a daylight-saving change still marks
    // local midnight.
    const offsetAt = (t) => new Date(t / 1000).getTimezoneOffset() * 60e6;
    const offset = offsetAt(lo);
    this.ticks.begin();
    for (let t = Math.ceil((lo - offset) / step) * step + offset; t <= hi; t += step) {
      const el = this.ticks.next();
      const [a] = span(t, t);
      this.place(el, a, a);
      const midnight = (t - offsetAt(t)) % US.day === 0;
      el.textContent = midnight && step >= US.h ? day(t) : time(t, step < US.min);
      el.classList.toggle('major', midnight);
    }
    this.ticks.end();

    // Runs: merged where the gap between them is under a pixel.
    this.runLayer.begin();
    let drawn = 0;
    for (let i = lowerBound(this.runs, lo, (r) => r.end_us); i < this.runs.length && this.runs[i].start_us < hi; i++) {
      const first = this.runs[i];
      let end = first.end_us;
      while (i + 1 < this.runs.length && this.runs[i + 1].start_us - end < usPerPx && this.runs[i + 1].kind === first.kind
        && this.runs[i + 1].start_us < hi) end = this.runs[++i].end_us;
      const el = this.runLayer.next();
      const [a, b] = span(Math.max(first.start_us, lo), Math.min(end, hi));
      this.place(el, a, b);
      el.className = `tl-run ${first.kind === 'event' ? 'event-only' : first.kind === 'archived' ? 'archived' : 'recorded'}`;
      drawn++;
    }
    this.runLayer.end();
    this.track.dataset.runs = String(drawn);

    // Event markers, clustered.
    this.eventLayer.begin();
    const clusterUs = CLUSTER_PX * usPerPx;
    let inWindow = 0;
    const events = this.shown;
    for (let i = lowerBound(events, lo, (e) => e.time_us); i < events.length && events[i].time_us <= hi;) {
      const first = i;
      while (i + 1 < events.length && events[i + 1].time_us - events[first].time_us < clusterUs && events[i + 1].time_us <= hi) i++;
      const count = i - first + 1;
      const a = axis(events[first].time_us);
      const b = axis(events[i].time_us);
      const el = this.eventLayer.next();
      const [x] = this.vertical ? [b] : [a];
      this.place(el, x, x + (this.vertical ? a - b : b - a));
      el.className = count > 1 ? 'tl-marker cluster' : 'tl-marker';
      el.textContent = count > 1 ? String(count) : '';
      // The cluster's events by time (not by index: the drawing must not depend on events
      // outside the window).
      el.dataset.from = String(events[first].time_us);
      el.dataset.count = String(count);
      if (events[first].time_us >= this.from && events[first].time_us <= this.to) inWindow += count;
      i++;
    }
    this.eventLayer.end();
    this.track.dataset.events = String(inWindow);

    // The present and the playhead.
    const now = this.nowUs;
    this.nowLine.hidden = now === null || now < this.from || now > this.to;
    if (!this.nowLine.hidden) { const [a] = span(now, now); this.place(this.nowLine, a, a); }
    const p = this.position;
    this.playhead.hidden = p === null;
    if (p !== null) {
      const [a] = span(p, p);
      this.place(this.playhead, a, a);
      // The share of the window before the playhead, whichever way the axis runs.
      this.track.setAttribute('aria-valuenow', Math.round(Math.min(1, Math.max(0, (p - this.from) / this.span)) * 100));
      this.track.setAttribute('aria-valuetext', dateTime(p));
    } else {
      // Live: the present's place in the window.
      const now = this.nowUs ?? this.to;
      this.track.setAttribute('aria-valuenow', Math.round(Math.min(1, Math.max(0, (now - this.from) / this.span)) * 100));
      this.track.setAttribute('aria-valuetext', 'live');
    }
    this.track.dataset.from = String(Math.round(this.from));
    this.track.dataset.to = String(Math.round(this.to));
  }

  // Zooms by `factor` (< 1 in) keeping the time under `anchor` where it is.
  zoom(factor, anchor = (this.from + this.to) / 2) {
    const span = Math.min(SPAN_MAX_US, Math.max(SPAN_MIN_US, this.span * factor));
    const share = (anchor - this.from) / this.span;
    this.setWindow(anchor - share * span, anchor - share * span + span, true);
  }

  pan(us) { this.setWindow(this.from + us, this.to + us, true); }

  bindInput() {
    const t = this.track;
    const pointers = new Map();
    let gesture = null;
    const along = (e) => (this.vertical ? e.clientY : e.clientX);
    t.addEventListener('pointerdown', (e) => {
      if (e.button > 0) return;
      t.setPointerCapture(e.pointerId);
      pointers.set(e.pointerId, e);
      if (pointers.size === 2) {
        const [p, q] = [...pointers.values()];
        const mid = this.timeAt((p.clientX + q.clientX) / 2, (p.clientY + q.clientY) / 2);
        gesture = { kind: 'pinch', dist: Math.max(10, Math.abs(along(p) - along(q))), span: this.span, mid, share: (mid - this.from) / this.span };
        return;
      }
      const onHandle = e.target.closest('.tl-playhead');
      gesture = { kind: onHandle ? 'scrub' : 'press', start: along(e), from: this.from, target: e.target, lastSeek: 0 };
    });
    t.addEventListener('pointermove', (e) => {
      if (!pointers.has(e.pointerId) || !gesture) return;
      pointers.set(e.pointerId, e);
      if (gesture.kind === 'pinch' && pointers.size === 2) {
        const [p, q] = [...pointers.values()];
        const dist = Math.max(10, Math.abs(along(p) - along(q)));
        const span = Math.min(SPAN_MAX_US, Math.max(SPAN_MIN_US, (gesture.span * gesture.dist) / dist));
        // The time between the fingers stays between them.
        const from = gesture.mid - gesture.share * span;
        this.setWindow(from, from + span, true);
        return;
      }
      const moved = along(e) - gesture.start;
      if (gesture.kind === 'press' && Math.abs(moved) >= CLICK_PX) gesture.kind = 'pan';
      if (gesture.kind === 'pan') {
        // The content follows the finger.
        const us = (moved / this.length()) * this.span;
        const from = this.vertical ? gesture.from + us : gesture.from - us;
        this.setWindow(from, from + this.span, true);
      } else if (gesture.kind === 'scrub') {
        const at = this.timeAt(e.clientX, e.clientY);
        this.setPosition(at);
        // While dragging, seek at most every 250 ms; the last one is sent on release.
        if (e.timeStamp - gesture.lastSeek > 250 && this.on.seek) { gesture.lastSeek = e.timeStamp; this.on.seek(at, false); }
      }
    });
    const release = (e) => {
      if (!pointers.delete(e.pointerId) || !gesture) return;
      const g = gesture;
      if (pointers.size) { gesture = { kind: 'done' }; return; }
      gesture = null;
      if (e.type === 'pointercancel') return;
      if (g.kind === 'scrub' && this.on.seek) this.on.seek(this.timeAt(e.clientX, e.clientY), true);
      if (g.kind === 'press') this.click(g.target, this.timeAt(e.clientX, e.clientY));
    };
    t.addEventListener('pointerup', release);
    t.addEventListener('pointercancel', release);
    t.addEventListener('wheel', (e) => {
      e.preventDefault();
      const horizontal = Math.abs(e.deltaX) > Math.abs(e.deltaY);
      if (e.shiftKey || horizontal) this.pan(((horizontal ? e.deltaX : e.deltaY) / this.length()) * this.span);
      else this.zoom(Math.exp(e.deltaY * 0.002), this.timeAt(e.clientX, e.clientY));
    }, { passive: false });
    t.addEventListener('keydown', (e) => {
      const key = e.key;
      if (key === '+' || key === '=') this.zoom(0.5, this.position ?? undefined);
      else if (key === '-' || key === '_') this.zoom(2, this.position ?? undefined);
      else if (key === 'ArrowLeft' || key === 'ArrowDown') this.on.step && this.on.step(-1);
      else if (key === 'ArrowRight' || key === 'ArrowUp') this.on.step && this.on.step(1);
      else if (key === ' ') this.on.pause && this.on.pause();
      else if (key === 'l' || key === 'L') this.on.live && this.on.live();
      else return;
      e.preventDefault();
    });
  }

  click(target, at) {
    const marker = target.closest && target.closest('.tl-marker');
    if (marker) {
      // (The events may have changed since the marker was drawn.)
      const first = lowerBound(this.shown, Number(marker.dataset.from), (e) => e.time_us);
      if (first >= this.shown.length) return;
      const count = Number(marker.dataset.count) || 1;
      if (count === 1) { if (this.on.event) this.on.event(this.shown[first]); return; }
      // A cluster: zoom to show its events apart.
      const a = this.shown[first].time_us;
      const b = this.shown[Math.min(first + count, this.shown.length) - 1].time_us;
      const pad = Math.max(SPAN_MIN_US / 2, (b - a) * 0.25);
      this.setWindow(a - pad, b + pad, true);
      return;
    }
    if (this.on.seek) this.on.seek(at, true);
  }
}
