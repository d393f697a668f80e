//! What a Go executable says of its runtime, read from the file (never
//! from the process): the Go version (`.go.buildinfo`), where the
//! runtime's roots are (`runtime.allgs`, `runtime.semtable`,
//! `runtime.waitReasonStrings`: from the symbol table; the first two from
//! the runtime's code in a stripped binary), and the layout of its
//! structures (from DWARF, else the version's table).

use std::{borrow::Cow, collections::HashSet, io::Read, path::Path};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use super::{
    FuncTable, code,
    layout::{self, Layout, Members},
};

/// A Go executable's facts, as file addresses (ELF virtual addresses).
#[derive(Clone, Debug)]
pub(crate) struct GoBinary {
    /// `go1.19.8`.
    pub(crate) version: String,
    /// The layout of the runtime's structures, or why it is not known.
    pub(crate) layout: Result<Layout, String>,
    /// `runtime.allgs` (a slice of `*g`), if found.
    pub(crate) allgs: Option<u64>,
    /// `runtime.waitReasonStrings` and its size in bytes, if found.
    pub(crate) wait_reasons: Option<(u64, u64)>,
    /// `runtime.semtable` and its size in bytes, if found.
    pub(crate) semtable: Option<(u64, u64)>,
    /// `(p_vaddr - p_offset)` of the executable segment: with the mapping's
    /// `start - offset`, the load bias.
    pub(crate) exec_delta: u64,
}

/// The `.go.buildinfo` magic.
const BUILDINFO_MAGIC: &[u8] = b"\xff Go buildinf:";

impl GoBinary {
    /// Reads `path`; `Ok(None)` when it is not a Go executable.
    /// `table`: its function table, for the roots a stripped binary's
    /// symbol table no longer names.
    pub(crate) fn open(
        path: &Path,
        table: Option<&dyn FuncTable>,
    ) -> Result<Option<GoBinary>, String> {
        let data = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Self::parse(&data, table)
    }

    /// [`Self::open`] on the file's bytes.
    pub(crate) fn parse(
        data: &[u8],
        table: Option<&dyn FuncTable>,
    ) -> Result<Option<GoBinary>, String> {
        let Ok(file) = object::File::parse(data) else {
            return Ok(None);
        };
        let Some(version) = version(&file) else {
            return Ok(None);
        };
        let mut allgs = None;
        let mut wait_reasons = None;
        let mut semtable = None;
        for s in file.symbols() {
            match s.name() {
                Ok("runtime.allgs") => allgs = Some(s.address()),
                Ok("runtime.waitReasonStrings") => wait_reasons = Some((s.address(), s.size())),
                Ok("runtime.semtable") => semtable = Some((s.address(), s.size())),
                _ => {}
            }
        }
        if allgs.is_none() {
            allgs = table.and_then(|t| allgs_from_code(&file, t));
        }
        if semtable.is_none() {
            semtable = table
                .and_then(|t| semtable_from_code(&file, t))
                .map(|a| (a, SEMTABLE_SIZE));
        }
        let layout = match dwarf_members(&file) {
            Some(m) => layout::from_dwarf(&m),
            None => layout::table(&version).ok_or_else(|| {
                format!(
                    "no DWARF and no checked layout table for {version} (tables: {}; a \
                     build without -ldflags=-w carries its own layout)",
                    layout::TABLES
                )
            }),
        };
        let exec_delta = file
            .segments()
            .find(|s| {
                matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0)
            })
            .map_or(0, |s| s.address().wrapping_sub(s.file_range().0));
        Ok(Some(GoBinary {
            version,
            layout,
            allgs,
            wait_reasons,
            semtable,
            exec_delta,
        }))
    }
}

