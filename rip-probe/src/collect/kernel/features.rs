//! What the running kernel offers rip's programs, probed at start: program
//! types, map types and helpers are asked of the kernel itself (a tiny
//! program or map is loaded and the verifier's answer read, as libbpf and
//! bpftool do), kernel types are looked up in its BTF. Never a version
//! number: distributions backport features, and RT kernels differ.

use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{BpfHelper, is_helper_supported, is_map_supported, is_program_supported},
};

use super::Error;
use super::layout::KernelLayout;
use crate::collect::Result;

/// The oldest kernel whose BPF has everything the design needs (ring
/// buffers and task iterators from 5.8, `bpf_get_task_stack` from 5.9).
pub const MINIMUM_KERNEL: &str = "5.9";

/// The answers of one probe of the running kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    /// `uname -r`.
    pub release: String,
    /// `bpf_task_pt_regs` and `bpf_get_current_task_btf` (5.15): the
    /// programs can ask the kernel where a task's user registers are, rather
    /// than finding them at the top of its kernel stack.
    pub task_pt_regs: bool,
}

/// The build of rip's register-reading programs a kernel gets (see
/// `rip-ebpf`'s programs module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegsSource {
    /// `bpf_task_pt_regs`.
    Helper,
    /// The frame at the top of the task's kernel stack.
    KernelStack,
}

impl KernelFeatures {
    /// Probes the running kernel. Fails with a one-line refusal when it
    /// lacks something rip cannot do without.
    pub(crate) fn probe(layout: &KernelLayout) -> Result<Self> {
        let release = kernel_release();
        let too_old = |missing: &'static str| -> crate::collect::Error {
            Error::KernelTooOld {
                release: release.clone(),
                missing,
                minimum: MINIMUM_KERNEL,
            }
            .into()
        };
        // An error from a probe itself (not a "no") means something else is
        // wrong (e.g. a seccomp filter); treat it as absent and say which.
        let map = |t| is_map_supported(t).unwrap_or(false);
        let prog = |t| is_program_supported(t).unwrap_or(false);
        let helper = |h| is_helper_supported(ProgramType::TracePoint, h).unwrap_or(false);

        if !prog(ProgramType::TracePoint) {
            return Err(too_old("BPF tracepoint programs"));
        }
        if !prog(ProgramType::RawTracePoint) {
            return Err(too_old("BPF raw tracepoint programs"));
        }
        if !map(MapType::RingBuf) {
            return Err(too_old("BPF ring buffers (BPF_MAP_TYPE_RINGBUF)"));
        }
        if !layout.task_iter {
            return Err(too_old("the BPF task iterator (bpf_iter__task)"));
        }
        if !helper(BpfHelper::BPF_FUNC_get_task_stack) {
            return Err(too_old("the bpf_get_task_stack helper"));
        }
        Ok(KernelFeatures {
            release,
            task_pt_regs: helper(BpfHelper::BPF_FUNC_task_pt_regs)
                && helper(BpfHelper::BPF_FUNC_get_current_task_btf),
        })
    }

    /// Which build of the register-reading programs to load.
    pub fn regs_source(&self) -> RegsSource {
        if self.task_pt_regs {
            RegsSource::Helper
        } else {
            RegsSource::KernelStack
        }
    }
}

impl RegsSource {
    /// The names of the sched_switch and task iterator programs of this
    /// build.
    pub fn programs(self) -> (&'static str, &'static str) {
        use rip_ebpf::names;
        match self {
            RegsSource::Helper => (names::SCHED_SWITCH, names::TASK_ITER),
            RegsSource::KernelStack => (names::SCHED_SWITCH_KSTACK, names::TASK_ITER_KSTACK),
        }
    }

    /// The name of the lean task iterator of this build (see
    /// [`super::KernelProbe::waits`]).
    pub fn waits_program(self) -> &'static str {
        use rip_ebpf::names;
        match self {
            RegsSource::Helper => names::TASK_WAITS,
            RegsSource::KernelStack => names::TASK_WAITS_KSTACK,
        }
    }
}

pub use super::layout::kernel_release;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_regs_source_names_programs_of_the_object() {
        let obj = aya_obj::Object::parse(super::super::EBPF_OBJECT).expect("rip-ebpf parses");
        for src in [RegsSource::Helper, RegsSource::KernelStack] {
            let (switch, iter) = src.programs();
            assert!(obj.programs.contains_key(switch), "{switch} in the object");
            assert!(obj.programs.contains_key(iter), "{iter} in the object");
            let waits = src.waits_program();
            assert!(obj.programs.contains_key(waits), "{waits} in the object");
        }
        assert_ne!(
            RegsSource::Helper.programs(),
            RegsSource::KernelStack.programs()
        );
    }

    #[test]
    fn helper_absence_selects_the_kernel_stack_build() {
        let old = KernelFeatures {
            release: "5.10.0-35-amd64".into(),
            task_pt_regs: false,
        };
        assert_eq!(old.regs_source(), RegsSource::KernelStack);
        let new = KernelFeatures {
            task_pt_regs: true,
            ..old
        };
        assert_eq!(new.regs_source(), RegsSource::Helper);
    }

    #[test]
    fn refusal_names_what_is_missing_the_kernel_and_the_minimum() {
        let e = Error::KernelTooOld {
            release: "5.4.0-150-generic".into(),
            missing: "the BPF task iterator (bpf_iter__task)",
            minimum: MINIMUM_KERNEL,
        }
        .to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        for want in [
            "5.4.0-150-generic",
            "bpf_iter__task",
            "Linux 5.9",
            "CONFIG_DEBUG_INFO_BTF",
        ] {
            assert!(e.contains(want), "{want:?} in {e:?}");
        }
    }

    /// On the machine the tests run on, probing succeeds and agrees with
    /// what the kernel's BTF says about the helper.
    #[test]
    fn probe_of_running_kernel() {
        if std::env::var("RIP_SKIP_BPF_TESTS").is_ok_and(|v| v == "1") {
            eprintln!("SKIPPED probe_of_running_kernel: RIP_SKIP_BPF_TESTS=1 is set");
            return;
        }
        let btf = super::super::btf::KernelBtf::load().expect("kernel BTF");
        let layout = KernelLayout::derive(&btf).expect("layout");
        let f = KernelFeatures::probe(&layout).expect("this kernel is supported");
        assert!(!f.release.is_empty());
        assert_eq!(
            f.task_pt_regs,
            btf.has_enum_value("bpf_func_id", "BPF_FUNC_task_pt_regs")
        );
    }
}
