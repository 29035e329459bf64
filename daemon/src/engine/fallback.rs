//! Fallback along the role's chain (issue 17, item 2).
//!
//! A task that ends blocked by auth, a quota or the network before it
//! changed anything, whose role's chain has another agent the policy
//! allows, is followed by a new task for that agent. The caller keeps the
//! first task's id: its status, await and report follow the chain to the
//! attempt running now, and list the attempts before it.
//!
//! Durable in two steps, each safe to crash after: the fallback (this task,
//! the next agent, and the next task's id, chosen once) is stored before
//! the blocked task ends; the next task is delegated under that id after
//! it ended, and again by recovery if a daemon died in between. A redone
//! conclusion finds the stored fallback and keeps its id, and a delegation
//! under an id that exists is never made: no attempt is lost or doubled.
//!
//! The design beside its neighbours: `docs/design/orchestration.md`.

use std::path::Path;

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::config::{Config, project_root};
use crate::error::{Error, Result};
use crate::lifecycle::{Limits, OnBlocker, Plan};
use crate::oacp::{Blocker, BlockerKind, Finding, Isolation, Mode, Report, Severity};
use crate::resolve::{self, Resolution};
use crate::store::{AttemptRow, TaskRecord, TaskStatus};

use super::*;

/// The most attempts one chain may make (a guard against a loop).
const MAX_ATTEMPTS: usize = 16;

/// The id a delegation is made under and the chain it continues.
#[derive(Debug, Clone)]
pub(super) struct Succession {
    pub id: String,
    pub root: String,
    /// A relay's worktree (issue 31, `relay.rs`): the next agent works there.
    pub workshop: Option<crate::workshop::Prepared>,
}

/// One earlier attempt of a task, as callers see it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptView {
    pub task_id: String,
    pub agent: String,
    /// The blocker that stopped it; `None` for a stored word this build does not know.
    pub stopped_by: Option<BlockerKind>,
    pub message: String,
    /// Issue 31: the files git saw changed since the base when it stopped, and whether the
    /// next agent went on with them in the same worktree (a relay).
    pub files_changed: u32,
    pub relayed: bool,
}

/// A budget and what was used of it, as callers see it.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetView {
    pub limits: Limits,
    pub used: super::budget::Tally,
    pub wall_ms: u64,
    /// The limit that stopped the task.
    pub exceeded: Option<String>,
}

/// What a view adds for the life cycle.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LifecycleView {
    pub attempts: Vec<AttemptView>,
    /// The attempt this view shows, when not the task asked about.
    pub current_task_id: Option<String>,
    pub budget: Option<BudgetView>,
    /// While the task is parked at a quota (`parking.rs`): until when, and why.
    pub parked: Option<(i64, String)>,
    /// Issue 31: the task this one continues in its worktree, and the one that continued it.
    pub continues: Option<String>,
    pub continued_by: Option<String>,
}

/// The life-cycle plan of a delegation: its budget (delegation over role
/// over `[budget]`), its blocker policy and the chain it may fall back on.
/// Refuses a bad `on_blocker`; budgets were checked at the RPC and config.
pub(super) fn plan_for(
    config: &Config,
    resolution: &Resolution<'_>,
    input: &DelegateInput,
    succession: Option<&Succession>,
) -> Result<Plan> {
    let role = resolution.role.as_ref();
    let role_lifecycle = role.and_then(|r| config.role_lifecycle.get(&r.name)).cloned().unwrap_or_default();
    if let Some(b) = &input.budget {
        // Limits built in code (not through the RPC) are checked here too.
        Limits::from_signed(
            "budget",
            b.tokens.map(|v| v as i64),
            b.cost_usd,
            b.wall_ms.map(|v| v as i64),
            b.turns.map(|v| v as i64),
        )
        .map_err(Error::Invalid)?;
    }
    let budget = input.budget.unwrap_or_default().over(role_lifecycle.budget).over(config.budget);
    let on_blocker = match input.on_blocker.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => OnBlocker::parse(s).map_err(Error::Invalid)?,
        None => role_lifecycle.on_blocker.unwrap_or_default(),
    };
    // A caller who named the agent without a role chose it: no chain.
    let named_agent = input.agent.as_deref().is_some_and(|a| !a.is_empty());
    // Issue 31: the agent the caller named takes over on a blocker, not the role's chain.
    let named_next = if succession.is_none() { super::relay::named_next(config, resolution, input)? } else { None };
    let relay_named = named_next.is_some();
    let chain = match (named_next, role) {
        (Some(next), _) => vec![next],
        (None, Some(r)) => r.agents.clone(),
        (None, None) if !named_agent || succession.is_some() => resolve::default_role(config).agents,
        (None, None) => Vec::new(),
    };
    let mut request = input.clone();
    // The next agent is named by the fallback; a model or session belongs to this one.
    request.model = None;
    request.session_id = None;
    // A continuation's source is its own (issue 31): a next agent takes the task's workshop.
    request.continue_from = None;
    // A review loop is the first task's (issue 32), and a chosen id its own.
    request.review_by = None;
    request.review_rounds = None;
    request.chosen_id = None;
    // The named next agent is this plan's chain; the next attempt goes on along the role's.
    request.relay_to = None;
    // The objective is the task's own column: the launch record keeps no copy
    // of it (issue 19), and the next attempt takes it from the task.
    request.objective.clear();
    // Nor of the context: it is kept in the task's daemon part, and the
    // launch holds its placeholder (`prompt::CONTEXT_TOKEN`).
    if !request.context.is_empty() {
        request.context = crate::prompt::CONTEXT_TOKEN.to_owned();
    }
    if succession.is_none() {
        request.agent = None;
    }
    Ok(Plan {
        budget,
        on_blocker,
        chain,
        named_next: relay_named,
        root: succession.map(|s| s.root.clone()),
        request: Some(request),
    })
}

