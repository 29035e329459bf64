// caesar's dashboard, the shared part: plain JavaScript, embedded in the
// daemon, no framework. The pages (board.js, task.js, app.js) build on these
// helpers. Agents' text is only ever set as text, never as HTML.
'use strict';

const CSRF = document.querySelector('meta[name="caesar-csrf"]')?.content || '';
const MAIN = document.getElementById('main');
let clockSkew = 0; // server now minus browser now, in ms

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

function toast(msg, bad) {
  const t = document.getElementById('toast');
  t.textContent = msg;
  t.className = bad ? 'show bad' : 'show';
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.className = ''; }, 6000);
}

function live(state) {
  const l = document.getElementById('live');
  if (!l) return;
  l.textContent = state === 'open' ? '● live' : state === 'closed' ? 'finished' : 'reconnecting…';
  l.className = 'live ' + state;
}

async function getJSON(url) {
  const r = await fetch(url, { credentials: 'same-origin' });
  const data = await r.json().catch(() => ({ error: 'the daemon answered ' + r.status }));
  if (!r.ok) throw new Error(data.error || ('HTTP ' + r.status));
  return data;
}

// Every state-changing request carries the session's CSRF token (auth.rs checks it).
async function post(url, body) {
  const r = await fetch(url, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'content-type': 'application/json', 'x-caesar-csrf': CSRF },
    body: JSON.stringify(body || {}),
  });
  const data = await r.json().catch(() => ({ error: 'the daemon answered ' + r.status }));
  return { ok: r.ok, status: r.status, data };
}

// Terminal colour and cursor codes (CSI, OSC and lone escapes), which agents
// print for terminals, are no text for a page.
// eslint-disable-next-line no-control-regex
const ANSI = /\u001b\[[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)|\u001b[@-Z\\-_]|\u009b[0-?]*[ -/]*[@-~]/g;
function stripAnsi(s) { return String(s || '').replace(ANSI, ''); }

function elapsed(t) {
  if (!t.started_ms) return '';
  const end = t.finished_ms || (Date.now() + clockSkew);
  let s = Math.max(0, Math.floor((end - t.started_ms) / 1000));
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return h ? `${h}h${String(m).padStart(2, '0')}m` : m ? `${m}m${String(s).padStart(2, '0')}s` : `${s}s`;
}

// "3 min ago", from a time in ms on the daemon's clock.
function ago(ms) {
  if (!ms) return '';
  const s = Math.max(0, Math.round((Date.now() + clockSkew - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

function clock(at) {
  const d = new Date(at);
  if (isNaN(d)) return '';
  return d.toLocaleTimeString([], { hour12: false });
}

function statusText(t) {
  if (t.status === 'pending') {
    return t.phase === 'queued' && t.queue_position !== null && t.queue_position !== undefined
      ? `queued #${t.queue_position + 1}` : (t.phase || 'pending');
  }
  return t.status;
}

// The verdict leads (issue 30): `blocked: auth`, `verification failed`, …;
// a pending task says where it stands. An older daemon sends none.
function verdictText(t) {
  if (!t.verdict || t.verdict_kind === 'pending') return statusText(t);
  return t.verdict;
}

function badge(t) {
  const kind = t.verdict_kind || t.status;
  const kids = [el('span', { class: 'badge v-' + kind + ' s-' + t.status, title: 'process: ' + t.status, text: verdictText(t) })];
  if (t.blocker && kind !== 'blocked') kids.push(el('span', { class: 'badge blocked', text: 'blocked: ' + t.blocker }));
  if (t.questions && t.questions.length) kids.push(el('span', { class: 'badge ask', text: `${t.questions.length} waiting` }));
  if (t.changes) kids.push(el('span', { class: 'badge changes', text: t.changes }));
  return kids;
}

function activityText(t) {
  if (t.questions && t.questions.length) return '? ' + t.questions[0].question;
  if (t.activity) {
    const a = t.activity;
    if (a.kind === 'tool_use') return `tool ${a.tool}${a.state ? ' (' + a.state + ')' : ''}`;
    if (a.kind === 'thinking') return 'thinking';
  }
  if (t.output_tail) {
    const lines = stripAnsi(t.output_tail).trim().split('\n');
    return lines[lines.length - 1];
  }
  if (t.error) return t.error;
  return '';
}

function cut(s, n) { s = s || ''; return s.length > n ? s.slice(0, n - 1) + '…' : s; }

function taskLink(id) {
  return id === 'uncommitted' ? el('i', { text: 'your uncommitted changes' }) : el('a', { href: '/task/' + id, class: 'id', text: id });
}

// The project a task belongs to: its workspace, or the repository a worktree
// under `<repo>/.caesar/wt/` belongs to.
function projectOf(t) {
  const w = t.workspace || '';
  const i = w.indexOf('/.caesar/wt/');
  return i > 0 ? w.slice(0, i) : w;
}

function projectName(p) {
  if (!p) return '(no project)';
  const parts = p.split('/').filter(Boolean);
  return parts[parts.length - 1] || p;
}

const ACTIVE = new Set(['pending', 'running']);
function isActive(t) { return ACTIVE.has(t.status); }
