// caesar's dashboard: the smaller pages (agents and roles, health, groups,
// budgets, the conflict radar) and the page dispatch. Shared helpers are in
// core.js, the board in board.js, a task's page in task.js; the daemon
// embeds all four and loads them in that order. Each view is an entry of
// PAGES and a link in the daemon's NAV.
'use strict';

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
