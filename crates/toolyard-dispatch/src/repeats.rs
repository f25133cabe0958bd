//! The third time a session makes the same failing call (tool, arguments and error alike), the
//! error says so and what to try instead: a model in a loop otherwise retries the same thing
//! until its budget is gone.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use serde_json::Value;
use toolyard_core::ToolResult;

/// How many identical failures make a repeat worth saying.
const SAY_AT: u32 = 3;
/// Failures remembered before the oldest are forgotten (a long session stays bounded).
const REMEMBERED: usize = 4096;

/// Identical failed calls counted per session.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    seen: Mutex<HashMap<u64, u32>>,
}

impl Repeats {
    /// Count `result` if it is a failure, and from the third identical one on, append a note.
    pub(crate) fn note(&self, session: &str, tool: &str, args: &Value, result: &mut ToolResult) {
        if result.success {
            return;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (session, tool, args.to_string(), &result.output).hash(&mut h);
        let key = h.finish();
        let n = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.len() >= REMEMBERED && !seen.contains_key(&key) {
                seen.clear();
            }
            let n = seen.entry(key).or_default();
            *n += 1;
            *n
        };
        if n < SAY_AT {
            return;
        }
        let note = format!(
            "\n[This exact call ({tool} with the same arguments) has now failed {n} times in this \
             session with the same error. Repeating it will fail again: change the arguments as \
             the error says, read the file or directory again to see it as it is now, or try \
             another tool or approach.]"
        );
        result.output.push_str(&note);
        if let Some(error) = result.error.as_mut() {
            error.push_str(&note);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_third_identical_failure_says_so_and_others_do_not() {
        let r = Repeats::default();
        let args = json!({"path": "a.rs", "old_string": "x"});
        let fail = || ToolResult::failure("not_found", "old_string was not found in a.rs");
        for n in 1..=4 {
            let mut res = fail();
            r.note("s1", "edit_file", &args, &mut res);
            assert_eq!(
                res.output.contains("has now failed"),
                n >= 3,
                "{n}: {}",
                res.output
            );
        }
        // Another session, other arguments, a success: counted apart or not at all.
        let mut res = fail();
        r.note("s2", "edit_file", &args, &mut res);
        assert!(!res.output.contains("has now failed"));
        let mut res = fail();
        r.note("s1", "edit_file", &json!({"path": "b.rs"}), &mut res);
        assert!(!res.output.contains("has now failed"));
        let mut ok = ToolResult::ok("done");
        r.note("s1", "edit_file", &args, &mut ok);
        assert_eq!(ok.output, "done");
    }
}
