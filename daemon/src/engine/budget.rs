//! Budgets (issue 17, item 4): a task's limits on tokens, cost, wall time
//! and turns, tallied live from the agent's own events.
//!
//! The tally sits on the monitor's hot path: [`Meter::observe`] is a match
//! and an addition per event, and [`Meter::exceeded`] compares four
//! numbers. It is never stored: after a restart it is rebuilt from the
//! task's stored events (the same events, so the same figures). What is
//! stored is the stop itself, before the agent is told to stop, so the
//! ending after a crash still says the budget ended it.
//!
//! The design beside its neighbours: `docs/design/orchestration.md`.

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::lifecycle::Limits;
use crate::oacp::{EventBody, Finding, Report, ReportStatus, Severity};

use super::*;

/// What a task has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    pub tokens: u64,
    pub cost_usd: f64,
    pub turns: u64,
}

/// A running task's budget: its limits and its tally.
#[derive(Debug, Clone, Default)]
pub struct Meter {
    pub limits: Limits,
    pub tally: Tally,
    /// When the agent started, for the wall-time limit.
    pub started_ms: i64,
    /// A limit was reached and the stop is under way.
    pub stopping: bool,
}

impl Meter {
    /// A meter of these limits for a run started at `started_ms`.
    pub fn new(limits: Limits, started_ms: i64) -> Meter {
        Meter { limits, started_ms, ..Meter::default() }
    }

    /// Whether there is anything to measure.
    pub fn is_active(&self) -> bool {
        !self.limits.is_empty()
    }

    /// Adds one event to the tally.
    #[inline]
    pub fn observe(&mut self, body: &EventBody) {
        match body {
            EventBody::Usage { usage } => {
                self.tally.tokens += usage.input_tokens.unwrap_or(0) + usage.output_tokens.unwrap_or(0);
                self.tally.cost_usd += usage.cost_usd.unwrap_or(0.0);
            }
            EventBody::Message { .. } => self.tally.turns += 1,
            _ => {}
        }
    }

    /// The first limit reached at `now_ms`, as its name and the figures.
    pub fn exceeded(&self, now_ms: i64) -> Option<(&'static str, String)> {
        let l = &self.limits;
        let t = &self.tally;
        if let Some(max) = l.tokens
            && t.tokens >= max
        {
            return Some(("tokens", format!("{} tokens used of a budget of {max}", t.tokens)));
        }
        if let Some(max) = l.cost_usd
            && t.cost_usd >= max
        {
            return Some(("cost_usd", format!("${:.4} spent of a budget of ${max:.4}", t.cost_usd)));
        }
        if let Some(max) = l.turns
            && t.turns >= max
        {
            return Some(("turns", format!("{} turns taken of a budget of {max}", t.turns)));
        }
        let wall = (now_ms - self.started_ms).max(0) as u64;
        if let Some(max) = l.wall_ms
            && wall >= max
        {
            return Some(("wall_ms", format!("{wall} ms of wall time used of a budget of {max} ms")));
        }
        None
    }
}

/// The finding a budget stop adds to the report, and what it does to it.
pub fn apply_stop(report: &mut Report, limit: &str, detail: &str) {
    if report.status == ReportStatus::Success {
        report.status = ReportStatus::Partial;
    }
    if report.status == ReportStatus::Failed {
        report.status = ReportStatus::Partial;
    }
    report.findings.push(Finding {
        severity: Severity::High,
        title: format!("budget: the {limit} limit stopped the agent"),
        file: None,
        line: None,
        detail: format!("{detail}. The agent was asked to stop and hand back what it had; raise `budget.{limit}` to let it go further."),
    });
}

impl super::group_budget::Budgets {
    /// Rebuilds a re-attached task's budget tally, and whether it has
    /// worked (for the network watch), from its stored events.
    pub(super) fn restore(&self, run: &mut Run) {
        match self.store.usage_and_messages(&run.id) {
            Ok(bodies) => {
                for b in &bodies {
                    run.budget.observe(b);
                    run.network.observe(b);
                }
            }
            Err(e) => warn!(task_id = %run.id, "cannot rebuild the budget's tally: {e}"),
        }
        // A stop recorded before the restart is not asked again.
        run.budget.stopping = self.store.budget_stop(&run.id).ok().flatten().is_some();
    }

    /// At a limit: records the stop, then asks the agent to stop and hand
    /// back what it has: the driver's interrupt first where its protocol has
    /// one (claude's `interrupt`, ACP's `session/cancel`, codex's
    /// `turn/interrupt`), then, after the protocol's wait, SIGTERM to its
    /// tree, the grace and SIGKILL. Called by the monitor after each read.
    pub(super) fn check(&self, run: &mut Run) {
        if run.budget.stopping || !run.budget.is_active() {
            return;
        }
        let Some((limit, detail)) = run.budget.exceeded(now_ms()) else {
            return;
        };
        if let Err(e) = self.store.record_budget_stop(&run.id, limit, &detail, None, now_ms()) {
            // Not stored: not acted on either; tried again after the next read.
            warn!(task_id = %run.id, "cannot record the budget stop: {e}");
            return;
        }
        run.budget.stopping = true;
        info!(task_id = %run.id, limit, "budget reached: stopping the agent");
        self.notices.budget(&run.id, &format!("budget ({limit}): {detail}"));
        let Some(handle) = run.handle.clone() else { return };
        let interrupted = run
            .driver
            .cancel_line(run.session_id.as_deref())
            .is_some_and(|line| self.runner.write_stdin(&handle, &run.dir, &line).is_ok());
        if !interrupted {
            self.runner.request_stop(&handle);
            return;
        }
        info!(task_id = %run.id, "budget reached: interrupt sent through the agent's protocol");
        // The signals stay the backstop: an agent that ended its turn has
        // exited by then, and stopping a gone supervisor is a no-op.
        let runner = Arc::clone(&self.runner);
        tokio::spawn(async move {
            tokio::time::sleep(super::cancel::PROTOCOL_CANCEL_WAIT).await;
            runner.request_stop(&handle);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oacp::Usage;

    #[test]
    fn the_tally_sums_usage_and_counts_replies() {
        let mut m = Meter::new(Limits { tokens: Some(100), turns: Some(3), ..Limits::default() }, 0);
        let usage = |i, o| EventBody::Usage {
            usage: Usage { input_tokens: Some(i), output_tokens: Some(o), ..Usage::default() },
        };
        m.observe(&usage(30, 10));
        m.observe(&EventBody::Message { text: "a".into() });
        assert_eq!(m.tally, Tally { tokens: 40, cost_usd: 0.0, turns: 1 });
        assert_eq!(m.exceeded(1), None);
        m.observe(&usage(50, 20));
        let (limit, detail) = m.exceeded(1).unwrap();
        assert_eq!((limit, detail.as_str()), ("tokens", "110 tokens used of a budget of 100"));
    }

    #[test]
    fn wall_time_and_cost_limits() {
        let m = Meter::new(Limits { wall_ms: Some(500), ..Limits::default() }, 1000);
        assert_eq!(m.exceeded(1499), None);
        assert_eq!(m.exceeded(1500).unwrap().0, "wall_ms");
        let mut m = Meter::new(Limits { cost_usd: Some(0.01), ..Limits::default() }, 0);
        m.observe(&EventBody::Usage { usage: Usage { cost_usd: Some(0.02), ..Usage::default() } });
        assert_eq!(m.exceeded(0).unwrap().0, "cost_usd");
    }
}
