//! `rip-probe dump` of a ring written by the original header-only librip
//! (what the original `read_rip -e EXE -r RING` read): each named slot
//! with its last addresses, newest first, in the order of their counters,
//! symbolized through `--exe BINARY` when that binary is not PIE.

use std::{collections::HashMap, io::Write, path::Path};

use librip::reader::{Follow, OriginalRing, RegularFile};

use super::output::Sink;
use crate::{
    error::{Error, Result},
    model::{
        Frame, SCHEMA_VERSION,
        original::{OriginalEntry, OriginalReport, OriginalSlot},
    },
    render::{self, escape},
    symbolize::Symbolizer,
};

/// ELF `e_type` of a position-dependent executable.
const ET_EXEC: u16 = 2;
/// ELF `e_type` of a shared object or PIE.
const ET_DYN: u16 = 3;

/// What the ELF header of `exe` says: position-dependent or not.
fn elf_type(exe: &Path) -> Result<u16> {
    let f = RegularFile::open(exe, Follow::Yes)
        .map_err(|e| Error::Usage(format!("--exe {}: {e}", exe.display())))?;
    let mut head = [0u8; 18];
    let n = f.read_at(0, &mut head).map_err(|e| Error::io(exe, e))?;
    if n < head.len() || head[..4] != *b"\x7fELF" {
        return Err(Error::Usage(format!(
            "--exe {}: not an ELF file: pass the program that wrote the ring",
            exe.display()
        )));
    }
    Ok(u16::from_le_bytes([head[16], head[17]]))
}

/// Dumps the original ring at `path` to `out`.
pub(crate) fn dump(path: &Path, exe: Option<&Path>, json: bool, out: &mut Sink) -> Result<()> {
    let ring = OriginalRing::open(path).map_err(Error::Ring)?;
    let mut warnings = Vec::new();
    let addrs: Vec<u64> = ring
        .slots
        .iter()
        .flat_map(|s| s.entries.iter().map(|e| e.addr))
        .collect();
    let frames: HashMap<u64, Frame> = match exe {
        None => {
            warnings.push(
                "no --exe BINARY: addresses are shown raw (pass the program that wrote the ring)"
                    .to_string(),
            );
            HashMap::new()
        }
        Some(exe) => match elf_type(exe)? {
            ET_EXEC => {
                let mut sym = Symbolizer::new();
                let f = sym.executable(exe, &addrs);
                warnings.extend(sym.take_warnings());
                f
            }
            ET_DYN => {
                warnings.push(format!(
                    "{} is position-independent (PIE): an original ring records no load address, so its addresses cannot be mapped to it; rebuild it with -no-pie to symbolize",
                    exe.display()
                ));
                HashMap::new()
            }
            t => {
                return Err(Error::Usage(format!(
                    "--exe {}: ELF type {t} is not an executable",
                    exe.display()
                )));
            }
        },
    };
    let frame = |addr: u64| {
        frames.get(&addr).cloned().unwrap_or(Frame {
            addr,
            ..Frame::default()
        })
    };
    let report = OriginalReport {
        schema: SCHEMA_VERSION,
        format: "original-librip".into(),
        path: path.display().to_string(),
        file_size: ring.file_size,
        slot_count: ring.slot_count,
        warnings,
        slots: ring
            .slots
            .iter()
            .map(|s| OriginalSlot {
                id: s.id,
                name: s.name.clone(),
                exited: s.exited,
                entries: s
                    .entries
                    .iter()
                    .map(|e| OriginalEntry {
                        counter: e.counter,
                        seq: e.seq,
                        addr: e.addr,
                        frame: frame(e.addr),
                    })
                    .collect(),
            })
            .collect(),
    };
    out.emit(|w| {
        if json {
            render::json(&report, w)
        } else {
            text(&report, w)
        }
    })
}

fn text(r: &OriginalReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "ring {} (original librip: no header, {} slots of 320 bytes)",
        escape(&r.path),
        r.slot_count
    )?;
    for wrn in &r.warnings {
        writeln!(out, "warning: {}", escape(wrn))?;
    }
    for s in &r.slots {
        writeln!(out)?;
        let state = if s.exited { "exited" } else { "live" };
        writeln!(
            out,
            "slot {} \"{}\" {state}, last {} snaps, newest first",
            s.id,
            escape(&s.name),
            s.entries.len()
        )?;
        for e in &s.entries {
            writeln!(
                out,
                "  {:>5}  {} <{:#x}>",
                format!("{{{}}}", e.counter),
                escape(&e.frame.describe()),
                e.addr
            )?;
        }
    }
    Ok(())
}
