//! Brendan Gregg's folded stacks (the input of flamegraph.pl and
//! inferno): one line per distinct stack, `comm;outer;...;inner COUNT`,
//! COUNT the threads that have it. Functions inlined at an address are
//! frames of their own; a blocked thread's kernel stack follows its user
//! stack, each kernel function marked `_[k]` as `perf script` collapsers
//! do. Threads without a user stack are left out. Goroutines follow, one
//! line per distinct stack under `comm;goroutine`, COUNT the goroutines
//! that have it (their wait is not on a thread: no kernel frames); then
//! asyncio tasks under `comm;asyncio task`, their await chains.

use std::{
    collections::BTreeMap,
    io::{self, Write},
};

use super::text::escape;
use crate::model::{Frame, Report};

/// A frame's name in a folded line: no `;` (the separator) and no control
/// character.
pub(super) fn clean(s: &str) -> String {
    escape(s).replace(';', ":")
}

/// The names of a user frame, outermost first: the function, then the
/// functions inlined in it; else module+offset, else the address. A
/// Python frame is its function with its file's name and line.
pub(super) fn names(f: &Frame, out: &mut Vec<String>) {
    // A Python frame as py-spy names it: `function (file.py:LINE)`.
    if let (true, Some(func)) = (f.python, &f.function) {
        let file = f.file.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p));
        out.push(clean(&match (file, f.line) {
            (Some(file), Some(line)) => format!("{func} ({file}:{line})"),
            (Some(file), None) => format!("{func} ({file})"),
            _ => func.clone(),
        }));
        return;
    }
    match (&f.function, &f.module, f.module_offset) {
        (Some(func), _, _) => out.push(clean(func)),
        (None, Some(m), Some(off)) => {
            let base = m.rsplit('/').next().unwrap_or(m);
            out.push(clean(&format!("{base}+{off:#x}")));
        }
        _ => out.push(format!("{:#x}", f.addr)),
    }
    out.extend(f.inlined.iter().map(|i| clean(&i.function)));
}

/// The folded stacks of a report.
pub fn folded(r: &Report, w: &mut dyn Write) -> io::Result<()> {
    let comm = r
        .process
        .comm
        .as_deref()
        .map(clean)
        .unwrap_or_else(|| format!("pid {}", r.process.pid));
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for t in r.threads.iter().filter(|t| !t.frames.is_empty()) {
        let mut names = vec![comm.clone()];
        for f in t.frames.iter().rev() {
            self::names(f, &mut names);
        }
        for k in t.kernel_stack.iter().rev() {
            let name = k
                .function
                .as_deref()
                .map(clean)
                .unwrap_or_else(|| format!("{:#x}", k.addr));
            names.push(format!("{name}_[k]"));
        }
        *lines.entry(names.join(";")).or_default() += 1;
    }
    for g in r.tasks.iter().filter_map(|t| t.go.as_ref()) {
        if g.stack.is_empty() {
            continue;
        }
        let mut names = vec![comm.clone(), "goroutine".to_string()];
        for f in g.stack.iter().rev() {
            self::names(f, &mut names);
        }
        *lines.entry(names.join(";")).or_default() += 1;
    }
    for p in r.tasks.iter().filter_map(|t| t.python.as_ref()) {
        if p.frames.is_empty() {
            continue;
        }
        let mut names = vec![comm.clone(), "asyncio task".to_string()];
        for f in p.frames.iter().rev() {
            self::names(f, &mut names);
        }
        *lines.entry(names.join(";")).or_default() += 1;
    }
    for (stack, n) in lines {
        writeln!(w, "{stack} {n}")?;
    }
    Ok(())
}
