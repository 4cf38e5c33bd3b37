// The box's HTTP API: JSON in and out, the session's CSRF token on every change, and the
// box's error ({ code, message, field? }) turned into an ApiError that says what went wrong.

export const session = { csrf: null, role: null, user: null };

export class ApiError extends Error {
  constructor(status, data) {
    super((data && data.message) || `the box answered ${status}`);
    this.status = status;
    this.code = data && data.code;
    this.field = data && data.field;
  }
}

function headers(json) {
  const h = {};
  if (json) h['content-type'] = 'application/json';
  if (session.csrf) h['x-csrf-token'] = session.csrf;
  return h;
}

// { status, data } whatever the status; data is the parsed JSON or null.
export async function request(method, path, body) {
  const r = await fetch(path, {
    method, credentials: 'same-origin', headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = JSON.parse(await r.text()); } catch (_) { /* not JSON */ }
  return { status: r.status, data };
}

// The JSON of a successful answer; anything else throws an ApiError.
export async function api(method, path, body) {
  const r = await request(method, path, body);
  if (r.status < 200 || r.status > 299) throw new ApiError(r.status, r.data);
  return r.data;
}

export const get = (path) => api('GET', path);

// Uploads `file` with progress (fetch cannot report an upload's progress; XHR can).
export function upload(path, file, onProgress) {
  return new Promise((done, fail) => {
    const x = new XMLHttpRequest();
    x.open('POST', path);
    x.setRequestHeader('content-type', 'application/octet-stream');
    if (session.csrf) x.setRequestHeader('x-csrf-token', session.csrf);
    x.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    x.onload = () => {
      let data = null;
      try { data = JSON.parse(x.responseText); } catch (_) { /* not JSON */ }
      if (x.status >= 200 && x.status < 300) done(data); else fail(new ApiError(x.status, data));
    };
    x.onerror = () => fail(new Error('the upload broke off: is the box still reachable?'));
    x.send(file);
  });
}

// The page-wide notice line (errors that belong to no field).
export function say(text, kind = 'error') {
  const m = document.querySelector('#message');
  m.textContent = text || '';
  m.dataset.kind = kind;
}

// A notice said just before a page sends the browser elsewhere stays for the next page.
let keep = false;
export function sayThenGo(text, hash) {
  say(text);
  keep = true;
  location.hash = hash;
}

// A new page starts with no notice, unless the last one sent it there with one.
export function clearSay() {
  if (keep) keep = false; else say('');
}
