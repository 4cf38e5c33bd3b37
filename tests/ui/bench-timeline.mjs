// The timeline benchmark's driver (benches/timeline.rs runs it; not a test). It serves
// ui-static/ as it is, opens a page in Debian's Chromium that imports the real timeline
// module (ui-static/lib/timeline.js) with the real style sheet, and gives it a 24-hour
// fixture: 1,440 one-minute segments (2 s apart) and 600 events with five labels. Then,
// with real input from Chromium (wheel, mouse, touch-free pointer drags, clicks):
//   initial render (10 samples), zoom, pan, label filter, playhead drag and cold-seek
//   feedback (20 samples each),
// each timed in the page from the input event's timestamp to the second animation frame
// after the one that drew it; nearest-rank p50 and p95; long tasks; the most elements the
// timeline held. At 1440×900 (horizontal) and 390×844 (vertical, as on a phone). The
// baseline, in the same run: the same component drawing every run and event of the day
// (no window, no clusters). 1,200 more events outside the window must change nothing drawn.
// Prints JSON. `--smoke`: 3 samples each, desktop only.
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';
import { chromium } from 'playwright-core';
import { repo } from './harness.mjs';

const smoke = process.argv.includes('--smoke');
const SAMPLES = smoke ? 3 : 20;
const INITIAL = smoke ? 3 : 10;
const TYPES = { '.js': 'text/javascript', '.css': 'text/css', '.html': 'text/html' };

// The page: the real module and style sheet, the fixture, the baseline, and the probes.
const PAGE = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/style.css"></head><body><main id="view"><div id="lane"></div>
<div class="chips labels" id="labels"></div></main>
<script type="module">
import { Timeline } from '/lib/timeline.js';
const H = 3600e6, DAY = 24 * H;
const day0 = Date.UTC(2026, 0, 15) * 1000;
// A seeded generator: the same fixture every run.
let seed = 7;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const LABELS = ['person', 'car', 'dog', 'cat', 'package'];
const runs = Array.from({ length: 1440 }, (_, i) => ({ start_us: day0 + i * 60e6, end_us: day0 + (i + 1) * 60e6 - 2e6, kind: 'recorded' }));
const event = (t, i) => ({ event: i, time_us: Math.round(t), labels: [LABELS[i % 5]] });
const events = Array.from({ length: 600 }, (_, i) => day0 + random() * DAY).sort((a, b) => a - b).map(event);
// Outside the day and its overscan: two days either side.
const extra = Array.from({ length: 1200 }, (_, i) => (i < 600 ? day0 - 2 * DAY - random() * DAY : day0 + 3 * DAY + random() * DAY))
  .sort((a, b) => a - b).map((t, i) => event(t, 10000 + i));

// The baseline: the same component, every item of the day drawn (no window, no clusters).
class Unwindowed extends Timeline {
  render() {
    const usPerPx = this.span / this.length();
    this.ticks.begin();
    const step = 3600e6;
    for (let t = Math.ceil(this.from / step) * step; t <= this.to; t += step) {
      const el = this.ticks.next(); const [a] = this.vertical ? [this.at(t)] : [this.at(t)]; this.place(el, a, a); el.textContent = String(t);
    }
    this.ticks.end();
    this.runLayer.begin();
    for (const r of this.runs) {
      const el = this.runLayer.next(); const a = this.at(r.start_us), b = this.at(r.end_us);
      this.place(el, Math.min(a, b), Math.max(a, b)); el.className = 'tl-run recorded';
    }
    this.runLayer.end();
    this.eventLayer.begin();
    for (const [i, e] of this.shown.entries()) {
      const el = this.eventLayer.next(); const a = this.at(e.time_us); this.place(el, a, a); el.className = 'tl-marker';
      el.dataset.from = String(e.time_us); el.dataset.count = '1';
    }
    this.eventLayer.end();
    const p = this.position;
    this.playhead.hidden = p === null;
    if (p !== null) { const a = this.at(p); this.place(this.playhead, a, a); }
    this.track.dataset.usPerPx = String(usPerPx);
  }
}

const frames2 = () => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(() => ok(performance.now()))));
let tl = null;
let peak = 0;
const samples = [];
let longTasks = 0, longTaskMs = 0;
new PerformanceObserver((l) => { for (const e of l.getEntries()) { longTasks++; longTaskMs += e.duration; } }).observe({ type: 'longtask' });