/// Why a blocked task's chain has no next agent: every agent of it was
/// tried (each with why it was left), or those not tried are not
/// installed or not allowed. `left` is `(agent, blocker kind, message)` per
/// attempt, oldest first.
fn no_fallback_finding(plan: &Plan, left: &[(String, String, String)]) -> Finding {
    let chain = &plan.chain;
    let untried: Vec<&str> =
        chain.iter().filter(|a| !left.iter().any(|(tried, _, _)| tried == *a)).map(String::as_str).collect();
    let tried: Vec<String> = left
        .iter()
        .map(|(agent, kind, message)| {
            let message: String = message.chars().take(160).collect();
            if message.is_empty() { format!("{agent} ({kind})") } else { format!("{agent} ({kind}: {message})") }
        })
        .collect();
    let title = match (untried.is_empty(), plan.named_next) {
        (true, false) => format!("no fallback: every agent of the role's chain was tried ({})", chain.join(", ")),
        (false, false) => {
            format!(
                "no fallback: the rest of the role's chain is not installed or not allowed ({})",
                untried.join(", ")
            )
        }
        (true, true) => format!("no fallback: the agent `relay_to` named was tried ({})", chain.join(", ")),
        (false, true) => {
            format!(
                "no fallback: the agent `relay_to` named is no longer installed or allowed ({})",
                untried.join(", ")
            )
        }
    };
    Finding {
        severity: Severity::Medium,
        title,
        file: None,
        line: None,
        detail: format!(
            "tried, oldest first: {}; see `caesar agents` for what is installed and allowed",
            tried.join("; ")
        ),
    }
}

