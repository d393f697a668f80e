//! Which sched_switch program a session runs, chosen when it loads.
//!
//! Each per-switch program of rip-ebpf comes as a BTF-typed tracepoint
//! (`tp_btf`), which reads the switching tasks by plain loads, and as raw
//! tracepoints (one per build of the register-reading code), which read
//! them through helpers. The BTF-typed one costs a switch less; the raw
//! ones load on every kernel rip supports. The choice is the kernel's:
//! the BTF-typed program is loaded first, and its refusal (a kernel
//! without `btf_trace_sched_switch`, a verifier that rejects what the
//! program does) is the feature probe that selects the raw build, with
//! the reason kept. Nothing is assumed from a version number.

use aya::{
    Ebpf,
    programs::{
        BtfTracePoint, RawTracePoint, raw_trace_point::RawTracePointLink, tp_btf::BtfTracePointLink,
    },
};

use super::{Error, ProgramOp, features::RegsSource, layout, program};
use crate::{collect::Result, util::timing};

/// The sched_switch tracepoint, as both program types name it.
const TRACEPOINT: &str = "sched_switch";

/// The program that runs at each context switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchProgram {
    /// The BTF-typed tracepoint.
    Btf,
    /// The raw tracepoint, in this build of the register-reading code.
    Raw(RegsSource),
}

/// The programs of one kind of per-switch work, by rip-ebpf's names.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SwitchNames {
    /// The BTF-typed tracepoint.
    pub(crate) btf: &'static str,
    /// The raw tracepoint reading registers with `bpf_task_pt_regs`.
    pub(crate) raw_helper: &'static str,
    /// The raw tracepoint reading them from the top of the kernel stack.
    pub(crate) raw_kstack: &'static str,
}

impl SwitchNames {
    /// The name of `program` among these.
    pub(crate) fn of(&self, program: SwitchProgram) -> &'static str {
        match program {
            SwitchProgram::Btf => self.btf,
            SwitchProgram::Raw(RegsSource::Helper) => self.raw_helper,
            SwitchProgram::Raw(RegsSource::KernelStack) => self.raw_kstack,
        }
    }
}

/// What to try: the BTF-typed program first unless a build of the raw
/// one is forced (`forced`: a test standing in for an older kernel) or
/// `RIP_PROBE_TP_BTF=0` asks for the raw one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// Try the BTF-typed program.
    pub(crate) btf: bool,
    /// The raw build to fall back on.
    pub(crate) raw: RegsSource,
}

impl Wanted {
    /// What a session tries, given the kernel's register build and an
    /// optional forced one.
    pub(crate) fn new(kernel: RegsSource, forced: Option<RegsSource>) -> Self {
        Wanted {
            btf: forced.is_none() && !raw_asked(),
            raw: forced.unwrap_or(kernel),
        }
    }
}

/// Whether `RIP_PROBE_TP_BTF=0` asks for the raw tracepoint programs.
pub(crate) fn raw_asked() -> bool {
    std::env::var("RIP_PROBE_TP_BTF").is_ok_and(|v| v == "0")
}

/// The program a session loaded, and why not the BTF-typed one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchChoice {
    /// The program loaded.
    pub program: SwitchProgram,
    /// Its name in the object (as `bpftool prog` shows it).
    pub name: &'static str,
    /// Why the BTF-typed program is not the one: the kernel's refusal in
    /// one line, or that it was not asked for. `None` when it is.
    pub fallback: Option<String>,
}

/// Loads the first program of `names` that is wanted and that the
/// kernel takes (see the module's documentation), for programs whose maps
/// do not depend on which: a refused program leaves nothing behind.
pub(crate) fn load(ebpf: &mut Ebpf, names: SwitchNames, wanted: Wanted) -> Result<SwitchChoice> {
    let why = if wanted.btf {
        match try_btf(ebpf, names.btf) {
            Ok(()) => return Ok(btf_choice(names)),
            Err(why) => why,
        }
    } else {
        wanted.not_btf()
    };
    load_raw(ebpf, names, wanted.raw, why)
}

impl Wanted {
    /// Why the BTF-typed program is not tried.
    pub(crate) fn not_btf(&self) -> String {
        if raw_asked() {
            "RIP_PROBE_TP_BTF=0 asks for the raw tracepoint".to_string()
        } else {
            "a build of the raw tracepoint was asked for".to_string()
        }
    }
}

/// The choice of the BTF-typed program of `names`, once it loaded.
pub(crate) fn btf_choice(names: SwitchNames) -> SwitchChoice {
    timing::mark("sched_switch program", names.btf);
    SwitchChoice {
        program: SwitchProgram::Btf,
        name: names.btf,
        fallback: None,
    }
}

