// Small DOM helpers: elements built in code (never from HTML strings, so nothing a camera
// or an event sender names can become markup).

// h('button.primary', { type: 'button', onclick }, 'text', child…): an element with classes
// after the dots, properties (on… become listeners, data-/aria- attributes set as such) and
// children (strings become text; null and false are skipped).
export function h(tag, props = {}, ...children) {
  const [name, ...classes] = tag.split('.');
  const el = document.createElement(name || 'div');
  if (classes.length) el.className = classes.join(' ');
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k.startsWith('data-') || k.startsWith('aria-') || k === 'role' || k === 'for') el.setAttribute(k, v === true ? '' : String(v));
    else if (k === 'style' && typeof v === 'object') Object.assign(el.style, v);
    else el[k] = v;
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

export const $ = (s, root = document) => root.querySelector(s);
export const $$ = (s, root = document) => [...root.querySelectorAll(s)];

// A labelled form field: <label>text <input …></label>, with a slot for the server's error
// about that field (see showFieldError).
export function field(text, input, hint) {
  const error = h('span.field-error', { 'aria-live': 'polite' });
  input.dataset.field = input.name || '';
  return h('label.field', {}, h('span.field-label', {}, text), input, hint ? h('small.hint', {}, hint) : null, error);
}

// Shows `message` next to the field named `name` in `form` (the server's answers name the
// field they refuse); false when the form has no such field.
export function showFieldError(form, name, message) {
  for (const e of form.querySelectorAll('.field-error')) e.textContent = '';
  const input = name && form.querySelector(`[name="${CSS.escape(name)}"]`);
  if (!input) return false;
  const slot = input.closest('.field').querySelector('.field-error');
  slot.textContent = message;
  input.setAttribute('aria-invalid', 'true');
  input.focus();
  return true;
}

// Asks before something that cannot be undone, in a modal <dialog>; resolves to true when
// the person confirms.
export function confirmDialog(title, text, action) {
  return new Promise((done) => {
    const dialog = h('dialog.confirm', { 'aria-labelledby': 'confirm-title' },
      h('h2', { id: 'confirm-title' }, title), h('p', {}, text),
      h('form', { method: 'dialog' },
        h('button', { value: 'no', type: 'submit' }, 'Cancel'),
        h('button.danger', { value: 'yes', type: 'submit' }, action)));
    dialog.addEventListener('close', () => { dialog.remove(); done(dialog.returnValue === 'yes'); });
    document.body.append(dialog);
    dialog.showModal();
    dialog.querySelector('button').focus();
  });
}