impl Engine {
    /// At a blocked task's end: whether the next agent of its chain takes
    /// over. Stores the fallback (idempotently) and says so in the report;
    /// or says in the report why it does not.
    pub(super) fn plan_fallback(
        &self,
        record: &TaskRecord,
        blocker: Option<&Blocker>,
        report: &mut Report,
    ) -> Option<AttemptRow> {
        let Blocker { kind, message, .. } = blocker?;
        if !matches!(kind, BlockerKind::Auth | BlockerKind::RateLimit | BlockerKind::Network | BlockerKind::Budget) {
            return None;
        }
        let plan = &record.launch.lifecycle;
        if plan.on_blocker == OnBlocker::Fail || plan.chain.is_empty() {
            return None;
        }
        let request = plan.request.as_ref()?;
        if let Ok(Some(row)) = self.store.fallback_of(&record.id) {
            // Concluded again after a crash: the same fallback.
            self.announce(&row, report);
            return Some(row);
        }
        let git_checked = report.changes_verified_by.as_deref() == Some("git");
        // Issue 31: git-checked changes in a worktree go on with the next agent there.
        let relay = git_checked && !report.changes.is_empty() && super::relay::relayable(record).is_some();
        if *kind == BlockerKind::Budget && !relay {
            // A budget stop is relayed, never fallen back on: with nothing to go on with, it ends there.
            return None;
        }
        if !relay && (!report.changes.is_empty() || (record.mode == Mode::Write && !git_checked)) {
            let why = if report.changes.is_empty() {
                "its changes could not be checked against git"
            } else {
                "it had already changed files"
            };
            report.findings.push(Finding {
                severity: Severity::Medium,
                title: format!("no fallback to another agent: {why}"),
                file: None,
                line: None,
                detail: format!(
                    "caesar never re-runs elsewhere a task that may have changed files. Review its changes with \
                     `caesar diff {id}`, then apply or discard them and delegate the rest again.",
                    id = record.id
                ),
            });
            return None;
        }
        let root = plan.root.clone().unwrap_or_else(|| record.id.clone());
        let earlier = self.store.attempts_of(&root).unwrap_or_default();
        if earlier.len() + 1 >= MAX_ATTEMPTS {
            return None;
        }
        let mut tried: Vec<String> =
            earlier.iter().filter_map(|a| self.store.task(&a.task_id).ok().flatten().map(|t| t.agent)).collect();
        tried.push(record.agent.clone());
        let project = project_root(Path::new(&request.workspace));
        let Ok((config, _)) = self.projects.load_config(&project) else { return None };
        let next = plan.chain.iter().filter(|a| !tried.contains(a)).find(|candidate| {
            let mut input = request.clone();
            input.objective.clone_from(&record.objective);
            input.agent = Some((*candidate).clone());
            resolve::resolve(&config, &project, &input).is_ok()
        });
        let Some(next) = next else {
            let mut left: Vec<(String, String, String)> = earlier
                .iter()
                .map(|a| {
                    let agent = self.store.task(&a.task_id).ok().flatten().map(|t| t.agent).unwrap_or_default();
                    (agent, a.stopped_by.clone(), a.message.clone())
                })
                .collect();
            left.push((record.agent.clone(), kind.as_str().to_owned(), message.clone()));
            let mut finding = no_fallback_finding(plan, &left);
            if relay {
                finding.title = finding.title.replacen("no fallback", "no relay", 1);
                finding.detail.push_str(&format!(
                    "; nothing is lost: the changes stay in the task's worktree (`caesar diff {id}`), and \
                     `caesar continue {id} \"<text>\" --agent <agent>` goes on with them once an agent can",
                    id = record.id
                ));
            }
            report.findings.push(finding);
            return None;
        };
        let row = AttemptRow {
            task_id: record.id.clone(),
            root_id: root,
            successor_id: crate::ids::task_id(),
            next_agent: next.clone(),
            stopped_by: kind.as_str().to_owned(),
            message: message.clone(),
            at_ms: now_ms(),
        };
        match self.store.record_fallback(&row) {
            Ok(row) => {
                self.announce(&row, report);
                Some(row)
            }
            Err(e) => {
                warn!(task_id = %record.id, "cannot record the fallback: {e}");
                None
            }
        }
    }

    /// The report says who takes over; waiters of the chain can wait on it
    /// from now on, before it is delegated.
    fn announce(&self, row: &AttemptRow, report: &mut Report) {
        let relay = !report.changes.is_empty();
        report.findings.push(Finding {
            severity: Severity::Info,
            title: if relay {
                format!("relayed to agent `{}` as task {}, in the same worktree", row.next_agent, row.successor_id)
            } else {
                format!("fell back to agent `{}` as task {}", row.next_agent, row.successor_id)
            },
            file: None,
            line: None,
            detail: if relay {
                format!(
                    "this agent stopped on a {} blocker after changing {} file(s); the next one continues its work \
                     with a handoff of what git says was done",
                    row.stopped_by,
                    report.changes.len()
                )
            } else {
                format!("this agent stopped on a {} blocker before changing anything", row.stopped_by)
            },
        });
        self.runs.make(&row.successor_id, TaskStatus::Pending, 0);
    }

