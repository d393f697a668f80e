//! Kernel type layouts from BTF (`/sys/kernel/btf/vmlinux`). Rust eBPF gets
//! no CO-RE relocations, so the offsets the programs need are computed here
//! at run time and handed to them as globals.

use std::{path::Path, sync::OnceLock};

use btf_rs::{Btf, Struct, Type};
use rip_ebpf::{PtRegsOffsets, TaskOffsets};

use super::Error;
use crate::collect::Result;

/// Where the running kernel publishes its BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// The kernel's BTF, parsed once.
pub struct KernelBtf {
    btf: Btf,
}

fn err(what: String) -> crate::collect::Error {
    Error::Unexpected {
        path: VMLINUX.into(),
        what,
    }
    .into()
}

impl KernelBtf {
    /// Loads the running kernel's BTF, or [`Error::NoBtf`].
    pub fn load() -> Result<Self> {
        if !Path::new(VMLINUX).exists() {
            return Err(Error::NoBtf.into());
        }
        // read(), never mmap: sysfs BTF can be mapped only from 6.x kernels
        // newer than many in use (6.1 and 6.12 answer ENODEV).
        let bytes = std::fs::read(VMLINUX).map_err(|source| Error::Read {
            path: VMLINUX.into(),
            source,
        })?;
        Self::from_bytes(&bytes)
    }