/// `runtime.allgs`, from the code of `runtime.forEachG` (which ranges over
/// it), where the function table says it is.
pub(crate) fn allgs_from_code(file: &object::File<'_>, table: &dyn FuncTable) -> Option<u64> {
    let (entry, end) = table.func_range("runtime.forEachG")?;
    let len = usize::try_from(end.checked_sub(entry)?)
        .ok()
        .filter(|&n| n < 1 << 16)?;
    let code = read_vaddr(file, entry, len)?;
    code::allgs(&code::rip_targets(&code, entry))
}

/// Bytes of `runtime.semtable` in every supported version: `semTabSize`
/// (251) roots, each padded to a 64-byte cache line on amd64.
pub(crate) const SEMTABLE_SIZE: u64 = 251 * 64;

/// The runtime's functions that index `runtime.semtable` by a semaphore's
/// address (`sync.Mutex`, `WaitGroup` and `RWMutex` sleep and wake through
/// them, `semroot`/`rootFor` inlined into each).
const SEMTABLE_USERS: &[&str] = &["runtime.semacquire1", "runtime.semrelease1"];

/// `runtime.semtable`, from the code of the runtime's semaphore functions
/// where the function table says they are: the one address both take with
/// a RIP-relative `lea` that lies in writable data with room for the
/// whole table.
pub(crate) fn semtable_from_code(file: &object::File<'_>, table: &dyn FuncTable) -> Option<u64> {
    let per_function = SEMTABLE_USERS
        .iter()
        .map(|name| {
            let (entry, end) = table.func_range(name)?;
            let len = usize::try_from(end.checked_sub(entry)?)
                .ok()
                .filter(|&n| n < 1 << 16)?;
            let code = read_vaddr(file, entry, len)?;
            Some(code::lea_targets(&code, entry))
        })
        .collect::<Option<Vec<_>>>()?;
    let writable = |a: u64| {
        file.sections().any(|s| {
            let flags = match s.flags() {
                object::SectionFlags::Elf { sh_flags } => sh_flags,
                _ => 0,
            };
            let alloc_write = u64::from(object::elf::SHF_ALLOC | object::elf::SHF_WRITE);
            flags & alloc_write == alloc_write
                && a >= s.address()
                && a.checked_add(SEMTABLE_SIZE)
                    .is_some_and(|e| e <= s.address() + s.size())
        })
    };
    code::semtable(&per_function, writable)
}

/// The Go version in `.go.buildinfo` (`go1.19.8`), or `None`: not Go.
fn version(file: &object::File<'_>) -> Option<String> {
    let sec = file.section_by_name(".go.buildinfo")?;
    let d = sec.data().ok()?;
    if d.len() < 32 || &d[..14] != BUILDINFO_MAGIC {
        return None;
    }
    let ptr_size = usize::from(d[14]);
    let flags = d[15];
    if flags & 2 != 0 {
        // Go 1.18+: the version inline, after the header, length-prefixed
        // (uvarint).
        let (len, n) = uvarint(&d[32..])?;
        let s = d.get(32 + n..32 + n + usize::try_from(len).ok()?)?;
        return String::from_utf8(s.to_vec()).ok();
    }
    // Before 1.18: a pointer to a Go string header (pointer, length).
    if ptr_size != 8 {
        return None;
    }
    let at = |off: usize| -> Option<u64> {
        Some(u64::from_le_bytes(d.get(off..off + 8)?.try_into().ok()?))
    };
    let hdr = read_vaddr(file, at(16)?, 16)?;
    let ptr = u64::from_le_bytes(hdr[..8].try_into().ok()?);
    let len = u64::from_le_bytes(hdr[8..16].try_into().ok()?);
    let s = read_vaddr(file, ptr, usize::try_from(len).ok().filter(|&l| l < 256)?)?;
    String::from_utf8(s).ok()
}

/// `len` bytes of the file at virtual address `addr`.
pub(crate) fn read_vaddr(file: &object::File<'_>, addr: u64, len: usize) -> Option<Vec<u8>> {
    file.sections().find_map(|s| {
        let off = addr.checked_sub(s.address())?;
        let d = s.data().ok()?;
        let off = usize::try_from(off).ok()?;
        Some(d.get(off..off.checked_add(len)?)?.to_vec())
    })
}

