// The board (issue 30, item 7): every task of the listing as a card in one of
// four columns by state (needs answer, running, to review, done), per
// project, with a filter by agent and a search, all in the page over the
// listing the daemon streams. Fan-out members sit in their group's card, and
// a task's fallback attempts and continuations under the task they carry on.
'use strict';

const COLUMNS = [
  ['answer', 'Needs answer', 'A question or permission waits for you.'],
  ['running', 'Running', 'Queued, preparing or working.'],
  ['review', 'To review', 'Ended in a worktree: apply, continue or discard.'],
  ['done', 'Done', 'Applied, discarded, or ended in place.'],
];
const COLUMN_RANK = { answer: 0, running: 1, review: 2, done: 3 };
// The most cards a column paints before "show all": a long history stays cheap.
const COLUMN_PAGE = 60;

function columnOf(t) {
  if ((t.questions && t.questions.length) || t.verdict_kind === 'needs_answer') return 'answer';
  if (isActive(t)) return 'running';
  if (t.isolation === 'worktree' && !t.changes && !t.continued_by) return 'review';
  return 'done';
}

// Cards from tasks and their ties: [task, kind, other] (store/board.rs).
function buildCards(tasks, links) {
  const parent = new Map();
  const group = new Map();
  for (const [id, kind, other] of links) {
    if (kind === 'group') group.set(id, other);
    else parent.set(id, other);
  }
  const rootOf = (id) => {
    let r = id;
    for (let i = 0; i < 1000 && parent.has(r); i++) r = parent.get(r);
    return r;
  };
  const cards = new Map();
  const card = (key) => {
    let c = cards.get(key);
    if (!c) { c = { key, chains: new Map() }; cards.set(key, c); }
    return c;
  };
  for (const t of tasks.values()) {
    const root = rootOf(t.id);
    const g = group.get(root);
    const c = card(g ? 'g:' + g : root);
    if (g) c.group = g;
    let chain = c.chains.get(root);
    if (!chain) { chain = { root, tasks: [] }; c.chains.set(root, chain); }
    chain.tasks.push(t);
  }
  for (const c of cards.values()) {
    c.heads = [];
    c.all = [];
    for (const chain of c.chains.values()) {
      chain.tasks.sort((a, b) => a.created_ms - b.created_ms || (a.id < b.id ? -1 : 1));
      chain.head = chain.tasks[chain.tasks.length - 1];
      chain.first = chain.tasks.find((t) => t.id === chain.root) || chain.tasks[0];
      c.heads.push(chain.head);
      c.all.push(...chain.tasks);
    }
    c.column = c.heads.map(columnOf).sort((a, b) => COLUMN_RANK[a] - COLUMN_RANK[b])[0];
    c.created = Math.max(...c.all.map((t) => t.created_ms));
    c.first = [...c.chains.values()][0].first;
    c.project = projectOf(c.first);
    c.text = c.all.map((t) => [t.id, t.objective, t.agent, t.role, t.verdict, t.status, c.group].join(' ')).join(' ').toLowerCase();
  }
  return cards;
}

function subRow(t, label) {
  return el('div', { class: 'sub', 'data-id': t.id, 'data-status': t.status },
    label ? el('span', { class: 'rel', text: label }) : '', el('b', { text: t.agent }), taskLink(t.id),
    el('span', { class: 'status' }, badge(t)[0]));
}

function cardView(c) {
  if (c.group) {
    const members = [...c.chains.values()];
    return el('article', { class: 'card group', 'data-group': c.group, 'data-col': c.column },
      el('div', { class: 'top' }, el('a', { href: '/groups', class: 'id', text: c.group }),
        el('span', { class: 'muted', text: ` fan-out · ${members.length} agents` })),
      el('div', { class: 'objective', text: cut(c.first.objective, 160) }),
      members.sort((a, b) => a.first.created_ms - b.first.created_ms || (a.root < b.root ? -1 : 1))
        .map((m) => subRow(m.head, m.tasks.length > 1 ? `try ${m.tasks.length}` : '')),
      el('div', { class: 'foot muted', text: ago(c.created) }));
  }
  const chain = [...c.chains.values()][0];
  const h = chain.head;
  const f = chain.first;
  const rest = chain.tasks.filter((t) => t !== h);
  const relation = (t) => (t.id === chain.root ? 'first' : 'then');
  const kids = rest.length ? el('div', { class: 'chain' }, el('div', { class: 'muted small', text: h.continues ? 'continues' : 'earlier attempts' }),
    rest.map((t) => subRow(t, relation(t)))) : '';
  return el('article', { class: 'card' + (h.questions && h.questions.length ? ' asks' : ''), 'data-id': f.id, 'data-head': h.id, 'data-status': h.status, 'data-col': c.column },
    el('div', { class: 'top' }, el('a', { href: '/task/' + h.id, class: 'id', text: f.id }), el('span', { class: 'status' }, badge(h))),
    el('div', { class: 'objective', text: cut(f.objective, 180) }),
    el('div', { class: 'who' }, el('b', { text: h.agent }), h.role ? ' · ' + h.role : '', ' · ', el('span', { class: 'elapsed', 'data-for': h.id, text: elapsed(h) }),
      h.isolation === 'worktree' ? el('span', { class: 'tag', text: 'worktree' }) : '', h.mode === 'write' ? el('span', { class: 'tag', text: 'write' }) : ''),
    activityText(h) ? el('div', { class: 'activity', text: cut(activityText(h), 140) }) : '',
    kids);
}

