//! Names for data addresses in a live process (a lock's address): the
//! global or static variable that holds it, from the binary's `.symtab` or
//! `.dynsym`, or the kind of memory it lives in (`heap`, `stack`, a shared
//! file).

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind, read::ReadCache};

use librip::reader::{MapsLine, open_mapped};

use crate::discover::maps::ProcessMaps;

/// Names data addresses of one process; parses each binary at most once.
pub struct DataNames<'m> {
    pid: u32,
    /// Asked per address (two lines per thread make the whole text slow).
    maps: Option<&'m ProcessMaps>,
    /// Per binary path: its load bias and data symbols (start, size, name),
    /// sorted by start. `None`: not an ELF file we could read.
    binaries: Vec<(String, Option<Binary>)>,
    /// The mapped binaries' paths (mappings at file offset 0), once.
    paths: Option<Vec<String>>,
}

struct Binary {
    /// Loaded address minus ELF virtual address.
    bias: u64,
    /// `[start, end)` of each loadable segment, in ELF virtual addresses
    /// (memory size, so `.bss` is covered).
    segments: Vec<(u64, u64)>,
    symbols: Vec<(u64, u64, String)>,
}

impl<'m> DataNames<'m> {
    /// Names addresses of process `pid`, whose map is `maps`; mappings
    /// are asked for and binaries parsed when first needed.
    pub fn new(pid: u32, maps: Option<&'m ProcessMaps>) -> Self {
        DataNames {
            pid,
            maps,
            binaries: Vec::new(),
            paths: None,
        }
    }

    /// `g_table_lock`, `table+0x40`, `heap 0x…`, `stack 0x…`,
    /// `/dev/shm/x+0x40` (shared memory), or `None` (unmapped).
    pub fn name(&mut self, addr: u64) -> Option<String> {
        if let Some(n) = self.symbol(addr) {
            return Some(n);
        }
        let m = self.maps?.containing(addr).ok()??;
        let shared = m.perms.as_bytes().get(3) == Some(&b's');
        Some(match (m.name.as_str(), m.file()) {
            ("[heap]", _) => format!("heap {addr:#x}"),
            ("[stack]", _) => format!("stack {addr:#x}"),
            (_, Some(path)) if shared => format!(
                "shared memory {}+{:#x}",
                path.display(),
                addr - m.start + m.offset
            ),
            (_, Some(path)) => format!("{}+{:#x}", path.display(), addr - m.start + m.offset),
            // MAP_SHARED | MAP_ANONYMOUS shows as a deleted /dev/zero.
            ("/dev/zero", None) if shared => format!("shared anonymous memory {addr:#x}"),
            (name, None) if shared => format!("shared memory {name} {addr:#x}"),
            // malloc arenas, thread stacks and mmap'd heaps are anonymous.
            _ => format!("heap {addr:#x}"),
        })
    }

    /// The data symbol holding `addr` in one of the mapped binaries.
    fn symbol(&mut self, addr: u64) -> Option<String> {
        if self.paths.is_none() {
            let mut v: Vec<String> = self
                .file_backed()
                .iter()
                .filter(|m| m.file().is_some() && m.offset == 0)
                .map(|m| m.name.clone())
                .collect();
            v.dedup();
            self.paths = Some(v);
        }
        let paths = self.paths.clone().unwrap_or_default();
        for path in paths {
            if !self.binaries.iter().any(|(p, _)| *p == path) {
                let b = self.load(&path);
                self.binaries.push((path.clone(), b));
            }
            let Some((_, Some(b))) = self.binaries.iter().find(|(p, _)| *p == path) else {
                continue;
            };
            let Some(va) = addr.checked_sub(b.bias) else {
                continue;
            };
            if !b.segments.iter().any(|&(s, e)| (s..e).contains(&va)) {
                continue;
            }
            let i = b.symbols.partition_point(|&(s, _, _)| s <= va);
            let (start, size, name) = &b.symbols[i.checked_sub(1)?];
            if va < start.saturating_add((*size).max(1)) {
                return Some(if va == *start {
                    name.clone()
                } else {
                    format!("{name}+{:#x}", va - start)
                });
            }
            return None;
        }
        None
    }

    /// The file-backed mappings (listed once by [`ProcessMaps`]).
    fn file_backed(&self) -> &[MapsLine] {
        self.maps
            .and_then(|m| m.file_backed().ok())
            .unwrap_or_default()
    }

    /// Parses the binary mapped from `path` (through map_files) for its
    /// bias, segments and data symbols.
    fn load(&self, path: &str) -> Option<Binary> {
        let first = self
            .file_backed()
            .iter()
            .find(|m| m.name == path && m.offset == 0)?;
        let file = open_mapped(self.pid, first)?;
        let f = std::fs::File::open(file.proc_path()).ok()?;
        let cache = ReadCache::new(f);
        let elf = object::File::parse(&cache).ok()?;
        // The segment at file offset 0 is loaded at the first mapping.
        let base_va = elf
            .segments()
            .filter(|s| s.file_range().0 == 0)
            .map(|s| s.address())
            .min()
            .unwrap_or(0);
        let bias = first.start.checked_sub(base_va)?;
        let segments = elf
            .segments()
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .collect();
        let mut symbols: Vec<(u64, u64, String)> = elf
            .symbols()
            .chain(elf.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Data && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?;
                Some((
                    s.address(),
                    s.size(),
                    crate::util::demangle::demangle(name).into_owned(),
                ))
            })
            .collect();
        symbols.sort();
        symbols.dedup_by_key(|s| s.0);
        Some(Binary {
            bias,
            segments,
            symbols,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static GLOBAL_LOCK: std::sync::Mutex<u64> = std::sync::Mutex::new(0);

    #[test]
    fn globals_by_symbol_heap_and_stack_by_memory() {
        let maps = ProcessMaps::open(std::process::id()).unwrap();
        let mut names = DataNames::new(std::process::id(), Some(&maps));
        let g = &GLOBAL_LOCK as *const _ as u64;
        let name = names.name(g).expect("a global is named");
        assert!(name.contains("GLOBAL_LOCK"), "{name}");
        let boxed = Box::new([0u64; 4]);
        let name = names.name(boxed.as_ptr() as u64 + 8).unwrap();
        assert!(name.starts_with("heap 0x"), "{name}");
        assert!(names.name(8).is_none(), "page zero is unmapped");
    }
}
