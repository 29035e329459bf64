// caesar's dashboard: plain JavaScript, embedded in the daemon, no framework.
// Each page fills itself from the JSON API and follows the daemon through
// server-sent events (nothing polls). Agents' text is only ever set as text,
// never as HTML. Each view is an entry of PAGES and a link in the daemon's NAV.
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

function elapsed(t) {
  if (!t.started_ms) return '';
  const end = t.finished_ms || (Date.now() + clockSkew);
  let s = Math.max(0, Math.floor((end - t.started_ms) / 1000));
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return h ? `${h}h${String(m).padStart(2, '0')}m` : m ? `${m}m${String(s).padStart(2, '0')}s` : `${s}s`;
}

function statusText(t) {
  if (t.status === 'pending') {
    const where = t.phase === 'queued' && t.queue_position !== null ? `queued #${t.queue_position + 1}` : (t.phase || 'pending');
    return where;
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

// The agents a task tried, why each was left, and which one produced the
// result (issue 30, item 2).
function attemptList(t) {
  if (!t.attempts || !t.attempts.length) return '';
  const line = (a) => a.stopped_by !== undefined
    ? `${a.agent} (${a.task_id}) blocked (${a.stopped_by || 'unknown'}): ${a.message}`
    : `${a.agent} (${a.task_id}) ${a.produced_result ? 'produced the result' : 'runs now'}`;
  return el('div', { class: 'attempts' }, el('h2', { text: 'Attempts' }),
    el('ol', {}, ...t.attempts.map((a) => el('li', { text: line(a) }))));
}

function activityText(t) {
  if (t.questions && t.questions.length) return '? ' + t.questions[0].question;
  if (t.activity) {
    const a = t.activity;
    if (a.kind === 'tool_use') return `tool ${a.tool}${a.state ? ' (' + a.state + ')' : ''}`;
    if (a.kind === 'thinking') return 'thinking';
  }
  if (t.output_tail) {
    const lines = t.output_tail.trim().split('\n');
    return lines[lines.length - 1];
  }
  if (t.error) return t.error;
  return '';
}

function cut(s, n) { s = s || ''; return s.length > n ? s.slice(0, n - 1) + '…' : s; }

function order(a, b) {
  const qa = a.questions.length ? 0 : 1, qb = b.questions.length ? 0 : 1;
  if (qa !== qb) return qa - qb;
  const ra = a.status === 'running' || a.status === 'pending' ? 0 : 1;
  const rb = b.status === 'running' || b.status === 'pending' ? 0 : 1;
  if (ra !== rb) return ra - rb;
  return b.created_ms - a.created_ms;
}

// ------------------------------------------------------------------ tasks

function tasksPage() {
  const tasks = new Map();
  const count = el('p', { class: 'muted', id: 'count' });
  const body = el('tbody', { id: 'tasks' });
  const table = el('table', { class: 'tasks' },
    el('thead', {}, el('tr', {}, ['Task', 'Verdict', 'Agent', 'Elapsed', 'Activity'].map((h) => el('th', { text: h })))),
    body);
  MAIN.replaceChildren(el('h1', { text: 'Tasks' }), count, table);
  let painted = false;

  function row(t) {
    return el('tr', { 'data-id': t.id, 'data-status': t.status, class: t.questions.length ? 'asks' : null },
      el('td', {}, el('a', { href: '/task/' + t.id, class: 'id', text: t.id }), el('div', { class: 'objective', text: cut(t.objective, 140) })),
      el('td', { class: 'status' }, badge(t)),
      el('td', { text: t.agent + (t.role ? ' · ' + t.role : '') }),
      el('td', { class: 'elapsed', text: elapsed(t) }),
      el('td', { class: 'activity', text: cut(activityText(t), 160) }));
  }

  function render() {
    const sorted = [...tasks.values()].sort(order);
    const frag = document.createDocumentFragment();
    for (const t of sorted) frag.append(row(t));
    body.replaceChildren(frag);
    const active = sorted.filter((t) => t.status === 'running' || t.status === 'pending').length;
    count.textContent = `${sorted.length} task(s), ${active} active`;
    if (!sorted.length) body.append(el('tr', {}, el('td', { colspan: 5, class: 'muted', text: 'No tasks yet: delegate one with `caesar run`.' })));
    if (!painted) {
      painted = true;
      requestAnimationFrame(() => {
        window.__caesarPaintedMs = performance.now();
        document.body.dataset.painted = String(sorted.length);
      });
    }
  }

  const src = new EventSource('/api/tasks/stream');
  src.addEventListener('open', () => live('open'));
  src.addEventListener('error', () => live('error'));
  src.addEventListener('snapshot', (e) => {
    const d = JSON.parse(e.data);
    tasks.clear();
    for (const t of d.tasks) { tasks.set(t.id, t); clockSkew = t.now_ms - Date.now(); }
    render();
  });
  src.addEventListener('task', (e) => {
    const t = JSON.parse(e.data);
    clockSkew = t.now_ms - Date.now();
    tasks.set(t.id, t);
    // Many updates in one frame make one render.
    if (!render.pending) {
      render.pending = true;
      requestAnimationFrame(() => { render.pending = false; render(); });
    }
    window.__caesarLastUpdate = { id: t.id, status: t.status, events: t.event_count, at: performance.now() };
  });
  setInterval(() => {
    for (const tr of body.querySelectorAll('tr[data-status="running"]')) {
      const t = tasks.get(tr.dataset.id);
      if (t) tr.querySelector('.elapsed').textContent = elapsed(t);
    }
  }, 1000);
}

// ------------------------------------------------------------------- task

function confirmable(label, explain, act, cls) {
  const box = el('div', { class: 'action' });
  const start = el('button', { class: cls, 'data-action': label.toLowerCase(), text: label + '…' });
  start.addEventListener('click', () => {
    const go = el('button', { class: cls, 'data-confirm': label.toLowerCase(), text: 'Confirm: ' + label.toLowerCase() });
    const back = el('button', { text: 'Back' });
    const out = el('div', { class: 'result' });
    go.addEventListener('click', async () => {
      go.disabled = true; back.disabled = true;
      const r = await act();
      confirmable.last = r;
      out.textContent = r.message;
      out.className = 'result ' + (r.ok ? 'good' : 'bad');
      if (!r.ok) back.disabled = false;
    });
    back.addEventListener('click', () => box.replaceChildren(start));
    box.replaceChildren(el('p', { class: 'explain', text: explain() }), go, back, out);
  });
  box.append(start);
  return box;
}

function summarizeEvent(ev) {
  switch (ev.type) {
    case 'started': return `started ${ev.agent}`;
    case 'message': return ev.text;
    case 'thinking': return 'thinking: ' + ev.text;
    case 'tool_use': return `tool ${ev.tool} ${ev.status}${ev.input_summary ? ': ' + ev.input_summary : ''}`;
    case 'file_changed': return `${ev.action} ${ev.path}`;
    case 'progress': return ev.message + (ev.pct !== undefined ? ` (${ev.pct}%)` : '');
    case 'question': return `asks ${ev.id}: ${ev.question}`;
    case 'answer': return `answered ${ev.id}: ${ev.answer}`;
    case 'error': return ev.message;
    case 'warning': return 'warning: ' + ev.message;
    default: {
      const rest = Object.assign({}, ev);
      for (const k of ['protocol', 'seq', 'at', 'task_id', 'type']) delete rest[k];
      return JSON.stringify(rest);
    }
  }
}

function patchFiles(patch) {
  const parts = [];
  let cur = null;
  for (const line of patch.split('\n')) {
    if (line.startsWith('diff --git ')) { cur = []; parts.push(cur); }
    if (cur) cur.push(line);
  }
  return parts;
}

function diffView(d) {
  if (!d.available) return el('p', { class: 'muted', text: d.why });
  if (d.is_empty) return el('p', { class: 'muted', text: 'No changes.' });
  const sum = el('table', { class: 'files' },
    el('thead', {}, el('tr', {}, ['File', 'Change', '+', '−'].map((h) => el('th', { text: h })))),
    el('tbody', {}, d.files.map((f) => el('tr', {},
      el('td', { text: f.old_path ? `${f.old_path} → ${f.path}` : f.path }),
      el('td', { text: f.status + (f.binary ? ' (binary)' : '') }),
      el('td', { class: 'add', text: '+' + f.additions }),
      el('td', { class: 'del', text: '−' + f.deletions })))));
  const patches = patchFiles(d.patch).map((lines) => {
    const head = lines[0].replace(/^diff --git a\//, '').replace(/ b\/.*$/, '');
    const pre = el('pre', { class: 'patch' });
    for (const l of lines) {
      const cls = l.startsWith('+++') || l.startsWith('---') || l.startsWith('diff ') || l.startsWith('index ') ? 'meta'
        : l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : l.startsWith('@@') ? 'hunk' : 'ctx';
      pre.append(el('span', { class: cls, text: l + '\n' }));
    }
    return el('details', { open: true, class: 'filepatch' }, el('summary', { text: head }), pre);
  });
  return el('div', {}, sum, patches);
}

function taskPage(id) {
  let t = null;
  const head = el('section', { id: 'head' });
  const asks = el('section', { id: 'questions' });
  const actions = el('section', { id: 'actions' });
  const reply = el('section', { id: 'reply' });
  const report = el('section', { id: 'report' });
  const diff = el('section', { id: 'diff' }, el('h2', { text: 'Changes' }), el('p', { class: 'muted', text: 'loading…' }));
  const evList = el('ol', { id: 'events', class: 'events' });
  const events = el('section', {}, el('h2', { text: 'Events' }), evList);
  const rawPre = el('pre', { id: 'raw', class: 'raw' });
  const rawMore = el('button', { id: 'raw-more', text: 'Load more' });
  const rawInfo = el('span', { class: 'muted' });
  const raw = el('section', {}, el('h2', { text: 'Raw log' }), rawPre, el('div', {}, rawMore, ' ', rawInfo));
  MAIN.replaceChildren(head, asks, actions, reply, report, diff, events, raw);
  const answered = new Set();

  async function loadDiff() {
    try {
      const d = await getJSON(`/api/task/${id}/diff`);
      diff.replaceChildren(el('h2', { text: 'Changes' }), diffView(d));
      return d;
    } catch (e) {
      diff.replaceChildren(el('h2', { text: 'Changes' }), el('p', { class: 'bad', text: e.message }));
      return null;
    }
  }
  let lastDiff = null;

  const boxes = new Map();
  function questionBox(q) {
      const out = el('div', { class: 'result' });
      const box = el('div', { class: 'question', 'data-question': q.id });
      async function send(answer, btn) {
        for (const b of box.querySelectorAll('button,input')) b.disabled = true;
        const r = await post(`/api/task/${id}/answer`, { question_id: q.id, answer });
        if (r.ok) {
          answered.add(q.id);
          out.textContent = `Sent: ${answer}`; out.className = 'result good';
        } else {
          out.textContent = r.data.error; out.className = 'result bad';
          if (r.status !== 409) for (const b of box.querySelectorAll('button,input')) b.disabled = false;
        }
        if (btn) btn.classList.add('chosen');
      }
      const buttons = [];
      if (q.permission) {
        const allow = el('button', { class: 'good', 'data-answer': 'allow', text: 'Allow' });
        const deny = el('button', { class: 'bad', 'data-answer': 'deny', text: 'Deny' });
        allow.addEventListener('click', () => send('allow', allow));
        deny.addEventListener('click', () => send('deny', deny));
        buttons.push(allow, deny);
      } else {
        for (const o of q.options || []) {
          const b = el('button', { 'data-answer': o, text: o });
          b.addEventListener('click', () => send(o, b));
          buttons.push(b);
        }
        const input = el('input', { type: 'text', placeholder: 'Your answer', 'aria-label': 'answer' });
        const go = el('button', { class: 'primary', 'data-answer-send': q.id, text: 'Answer' });
        go.addEventListener('click', () => { if (input.value.trim()) send(input.value.trim(), go); });
        input.addEventListener('keydown', (e) => { if (e.key === 'Enter') go.click(); });
        buttons.push(input, go);
      }
      box.append(el('p', { class: 'q', text: (q.permission ? 'Permission: ' : '') + q.question }), el('div', { class: 'buttons' }, buttons), out);
      return box;
  }

  // Pending questions, and those answered here (with what was sent), in
  // place: an update never wipes an answer being typed.
  function renderQuestions() {
    for (const q of t.questions) if (!boxes.has(q.id)) boxes.set(q.id, questionBox(q));
    const pending = new Set(t.questions.map((q) => q.id));
    const shown = [...boxes.entries()].filter(([qid]) => pending.has(qid) || answered.has(qid));
    const key = shown.map(([qid]) => qid).join(',');
    if (asks.dataset.key === key) return;
    asks.dataset.key = key;
    const anyPending = shown.some(([qid]) => !answered.has(qid));
    asks.replaceChildren(shown.length ? el('h2', { text: anyPending ? 'Waiting for you' : 'Answered' }) : '', ...shown.map(([, b]) => b));
  }

  function renderActions() {
    const kids = [];
    const active = t.status === 'pending' || t.status === 'running';
    if (active) {
      kids.push(confirmable('Cancel',
        () => `Cancel stops ${t.agent}: SIGTERM to its whole process tree, SIGKILL after the grace period, and the task ends "cancelled". ${t.worktree ? 'Its worktree is kept until you apply, discard or gc it.' : ''}`,
        async () => {
          const r = await post(`/api/task/${id}/cancel`);
          return { ok: r.ok, message: r.ok ? (r.data.cancelled ? 'Cancelled.' : `Nothing to cancel: the task is ${r.data.status}.`) : r.data.error };
        }, 'bad'));
    }
    if (!active && t.worktree && !t.changes) {
      kids.push(confirmable('Apply',
        () => {
          const files = lastDiff && lastDiff.files ? lastDiff.files.map((f) => f.path) : [];
          return `Apply writes ${files.length} changed file(s) into the main working tree at ${t.workspace}: a 3-way merge, all or nothing, never a commit. Nothing is written if the main tree changed those lines since. Files: ${files.join(', ') || '(none)'}.`;
        },
        async () => {
          const r = await post(`/api/task/${id}/apply`);
          return { ok: r.ok, message: r.ok ? r.data.message : r.data.error };
        }, 'primary'));
      kids.push(confirmable('Discard',
        () => 'Discard marks this task\'s changes as unwanted: nothing is written to the main tree, and `caesar gc` may then remove its worktree and branch.',
        async () => {
          const r = await post(`/api/task/${id}/discard`);
          return { ok: r.ok, message: r.ok ? 'Discarded: gc may now remove the worktree.' : r.data.error };
        }, 'bad'));
    }
    if (t.changes) kids.push(el('p', { class: 'muted', text: `Changes ${t.changes}.` }));
    // What the last action said stays when the buttons change under it.
    const last = confirmable.last;
    if (last) kids.push(el('div', { class: 'action' }, el('div', { class: 'result ' + (last.ok ? 'good' : 'bad'), text: last.message })));
    // Keep an open confirmation when nothing it depends on changed.
    const key = `${t.status}|${t.changes}|${t.worktree}`;
    if (actions.dataset.key === key) return;
    actions.dataset.key = key;
    actions.replaceChildren(kids.length ? el('h2', { text: 'Actions' }) : '', ...kids);
  }

  function render() {
    head.replaceChildren(
      el('h1', {}, el('span', { class: 'id', text: t.id }), ' ', badge(t)),
      el('p', { class: 'meta', text: [t.agent, t.role && 'role ' + t.role, t.model && 'model ' + t.model, t.mode, t.isolation, elapsed(t) && 'elapsed ' + elapsed(t), `${t.event_count} events`].filter(Boolean).join(' · ') }),
      el('pre', { class: 'objective', text: t.objective }),
      t.error ? el('p', { class: 'bad', text: t.error }) : '',
      attemptList(t));
    renderQuestions();
    renderActions();
    const act = activityText(t);
    reply.replaceChildren(el('h2', { text: 'Reply' }), t.activity ? el('p', { class: 'muted', text: 'now: ' + act }) : '',
      el('pre', { class: 'reply', id: 'reply-tail', text: t.output_tail || (t.status === 'running' ? '…' : '') }));
    if (t.report) {
      report.replaceChildren(el('h2', { text: `Report (${t.report.status}, from ${t.report.source})` }),
        el('pre', { class: 'report', text: typeof t.report.body === 'string' ? t.report.body : JSON.stringify(t.report.body, null, 2) }));
    }
  }

  const st = new EventSource('/api/tasks/stream?only=' + encodeURIComponent(id));
  st.addEventListener('open', () => live('open'));
  st.addEventListener('error', () => live('error'));
  let wasTerminal = null;
  const onView = async (v) => {
    t = v; clockSkew = v.now_ms - Date.now();
    const terminal = !(v.status === 'pending' || v.status === 'running');
    if (terminal !== wasTerminal || !lastDiff) {
      wasTerminal = terminal;
      lastDiff = await loadDiff();
    }
    render();
  };
  st.addEventListener('snapshot', (e) => { const d = JSON.parse(e.data); if (d.tasks[0]) onView(d.tasks[0]); });
  st.addEventListener('task', (e) => onView(JSON.parse(e.data)));

  let nextSeq = 0;
  let evEnded = false;
  function onEvent(e) {
    const seq = Number(e.lastEventId);
    if (seq < nextSeq) return;
    nextSeq = seq + 1;
    let ev;
    try { ev = JSON.parse(e.data); } catch (_) { ev = { type: 'unreadable', text: e.data }; }
    evList.append(el('li', { 'data-seq': seq, 'data-type': ev.type }, el('span', { class: 'seq', text: '#' + seq }), el('span', { class: 'etype', text: ev.type }), el('span', { class: 'etext', text: cut(summarizeEvent(ev), 400) })));
    while (evList.childElementCount > 500) evList.firstElementChild.remove();
    window.__caesarLastEvent = { seq, type: ev.type, at: performance.now(), text: ev.text || '' };
    // For the latency figure (caesar-bench's counterpart in tests/dashboard.rs): when each event showed.
    const seen = (window.__caesarEvents = window.__caesarEvents || []);
    if (seen.length < 2000) seen.push({ seq, type: ev.type, text: ev.text || '', wall: Date.now() });
  }
  function openEvents() {
    const evs = new EventSource(`/api/task/${id}/events?from=${nextSeq}`);
    evs.addEventListener('ev', onEvent);
    evs.addEventListener('end', () => { evEnded = true; evs.close(); });
    // The browser would reconnect from the start: reconnect from where we are.
    evs.addEventListener('error', () => { evs.close(); if (!evEnded) setTimeout(openEvents, 1000); });
  }
  openEvents();

  let rawNext = 0;
  async function loadRaw() {
    try {
      const r = await getJSON(`/api/task/${id}/raw?offset=${rawNext}`);
      rawPre.append(document.createTextNode(r.text));
      rawNext = r.next;
      const left = r.size - r.next;
      rawInfo.textContent = left > 0 ? `${left} more byte(s)` : `${r.size} byte(s), all shown`;
    } catch (e) { rawInfo.textContent = e.message; }
  }
  rawMore.addEventListener('click', loadRaw);
  loadRaw();
}

// ----------------------------------------------------------------- agents

async function agentsPage() {
  MAIN.replaceChildren(el('h1', { text: 'Agents & roles' }), el('p', { class: 'muted', text: 'probing agents…' }));
  try {
    const d = await getJSON('/api/agents');
    live('closed');
    const agents = el('table', { class: 'agents', id: 'agents' },
      el('thead', {}, el('tr', {}, ['Agent', 'Installed', 'Version', 'Policy', 'Default model'].map((h) => el('th', { text: h })))),
      el('tbody', {}, d.agents.map((a) => el('tr', { 'data-agent': a.id },
        el('td', {}, el('b', { text: a.id }), ' ', el('span', { class: 'muted', text: a.name })),
        el('td', { class: a.installed ? 'good' : 'muted', text: a.installed ? (a.path || 'yes') : `no (${a.bin} not found)` }),
        el('td', { text: a.version || '' }),
        el('td', { class: a.allowed ? 'good' : 'bad', text: a.allowed ? 'permitted' : (a.refusal || 'refused') }),
        el('td', { text: a.default_model || '' })))));
    const roles = el('table', { class: 'roles', id: 'roles' },
      el('thead', {}, el('tr', {}, ['Role', 'Chain', 'Would pick', 'Mode', 'Isolation', 'Network', 'From'].map((h) => el('th', { text: h })))),
      el('tbody', {}, d.roles.map((r) => el('tr', { 'data-role': r.name },
        el('td', {}, el('b', { text: r.name }), el('div', { class: 'muted', text: r.purpose || '' })),
        el('td', { text: (r.agents || []).join(' → ') }),
        el('td', {}, el('span', { class: r.would_pick ? 'good' : 'bad', text: r.would_pick || 'none' }), el('div', { class: 'muted', text: r.reason || '' })),
        el('td', { text: r.mode }), el('td', { text: r.isolation }), el('td', { text: r.network }), el('td', { text: r.origin })))));
    MAIN.replaceChildren(el('h1', { text: 'Agents & roles' }), el('p', { class: 'muted', text: 'Project: ' + (d.workspace || '(global config only)') }),
      el('h2', { text: 'Agents' }), agents, el('h2', { text: 'Roles' }), roles);
  } catch (e) {
    MAIN.replaceChildren(el('h1', { text: 'Agents & roles' }), el('p', { class: 'bad', text: e.message }));
  }
}

// ----------------------------------------------------------------- health

async function healthPage() {
  try {
    const d = await getJSON('/api/health');
    live('closed');
    const rows = [
      ['daemon', `caesard ${d.version}, pid ${d.pid}`],
      ['socket', d.socket], ['state', d.state_dir],
      ['store', d.store_ok ? 'ok' : ('BROKEN: ' + d.store_error)],
      ['active tasks', String(d.active_tasks)],
      ['MCP over HTTP', d.http_listen ? `http://${d.http_listen}/mcp` : 'off (no [http] listen)'],
      ['dashboard', d.dashboard || ''],
      ['environment', d.environment], ['project', d.workspace || '(global config only)'],
    ];
    MAIN.replaceChildren(el('h1', { text: 'Health' }),
      el('table', { class: 'kv', id: 'health' }, el('tbody', {}, rows.map(([k, v]) => el('tr', {}, el('th', { text: k }), el('td', { class: k === 'store' ? (d.store_ok ? 'good' : 'bad') : null, text: v }))))),
      el('h2', { text: 'Problems' }),
      d.problems.length ? el('ul', { id: 'problems' }, d.problems.map((p) => el('li', { class: 'bad', text: p }))) : el('p', { class: 'good', id: 'problems', text: 'None.' }));
  } catch (e) {
    MAIN.replaceChildren(el('h1', { text: 'Health' }), el('p', { class: 'bad', text: e.message }));
  }
}

// ------------------------------------------------- groups, budgets, radar

// These pages reload their JSON when the engine says a task changed (the
// list's change stream), a quarter second after the last change.
function followChanges(reload) {
  const src = new EventSource('/api/tasks/stream?limit=1');
  src.addEventListener('open', () => live('open'));
  src.addEventListener('error', () => live('error'));
  let timer = null;
  src.addEventListener('task', () => { clearTimeout(timer); timer = setTimeout(reload, 250); });
}

function taskLink(id) {
  return id === 'uncommitted' ? el('i', { text: 'your uncommitted changes' }) : el('a', { href: '/task/' + id, class: 'id', text: id });
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return '';
  const s = Math.round(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${s}s`;
}

function paths(list) { return (list || []).join(', '); }

async function groupsPage() {
  const title = el('h1', { text: 'Groups' });
  async function load() {
    try {
      const d = await getJSON('/api/groups');
      const sections = d.groups.map((g) => {
        const rows = [
          ['Agent', (m) => el('b', { text: m.agent })],
          ['Task', (m) => taskLink(m.task_id)],
          ['Status', (m) => el('span', { class: 'badge s-' + m.status, text: m.status + (m.report_status ? ' · report ' + m.report_status : '') })],
          ['Verification', (m) => el('span', { class: m.verification === 'passed' ? 'good' : m.verification === 'failed' ? 'bad' : 'muted', text: m.verification || 'none' })],
          ['Files', (m) => String(m.files_changed)],
          ['Lines', (m) => el('span', {}, el('span', { class: 'add', text: '+' + m.lines_added }), ' ', el('span', { class: 'del', text: '−' + m.lines_removed }))],
          ['Tokens', (m) => m.input_tokens === null && m.output_tokens === null ? '' : `${m.input_tokens || 0} in / ${m.output_tokens || 0} out`],
          ['Cost', (m) => m.cost_usd === null || m.cost_usd === undefined ? '' : '$' + m.cost_usd.toFixed(4)],
          ['Time', (m) => fmtMs(m.duration_ms)],
          ['Overlaps', (m) => m.overlaps.length ? el('ul', {}, m.overlaps.map((o) => el('li', { class: o.hunk_paths.length ? 'bad' : null },
            taskLink(o.task_id), ': ' + paths(o.paths) + (o.hunk_paths.length ? ' (same lines: ' + paths(o.hunk_paths) + ')' : '')))) : el('span', { class: 'good', text: 'none' })],
          ['Summary', (m) => el('div', { class: 'summary', text: m.summary })],
        ];
        return el('section', { class: 'group', 'data-group': g.group_id },
          el('h2', {}, el('span', { class: 'id', text: g.group_id }), ' ', el('span', { class: g.done ? 'good' : 'muted', text: g.done ? 'done' : 'running' })),
          el('p', { class: 'objective', text: cut(g.objective, 300) }),
          el('table', { class: 'side' },
            el('tbody', {}, rows.map(([label, cell]) => el('tr', { 'data-row': label.toLowerCase() }, el('th', { text: label }),
              g.members.map((m) => el('td', { 'data-task': m.task_id }, cell(m))))))));
      });
      MAIN.replaceChildren(title, sections.length ? el('div', { id: 'groups' }, sections)
        : el('p', { class: 'muted', id: 'groups', text: 'No groups yet: delegate one objective to several agents (`caesar run --agents a,b`).' }));
      document.body.dataset.loaded = String(d.groups.length);
    } catch (e) {
      MAIN.replaceChildren(title, el('p', { class: 'bad', text: e.message }));
    }
  }
  await load();
  followChanges(load);
}

function bar(used, limit, fmt) {
  if (limit === null || limit === undefined) return el('span', { class: 'muted', text: used === null || used === undefined ? '' : fmt(used) + ' (no limit)' });
  const pct = limit > 0 ? Math.min(100, Math.round((used / limit) * 100)) : 100;
  const cls = used >= limit ? 'over' : pct >= 80 ? 'near' : 'ok';
  const fill = el('div', { class: 'fill' });
  fill.style.width = pct + '%'; // through the CSSOM: the page's CSP refuses style attributes
  return el('div', { class: 'meter ' + cls, title: `${fmt(used)} of ${fmt(limit)}`, 'data-pct': pct },
    fill, el('span', { class: 'label', text: `${fmt(used)} / ${fmt(limit)} (${pct}%)` }));
}

async function budgetsPage() {
  const title = el('h1', { text: 'Budgets' });
  async function load() {
    try {
      const d = await getJSON('/api/budgets');
      const n = (x) => String(x);
      const usd = (x) => '$' + Number(x).toFixed(4);
      const table = el('table', { class: 'budgets', id: 'budgets' },
        el('thead', {}, el('tr', {}, ['Task', 'Status', 'Tokens', 'Cost', 'Wall time', 'Turns', 'Stopped by'].map((h) => el('th', { text: h })))),
        el('tbody', {}, d.tasks.map((t) => el('tr', { 'data-id': t.task_id },
          el('td', {}, taskLink(t.task_id), el('div', { class: 'objective', text: t.agent + ' · ' + cut(t.objective, 100) })),
          el('td', {}, el('span', { class: 'badge s-' + t.status, text: t.status })),
          el('td', { class: 'tokens' }, bar(t.used.tokens, t.limits.tokens, n)),
          el('td', { class: 'cost' }, bar(t.used.cost_usd, t.limits.cost_usd, usd)),
          el('td', { class: 'wall' }, bar(t.used.wall_ms, t.limits.wall_ms, fmtMs)),
          el('td', { class: 'turns' }, bar(t.used.turns, t.limits.turns, n)),
          el('td', { class: t.exceeded ? 'bad exceeded' : 'muted exceeded', text: t.exceeded || '' })))));
      MAIN.replaceChildren(title, d.tasks.length ? table
        : el('p', { class: 'muted', id: 'budgets', text: 'No task has a budget: set `budget` on a delegation, a role or `[budget]`.' }));
      document.body.dataset.loaded = String(d.tasks.length);
    } catch (e) {
      MAIN.replaceChildren(title, el('p', { class: 'bad', text: e.message }));
    }
  }
  await load();
  followChanges(load);
}

async function radarPage() {
  const title = el('h1', { text: 'Conflict radar' });
  async function load() {
    try {
      const d = await getJSON('/api/radar');
      const table = el('table', { class: 'radar', id: 'radar' },
        el('thead', {}, el('tr', {}, ['Task', 'Status', 'Meets', 'Same files', 'Same lines (a later apply conflicts)'].map((h) => el('th', { text: h })))),
        el('tbody', {}, d.tasks.flatMap((t) => (t.meets.length ? t.meets : [null]).map((m, i) =>
          el('tr', { 'data-id': t.task_id, 'data-meets': m ? m.task_id : '', class: m && m.hunk_paths.length ? 'clash' : null },
            el('td', {}, i === 0 ? [taskLink(t.task_id), el('div', { class: 'objective', text: t.agent + ' · ' + cut(t.objective, 100) })] : ''),
            el('td', {}, i === 0 ? el('span', { class: 'badge s-' + t.status, text: t.status }) : ''),
            el('td', {}, m ? taskLink(m.task_id) : el('span', { class: 'good', text: 'nobody' })),
            el('td', { class: 'paths', text: m ? paths(m.paths) : '' }),
            el('td', { class: 'hunks bad', text: m ? paths(m.hunk_paths) : '' }))))));
      MAIN.replaceChildren(title,
        el('p', { class: 'muted', text: 'Worktree tasks not yet applied or discarded, and who else changes the same files: other tasks of the repository, or your uncommitted changes.' }),
        d.tasks.length ? table : el('p', { class: 'muted', id: 'radar', text: 'No worktree task is being watched.' }));
      document.body.dataset.loaded = String(d.tasks.length);
    } catch (e) {
      MAIN.replaceChildren(title, el('p', { class: 'bad', text: e.message }));
    }
  }
  await load();
  followChanges(load);
}

const PAGES = {
  tasks: () => tasksPage(),
  task: () => taskPage(document.body.dataset.task),
  agents: () => agentsPage(),
  health: () => healthPage(),
  groups: () => groupsPage(),
  budgets: () => budgetsPage(),
  radar: () => radarPage(),
};

(PAGES[document.body.dataset.page] || (() => {}))();