function startForm(projects, close) {
  const objective = el('textarea', { id: 'start-objective', rows: 4, placeholder: 'What should the agent do?' });
  const project = el('select', { id: 'start-project' }, projects.map((p) => el('option', { value: p, text: p })));
  const agent = el('select', { id: 'start-agent' }, el('option', { value: '', text: 'the default role picks' }));
  const mode = el('select', { id: 'start-mode' }, el('option', { value: 'read-only', text: 'read-only (in place)' }), el('option', { value: 'write', text: 'write (own worktree)' }));
  const out = el('div', { class: 'result' });
  const go = el('button', { class: 'primary', 'data-action': 'start', text: 'Start task' });
  getJSON('/api/agents').then((d) => {
    for (const a of d.agents) if (a.installed && a.allowed) agent.append(el('option', { value: a.id, text: a.id }));
  }).catch(() => {});
  go.addEventListener('click', async () => {
    if (!objective.value.trim()) { out.textContent = 'Say what the agent should do.'; out.className = 'result bad'; return; }
    go.disabled = true;
    const r = await post('/api/tasks', { objective: objective.value, workspace: project.value, agent: agent.value, mode: mode.value });
    go.disabled = false;
    if (r.ok) { location.href = '/task/' + r.data.task_id; return; }
    out.textContent = r.data.error; out.className = 'result bad';
  });
  return el('section', { class: 'panel', id: 'start' }, el('h2', { text: 'New task' }), objective,
    el('div', { class: 'row' }, el('label', {}, 'Project ', project), el('label', {}, 'Agent ', agent), el('label', {}, 'Mode ', mode)),
    el('div', { class: 'row' }, go, el('button', { text: 'Close', onclick: close }), out));
}

