//! Bounds on what one request may ask of the daemon, so that no caller can
//! exhaust its memory, its store or its clients (issue 19). Each check is a
//! pure function; every refusal names the field, its size, the cap and what
//! to do instead.

use crate::error::{Error, Result};
use crate::request::DelegateInput;

/// The most task ids one `Await` call may name. An orchestrator waits on
/// the tasks it delegated, a handful or a few hundred; a million ids cost
/// seconds and gigabytes before anything was awaited.
pub const MAX_AWAIT_IDS: usize = 1_000;
/// The most bytes of a delegation's `objective`. An objective says what to
/// do; material belongs in `context` or in files of the workspace.
pub const MAX_OBJECTIVE_BYTES: usize = 256 * 1024;
/// The most bytes of a delegation's `context`. Task views carry it, and a
/// listing of many tasks must still fit in one gRPC message (4 MiB).
pub const MAX_CONTEXT_BYTES: usize = 1024 * 1024;
/// The most entries of `constraints`, and of `acceptance_criteria`.
pub const MAX_LIST_ITEMS: usize = 100;
/// The most bytes of one entry of `constraints` or `acceptance_criteria`.
pub const MAX_ITEM_BYTES: usize = 16 * 1024;
/// The most tasks waiting in the queue at once (default of `CAESAR_MAX_PENDING`).
pub const MAX_PENDING: u32 = 10_000;

/// Refuses an `Await` on more ids than [`MAX_AWAIT_IDS`].
pub fn check_await_ids(n: usize) -> Result<()> {
    if n > MAX_AWAIT_IDS {
        return Err(Error::Invalid(format!(
            "`task_ids` names {n} tasks, more than the {MAX_AWAIT_IDS} one await may wait on: \
             await them in batches of at most {MAX_AWAIT_IDS}"
        )));
    }
    Ok(())
}

/// Refuses a delegation whose text fields or lists are past their caps.
pub fn check_delegate(input: &DelegateInput) -> Result<()> {
    check_bytes(
        "objective",
        input.objective.len(),
        MAX_OBJECTIVE_BYTES,
        "put the material in `context` or in a file of the workspace and name it",
    )?;
    check_bytes(
        "context",
        input.context.len(),
        MAX_CONTEXT_BYTES,
        "put the material in files of the workspace and name them in `context`",
    )?;
    for (field, list) in [("constraints", &input.constraints), ("acceptance_criteria", &input.acceptance_criteria)] {
        if list.len() > MAX_LIST_ITEMS {
            return Err(Error::Invalid(format!(
                "`{field}` has {} entries, more than the {MAX_LIST_ITEMS} allowed: merge them, or move them into `context`",
                list.len()
            )));
        }
        if let Some((i, item)) = list.iter().enumerate().find(|(_, s)| s.len() > MAX_ITEM_BYTES) {
            return Err(Error::Invalid(format!(
                "`{field}[{i}]` is {} bytes, more than the {MAX_ITEM_BYTES} allowed for one entry: shorten it, or move it into `context`",
                item.len()
            )));
        }
    }
    Ok(())
}

fn check_bytes(field: &str, len: usize, cap: usize, fix: &str) -> Result<()> {
    if len > cap {
        return Err(Error::Invalid(format!(
            "`{field}` is {len} bytes, more than the {cap} bytes allowed ({} KiB): {fix}",
            cap / 1024
        )));
    }
    Ok(())
}

/// Refuses a delegation when `pending` tasks already wait and `cap` is reached.
pub fn check_pending(pending: u32, cap: u32) -> Result<()> {
    if pending >= cap {
        return Err(Error::Exhausted(format!(
            "{pending} tasks are already queued (the cap is {cap}, `CAESAR_MAX_PENDING`): \
             wait for some to finish (`caesar ps`), or cancel those you no longer need, then delegate again"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> DelegateInput {
        DelegateInput { objective: "do it".to_owned(), workspace: "/tmp".to_owned(), ..Default::default() }
    }

    #[test]
    fn await_ids_are_capped_and_the_cap_is_named() {
        assert!(check_await_ids(0).is_ok());
        assert!(check_await_ids(MAX_AWAIT_IDS).is_ok());
        let e = check_await_ids(MAX_AWAIT_IDS + 1).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)));
        let m = e.to_string();
        assert!(m.contains("1001") && m.contains("1000") && m.contains("batches"), "{m}");
    }

    #[test]
    fn objective_and_context_are_capped_with_field_size_and_cap() {
        let mut i = input();
        i.objective = "x".repeat(MAX_OBJECTIVE_BYTES);
        i.context = "y".repeat(MAX_CONTEXT_BYTES);
        assert!(check_delegate(&i).is_ok());
        i.objective.push('x');
        let m = check_delegate(&i).unwrap_err().to_string();
        assert!(m.contains("`objective`") && m.contains(&(MAX_OBJECTIVE_BYTES + 1).to_string()), "{m}");
        assert!(m.contains(&MAX_OBJECTIVE_BYTES.to_string()), "{m}");
        i.objective = "x".to_owned();
        i.context.push('y');
        let e = check_delegate(&i).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)));
        assert!(e.to_string().contains("`context`"), "{e}");
    }

    #[test]
    fn lists_are_capped_in_count_and_entry_size() {
        let mut i = input();
        i.constraints = vec!["c".to_owned(); MAX_LIST_ITEMS];
        i.acceptance_criteria = vec!["a".to_owned(); MAX_LIST_ITEMS];
        assert!(check_delegate(&i).is_ok());
        i.acceptance_criteria.push("a".to_owned());
        let m = check_delegate(&i).unwrap_err().to_string();
        assert!(m.contains("`acceptance_criteria`") && m.contains("101") && m.contains("100"), "{m}");
        i.acceptance_criteria.clear();
        i.constraints[3] = "z".repeat(MAX_ITEM_BYTES + 1);
        let m = check_delegate(&i).unwrap_err().to_string();
        assert!(m.contains("`constraints[3]`"), "{m}");
    }

    #[test]
    fn the_queue_is_capped_with_resource_exhausted() {
        assert!(check_pending(9, 10).is_ok());
        let e = check_pending(10, 10).unwrap_err();
        assert!(matches!(e, Error::Exhausted(_)));
        let m = e.to_string();
        assert!(m.contains("10 tasks are already queued") && m.contains("CAESAR_MAX_PENDING"), "{m}");
        assert_eq!(tonic::Status::from(e).code(), tonic::Code::ResourceExhausted);
    }
}
