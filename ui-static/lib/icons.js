// Icons as inline SVG paths (24×24, filled with the text colour): every device draws them
// the same, where symbol characters depend on the fonts a device happens to have.
const PATHS = {
  live: 'M3 3h8v8H3zM13 3h8v8h-8zM3 13h8v8H3zM13 13h8v8h-8z',
  timeline: 'M2 10h20v4H2zM11 3h2v18h-2z',
  events: 'M5 3h2v18H5zM8 4h11l-2.5 4.5L19 13H8z',
  health: 'M3 4h18v4H3zM3 10h18v4H3zM3 16h18v4H3zM17 5h2v2h-2zM17 11h2v2h-2zM17 17h2v2h-2z',
  settings: 'M10.5 2h3l.5 2.6 1.9.8 2.2-1.5 2.1 2.1-1.5 2.2.8 1.9 2.5.5v3l-2.5.5-.8 1.9 1.5 2.2-2.1 2.1-2.2-1.5-1.9.8-.5 2.4h-3l-.5-2.4-1.9-.8-2.2 1.5-2.1-2.1 1.5-2.2-.8-1.9L2 13.5v-3l2.5-.5.8-1.9-1.5-2.2 2.1-2.1 2.2 1.5 1.9-.8zM12 9a3 3 0 1 0 0 6 3 3 0 1 0 0-6z',
  system: 'M12 2a10 10 0 1 0 0 20 10 10 0 1 0 0-20zm-1 8h2v8h-2zm0-4h2v2h-2z',
  pause: 'M6 5h4v14H6zM14 5h4v14h-4z',
  play: 'M7 4l13 8-13 8z',
  step: 'M5 4l10 8-10 8zM16 4h3v16h-3z',
  fullscreen: 'M3 3h7v2H5v5H3zM14 3h7v7h-2V5h-5zM3 14h2v5h5v2H3zM19 14h2v7h-7v-2h5z',
  back: 'M11 5l-7 7 7 7 1.4-1.4L7.8 13H20v-2H7.8l4.6-4.6z',
  sound: 'M3 9h4l5-4v14l-5-4H3zM15.5 8.5a5 5 0 0 1 0 7l-1.4-1.4a3 3 0 0 0 0-4.2zM18.4 5.6a9 9 0 0 1 0 12.8L17 17a7 7 0 0 0 0-9.9z',
  muted: 'M3 9h4l5-4v14l-5-4H3zM15 9.4l1.4-1.4 2.1 2.1 2.1-2.1L22 9.4l-2.1 2.1 2.1 2.1-1.4 1.4-2.1-2.1-2.1 2.1L15 13.6l2.1-2.1z',
};

export function icon(name) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('class', 'icon');
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', PATHS[name]);
  path.setAttribute('fill-rule', 'evenodd');
  svg.append(path);
  return svg;
}
