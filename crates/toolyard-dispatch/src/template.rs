//! The argv templates of the catalog's `[remote]` links, shared by the command link and the
//! Kubernetes settings.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// A `[remote] command`: a non-empty argv whose placeholders are `{lane}` and `{session}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandTemplate(pub Vec<String>);

impl<'de> Deserialize<'de> for CommandTemplate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let argv = Vec::<Arg>::deserialize(d)?;
        if argv.first().is_none_or(|p| p.0.trim().is_empty()) {
            return Err(D::Error::custom(
                "`command` needs at least the program to run, e.g. [\"podman\", \"exec\", \"-i\", \"box1\", \"toolyard\", \"runner\", \"--lane\", \"{lane}\", \"--workspace\", \"/workspace\"]",
            ));
        }
        Ok(Self(argv.into_iter().map(|a| a.0).collect()))
    }
}

/// One argument of the template, checked on its own.
struct Arg(String);

impl<'de> Deserialize<'de> for Arg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let arg = String::deserialize(d)?;
        if let Some(bad) = unknown_placeholder(&arg) {
            return Err(D::Error::custom(format!(
                "unknown placeholder `{{{bad}}}` in `{arg}`: only {{lane}} and {{session}} expand"
            )));
        }
        Ok(Self(arg))
    }
}

/// The first `{name}` in `arg` whose name is a word other than `lane` and `session`.
fn unknown_placeholder(arg: &str) -> Option<&str> {
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find('}')?;
        let name = &after[..close];
        let word = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if word && name != "lane" && name != "session" {
            return Some(name);
        }
        rest = &after[close + 1..];
    }
    None
}
