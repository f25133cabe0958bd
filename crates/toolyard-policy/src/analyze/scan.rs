//! Quick scans of a whole script before the walk: the variables it assigns, and the fork
//! bomb's shape.

use super::*;

/// Collect variables the code assigns (assignments, `for`, `read`, `printf -v`, ...).
pub(super) fn prescan(root: Node, src: &str, set: &mut HashSet<String>) {
    let mut stack = vec![root];
    let mut budget = 500_000usize;
    while let Some(n) = stack.pop() {
        budget = budget.saturating_sub(1);
        if budget == 0 {
            break;
        }
        match n.kind() {
            "variable_assignment" => {
                if let Some(v) = n.child_by_field_name("name") {
                    let v = if v.kind() == "subscript" {
                        v.child_by_field_name("name").unwrap_or(v)
                    } else {
                        v
                    };
                    set.insert(text(v, src).to_string());
                }
            }
            "for_statement" => {
                if let Some(v) = n.child_by_field_name("variable") {
                    set.insert(text(v, src).to_string());
                }
            }
            "command" => {
                let name = n
                    .child_by_field_name("name")
                    .map(|k| text(k, src))
                    .unwrap_or("");
                if matches!(
                    name,
                    "read"
                        | "mapfile"
                        | "readarray"
                        | "getopts"
                        | "printf"
                        | "declare"
                        | "typeset"
                        | "local"
                        | "export"
                ) {
                    for (k, f) in kids(n) {
                        if f == Some("argument") {
                            let a = text(k, src);
                            if !a.is_empty()
                                && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                            {
                                set.insert(a.to_string());
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        let mut c = n.walk();
        if c.goto_first_child() {
            loop {
                stack.push(c.node());
                if !c.goto_next_sibling() {
                    break;
                }
            }
        }
    }
}

/// A function that calls itself in a pipeline or in the background (`:(){ :|:& };:`).
pub(super) fn fork_bomb(name: &str, body: Node, src: &str) -> bool {
    let mut calls = 0;
    let mut spawned = false;
    let mut stack = vec![body];
    let mut budget = 100_000usize;
    while let Some(n) = stack.pop() {
        budget = budget.saturating_sub(1);
        if budget == 0 {
            break;
        }
        if n.kind() == "command"
            && n.child_by_field_name("name").map(|k| text(k, src)) == Some(name)
        {
            calls += 1;
            let in_pipe = n.parent().is_some_and(|p| p.kind() == "pipeline");
            let in_bg = n.next_sibling().is_some_and(|s| s.kind() == "&")
                || n.parent()
                    .and_then(|p| p.next_sibling())
                    .is_some_and(|s| s.kind() == "&");
            spawned |= in_pipe || in_bg;
        }
        let mut c = n.walk();
        if c.goto_first_child() {
            loop {
                stack.push(c.node());
                if !c.goto_next_sibling() {
                    break;
                }
            }
        }
    }
    spawned || calls >= 2
}