/// Loads the raw tracepoint of `names` in build `regs`, the BTF-typed one
/// not being taken for the reason `why`.
pub(crate) fn load_raw(
    ebpf: &mut Ebpf,
    names: SwitchNames,
    regs: RegsSource,
    why: String,
) -> Result<SwitchChoice> {
    let program = SwitchProgram::Raw(regs);
    let name = names.of(program);
    let prog: &mut RawTracePoint = super::program(ebpf, name)?;
    prog.load()
        .map_err(|e| Error::program(ProgramOp::Load, TRACEPOINT, e))?;
    timing::mark("sched_switch program", &format!("{name} ({why})"));
    Ok(SwitchChoice {
        program,
        name,
        fallback: Some(why),
    })
}

/// Loads the BTF-typed program `name`; the kernel's refusal in one line.
pub(crate) fn try_btf(ebpf: &mut Ebpf, name: &str) -> std::result::Result<(), String> {
    let layout = layout::KernelLayout::shared().map_err(|e| e.to_string())?;
    if layout.switch_tp_id == 0 {
        return Err(format!("the kernel's BTF has no {}", layout::SWITCH_TP));
    }
    let btf = layout::aya_shared().map_err(|e| e.to_string())?;
    let prog: &mut BtfTracePoint = program(ebpf, name).map_err(|e| e.to_string())?;
    prog.load(TRACEPOINT, btf).map_err(|e| refusal(&e))
}

/// A program load's error in one line: the syscall's answer and the
/// verifier's last words, which say what it refused.
fn refusal(e: &aya::programs::ProgramError) -> String {
    match e {
        aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            match last_words(&log) {
                Some(last) => format!("the kernel refused it ({io_error}): {last}"),
                None => format!("the kernel refused it ({io_error})"),
            }
        }
        e => e.to_string(),
    }
}

/// The verifier's last line that says something of the program: the
/// statistics it prints after its verdict (`processed N insns …`,
/// `verification time …`, `stack depth …`) say nothing of why.
fn last_words(log: &str) -> Option<&str> {
    const STATISTICS: [&str; 3] = ["processed ", "verification time", "stack depth"];
    log.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !STATISTICS.iter().any(|s| l.starts_with(s)))
}

/// An attached sched_switch program: dropping it detaches it.
#[expect(
    dead_code,
    reason = "the links are held for their drop: closing one detaches the program"
)]
pub(crate) enum SwitchLink {
    /// The BTF-typed tracepoint's link.
    Btf(BtfTracePointLink),
    /// The raw tracepoint's link.
    Raw(RawTracePointLink),
}

/// Attaches the program `choice` loaded, and takes its link out of the
/// program (so that it can be dropped apart from it).
pub(crate) fn attach(ebpf: &mut Ebpf, choice: &SwitchChoice) -> Result<SwitchLink> {
    let attach_err = |e| Error::program(ProgramOp::Attach, "sched:sched_switch", e);
    let take_err = |e| Error::program(ProgramOp::TakeLink, "the sched_switch link", e);
    Ok(match choice.program {
        SwitchProgram::Btf => {
            let prog: &mut BtfTracePoint = program(ebpf, choice.name)?;
            let id = prog.attach().map_err(attach_err)?;
            SwitchLink::Btf(prog.take_link(id).map_err(take_err)?)
        }
        SwitchProgram::Raw(_) => {
            let prog: &mut RawTracePoint = program(ebpf, choice.name)?;
            let id = prog.attach(TRACEPOINT).map_err(attach_err)?;
            SwitchLink::Raw(prog.take_link(id).map_err(take_err)?)
        }
    })
}

/// The programs under the cost of any sched_switch program, for the
/// benchmark (`rip-bench-uprobe --switch-floor`): `floor_nothing` (the
/// dispatch of an empty BTF-typed program) and `floor_clock`
/// (`bpf_ktime_get_ns` alone).
pub const FLOOR_PROGRAMS: [&str; 2] = ["floor_nothing", "floor_clock"];

/// One of [`FLOOR_PROGRAMS`], attached to sched_switch while this lives.
pub struct SwitchFloor {
    _ebpf: Ebpf,
    _link: BtfTracePointLink,
}

impl SwitchFloor {
    /// Loads and attaches floor program `name`; the error says why not
    /// in a line.
    pub fn attach(name: &str) -> std::result::Result<SwitchFloor, String> {
        if !FLOOR_PROGRAMS.contains(&name) {
            return Err(format!(
                "no floor program {name:?}: one of {FLOOR_PROGRAMS:?}"
            ));
        }
        let mut ebpf = super::loader_without_session_maps()
            .load(super::EBPF_OBJECT)
            .map_err(|e| Error::load(e).to_string())?;
        try_btf(&mut ebpf, name).map_err(|why| format!("the kernel refused {name}: {why}"))?;
        let prog: &mut BtfTracePoint = program(&mut ebpf, name).map_err(|e| e.to_string())?;
        let id = prog
            .attach()
            .map_err(|e| format!("attaching {name} to sched_switch: {e}"))?;
        let link = prog
            .take_link(id)
            .map_err(|e| format!("taking {name}'s link: {e}"))?;
        Ok(SwitchFloor {
            _ebpf: ebpf,
            _link: link,
        })
    }
}

