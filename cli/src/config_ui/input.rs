//! The terminal's side of `caesar config`: key events mapped onto the
//! model's keys, and a role's prompt file opened in the user's editor.

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::model::Key;

/// The model's key for a terminal key event (presses only).
pub fn key_of(e: KeyEvent) -> Option<Key> {
    if e.kind != KeyEventKind::Press {
        return None;
    }
    if e.modifiers.contains(KeyModifiers::CONTROL) && e.code == KeyCode::Char('c') {
        return Some(Key::Interrupt);
    }
    Some(match e.code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Left => Key::Left,
        KeyCode::Right => Key::Right,
        KeyCode::Tab => Key::Tab,
        KeyCode::BackTab => Key::BackTab,
        _ => return None,
    })
}

/// Waits for the next key; `None` for events that are not one (a resize
/// redraws).
pub fn next_key() -> anyhow::Result<Option<Key>> {
    match event::read()? {
        Event::Key(k) => Ok(key_of(k)),
        _ => Ok(None),
    }
}

/// Opens `path` in `$VISUAL`, `$EDITOR` or `vi`, and waits for it. The
/// prompt file is the user's own text, written by their editor.
pub fn edit_file(path: &str) -> anyhow::Result<()> {
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| std::env::var("EDITOR").ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned());
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    // `$EDITOR` may carry arguments (`code --wait`).
    let mut words = editor.split_whitespace();
    let program = words.next().unwrap_or("vi");
    let status = std::process::Command::new(program)
        .args(words)
        .arg(path)
        .status()
        .map_err(|e| anyhow::anyhow!("cannot start the editor `{editor}` (set $EDITOR): {e}"))?;
    if !status.success() {
        anyhow::bail!("the editor `{editor}` exited with {status}");
    }
    Ok(())
}
