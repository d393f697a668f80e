//! Kernel type layouts from BTF (`/sys/kernel/btf/vmlinux`). Rust eBPF gets
//! no CO-RE relocations, so the offsets the programs need are computed here
//! at run time and handed to them as globals.

use std::path::Path;

use btf_rs::{Btf, Type};
use rip_ebpf::PtRegsOffsets;

use crate::error::{Error, Result};

/// Where the running kernel publishes its BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// The kernel's BTF, parsed once.
pub struct KernelBtf {
    btf: Btf,
}

impl KernelBtf {
    /// Loads the running kernel's BTF, or [`Error::NoBtf`].
    pub fn load() -> Result<Self> {
        if !Path::new(VMLINUX).exists() {
            return Err(Error::NoBtf);
        }
        let btf = Btf::from_file(VMLINUX).map_err(|e| Error::Kernel {
            path: VMLINUX.into(),
            what: e.to_string(),
        })?;
        Ok(KernelBtf { btf })
    }

    /// Byte offset of each named member of `struct name`.
    pub fn member_offsets<const N: usize>(
        &self,
        name: &str,
        members: [&str; N],
    ) -> Result<[u32; N]> {
        let err = |what: String| Error::Kernel {
            path: VMLINUX.into(),
            what,
        };
        let types = self
            .btf
            .resolve_types_by_name(name)
            .map_err(|e| err(format!("struct {name}: {e}")))?;
        let st = types
            .iter()
            .find_map(|t| match t {
                Type::Struct(s) => Some(s),
                _ => None,
            })
            .ok_or_else(|| err(format!("no struct {name}")))?;
        let mut out = [0u32; N];
        for (slot, want) in out.iter_mut().zip(members) {
            let m = st
                .members
                .iter()
                .find(|m| self.btf.resolve_name(*m).is_ok_and(|n| n == want))
                .ok_or_else(|| err(format!("struct {name} has no member {want}")))?;
            if m.bit_offset() % 8 != 0 {
                return Err(err(format!("{name}.{want} is a bitfield")));
            }
            *slot = m.bit_offset() / 8;
        }
        Ok(out)
    }

    /// Offsets of the syscall registers in `struct pt_regs` (x86-64).
    pub fn pt_regs(&self) -> Result<PtRegsOffsets> {
        let [orig_ax, di, si, dx, r10, r8, r9, ip, sp] = self.member_offsets(
            "pt_regs",
            ["orig_ax", "di", "si", "dx", "r10", "r8", "r9", "ip", "sp"],
        )?;
        Ok(PtRegsOffsets {
            orig_ax,
            args: [di, si, dx, r10, r8, r9],
            ip,
            sp,
            valid: 1,
        })
    }
}