/// What a report must say of the BTF-typed program's slots (see
/// `rip_ebpf::ThreadSlot`): threads whose switches went unrecorded, and
/// exited threads whose records a newer thread took. Nothing when
/// neither happened.
pub fn slot_warnings(stats: &rip_ebpf::SlotStats) -> Vec<String> {
    let mut out = Vec::new();
    if stats.full > 0 {
        out.push(format!(
            "sched_switch's per-thread table had no slot left for {} switches of threads \
             created during the window: those threads' blocked times come from their own \
             clocks (bounds), not from their switches",
            stats.full
        ));
    }
    if stats.reused > 0 {
        out.push(format!(
            "{} threads that exited during the window gave their slot in sched_switch's \
             per-thread table to newer threads: their last switches are not in the report",
            stats.reused
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason a kernel refuses a program is the verifier's verdict,
    /// not the statistics it prints after it (5.10's refusal of the
    /// BTF-typed program showed only those).
    #[test]
    fn a_refusal_names_the_verdict_not_the_statistics() {
        let log = "0: (79) r6 = *(u64 *)(r1 +8)\n\
                   1: (db) lock *(u64 *)(r6 +0) += r7\n\
                   BPF_ATOMIC stores into R6 tp_btf is not allowed\n\
                   processed 2 insns (limit 1000000) max_states_per_insn 0 total_states 0 \
                   peak_states 0 mark_read 0\n\
                   verification time 31 usec\n\
                   stack depth 0\n\n";
        assert_eq!(
            last_words(log),
            Some("BPF_ATOMIC stores into R6 tp_btf is not allowed")
        );
        assert_eq!(last_words("processed 1 insns (limit 1000000)\n"), None);
        assert_eq!(last_words(""), None);
    }

    const NAMES: SwitchNames = SwitchNames {
        btf: rip_ebpf::names::SCHED_SWITCH_BTF,
        raw_helper: rip_ebpf::names::SCHED_SWITCH,
        raw_kstack: rip_ebpf::names::SCHED_SWITCH_KSTACK,
    };

    #[test]
    fn every_switch_program_is_in_the_object_with_its_type() {
        let obj = aya_obj::Object::parse(super::super::EBPF_OBJECT).expect("rip-ebpf parses");
        let offcpu = SwitchNames {
            btf: rip_ebpf::offcpu::names::OFFCPU_SWITCH_BTF,
            raw_helper: rip_ebpf::offcpu::names::OFFCPU_SWITCH,
            raw_kstack: rip_ebpf::offcpu::names::OFFCPU_SWITCH_KSTACK,
        };
        for names in [NAMES, offcpu] {
            for (name, btf) in [
                (names.btf, true),
                (names.raw_helper, false),
                (names.raw_kstack, false),
            ] {
                let p = obj.programs.get(name).unwrap_or_else(|| panic!("{name}"));
                let section = &p.section;
                assert_eq!(
                    matches!(section, aya_obj::ProgramSection::BtfTracePoint),
                    btf,
                    "{name}: {section:?}"
                );
                assert_eq!(
                    matches!(section, aya_obj::ProgramSection::RawTracePoint),
                    !btf,
                    "{name}: {section:?}"
                );
            }
        }
    }

    #[test]
    fn full_and_reused_slots_are_said_and_nothing_else() {
        use rip_ebpf::SlotStats;
        assert!(
            slot_warnings(&SlotStats {
                claimed: 7,
                ..SlotStats::default()
            })
            .is_empty()
        );
        let w = slot_warnings(&SlotStats {
            claimed: 7,
            reused: 2,
            full: 3,
        });
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("no slot left for 3 switches"), "{w:?}");
        assert!(w[1].starts_with("2 threads that exited"), "{w:?}");
        assert!(w.iter().all(|l| !l.contains('\n')));
    }

    #[test]
    fn a_forced_build_skips_the_btf_program_and_falls_back_to_the_kernels() {
        assert_eq!(
            Wanted::new(RegsSource::Helper, Some(RegsSource::KernelStack)),
            Wanted {
                btf: false,
                raw: RegsSource::KernelStack
            }
        );
        let auto = Wanted::new(RegsSource::KernelStack, None);
        assert_eq!(auto.raw, RegsSource::KernelStack);
        assert_eq!(auto.btf, !raw_asked());
        assert_eq!(NAMES.of(SwitchProgram::Btf), "switch_btf");
        assert_eq!(
            NAMES.of(SwitchProgram::Raw(RegsSource::KernelStack)),
            "switch_kstack"
        );
    }
}
