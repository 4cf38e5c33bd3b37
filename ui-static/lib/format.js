// Times and sizes as people read them. The API speaks UTC µs; people read local time.

export const US = { s: 1e6, min: 60e6, h: 3600e6, day: 86400e6 };

export const nowUs = () => Date.now() * 1000;
export const dateOf = (us) => new Date(us / 1000);

export function time(us, seconds = true) {
  return dateOf(us).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: seconds ? '2-digit' : undefined });
}

export function dateTime(us) {
  return dateOf(us).toLocaleString([], { dateStyle: 'medium', timeStyle: 'medium' });
}

export function day(us) {
  return dateOf(us).toLocaleDateString([], { weekday: 'short', day: 'numeric', month: 'short' });
}

// "3 min ago", "yesterday 14:02" …: how long ago, for lists.
export function ago(us) {
  const d = (nowUs() - us) / 1e6;
  if (d < 60) return 'just now';
  if (d < 3600) return `${Math.floor(d / 60)} min ago`;
  if (d < 86400) return `${Math.floor(d / 3600)} h ago`;
  return `${day(us)} ${time(us, false)}`;
}

export function duration(us) {
  const s = Math.round(us / 1e6);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60 ? `${s % 60} s` : ''}`.trim();
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export function bytes(n) {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(n < 10 && i ? 1 : 0)} ${units[i]}`;
}

export function percent(share) {
  if (share > 0 && share < 0.0001) return '<0.01%';
  return `${(100 * share).toFixed(share < 0.01 ? 2 : share < 0.995 ? 1 : 0)}%`;
}

// A local midnight, as UTC µs.
export function midnight(us) {
  const d = dateOf(us);
  return new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime() * 1000;
}

// <input type=date> value of the local day holding `us`, and back.
export function dateInput(us) {
  const d = dateOf(us);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
}
export function fromDateInput(v) {
  const [y, m, d] = v.split('-').map(Number);
  return new Date(y, m - 1, d).getTime() * 1000;
}
