//! Words and small layouts the text views share: plurals, elided id
//! lists, where a location came from, truncation.

use crate::{
    model::{Location, LocationSource, Thread},
    util::timefmt::duration,
};

/// Tids listed in a group line before eliding; JSON has them all.
const MAX_IDS: usize = 12;

pub(super) fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub(super) fn ids(v: &[u64]) -> String {
    let mut s: Vec<String> = v.iter().take(MAX_IDS).map(u64::to_string).collect();
    if v.len() > MAX_IDS {
        s.push(format!("… (+{})", v.len() - MAX_IDS));
    }
    s.join(" ")
}

pub(super) fn source_word(s: Option<LocationSource>) -> &'static str {
    match s {
        Some(LocationSource::Ring) | None => "last snap",
        Some(LocationSource::Uprobe) => "last entered",
        Some(LocationSource::UserPc) => "user pc",
        Some(LocationSource::Python) => "awaiting in",
    }
}

pub(super) fn location_text(l: &Option<Location>) -> String {
    match l {
        Some(l) => {
            let mut s = l.frame.describe();
            if l.source != LocationSource::Ring {
                s.push_str(&format!(" [{}]", source_word(Some(l.source))));
            }
            if let Some(ago) = l.ago_ns {
                s.push_str(&format!(" ({} ago)", duration(ago)));
            }
            s
        }
        None => "-".into(),
    }
}

pub(super) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// What a thread is doing, in a few words: `blocked in read(…) for ≥41s`,
/// `running`, `sleeping`.
pub(super) fn doing(t: &Thread) -> String {
    let state = t.state.as_str();
    match (&t.syscall, &t.blocked) {
        (Some(s), Some(b)) => format!(
            "{state} in {} for {}{}",
            s.text,
            if b.exact { "" } else { "≥" },
            duration(b.ns)
        ),
        (Some(s), None) => format!("{state} in {}", s.text),
        _ => state.to_string(),
    }
}
