//! Attaches rip-probe's `fn_entry` uprobe to a function of a process
//! through rip-probe's library (`KernelProbe::attach`, `uprobe::resolve`,
//! `attach_uprobes`), for the benchmark's uprobe row. Unlike the CLI, it
//! never reads the switch-event ring buffer, so no event wakes it.
//!
//! Usage: `rip-bench-uprobe PID FUNCTION`. Prints `attached N uprobes` and
//! keeps everything attached until killed.

use std::io::Write;

use rip_probe::collect::kernel::{KernelProbe, uprobe};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(pid), Some(function)) = (args.get(1).and_then(|p| p.parse().ok()), args.get(2))
    else {
        eprintln!("usage: rip-bench-uprobe PID FUNCTION");
        std::process::exit(2);
    };
    let attached = uprobe::resolve(pid, function).and_then(|sites| {
        let mut probe = KernelProbe::attach(pid, false)?;
        probe.attach_uprobes(&sites)?;
        Ok((probe, sites.len()))
    });
    let (_probe, n) = match attached {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rip-bench-uprobe: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "attached {n} uprobes")
        .and_then(|_| out.flush())
        .expect("stdout");
    loop {
        std::thread::park();
    }
}