    /// Delegates every stored fallback whose next task does not exist yet
    /// (just concluded, or a daemon died in between).
    pub(super) async fn start_fallbacks(self: &Arc<Self>) {
        // One at a time: a second caller finds the successors of the first
        // recorded, and leaves them.
        let _turn = self.fallback_turn.lock().await;
        let rows = match self.store.unstarted_fallbacks() {
            Ok(rows) => rows,
            Err(e) => {
                warn!("cannot read the pending fallbacks: {e}");
                return;
            }
        };
        for row in rows {
            let Ok(Some(prev)) = self.store.task(&row.task_id) else { continue };
            // Its conclusion, under way, ends it first.
            if !prev.status.is_terminal() {
                continue;
            }
            let Some(mut input) = prev.launch.lifecycle.request.clone() else { continue };
            if input.objective.is_empty() {
                // Stored without it (issue 19): the task's own objective.
                input.objective.clone_from(&prev.objective);
            }
            if input.context == crate::prompt::CONTEXT_TOKEN {
                // Stored as a placeholder (issue 19): the task's kept context.
                input.context = crate::prompt::read_context(&TaskDir::new(&prev.task_dir)).unwrap_or_else(|e| {
                    warn!(task_id = %row.task_id, "the context of the blocked task cannot be read: {e}");
                    format!("(the context of task {} could not be read back: {e})", row.task_id)
                });
            }
            input.agent = Some(row.next_agent.clone());
            // A parked task resumes in its session, within its deadline (`parking.rs`).
            let parked = self.parking.resume_input(&prev, &mut input);
            // Issue 31: a relay goes on in the blocked task's worktree, with a handoff.
            let workshop = super::relay::relay_workshop(&prev);
            if let Some(p) = &workshop {
                let brief = super::handoff::brief(&self.handoff_facts(&prev, &row, p, &input));
                input.context =
                    if input.context.trim().is_empty() { brief } else { format!("{brief}\n\n{}", input.context) };
                input.mode = Some(prev.mode.as_str().to_owned());
                input.isolation = Some(Isolation::Worktree.as_str().to_owned());
            }
            let succession = Succession { id: row.successor_id.clone(), root: row.root_id.clone(), workshop };
            // A nested task's next attempt is its parent's child too.
            let parent = prev.launch.parent.as_deref().and_then(|p| self.store.task(p).ok().flatten());
            match self.delegate_as(input, parent.as_ref(), Some(succession)).await {
                Ok(d) => {
                    info!(task_id = %row.task_id, next = %d.record.id, agent = %row.next_agent, "fell back");
                    if parked && let Ok(Some(p)) = self.store.park_of(&row.task_id) {
                        self.arm_park(&p.successor_id, p.parked_until);
                    }
                }
                Err(e) => {
                    // The chain ends at the blocked task: its waiters learn so.
                    warn!(task_id = %row.task_id, agent = %row.next_agent, "the fallback could not be delegated: {e}");
                    let _ = self.store.drop_fallback(&row.task_id);
                    let removed = self.runs.remove(&row.successor_id);
                    if let Some(live) = removed {
                        live.status.send_replace(TaskStatus::Failed);
                    }
                }
            }
        }
    }
}

/// The attempt a task's handle stands for now: the last of its chain.
pub(super) fn head_of(store: &Store, id: &str) -> (String, Vec<AttemptRow>) {
    let mut head = id.to_owned();
    let mut rows = Vec::new();
    while rows.len() < MAX_ATTEMPTS {
        match store.fallback_of(&head) {
            Ok(Some(row)) => {
                head = row.successor_id.clone();
                rows.push(row);
            }
            _ => break,
        }
    }
    (head, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(agents: &[&str]) -> Vec<(String, String, String)> {
        agents.iter().map(|a| ((*a).to_owned(), "auth".to_owned(), format!("{a}: 401 Unauthorized"))).collect()
    }

    fn plan(agents: &[&str], named_next: bool) -> Plan {
        Plan { chain: agents.iter().map(|s| (*s).to_owned()).collect(), named_next, ..Plan::default() }
    }

    #[test]
    fn a_chain_tried_to_its_end_says_so_and_not_that_nothing_is_installed() {
        let f = no_fallback_finding(&plan(&["claude", "codex"], false), &left(&["claude", "codex"]));
        assert_eq!(f.title, "no fallback: every agent of the role's chain was tried (claude, codex)");
        assert!(!f.title.contains("installed"), "{}", f.title);
        assert!(f.detail.contains("claude (auth: claude: 401 Unauthorized); codex (auth"), "{}", f.detail);
    }

    #[test]
    fn agents_left_untried_are_named_as_not_installed_or_not_allowed() {
        let f = no_fallback_finding(&plan(&["claude", "codex", "gemini"], false), &left(&["codex"]));
        assert_eq!(
            f.title,
            "no fallback: the rest of the role's chain is not installed or not allowed (claude, gemini)"
        );
        assert!(f.detail.starts_with("tried, oldest first: codex (auth"), "{}", f.detail);
    }

    /// Issue 31: an agent the caller named with `relay_to` is no role's chain.
    #[test]
    fn the_agent_relay_to_named_is_named_as_such() {
        let f = no_fallback_finding(&plan(&["codex"], true), &left(&["claude"]));
        assert_eq!(f.title, "no fallback: the agent `relay_to` named is no longer installed or allowed (codex)");
        let f = no_fallback_finding(&plan(&["codex"], true), &left(&["claude", "codex"]));
        assert_eq!(f.title, "no fallback: the agent `relay_to` named was tried (codex)");
        assert!(!f.title.contains("role"), "{}", f.title);
    }
}