    /// The running kernel's BTF, parsed once per run and shared by every
    /// target and command: a parse holds tens of megabytes, and `--cgroup`
    /// sets up one session per process.
    pub fn shared() -> Result<&'static Self> {
        static PARSED: OnceLock<KernelBtf> = OnceLock::new();
        if let Some(btf) = PARSED.get() {
            return Ok(btf);
        }
        let btf = Self::load()?;
        Ok(PARSED.get_or_init(|| btf))
    }

    /// Parses BTF from its raw bytes (the format of `/sys/kernel/btf/vmlinux`).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let btf = Btf::from_bytes(bytes).map_err(|e| err(e.to_string()))?;
        Ok(KernelBtf { btf })
    }

    /// Whether the kernel defines `struct name` (feature detection: e.g.
    /// `bpf_iter__task` exists where the BPF task iterator does).
    pub fn has_struct(&self, name: &str) -> bool {
        self.named_struct(name).is_ok()
    }

    /// Whether `enum name` has the enumerator `value` (e.g. `bpf_func_id`
    /// lists every helper the kernel knows).
    #[cfg(test)]
    pub fn has_enum_value(&self, name: &str, value: &str) -> bool {
        let Ok(types) = self.btf.resolve_types_by_name(name) else {
            return false;
        };
        types.into_iter().any(|t| match t {
            Type::Enum(e) => e
                .members
                .iter()
                .any(|m| self.btf.resolve_name(m).is_ok_and(|n| n == value)),
            _ => false,
        })
    }

    /// The BTF id of function `name`.
    pub fn func_id(&self, name: &str) -> Result<u32> {
        let ids = self
            .btf
            .resolve_ids_by_name(name)
            .map_err(|e| err(format!("function {name}: {e}")))?;
        ids.into_iter()
            .find(|&id| matches!(self.btf.resolve_type_by_id(id), Ok(Type::Func(_))))
            .ok_or_else(|| err(format!("no function {name}")))
    }

    /// The BTF id of typedef `name`.
    pub fn typedef_id(&self, name: &str) -> Result<u32> {
        let ids = self
            .btf
            .resolve_ids_by_name(name)
            .map_err(|e| err(format!("typedef {name}: {e}")))?;
        ids.into_iter()
            .find(|&id| matches!(self.btf.resolve_type_by_id(id), Ok(Type::Typedef(_))))
            .ok_or_else(|| err(format!("no typedef {name}")))
    }

    /// `sizeof(struct name)`.
    pub fn size_of(&self, name: &str) -> Result<u32> {
        let st = self.named_struct(name)?;
        u32::try_from(st.size()).map_err(|_| err(format!("struct {name} is too large")))
    }

    /// The offset of the first of `names` that `struct name` has: members
    /// the kernel renamed over the versions it supports, newest name first.
    pub fn offset_of_any(&self, name: &str, names: &[&str]) -> Result<u32> {
        names
            .iter()
            .find_map(|n| self.offset_of(name, n).ok())
            .ok_or_else(|| err(format!("struct {name} has none of {}", names.join(", "))))
    }

    fn named_struct(&self, name: &str) -> Result<Struct> {
        let types = self
            .btf
            .resolve_types_by_name(name)
            .map_err(|e| err(format!("struct {name}: {e}")))?;
        types
            .into_iter()
            .find_map(|t| match t {
                Type::Struct(s) => Some(s),
                _ => None,
            })
            .ok_or_else(|| err(format!("no struct {name}")))
    }

    /// Strips typedefs and qualifiers down to a struct or union, if any.
    fn as_aggregate(&self, mut t: Type) -> Option<Struct> {
        for _ in 0..16 {
            match t {
                Type::Struct(s) | Type::Union(s) => return Some(s),
                Type::Typedef(_) | Type::Const(_) | Type::Volatile(_) | Type::Restrict(_) => {
                    t = self.btf.resolve_chained_type(t.as_btf_type()?).ok()?;
                }
                _ => return None,
            }
        }
        None
    }

    /// Byte offset of `member` in `st`, looking inside anonymous structs and
    /// unions (the kernel groups many task_struct members that way).
    fn find_member(&self, st: &Struct, member: &str, depth: u32) -> Option<u32> {
        for m in &st.members {
            let name = self.btf.resolve_name(m).unwrap_or_default();
            if m.bit_offset() % 8 != 0 {
                continue;
            }
            let here = m.bit_offset() / 8;
            if name == member {
                return Some(here);
            }
            if name.is_empty() && depth < 8 {
                let inner = self.btf.resolve_chained_type(m).ok()?;
                if let Some(inner) = self.as_aggregate(inner)
                    && let Some(off) = self.find_member(&inner, member, depth + 1)
                {
                    return Some(here + off);
                }
            }
        }
        None
    }

    /// Byte offset of a dotted member path such as `se.exec_start` in
    /// `struct name`.
    pub fn offset_of(&self, name: &str, path: &str) -> Result<u32> {
        let mut st = self.named_struct(name)?;
        let mut total = 0u32;
        let mut parts = path.split('.').peekable();
        while let Some(part) = parts.next() {
            let off = self
                .find_member(&st, part, 0)
                .ok_or_else(|| err(format!("struct {name} has no member {path}")))?;
            total += off;
            if parts.peek().is_some() {
                let m = self
                    .member_type(&st, part)
                    .ok_or_else(|| err(format!("{name}.{path}: {part} is not a struct")))?;
                st = m;
            }
        }
        Ok(total)
    }

    /// The struct type of member `member` of `st` (searching anonymous
    /// aggregates like [`Self::find_member`]).
    fn member_type(&self, st: &Struct, member: &str) -> Option<Struct> {
        for m in &st.members {
            let name = self.btf.resolve_name(m).unwrap_or_default();
            let ty = self.btf.resolve_chained_type(m).ok()?;
            if name == member {
                return self.as_aggregate(ty);
            }
            if name.is_empty()
                && let Some(inner) = self.as_aggregate(ty)
                && let Some(found) = self.member_type(&inner, member)
            {
                return Some(found);
            }
        }
        None
    }

    /// Offsets of the syscall registers in `struct pt_regs` (x86-64).
    pub fn pt_regs(&self) -> Result<PtRegsOffsets> {
        let o = |m| self.offset_of("pt_regs", m);
        Ok(PtRegsOffsets {
            orig_ax: o("orig_ax")?,
            args: [o("di")?, o("si")?, o("dx")?, o("r10")?, o("r8")?, o("r9")?],
            ip: o("ip")?,
            sp: o("sp")?,
            bp: o("bp")?,
            cs: o("cs")?,
            size: self.size_of("pt_regs")?,
            valid: 1,
            _pad: 0,
        })
    }

    /// Whether the sched_switch tracepoint passes `prev_state` (a fourth
    /// argument, 5.18 on): its raw tracepoint's type, the function
    /// pointer `btf_trace_sched_switch`, then takes five parameters (the
    /// context first). Without that type, as without the argument.
    pub fn switch_has_prev_state(&self) -> bool {
        let Ok(types) = self.btf.resolve_types_by_name("btf_trace_sched_switch") else {
            return false;
        };
        types.into_iter().any(|t| {
            let Type::Typedef(td) = t else { return false };
            let Ok(Type::Ptr(ptr)) = self.btf.resolve_chained_type(&td) else {
                return false;
            };
            matches!(
                self.btf.resolve_chained_type(&ptr),
                Ok(Type::FuncProto(f)) if f.parameters.len() >= 5
            )
        })
    }

    /// Offsets of the `task_struct` members the task iterator reads.
    pub fn task_struct(&self) -> Result<TaskOffsets> {
        let o = |m| self.offset_of("task_struct", m);
        // Without CONFIG_FAIR_GROUP_SCHED there is no se.cfs_rq: the
        // blocked-time estimate then does without the task's own CPU's
        // clocks (all four 0).
        let rq = (|| {
            Ok::<_, crate::collect::Error>((
                o("se.cfs_rq")?,
                self.offset_of("cfs_rq", "rq")?,
                self.offset_of("rq", "clock_task")?,
                self.offset_of("rq", "clock")?,
            ))
        })()
        .unwrap_or((0, 0, 0, 0));
        Ok(TaskOffsets {
            pid: o("pid")?,
            tgid: o("tgid")?,
            // `state` became `__state` in 5.14.
            state: self.offset_of_any("task_struct", &["__state", "state"])?,
            on_cpu: o("on_cpu")?,
            on_rq: o("on_rq")?,
            comm: o("comm")?,
            exec_start: o("se.exec_start")?,
            sum_exec_runtime: o("se.sum_exec_runtime")?,
            stack: o("stack")?,
            thread_pid: o("thread_pid")?,
            group_leader: o("group_leader")?,
            pid_level: self.offset_of("pid", "level")?,
            pid_numbers: self.offset_of("pid", "numbers")?,
            upid_size: self.size_of("upid")?,
            upid_nr: self.offset_of("upid", "nr")?,
            upid_ns: self.offset_of("upid", "ns")?,
            se_cfs_rq: rq.0,
            cfs_rq_rq: rq.1,
            rq_clock_task: rq.2,
            rq_clock: rq.3,
            // Only caps blocked times: without it they go uncapped.
            start_time: o("start_time").unwrap_or(0),
            valid: 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob holding an `int`, a `long`, `struct sched_entity`
    /// and a `struct task_struct` whose state member is called `state_name`
    /// (`state` before 5.14, `__state` after), as the kernels of each era
    /// publish it, so the renames are tested without booting them.
    fn task_struct_btf(state_name: &str) -> Vec<u8> {
        let mut strings = vec![0u8];
        let mut name = |s: &str| {
            let off = strings.len() as u32;
            strings.extend_from_slice(s.as_bytes());
            strings.push(0);
            off
        };
        let mut types: Vec<u32> = Vec::new();
        let int = |types: &mut Vec<u32>, n: u32, size: u32| {
            types.extend([n, 1 << 24, size, size * 8]);
        };
        // [1] int, [2] long
        int(&mut types, name("int"), 4);
        int(&mut types, name("long"), 8);
        // [3] struct sched_entity { long pad; long exec_start; long sum_exec_runtime; }
        let members = [
            ("pad", 2, 0),
            ("exec_start", 2, 8),
            ("sum_exec_runtime", 2, 16),
        ];
        types.extend([name("sched_entity"), (4 << 24) | members.len() as u32, 24]);
        for (m, t, off) in members {
            types.extend([name(m), t, off * 8]);
        }
        // [4] struct task_struct, with the members rip reads at known offsets.
        let members = [
            (state_name, 2, 16),
            ("stack", 2, 24),
            ("on_cpu", 1, 32),
            ("on_rq", 1, 36),
            ("se", 3, 64),
            ("pid", 1, 128),
            ("tgid", 1, 132),
            ("group_leader", 2, 144),
            ("thread_pid", 2, 152),
            ("comm", 2, 200),
        ];
        types.extend([name("task_struct"), (4 << 24) | members.len() as u32, 256]);
        for (m, t, off) in members {
            types.extend([name(m), t, off * 8]);
        }
        // [5] struct upid { int nr; long ns; }, [6] struct pid { ...; int
        // level; ...; struct upid numbers[]; } as 5.10 to 7.x have them.
        let members = [("nr", 1, 0), ("ns", 2, 8)];
        types.extend([name("upid"), (4 << 24) | members.len() as u32, 16]);
        for (m, t, off) in members {
            types.extend([name(m), t, off * 8]);
        }
        let members = [("level", 1, 4), ("numbers", 5, 96)];
        types.extend([name("pid"), (4 << 24) | members.len() as u32, 112]);
        for (m, t, off) in members {
            types.extend([name(m), t, off * 8]);
        }
        let type_bytes: Vec<u8> = types.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = Vec::new();
        out.extend(0xeb9f_u16.to_le_bytes());
        out.extend([1u8, 0]);
        for w in [24u32, 0, type_bytes.len() as u32, type_bytes.len() as u32] {
            out.extend(w.to_le_bytes());
        }
        out.extend((strings.len() as u32).to_le_bytes());
        out.extend(type_bytes);
        out.extend(strings);
        out
    }

    #[test]
    fn task_state_member_renamed_in_5_14() {
        for state in ["state", "__state"] {
            let btf = KernelBtf::from_bytes(&task_struct_btf(state)).unwrap();
            let t = btf.task_struct().unwrap();
            assert_eq!(t.state, 16, "{state}");
            assert_eq!((t.stack, t.on_cpu, t.on_rq), (24, 32, 36));
            assert_eq!((t.exec_start, t.sum_exec_runtime), (72, 80));
            assert_eq!((t.pid, t.tgid, t.comm), (128, 132, 200));
            assert_eq!((t.group_leader, t.thread_pid), (144, 152));
            assert_eq!((t.pid_level, t.pid_numbers), (4, 96));
            assert_eq!((t.upid_size, t.upid_nr, t.upid_ns), (16, 0, 8));
        }
        let btf = KernelBtf::from_bytes(&task_struct_btf("run_state")).unwrap();
        let e = btf.task_struct().unwrap_err().to_string();
        assert!(e.contains("none of __state, state"), "{e}");
    }

    #[test]
    fn feature_lookups_in_btf() {
        let btf = KernelBtf::from_bytes(&task_struct_btf("state")).unwrap();
        assert!(btf.has_struct("task_struct"));
        assert!(!btf.has_struct("bpf_iter__task"));
        assert_eq!(btf.size_of("task_struct").unwrap(), 256);
        assert!(!btf.has_enum_value("bpf_func_id", "BPF_FUNC_task_pt_regs"));
    }

    /// Reads the running kernel's BTF; every kernel this project supports
    /// has it (the CLI refuses to run without it).
    #[test]
    fn offsets_from_running_kernel() {
        let btf = KernelBtf::load().expect("kernel BTF");
        let regs = btf.pt_regs().unwrap();
        // struct pt_regs is part of the x86-64 kernel ABI; its layout has not
        // changed in decades, which makes it a check on the lookup itself.
        assert_eq!(regs.orig_ax, 120);
        assert_eq!(regs.args, [112, 104, 96, 56, 72, 64]);
        assert_eq!((regs.ip, regs.sp, regs.cs), (128, 152, 136));
        assert_eq!(regs.bp, 32);
        assert_eq!(regs.size, 168);
        let t = btf.task_struct().unwrap();
        assert!(
            t.pid > 0 && t.tgid == t.pid + 4,
            "pid@{} tgid@{}",
            t.pid,
            t.tgid
        );
        assert!(t.exec_start > 0 && t.comm > 0);
        // struct upid has been { int nr; struct pid_namespace *ns; } since
        // 4.15, and struct pid's level the second int.
        assert_eq!((t.upid_size, t.upid_nr, t.upid_ns), (16, 0, 8));
        assert_eq!(t.pid_level, 4);
        assert!(t.pid_numbers > t.pid_level && t.thread_pid > 0 && t.group_leader > 0);
        // sched_switch's fourth argument, prev_state, came with 5.18.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap());
        let version = (v.next().unwrap(), v.next().unwrap());
        assert_eq!(
            btf.switch_has_prev_state(),
            version >= (5, 18),
            "kernel {release}"
        );
    }
}
