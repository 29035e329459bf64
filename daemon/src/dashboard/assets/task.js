// A task's page (issue 30, item 7; issue 31): the verdict first, then the
// summary and findings for reading, the questions waiting, what can be done
// (steer, continue with line comments, retry with another agent, cancel,
// apply, discard), the diff with line numbers and comments, and the live
// conversation with timestamps. The report's JSON stays one click away.
'use strict';

const SEVERITY_RANK = { critical: 0, high: 1, medium: 2, low: 3, info: 4 };

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

function summarizeEvent(ev) {
  switch (ev.type) {
    case 'started': return `started ${ev.agent}`;
    case 'message': return ev.text;
    case 'thinking': return ev.text;
    case 'tool_use': return `${ev.tool} ${ev.status}${ev.input_summary ? ': ' + ev.input_summary : ''}`;
    case 'file_changed': return `${ev.action} ${ev.path}`;
    case 'progress': return ev.message + (ev.pct !== undefined ? ` (${ev.pct}%)` : '');
    case 'question': return `asks ${ev.id}: ${ev.question}`;
    case 'answer': return `answered ${ev.id}: ${ev.answer}`;
    case 'error': return ev.message;
    case 'warning': return ev.message;
    case 'blocker': return `${ev.kind}: ${ev.message}`;
    case 'steer': return `${ev.delivered ? 'delivered' : 'queued'} (${ev.mode}): ${ev.text}`;
    case 'finished': return `${ev.status}${ev.summary ? ': ' + ev.summary : ''}`;
    case 'unrecognized': return ev.line;
    default: {
      const rest = Object.assign({}, ev);
      for (const k of ['protocol', 'seq', 'at', 'task_id', 'type']) delete rest[k];
      return JSON.stringify(rest);
    }
  }
}

// One event of the conversation: a message as a bubble, a tool call as a
// card, the rest as a line; each with its time.
function eventItem(seq, ev) {
  const text = stripAnsi(summarizeEvent(ev));
  const time = el('time', { class: 'at', datetime: ev.at || '', title: ev.at || '', text: clock(ev.at) });
  const head = [time, el('span', { class: 'seq', text: '#' + seq })];
  if (ev.type === 'tool_use') {
    return el('li', { class: 'ev tool', 'data-seq': seq, 'data-type': ev.type, 'data-tool-id': ev.id || null },
      head, el('div', { class: 'toolcard' },
        el('div', { class: 'tname' }, el('b', { text: ev.tool }), ' ', el('span', { class: 'tstate t-' + ev.status, text: ev.status })),
        ev.input_summary ? el('pre', { class: 'tinput', text: cut(stripAnsi(ev.input_summary), 1200) }) : ''));
  }
  const kind = ev.type === 'message' ? 'msg' : ev.type === 'thinking' ? 'think'
    : ev.type === 'error' || ev.type === 'blocker' ? 'bad' : ev.type === 'warning' ? 'warn' : 'line';
  return el('li', { class: 'ev ' + kind, 'data-seq': seq, 'data-type': ev.type }, head,
    el('span', { class: 'etype', text: ev.type.replace('_', ' ') }), el('span', { class: 'etext', text: cut(text, 4000) }));
}

