//! Kernel type layouts from BTF (`/sys/kernel/btf/vmlinux`). Rust eBPF gets
//! no CO-RE relocations, so the offsets the programs need are computed here
//! at run time and handed to them as globals.

use std::path::Path;

use btf_rs::{Backend, Btf, Struct, Type};
use rip_ebpf::{PtRegsOffsets, TaskOffsets};

use crate::error::{Error, Result};

/// Where the running kernel publishes its BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// The kernel's BTF, parsed once.
pub struct KernelBtf {
    btf: Btf,
}

fn err(what: String) -> Error {
    Error::Kernel {
        path: VMLINUX.into(),
        what,
    }
}

impl KernelBtf {
    /// Loads the running kernel's BTF, or [`Error::NoBtf`].
    pub fn load() -> Result<Self> {
        if !Path::new(VMLINUX).exists() {
            return Err(Error::NoBtf);
        }
        // A few lookups only: mmap instead of parsing every type up front.
        let btf =
            Btf::from_file_with_backend(VMLINUX, Backend::Mmap).map_err(|e| err(e.to_string()))?;
        Ok(KernelBtf { btf })
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
            valid: 1,
        })
    }

    /// Offsets of the `task_struct` members the task iterator reads.
    pub fn task_struct(&self) -> Result<TaskOffsets> {
        let o = |m| self.offset_of("task_struct", m);
        Ok(TaskOffsets {
            pid: o("pid")?,
            tgid: o("tgid")?,
            state: o("__state")?,
            on_cpu: o("on_cpu")?,
            on_rq: o("on_rq")?,
            comm: o("comm")?,
            exec_start: o("se.exec_start")?,
            sum_exec_runtime: o("se.sum_exec_runtime")?,
            valid: 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!((regs.ip, regs.sp), (128, 152));
        let t = btf.task_struct().unwrap();
        assert!(
            t.pid > 0 && t.tgid == t.pid + 4,
            "pid@{} tgid@{}",
            t.pid,
            t.tgid
        );
        assert!(t.exec_start > 0 && t.comm > 0);
    }
}