function tasksPage() {
  const tasks = new Map();
  let links = [];
  let workspace = '';
  const params = new URLSearchParams(location.search);
  const state = { q: params.get('q') || '', project: params.get('project') || '', agent: params.get('agent') || '' };
  const shown = new Set(); // columns opened in full
  const count = el('span', { class: 'muted', id: 'count' });
  const search = el('input', { type: 'search', id: 'search', placeholder: 'Search tasks: id, objective, agent, verdict…', value: state.q, 'aria-label': 'search' });
  const project = el('select', { id: 'project', 'aria-label': 'project' });
  const agent = el('select', { id: 'agent-filter', 'aria-label': 'agent' });
  const startBox = el('div', {});
  const newBtn = el('button', { class: 'primary', 'data-action': 'new', text: '+ New task' });
  const board = el('div', { class: 'board', id: 'tasks' });
  MAIN.replaceChildren(
    el('div', { class: 'toolbar' }, el('h1', { text: 'Tasks' }), search, project, agent, count, newBtn),
    startBox, board);
  MAIN.classList.add('wide');
  let painted = false;

  newBtn.addEventListener('click', () => {
    if (startBox.firstChild) { startBox.replaceChildren(); return; }
    const projects = [...new Set([workspace, state.project, ...[...tasks.values()].map(projectOf)].filter(Boolean))];
    startBox.replaceChildren(startForm(projects, () => startBox.replaceChildren()));
    document.getElementById('start-objective').focus();
  });

  function options(select, values, current, all) {
    const key = values.join('\n') + '|' + current;
    if (select.dataset.key === key) return;
    select.dataset.key = key;
    select.replaceChildren(el('option', { value: '', text: all }),
      ...values.map((v) => el('option', { value: v, selected: v === current, text: select === project ? projectName(v) + ' — ' + v : v })));
  }

  function remember() {
    const p = new URLSearchParams();
    for (const k of ['q', 'project', 'agent']) if (state[k]) p.set(k, state[k]);
    const s = p.toString();
    history.replaceState(null, '', s ? '?' + s : location.pathname);
  }
  search.addEventListener('input', () => { state.q = search.value; remember(); schedule(); });
  project.addEventListener('change', () => { state.project = project.value; remember(); schedule(); });
  agent.addEventListener('change', () => { state.agent = agent.value; remember(); schedule(); });

  function render() {
    const all = [...tasks.values()];
    options(project, [...new Set(all.map(projectOf).filter(Boolean))].sort(), state.project, 'All projects');
    options(agent, [...new Set(all.map((t) => t.agent))].sort(), state.agent, 'All agents');
    const q = state.q.trim().toLowerCase().split(/\s+/).filter(Boolean);
    const cards = [...buildCards(tasks, links).values()]
      .filter((c) => !state.project || c.project === state.project)
      .filter((c) => !state.agent || c.all.some((t) => t.agent === state.agent))
      .filter((c) => q.every((w) => c.text.includes(w)))
      .sort((a, b) => b.created - a.created);
    const frag = document.createDocumentFragment();
    for (const [key, title, hint] of COLUMNS) {
      const mine = cards.filter((c) => c.column === key);
      if (key === 'answer') mine.reverse(); // the oldest question first
      const list = el('div', { class: 'cards' });
      const limit = shown.has(key) ? mine.length : COLUMN_PAGE;
      for (const c of mine.slice(0, limit)) list.append(cardView(c));
      if (mine.length > limit) {
        list.append(el('button', { class: 'more', 'data-more': key, text: `Show all ${mine.length}`, onclick: () => { shown.add(key); render(); } }));
      }
      if (!mine.length) list.append(el('p', { class: 'empty muted', text: key === 'answer' ? 'Nothing waits for you.' : 'None.' }));
      frag.append(el('section', { class: 'col col-' + key, 'data-col': key },
        el('h2', { title: hint }, title, el('span', { class: 'n', text: String(mine.length) })), list));
    }
    board.replaceChildren(frag);
    const active = all.filter(isActive).length;
    count.textContent = `${all.length} task(s), ${active} active` + (cards.length ? '' : ' · nothing matches');
    if (!all.length) board.prepend(el('p', { class: 'muted wide-note', text: 'No tasks yet: start one here with “New task”, or delegate one with `caesar run`.' }));
    if (!painted) {
      painted = true;
      requestAnimationFrame(() => {
        window.__caesarPaintedMs = performance.now();
        document.body.dataset.painted = String(all.length);
      });
    }
  }
  function schedule() {
    if (render.pending) return;
    render.pending = true;
    requestAnimationFrame(() => { render.pending = false; render(); });
  }

  // A task seen for the first time may belong to a group or carry on
  // another: the ties come with the listing, fetched again shortly after.
  let relink = null;
  function refreshLinks() {
    clearTimeout(relink);
    relink = setTimeout(async () => {
      try { const d = await getJSON('/api/tasks'); links = d.links || []; schedule(); } catch (_) { /* the stream says */ }
    }, 400);
  }

  const src = new EventSource('/api/tasks/stream');
  src.addEventListener('open', () => live('open'));
  src.addEventListener('error', () => live('error'));
  src.addEventListener('snapshot', (e) => {
    const d = JSON.parse(e.data);
    tasks.clear();
    links = d.links || [];
    workspace = d.workspace || '';
    for (const t of d.tasks) { tasks.set(t.id, t); clockSkew = t.now_ms - Date.now(); }
    render();
  });
  src.addEventListener('task', (e) => {
    const t = JSON.parse(e.data);
    clockSkew = t.now_ms - Date.now();
    if (!tasks.has(t.id)) refreshLinks();
    tasks.set(t.id, t);
    // Many updates in one frame make one render.
    schedule();
    window.__caesarLastUpdate = { id: t.id, status: t.status, events: t.event_count, at: performance.now() };
  });
  setInterval(() => {
    for (const s of board.querySelectorAll('.card[data-status="running"] .elapsed')) {
      const t = tasks.get(s.dataset.for);
      if (t) s.textContent = elapsed(t);
    }
  }, 1000);
}