// The patch of each file: its lines, with both sides' numbers.
function parsePatch(patch) {
  const files = [];
  let cur = null;
  let o = 0, n = 0, hs = 0;
  for (const line of patch.split('\n')) {
    if (line.startsWith('diff --git ')) {
      cur = { head: line.replace(/^diff --git a\//, '').replace(/ b\/.*$/, ''), path: line.replace(/^.* b\//, ''), lines: [] };
      files.push(cur);
      continue;
    }
    if (!cur) continue;
    if (line.startsWith('+++ ')) { if (line !== '+++ /dev/null') cur.path = line.slice(4).replace(/^b\//, ''); cur.lines.push({ kind: 'meta', text: line }); continue; }
    if (line.startsWith('--- ') || line.startsWith('index ') || line.startsWith('new file') || line.startsWith('deleted file') || line.startsWith('similarity') || line.startsWith('rename ') || line.startsWith('Binary')) {
      cur.lines.push({ kind: 'meta', text: line });
      continue;
    }
    const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
    if (m) { o = Number(m[1]); n = Number(m[2]); hs = cur.lines.length; cur.lines.push({ kind: 'hunk', text: line }); continue; }
    if (line.startsWith('\\')) { cur.lines.push({ kind: 'meta', text: line }); continue; }
    if (line === '') continue;
    // Where its hunk starts: a comment quotes the hunk up to its line.
    const at = { hs, idx: cur.lines.length };
    if (line.startsWith('+')) cur.lines.push({ kind: 'add', text: line, n: n++, ...at });
    else if (line.startsWith('-')) cur.lines.push({ kind: 'del', text: line, o: o++, ...at });
    else cur.lines.push({ kind: 'ctx', text: line, o: o++, n: n++, ...at });
  }
  return files;
}

// What a review finding's state means, for its badge's tooltip.
const REVIEW_STATES = {
  open: 'not addressed yet',
  sent: 'sent to the worker, whose next run addresses it',
  resolved: 'the next review no longer reports it',
  stale: 'the worker has since rewritten the hunk it was written on: not sent',
};

const REVIEW_RANK = { open: 0, sent: 1, stale: 2, resolved: 3 };

function stateBadge(f) {
  return el('span', { class: 'fstate st-' + f.state, title: REVIEW_STATES[f.state] || null, text: f.state });
}

// A finding under its line of the diff; a review finding with its place, round, reviewer and
// state, and a stale one with the hunk it was written on (which the diff no longer has).
function noteFor(f, review) {
  const stale = review && f.state === 'stale';
  return el('div', { class: 'note finding sev-' + f.severity + (review ? ' state-' + f.state : '') + (stale ? ' stale' : ''), 'data-finding': `${f.file}:${f.line}`, 'data-round': review ? f.round : null },
    el('span', { class: 'sev', text: f.severity }), review ? stateBadge(f) : '', ' ', el('b', { text: f.title }),
    ' ', el('code', { class: 'loc', text: `${f.file}:${f.line}` }),
    review ? el('span', { class: 'muted', text: ` · review round ${f.round} by ` }) : '', review ? taskLink(f.reviewer_task_id) : '',
    f.detail ? el('div', { class: 'fdetail', text: f.detail }) : '',
    stale && f.hunk ? el('div', { class: 'fdetail muted' }, 'Written on a hunk the worker has since rewritten:', el('pre', { class: 'was', text: f.hunk })) : '');
}

function taskPage(id) {
  let t = null;
  let lastDiff = null;
  const comments = []; // {file, line, hunk, comment}
  const head = el('section', { id: 'head' });
  const asks = el('section', { id: 'questions' });
  const actions = el('section', { id: 'actions' });
  const report = el('section', { id: 'report' });
  const diff = el('section', { id: 'diff' }, el('h2', { text: 'Changes' }), el('p', { class: 'muted', text: 'loading…' }));
  const evList = el('ol', { id: 'events', class: 'events' });
  const nowLine = el('p', { class: 'muted', id: 'now' });
  const events = el('section', { id: 'conversation' }, el('h2', { text: 'Conversation' }), nowLine, evList);
  const rawPre = el('pre', { id: 'raw', class: 'raw' });
  const rawMore = el('button', { id: 'raw-more', text: 'Load more' });
  const rawInfo = el('span', { class: 'muted' });
  const raw = el('details', { class: 'rawlog' }, el('summary', { text: 'Raw log' }), rawPre, el('div', {}, rawMore, ' ', rawInfo));
  const followup = el('section', { id: 'followup' });
  // An ended task reads top down: verdict, summary and findings, the diff, what to do
  // next, then how it got there. A running one: what it does now, and the steer box.
  function arrange(active) {
    if (arrange.active === active) return;
    arrange.active = active;
    MAIN.replaceChildren(...(active ? [head, asks, actions, events, report, diff, followup, raw]
      : [head, report, asks, actions, diff, followup, events, raw]));
  }
  arrange(true);
  const answered = new Set();
  const commentCount = el('span', { id: 'comment-count', class: 'muted' });

  function findingsOf() {
    const rep = t && t.report && typeof t.report.body === 'object' ? t.report.body : null;
    const review = Array.isArray(t && t.review_findings) ? t.review_findings : [];
    // A loop that ends with findings open copies them into the worker's report as
    // `review (round N): title`: shown once, as the review findings they are.
    const copy = (f) => review.some((r) => f.title === `review (round ${r.round}): ${r.title}`
      && (f.file || '') === (r.file || '') && Number(f.line || 0) === Number(r.line || 0));
    const own = rep && Array.isArray(rep.findings) ? rep.findings.filter((f) => !copy(f)) : [];
    return { own, review };
  }

  function updateCommentCount() {
    const diffShown = lastDiff && lastDiff.available && !lastDiff.is_empty;
    commentCount.textContent = comments.length ? `${comments.length} line comment(s) from the diff go with it.`
      : diffShown ? 'Comment on lines of the diff (the + at a line) to send them with it.' : '';
    for (const b of document.querySelectorAll('[data-action=continue]')) b.textContent = comments.length ? `Continue with ${comments.length} comment(s)` : 'Continue';
  }

  function commentNote(c) {
    const n = el('div', { class: 'note comment', 'data-comment': `${c.file}:${c.line}` },
      el('span', { class: 'who', text: 'you' }), ' ', el('span', { class: 'ctext', text: c.comment }),
      el('button', { class: 'small', text: 'Remove' }));
    n.querySelector('button').addEventListener('click', () => {
      comments.splice(comments.indexOf(c), 1);
      n.remove();
      updateCommentCount();
    });
    return n;
  }

  function openComment(row, file, l, all) {
    if (row.nextSibling && row.nextSibling.classList && row.nextSibling.classList.contains('comment-box')) return;
    const line = l.n !== undefined ? l.n : l.o;
    const area = el('textarea', { rows: 3, placeholder: `Comment on ${file}:${line}`, 'aria-label': 'comment' });
    const save = el('button', { class: 'primary small', 'data-save-comment': `${file}:${line}`, text: 'Add comment' });
    const cancel = el('button', { class: 'small', text: 'Cancel' });
    const box = el('div', { class: 'note comment-box' }, area, el('div', {}, save, cancel));
    row.after(box);
    area.focus();
    cancel.addEventListener('click', () => box.remove());
    save.addEventListener('click', () => {
      if (!area.value.trim()) return;
      const hunk = all.slice(l.hs, l.idx + 1).map((x) => x.text).join('\n');
      const c = { file, line, hunk, comment: area.value.trim() };
      comments.push(c);
      box.replaceWith(commentNote(c));
      updateCommentCount();
    });
  }

  function diffView(d) {
    if (!d.available) return el('p', { class: 'muted', text: d.why });
    if (d.is_empty) return el('p', { class: 'muted', id: 'no-changes', text: 'No changes.' });
    const sum = el('table', { class: 'files' },
      el('thead', {}, el('tr', {}, ['File', 'Change', '+', '−'].map((h) => el('th', { text: h })))),
      el('tbody', {}, d.files.map((f) => el('tr', {},
        el('td', {}, el('a', { href: '#f-' + encodeURIComponent(f.path), text: f.old_path ? `${f.old_path} → ${f.path}` : f.path })),
        el('td', { text: f.status + (f.binary ? ' (binary)' : '') }),
        el('td', { class: 'add', text: '+' + f.additions }),
        el('td', { class: 'del', text: '−' + f.deletions })))));
    const { own, review } = findingsOf();
    const anchored = new Set();
    const patches = parsePatch(d.patch).map((file) => {
      const pre = el('pre', { class: 'patch', 'data-file': file.path });
      for (const l of file.lines) {
        // The file's name heads it already: git's index and ---/+++ lines say nothing more.
        if (l.kind === 'meta' && /^(index |--- |\+\+\+ )/.test(l.text)) continue;
        const line = el('span', { class: 'ln ' + l.kind },
          el('span', { class: 'no', 'data-no': l.o !== undefined ? l.o : '' }),
          el('span', { class: 'no', 'data-no': l.n !== undefined ? l.n : '' }));
        if (l.n !== undefined) line.dataset.line = l.n;
        if (l.kind === 'add' || l.kind === 'del' || l.kind === 'ctx') {
          const b = el('button', { class: 'cbtn', title: 'Comment on this line', 'aria-label': 'comment', text: '+' });
          b.addEventListener('click', () => openComment(line, file.path, l, file.lines));
          line.append(b);
        }
        line.append(el('span', { class: 'code', text: l.text + '\n' }));
        pre.append(line);
        if (l.n !== undefined) {
          for (const f of own) if (f.file === file.path && Number(f.line) === l.n) { pre.append(noteFor(f, false)); anchored.add(f); }
          for (const f of review) if (f.file === file.path && Number(f.line) === l.n) { pre.append(noteFor(f, true)); anchored.add(f); }
          for (const c of comments) if (c.file === file.path && c.line === l.n) pre.append(commentNote(c));
        }
      }
      return el('details', { open: true, class: 'filepatch', id: 'f-' + encodeURIComponent(file.path) }, el('summary', { text: file.head }), pre);
    });
    diffView.anchored = anchored;
    return el('div', {}, sum, patches);
  }

  async function loadDiff() {
    try {
      const d = await getJSON(`/api/task/${id}/diff`);
      lastDiff = d;
      diff.replaceChildren(el('h2', { text: 'Changes' }), diffView(d));
      return d;
    } catch (e) {
      diff.replaceChildren(el('h2', { text: 'Changes' }), el('p', { class: 'bad', text: e.message }));
      return null;
    }
  }

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

  // A box with a text area and a button, whose result stays under it.
  function sendBox(opts) {
    const area = el('textarea', { id: opts.id, rows: 2, placeholder: opts.placeholder, 'aria-label': opts.label });
    const go = el('button', { class: 'primary', 'data-action': opts.action, text: opts.button });
    const out = el('div', { class: 'result' });
    const extra = opts.extra || [];
    go.addEventListener('click', async () => {
      go.disabled = true;
      const r = await opts.send(area.value);
      go.disabled = false;
      out.replaceChildren(...[].concat(r.message));
      out.className = 'result ' + (r.ok ? 'good' : 'bad');
      if (r.ok) area.value = '';
    });
    return el('div', { class: 'panel ' + opts.action, id: opts.action + '-box' }, el('h3', { text: opts.title }),
      el('p', { class: 'muted', text: opts.hint }), area, el('div', { class: 'row' }, go, ...extra), out);
  }

  function steerBox() {
    const interrupt = el('input', { type: 'checkbox', id: 'steer-interrupt' });
    return sendBox({
      id: 'steer-text', action: 'steer', title: 'Steer', button: 'Send to the agent', label: 'steer',
      placeholder: `Tell ${t.agent} something while it works…`,
      hint: 'Reaches the running agent without stopping it (stored first, delivered once). Interrupt ends its current turn first.',
      extra: [el('label', {}, interrupt, ' interrupt the current turn')],
      send: async (text) => {
        const r = await post(`/api/task/${id}/steer`, { text, interrupt: interrupt.checked });
        return { ok: r.ok, message: r.ok ? `Sent (steer ${r.data.steer_id}); it shows in the conversation once delivered.` : r.data.error };
      },
    });
  }

  function continueBox() {
    updateCommentCount();
    const b = sendBox({
      id: 'continue-text', action: 'continue', title: 'Continue', button: 'Continue', label: 'continue',
      placeholder: 'What should the agent do next? (optional with comments)',
      hint: `A new task in the same ${t.worktree ? 'worktree and branch' : 'place'}, resuming ${t.agent}'s session where it can; its diff holds all the work.`,
      extra: [commentCount],
      send: async (text) => {
        const r = await post(`/api/task/${id}/continue`, { text, comments });
        if (r.ok) comments.length = 0;
        return { ok: r.ok, message: r.ok ? ['Continued as ', taskLink(r.data.task_id), '.'] : r.data.error };
      },
    });
    setTimeout(updateCommentCount);
    return b;
  }

  function retryBox() {
    const agent = el('select', { id: 'retry-agent', 'aria-label': 'agent' });
    getJSON('/api/agents').then((d) => {
      for (const a of d.agents) if (a.installed && a.allowed && a.id !== t.agent) agent.append(el('option', { value: a.id, text: a.id }));
      if (!agent.options.length) agent.append(el('option', { value: '', text: 'no other agent is installed and allowed' }));
    }).catch(() => {});
    const go = el('button', { 'data-action': 'retry', text: 'Retry' });
    const out = el('div', { class: 'result' });
    go.addEventListener('click', async () => {
      go.disabled = true;
      const r = await post(`/api/task/${id}/retry`, { agent: agent.value });
      go.disabled = false;
      out.replaceChildren(...(r.ok ? ['Retrying as ', taskLink(r.data.task_id), ` with ${r.data.agent}.`] : [r.data.error]));
      out.className = 'result ' + (r.ok ? 'good' : 'bad');
    });
    return el('div', { class: 'panel retry', id: 'retry-box' }, el('h3', { text: 'Retry with another agent' }),
      el('p', { class: 'muted', text: 'What this task was asked (objective, context, constraints, criteria, checks and limits), as a new task for another agent.' }), el('div', { class: 'row' }, agent, go), out);
  }

  function renderActions() {
    const active = isActive(t);
    const hasChanges = !!(lastDiff && lastDiff.available && !lastDiff.is_empty);
    // Keep an open confirmation or a text being typed when nothing it depends on changed.
    const key = `${t.status}|${t.changes}|${t.worktree}|${hasChanges}|${t.continued_by}`;
    if (actions.dataset.key === key) return;
    actions.dataset.key = key;
    const kids = [];
    if (active) {
      kids.push(steerBox());
      kids.push(confirmable('Cancel',
        () => `Cancel stops ${t.agent}: SIGTERM to its whole process tree, SIGKILL after the grace period, and the task ends "cancelled". ${t.worktree ? 'Its worktree is kept until you apply, discard or gc it.' : ''}`,
        async () => {
          const r = await post(`/api/task/${id}/cancel`);
          return { ok: r.ok, message: r.ok ? (r.data.cancelled ? 'Cancelled.' : `Nothing to cancel: the task is ${r.data.status}.`) : r.data.error };
        }, 'bad'));
    }
    if (!active && t.worktree && !t.changes && hasChanges && !t.continued_by) {
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
    if (!active && t.worktree && !hasChanges && !t.changes) kids.push(el('p', { class: 'muted', text: 'Nothing to apply: the task changed no file.' }));
    if (t.changes) kids.push(el('p', { class: 'muted', text: `Changes ${t.changes}.` }));
    if (t.continued_by) kids.push(el('p', { class: 'muted' }, 'Continued by ', taskLink(t.continued_by), ', which holds this work now.'));
    // What the last action said stays when the buttons change under it.
    const last = confirmable.last;
    if (last) kids.push(el('div', { class: 'action' }, el('div', { class: 'result ' + (last.ok ? 'good' : 'bad'), text: last.message })));
    const boxes = [];
    if (!active && !t.changes && !t.continued_by) boxes.push(continueBox());
    if (!active) boxes.push(retryBox());
    actions.replaceChildren(kids.length ? el('h2', { text: active ? 'Steer or stop' : 'Actions' }) : '', ...kids);
    followup.replaceChildren(boxes.length ? el('h2', { text: 'Follow up' }) : '', boxes.length ? el('div', { class: 'boxes' }, boxes) : '');
  }

  function renderReport() {
    const rep = t.report && typeof t.report.body === 'object' && t.report.body ? t.report.body : null;
    const { own, review } = findingsOf();
    const key = JSON.stringify([t.report, t.review_findings || null]);
    if (report.dataset.key === key) return;
    report.dataset.key = key;
    if (!t.report && !review.length) { report.replaceChildren(); return; }
    const kids = [el('h2', {}, 'Summary ', t.report ? el('span', { class: 'muted', text: `report ${t.report.status}, from ${t.report.source}` }) : '')];
    if (t.report && !rep) kids.push(el('div', { class: 'summary', text: String(t.report.body) }));
    if (rep) {
      kids.push(el('div', { class: 'summary', id: 'summary', text: rep.summary || '' }));
      if (rep.details) kids.push(el('div', { class: 'details', text: rep.details }));
    }
    const list = (title, items, cls) => items.length ? [el('h3', { text: title }), el('ul', { class: cls }, items)] : [];
    const findingItem = (f, reviewed) => el('li', { class: 'finding sev-' + f.severity, 'data-severity': f.severity },
      el('span', { class: 'sev', text: f.severity }), reviewed ? stateBadge(f) : '', ' ',
      el('b', { text: f.title }),
      f.file ? [' ', el('a', { class: 'loc', href: '#f-' + encodeURIComponent(f.file), text: `${f.file}${f.line ? ':' + f.line : ''}` })] : '',
      reviewed ? el('span', { class: 'muted', text: ` · round ${f.round}` }) : '',
      f.detail ? el('div', { class: 'fdetail', text: f.detail }) : '');
    const bySeverity = (a, b) => (SEVERITY_RANK[a.severity] ?? 9) - (SEVERITY_RANK[b.severity] ?? 9);
    // What still needs doing first, then by severity, then the newest round first.
    const byState = (a, b) => (REVIEW_RANK[a.state] ?? 9) - (REVIEW_RANK[b.state] ?? 9) || bySeverity(a, b) || b.round - a.round;
    kids.push(...list('Findings', [...own].sort(bySeverity).map((f) => findingItem(f, false)), 'findings'));
    kids.push(...list('Review findings', [...review].sort(byState).map((f) => findingItem(f, true)), 'findings review'));
    if (rep) {
      kids.push(...list('Questions it left', (rep.questions || []).map((q) => el('li', { text: q.question + (q.options && q.options.length ? ` (${q.options.join(' / ')})` : '') })), 'plain'));
      kids.push(...list('Next steps', (rep.next_steps || []).map((s) => el('li', { text: s })), 'plain'));
      kids.push(...list('Commands run', (rep.commands_run || []).map((c) => el('li', {}, el('code', { text: c.command }),
        c.exit_code !== null && c.exit_code !== undefined ? el('span', { class: c.exit_code === 0 ? 'good' : 'bad', text: ` → ${c.exit_code}` }) : '',
        c.note ? el('span', { class: 'muted', text: ' ' + c.note }) : '')), 'plain'));
      if (rep.verification) {
        const v = rep.verification;
        kids.push(el('h3', { text: 'Verification' }), el('p', {}, el('span', { class: v.outcome === 'passed' ? 'badge v-succeeded' : 'badge v-failed', text: v.outcome }), ' ', el('code', { text: v.command })),
          v.tail ? el('pre', { class: 'tail', text: stripAnsi(v.tail) }) : '');
      }
      const changes = rep.changes || [];
      if (changes.length) {
        kids.push(el('h3', {}, 'Files changed ', el('span', { class: 'muted', text: rep.changes_verified_by === 'git' ? '(checked with git)' : '(as the agent says)' })),
          el('ul', { class: 'plain' }, changes.map((c) => el('li', {}, el('span', { class: 'tag', text: c.action }), ' ', el('code', { text: c.path }), c.summary ? ' — ' + c.summary : ''))));
      }
      if (rep.usage) {
        const u = rep.usage;
        const bits = [u.input_tokens != null && `${u.input_tokens} tokens in`, u.output_tokens != null && `${u.output_tokens} out`,
          u.cost_usd != null && '$' + Number(u.cost_usd).toFixed(4), u.duration_ms != null && Math.round(u.duration_ms / 1000) + ' s'].filter(Boolean);
        if (bits.length) kids.push(el('p', { class: 'muted', text: 'Usage: ' + bits.join(' · ') }));
      }
    }
    if (t.report) {
      kids.push(el('details', { class: 'json' }, el('summary', { text: 'The report as JSON' }),
        el('pre', { class: 'report', text: typeof t.report.body === 'string' ? t.report.body : JSON.stringify(t.report.body, null, 2) })));
    }
    report.replaceChildren(...kids);
  }

  function render() {
    arrange(isActive(t));
    const files = lastDiff && lastDiff.files ? lastDiff.files : [];
    const facts = [t.agent, t.role && 'role ' + t.role, t.model && 'model ' + t.model, t.mode, t.isolation,
      elapsed(t) && (isActive(t) ? 'running for ' : 'took ') + elapsed(t), files.length && `${files.length} file(s) changed`, `${t.event_count} events`].filter(Boolean);
    const asked = head.querySelector('details.asked');
    head.replaceChildren(
      el('div', { class: 'verdict-head v-' + (t.verdict_kind || t.status) },
        el('div', { class: 'vtop' }, el('span', { class: 'id', text: t.id }), ' ', badge(t).slice(1)),
        el('div', { class: 'vword', id: 'verdict', text: verdictText(t) }),
        el('p', { class: 'meta', text: facts.join(' · ') }),
        t.error ? el('p', { class: 'bad', text: t.error }) : ''),
      el('details', { class: 'asked', open: asked ? asked.open : !t.report }, el('summary', { text: 'Objective' }), el('pre', { class: 'objective', text: t.objective })),
      t.continues ? el('p', { class: 'lineage' }, 'Continues ', taskLink(t.continues), ' in its worktree.') : '',
      t.group ? el('p', { class: 'lineage', id: 'group' }, 'One of fan-out ', el('a', { href: '/groups', class: 'id', text: t.group.id }), ': ',
        t.group.task_ids.flatMap((m, i) => [i ? ', ' : '', m === t.id ? el('b', { class: 'id', text: m + ' (this one)' }) : taskLink(m)])) : '',
      attemptList(t));
    document.title = `${verdictText(t)} · ${t.id} · caesar`;
    renderQuestions();
    renderActions();
    renderReport();
    nowLine.textContent = isActive(t) ? 'now: ' + (activityText(t) || 'working…') : '';
  }

  const st = new EventSource('/api/tasks/stream?only=' + encodeURIComponent(id));
  st.addEventListener('open', () => live('open'));
  st.addEventListener('error', () => live('error'));
  let wasTerminal = null;
  let reportKey = null;
  const onView = async (v) => {
    t = v; clockSkew = v.now_ms - Date.now();
    const terminal = !isActive(v);
    const rk = JSON.stringify([v.report && v.report.status, v.review_findings || null]);
    if (terminal !== wasTerminal || !lastDiff || rk !== reportKey) {
      wasTerminal = terminal;
      reportKey = rk;
      await loadDiff();
    }
    render();
  };
  st.addEventListener('snapshot', (e) => { const d = JSON.parse(e.data); if (d.tasks[0]) onView(d.tasks[0]); });
  st.addEventListener('task', (e) => onView(JSON.parse(e.data)));

  let nextSeq = 0;
  let evEnded = false;
  const tools = new Map();
  function onEvent(e) {
    const seq = Number(e.lastEventId);
    if (seq < nextSeq) return;
    nextSeq = seq + 1;
    let ev;
    try { ev = JSON.parse(e.data); } catch (_) { ev = { type: 'unreadable', text: e.data }; }
    const follow = evList.scrollTop + evList.clientHeight >= evList.scrollHeight - 8;
    // A tool call's later states update its card.
    const prior = ev.type === 'tool_use' && ev.id ? tools.get(ev.id) : null;
    const item = eventItem(seq, ev);
    if (prior && prior.isConnected) prior.replaceWith(item); else evList.append(item);
    if (ev.type === 'tool_use' && ev.id) tools.set(ev.id, item);
    while (evList.childElementCount > 1000) evList.firstElementChild.remove();
    if (follow) evList.scrollTop = evList.scrollHeight;
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
      rawPre.append(document.createTextNode(stripAnsi(r.text)));
      rawNext = r.next;
      const left = r.size - r.next;
      rawInfo.textContent = left > 0 ? `${left} more byte(s)` : `${r.size} byte(s), all shown`;
    } catch (e) { rawInfo.textContent = e.message; }
  }
  rawMore.addEventListener('click', loadRaw);
  loadRaw();
}
