//! Attaches rip-probe's `fn_entry` uprobe to a function of a process
//! through rip-probe's library (`KernelProbe::attach`, `uprobe::resolve`,
//! `attach_uprobes`), for the benchmark's uprobe row. Unlike the CLI, it
//! never reads the switch-event ring buffer, so no event wakes it.
//!
//! Usage: `rip-bench-uprobe PID FUNCTION`. Prints `attached N uprobes` and
//! keeps everything attached until killed.
//!
//! `rip-bench-uprobe --switch-floor PROGRAM` attaches one of the programs
//! under any sched_switch program's cost instead (`floor_nothing`,
//! `floor_clock`: see rip-ebpf's `floor_programs.rs`), prints `attached
//! PROGRAM` and keeps it attached until killed.

use std::io::Write;

use rip_probe::collect::kernel::{KernelProbe, switch, uprobe};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--switch-floor") {
        switch_floor(args.get(2).map_or("", String::as_str));
    }
    let (Some(pid), Some(function)) = (args.get(1).and_then(|p| p.parse().ok()), args.get(2))
    else {
        eprintln!("usage: rip-bench-uprobe PID FUNCTION | --switch-floor PROGRAM");
        std::process::exit(2);
    };
    let attached = uprobe::resolve(pid, function).and_then(|sites| {
        let mut probe = KernelProbe::attach(pid, false)?;
        probe.attach_uprobes(&sites)?;
        Ok((probe, sites.len()))
    });
    keep(attached.map(|(probe, n)| (probe, format!("attached {n} uprobes"))))
}

/// Attaches floor program `name` and keeps it until killed.
fn switch_floor(name: &str) -> ! {
    keep(switch::SwitchFloor::attach(name).map(|f| (f, format!("attached {name}"))))
}

/// Says `line` and keeps what was attached until killed, or says why
/// nothing was and exits 1.
fn keep<T, E: std::fmt::Display>(attached: Result<(T, String), E>) -> ! {
    let (_kept, line) = match attached {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rip-bench-uprobe: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|_| out.flush())
        .expect("stdout");
    loop {
        std::thread::park();
    }
}