window.bench = {
  day0, DAY,
  // A fresh timeline (windowed or not) over the day; resolves to the time it took.
  async mount(kind, vertical, withExtra = false) {
    const lane = document.querySelector('#lane');
    lane.replaceChildren();
    const t0 = performance.now();
    const Kind = kind === 'baseline' ? Unwindowed : Timeline;
    tl = new Kind(lane, { seek: (at) => tl.setPosition(at) });
    tl.setVertical(vertical);
    tl.setRuns(runs);
    tl.setEvents(withExtra ? [...extra.slice(0, 600), ...events, ...extra.slice(600)] : events);
    tl.setWindow(day0, day0 + DAY);
    tl.setPosition(day0 + DAY / 2);
    const t1 = await frames2();
    peak = Math.max(peak, tl.track.querySelectorAll('*').length);
    document.querySelector('#labels').replaceChildren(...LABELS.map((l) => {
      const b = document.createElement('button'); b.type = 'button'; b.className = 'chip'; b.textContent = l;
      b.onclick = () => { b.classList.toggle('on'); tl.setLabels(new Set([...document.querySelectorAll('#labels .on')].map((x) => x.textContent))); };
      return b;
    }));
    return t1 - t0;
  },
  drawn: () => tl.track.innerHTML,
  setWindow: (from, to) => tl.setWindow(from, to),
  // The input events of the kinds in bench.only, on the timeline or the chips, are timed to
  // the second frame after.
  only: [],
  listen() {
    samples.length = 0; peak = 0; longTasks = 0; longTaskMs = 0;
    if (this.listening) return;
    this.listening = true;
    const time = (e) => { const t0 = e.timeStamp; frames2().then((t1) => { samples.push(t1 - t0); peak = Math.max(peak, tl.track.querySelectorAll('*').length); }); };
    for (const type of ['wheel', 'keydown', 'pointermove', 'pointerup', 'click']) document.addEventListener(type, (e) => {
      if (!bench.only.includes(type) || (type === 'pointermove' && !e.buttons)) return;
      if (e.target.closest('.tl-track, #labels')) time(e);
    }, { capture: true, passive: true });
  },
  take() { const out = { samples: [...samples], peak, longTasks, longTaskMs }; samples.length = 0; peak = 0; longTasks = 0; longTaskMs = 0; return out; },
  box: () => { const r = tl.track.getBoundingClientRect(); return { x: r.x, y: r.y, width: r.width, height: r.height }; },
  handle: () => { const r = document.querySelector('.tl-handle').getBoundingClientRect(); return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; },
  window: () => [tl.from, tl.to],
};
document.body.dataset.ready = 'true';
</script></body></html>`;

function serve() {
  const root = join(repo, 'ui-static');
  const server = createServer(async (req, res) => {
    if (req.url === '/') { res.writeHead(200, { 'content-type': 'text/html' }); return res.end(PAGE); }
    const path = normalize(join(root, decodeURIComponent(req.url.split('?')[0])));
    if (!path.startsWith(root)) { res.writeHead(404); return res.end(); }
    try {
      const body = await readFile(path);
      res.writeHead(200, { 'content-type': TYPES[extname(path)] || 'application/octet-stream' });
      res.end(body);
    } catch (_) { res.writeHead(404); res.end(); }
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

const rank = (xs, q) => { const s = [...xs].sort((a, b) => a - b); return s[Math.max(0, Math.ceil(q * s.length) - 1)]; };
const stats = (xs) => ({ n: xs.length, p50_ms: +rank(xs, 0.5).toFixed(2), p95_ms: +rank(xs, 0.95).toFixed(2) });

async function scenarios(page, kind, vertical) {
  const out = {};
  const initial = [];
  for (let i = 0; i < INITIAL; i++) initial.push(await page.evaluate(([k, v]) => bench.mount(k, v), [kind, vertical]));
  out.initial = { ...stats(initial) };
  const settle = () => new Promise((r) => setTimeout(r, 60));
  await page.evaluate(() => bench.listen());
  const box = await page.evaluate(() => bench.box());
  const along = (share) => (vertical ? { x: box.x + box.width * 0.8, y: box.y + box.height * share } : { x: box.x + box.width * share, y: box.y + box.height - 6 });
  const only = (types) => page.evaluate((t) => { bench.only = t; }, types);
  const record = async (name) => {
    await new Promise((r) => setTimeout(r, 150));
    const got = await page.evaluate(() => bench.take());
    out[name] = { ...stats(got.samples), peak_elements: got.peak, long_tasks: got.longTasks, long_task_ms: Math.round(got.longTaskMs) };
  };
  // Zoom: the wheel in and out at spread points, from the day down and back.
  await only(['wheel']);
  for (let i = 0; i < SAMPLES; i++) {
    const p = along(0.2 + 0.6 * ((i * 7) % 10) / 10);
    await page.mouse.move(p.x, p.y);
    await page.mouse.wheel(0, i % 8 < 4 ? -500 : 500);
    await settle();
  }
  await record('zoom');
  // Zoom by key (+ and −) on the focused track: the same zoom without the wheel's way
  // through the browser (Chromium hands a wheel event to the page some 25-30 ms after its
  // timestamp, whatever the page does with it).
  await only(['keydown']);
  await page.focus('.tl-track');
  for (let i = 0; i < SAMPLES; i++) {
    await page.keyboard.press(i % 8 < 4 ? '+' : '-');
    await settle();
  }
  await record('zoom_key');
  // Pan: drags along the track, each move one sample.
  await page.evaluate(() => bench.setWindow(bench.day0 + 6 * 3600e6, bench.day0 + 9 * 3600e6));
  const moves = 4;
  await only(['pointermove']);
  for (let i = 0; i < Math.ceil(SAMPLES / moves); i++) {
    const a = along(0.3);
    await page.mouse.move(a.x, a.y);
    await page.mouse.down();
    for (let m = 1; m <= moves; m++) {
      const b = along(0.3 + (i % 2 ? -1 : 1) * 0.05 * m);
      await page.mouse.move(b.x, b.y);
      await settle();
    }
    await page.mouse.up();
  }
  await record('pan');
  // Label filter: the chips on and off.
  await only(['click']);
  for (let i = 0; i < SAMPLES; i++) {
    await page.click(`#labels button:nth-child(${(i % 5) + 1})`);
    await settle();
  }
  await record('label_filter');
  // Playhead drag: the handle along the track.
  await page.evaluate(() => bench.setWindow(bench.day0, bench.day0 + bench.DAY));
  await new Promise((r) => setTimeout(r, 100));
  await only(['pointermove']);
  for (let i = 0; i < Math.ceil(SAMPLES / moves); i++) {
    const h = await page.evaluate(() => bench.handle());
    await page.mouse.move(h.x, h.y);
    await page.mouse.down();
    for (let m = 1; m <= moves; m++) {
      const b = along(0.5 + (i % 2 ? -1 : 1) * 0.04 * m);
      await page.mouse.move(vertical ? h.x : b.x, vertical ? b.y : h.y);
      await settle();
    }
    await page.mouse.up();
    await settle();
  }
  await record('playhead_drag');
  // Cold seek: a click anywhere plays from there (on release); the playhead is the feedback.
  await only(['pointerup']);
  for (let i = 0; i < SAMPLES; i++) {
    const p = along(0.1 + 0.8 * ((i * 3) % 10) / 10);
    await page.mouse.click(p.x, p.y);
    await settle();
  }
  await record('cold_seek');
  return out;
}

