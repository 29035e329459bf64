//! Drawing `caesar config`: the tab bar, the table of the current tab with
//! each value's layer, the line being typed, and the status line.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Tabs};

use super::model::{MCP_CLIENTS, State, Tab};

/// Draws the whole screen for `state`.
pub fn draw(frame: &mut Frame, state: &State) {
    let [header, tabs, body, input, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());

    let project = if state.snapshot.project.is_empty() { "(no project)" } else { &state.snapshot.project };
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled("caesar config ", Style::default().add_modifier(Modifier::BOLD)),
            Span::raw(format!("{project}  ")),
            Span::styled(
                format!("edits write the {} layer", state.layer.as_str()),
                Style::default().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            ),
            Span::raw(" (l to change)"),
        ])),
        header,
    );

    let titles: Vec<String> = Tab::ALL.iter().enumerate().map(|(i, t)| format!("{} {}", i + 1, t.title())).collect();
    let selected = Tab::ALL.iter().position(|t| *t == state.tab).unwrap_or(0);
    frame.render_widget(
        Tabs::new(titles).select(selected).highlight_style(Style::default().add_modifier(Modifier::REVERSED)),
        tabs,
    );

    let (head, rows, widths) = table_of(state);
    let mut table_state = TableState::default().with_selected(Some(state.selected(state.tab)));
    let table = Table::new(rows, widths)
        .header(Row::new(head.iter().map(|h| Cell::from(*h))).style(Style::default().add_modifier(Modifier::BOLD)))
        .block(Block::default().borders(Borders::TOP).title(state.help()))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ");
    frame.render_stateful_widget(table, body, &mut table_state);

    if let Some(i) = &state.input {
        frame.render_widget(
            Paragraph::new(Line::from(vec![
                Span::styled(format!("{}: ", i.prompt), Style::default().fg(Color::Cyan)),
                Span::raw(format!("{}_", i.buffer)),
                Span::raw("  (enter to save, esc to cancel)"),
            ])),
            input,
        );
    }
    let style = if state.status_is_error { Style::default().fg(Color::Red) } else { Style::default() };
    frame.render_widget(Paragraph::new(state.status.as_str()).style(style), status);
}

type TableParts = (Vec<&'static str>, Vec<Row<'static>>, Vec<Constraint>);

fn table_of(state: &State) -> TableParts {
    let s = &state.snapshot;
    match state.tab {
        Tab::Agents => (
            vec!["agent", "installed", "standing", "model (layer)"],
            s.agents
                .iter()
                .map(|a| {
                    let standing = if a.denied {
                        "disabled".to_owned()
                    } else if a.allowed {
                        "enabled".to_owned()
                    } else {
                        format!("refused: {}", a.refusal)
                    };
                    let model = match &a.model {
                        Some((m, origin)) => format!("{m} ({origin})"),
                        None if a.default_model.is_empty() => "agent's default".to_owned(),
                        None => format!("{} (provider default)", a.default_model),
                    };
                    Row::new(vec![a.id.clone(), if a.installed { "yes" } else { "no" }.to_owned(), standing, model])
                })
                .collect(),
            vec![Constraint::Length(16), Constraint::Length(10), Constraint::Min(12), Constraint::Min(16)],
        ),
        Tab::Roles => (
            vec!["role", "mode", "isolation", "network", "chain", "prompt file", "layer"],
            s.roles
                .iter()
                .map(|r| {
                    Row::new(vec![
                        r.name.clone(),
                        r.mode.clone(),
                        r.isolation.clone(),
                        r.network.clone(),
                        r.agents.join(" > "),
                        r.prompt_file.clone().unwrap_or_else(|| "-".to_owned()),
                        r.origin.clone(),
                    ])
                })
                .collect(),
            vec![
                Constraint::Length(12),
                Constraint::Length(10),
                Constraint::Length(10),
                Constraint::Length(8),
                Constraint::Min(14),
                Constraint::Length(24),
                Constraint::Length(8),
            ],
        ),
        Tab::Policy => (
            vec!["key", "value", "layer"],
            s.policy
                .iter()
                .map(|p| {
                    let value = if p.value.is_empty() { "[]".to_owned() } else { p.value.clone() };
                    Row::new(vec![p.key.clone(), value, p.origin.clone()])
                })
                .collect(),
            vec![Constraint::Length(22), Constraint::Min(20), Constraint::Length(10)],
        ),
        Tab::Mcp => (
            vec!["client", "registration"],
            MCP_CLIENTS
                .iter()
                .map(|c| {
                    Row::new(vec![(*c).to_owned(), "enter shows what `caesar mcp install` would change".to_owned()])
                })
                .collect(),
            vec![Constraint::Length(12), Constraint::Min(20)],
        ),
    }
}
