//! A user stack as text lines, innermost first, like a debugger's
//! backtrace: `#3  0x55d0c1a2b3c4 stk_chain_b at src/chain.c:120
//! (user_stacks)`, functions inlined at an address on lines of their own
//! above it.

use std::io::{self, Write};

use crate::model::{Frame, StackSamples, short_path};

/// The line of a frame after its number and address: function (with its
/// offset when no line is known), source position, module.
fn describe(function: Option<&str>, file: Option<&str>, line: Option<u32>, f: &Frame) -> String {
    let mut s = match (function, f.function_offset) {
        (Some(func), Some(off)) if line.is_none() => format!("{func}+{off:#x}"),
        (Some(func), _) => func.to_string(),
        (None, _) => match (&f.module, f.module_offset) {
            (Some(m), Some(off)) => format!("{}+{off:#x}", basename(m)),
            _ => "??".to_string(),
        },
    };
    if let (Some(file), Some(line)) = (file, line) {
        s.push_str(&format!(" at {}:{line}", short_path(file)));
    }
    if function.is_some()
        && let Some(m) = &f.module
    {
        s.push_str(&format!(" ({})", basename(m)));
    }
    s
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Writes `frames` indented by `indent`, numbered from the innermost; a
/// sampled stack first says how often it was seen.
pub(super) fn write(
    frames: &[Frame],
    samples: Option<StackSamples>,
    indent: &str,
    w: &mut impl Write,
) -> io::Result<()> {
    if frames.is_empty() {
        return Ok(());
    }
    if let Some(s) = samples {
        writeln!(
            w,
            "{indent}hottest stack in the window, {} of {} samples:",
            s.count, s.total
        )?;
    }
    let mut n = 0;
    for f in frames {
        // Inlined functions, innermost first, each at the call site of
        // the next one out.
        for i in f.inlined.iter().rev() {
            writeln!(
                w,
                "{indent}#{n:<2} {:<14} {}",
                "inlined",
                describe(Some(&i.function), i.file.as_deref(), i.line, f)
            )?;
            n += 1;
        }
        let describe = describe(f.function.as_deref(), f.file.as_deref(), f.line, f);
        if f.python {
            // A Python frame has no code address of its own.
            writeln!(w, "{indent}#{n:<2} {:<14} {describe}", "python")?;
        } else {
            writeln!(w, "{indent}#{n:<2} {:<#14x} {describe}", f.addr)?;
        }
        n += 1;
    }
    Ok(())
}