const server = await serve();
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update'] });
const report = { mode: smoke ? 'smoke' : 'full', fixture: { segments: 1440, events: 600, extra_events: 1200 }, layouts: [] };
try {
  const layouts = smoke ? [['desktop', { width: 1440, height: 900 }, false]] : [['desktop', { width: 1440, height: 900 }, false], ['mobile', { width: 390, height: 844 }, true]];
  for (const [name, viewport, vertical] of layouts) {
    const page = await browser.newPage({ viewport });
    await page.goto(`http://127.0.0.1:${server.address().port}/`);
    await page.locator('body[data-ready]').waitFor();
    // 1,200 events outside the window change nothing drawn.
    await page.evaluate((v) => bench.mount('windowed', v, false), vertical);
    const plain = await page.evaluate(() => bench.drawn());
    await page.evaluate((v) => bench.mount('windowed', v, true), vertical);
    const withExtra = await page.evaluate(() => bench.drawn());
    const result = await scenarios(page, 'windowed', vertical);
    const baseline = await scenarios(page, 'baseline', vertical);
    report.layouts.push({ name, viewport, vertical, extra_events_change_nothing: plain === withExtra, result, baseline });
    await page.close();
  }
} finally {
  await browser.close();
  server.close();
}
console.log(JSON.stringify(report));