/// A uvarint and the bytes it took.
fn uvarint(d: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in d.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// A section's bytes, inflated when the linker compressed it
/// (`SHF_COMPRESSED` with zlib, as Go's linker does).
fn section_bytes<'d>(file: &object::File<'d>, name: &str) -> Option<Cow<'d, [u8]>> {
    let sec = file.section_by_name(name)?;
    let c = sec.compressed_data().ok()?;
    match c.format {
        object::CompressionFormat::None => Some(Cow::Borrowed(c.data)),
        object::CompressionFormat::Zlib => {
            let size = usize::try_from(c.uncompressed_size).ok()?;
            let mut out = Vec::with_capacity(size.min(1 << 30));
            flate2::read::ZlibDecoder::new(c.data)
                .take(c.uncompressed_size)
                .read_to_end(&mut out)
                .ok()?;
            (out.len() == size).then_some(Cow::Owned(out))
        }
        _ => None,
    }
}

/// The members of the runtime structures [`layout::STRUCTS`] names, from
/// the binary's DWARF; `None` without DWARF.
pub(crate) fn dwarf_members(file: &object::File<'_>) -> Option<Members> {
    let load = |id: gimli::SectionId| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(section_bytes(file, id.name()).unwrap_or(Cow::Borrowed(&[])))
    };
    if section_bytes(file, ".debug_info").is_none_or(|d| d.is_empty()) {
        return None;
    }
    let owned = gimli::DwarfSections::load(load).ok()?;
    let dwarf = owned.borrow(|s| gimli::EndianSlice::new(s, gimli::LittleEndian));
    let mut want: HashSet<&str> = layout::STRUCTS.iter().copied().collect();
    let mut out = Members::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut tree = unit.entries_tree(None).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        while let Ok(Some(node)) = children.next() {
            let e = node.entry();
            if e.tag() != gimli::DW_TAG_structure_type {
                continue;
            }
            let Some(name) = attr_name(&dwarf, &unit, e) else {
                continue;
            };
            if !want.remove(name.as_str()) {
                continue;
            }
            let mut members = node.children();
            while let Ok(Some(m)) = members.next() {
                let me = m.entry();
                if me.tag() != gimli::DW_TAG_member {
                    continue;
                }
                let (Some(mname), Some(gimli::AttributeValue::Udata(off))) = (
                    attr_name(&dwarf, &unit, me),
                    me.attr_value(gimli::DW_AT_data_member_location),
                ) else {
                    continue;
                };
                let ty = match me.attr_value(gimli::DW_AT_type) {
                    Some(gimli::AttributeValue::UnitRef(r)) => unit
                        .entry(r)
                        .ok()
                        .and_then(|t| attr_name(&dwarf, &unit, &t))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                out.insert((name.clone(), mname), (off, ty));
            }
        }
        if want.is_empty() {
            break;
        }
    }
    Some(out)
}

fn attr_name<R: gimli::Reader>(
    dwarf: &gimli::Dwarf<R>,
    unit: &gimli::Unit<R>,
    e: &gimli::DebuggingInformationEntry<R>,
) -> Option<String> {
    let v = e.attr_value(gimli::DW_AT_name)?;
    let s = dwarf.attr_string(unit, v).ok()?;
    Some(s.to_string_lossy().ok()?.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvarints() {
        assert_eq!(uvarint(&[8]), Some((8, 1)));
        assert_eq!(uvarint(&[0x80, 0x01]), Some((128, 2)));
        assert_eq!(uvarint(&[0x80]), None);
    }

    #[test]
    fn a_file_that_is_not_go_is_none() {
        let me = std::fs::read("/proc/self/exe").unwrap();
        assert!(GoBinary::parse(&me, None).unwrap().is_none());
        assert!(GoBinary::parse(b"not an ELF", None).unwrap().is_none());
    }
}
