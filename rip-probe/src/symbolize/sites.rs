//! Snap sites from the binaries' site tables ([`librip::sites`]): exact
//! file, line and label of every snap, without debug information and in
//! stripped binaries.
//!
//! Each binary's table is parsed once per symbolizer (keyed by device,
//! inode, size and time of the opened file), its addresses turned into file offsets (what
//! both a ring's module table and /proc/PID/maps give for an address), and
//! looked up by binary search.

use std::collections::HashMap;

use librip::{
    reader::RegularFile,
    sites::{RECORD_SIZE, SECTION, Site, SiteTable},
};
use object::{Object, ObjectSection, ObjectSegment, read::ReadCache};

use super::held::FileKey;
use crate::model::Frame;

/// A binary's site table, keyed by file offset, with its build-id.
pub struct Loaded {
    /// Sites by file offset.
    pub table: SiteTable,
    /// The binary's GNU build-id, if it has one.
    pub build_id: Option<Vec<u8>>,
}

/// Site tables of the binaries seen so far.
#[derive(Default)]
pub struct SiteCache {
    tables: HashMap<FileKey, Option<Loaded>>,
}

impl SiteCache {
    /// The site table of `file`, whose key is `key` (parsed on first
    /// use). `Ok(None)`: the binary has none (not built with librip, or
    /// not ELF); `Err`: it has a malformed one, reported once (later calls
    /// give `Ok(None)`).
    pub fn get(&mut self, file: &RegularFile, key: FileKey) -> Result<Option<&Loaded>, String> {
        let mut err = None;
        let entry = self.tables.entry(key).or_insert_with(|| {
            load(file).unwrap_or_else(|e| {
                err = Some(e);
                None
            })
        });
        match err {
            Some(e) => Err(e),
            None => Ok(entry.as_ref()),
        }
    }

    /// Drops the table of the file `key` names.
    pub fn forget(&mut self, key: &FileKey) {
        self.tables.remove(key);
    }
}

/// Reads and parses the site table of an ELF file; `Ok(None)` when it
/// has none.
fn load(file: &RegularFile) -> Result<Option<Loaded>, String> {
    // Through the descriptor rip opened (a regular file, checked), never
    // by a path the target chose.
    let Ok(f) = std::fs::File::open(file.proc_path()) else {
        return Ok(None);
    };
    let cache = ReadCache::new(f);
    let Ok(elf) = object::File::parse(&cache) else {
        return Ok(None);
    };
    let Some(section) = elf.section_by_name(SECTION) else {
        return Ok(None);
    };
    let limit = (librip::sites::MAX_RECORDS * RECORD_SIZE) as u64;
    if section.size() > limit {
        return Err(librip::sites::SitesError::TooMany.to_string());
    }
    let data = section
        .data()
        .map_err(|_| "site table: its section is not in the file".to_string())?;
    // Strings are read from whichever allocated section holds them, at
    // most MAX_STRING + 1 bytes and never past the section's end.
    let sections: Vec<_> = elf
        .sections()
        .filter(|s| s.address() != 0 && s.file_range().is_some())
        .map(|s| (s.address(), s.size(), s.file_range()))
        .collect();
    let image = |addr: u64| -> Option<&[u8]> {
        let &(start, _, range) = sections
            .iter()
            .find(|(start, size, _)| addr >= *start && addr - start < *size)?;
        let (off, len) = range?;
        let skip = addr - start;
        let want = (len.checked_sub(skip)?).min(librip::sites::MAX_STRING as u64 + 1);
        object::ReadRef::read_bytes_at(&cache, off.checked_add(skip)?, want).ok()
    };
    let table = SiteTable::parse(data, section.address(), &image).map_err(|e| e.to_string())?;
    // Virtual address → file offset, through the loadable segments.
    let segments: Vec<(u64, u64, u64)> = elf
        .segments()
        .map(|s| (s.address(), s.file_range().0, s.file_range().1))
        .collect();
    let table = table.translate(|a| {
        segments
            .iter()
            .find(|&&(va, _, size)| a >= va && a - va < size)
            .and_then(|&(va, off, _)| off.checked_add(a - va))
    });
    let build_id = elf.build_id().ok().flatten().map(<[u8]>::to_vec);
    Ok(Some(Loaded { table, build_id }))
}

/// Whether DWARF's `dwarf` path and the site table's `site` path (as the
/// compiler was given it, often relative) name the same file.
fn same_file(dwarf: &str, site: &str) -> bool {
    let site = site.trim_start_matches("./");
    dwarf == site || dwarf.ends_with(&format!("/{site}")) || site.ends_with(&format!("/{dwarf}"))
}

/// Names `f`'s address by its site: the table is exact for a snap, so its
/// file and line replace whatever DWARF says unless DWARF says the same
/// (then DWARF's fuller path stays). DWARF's inlined frames are kept; the
/// symbol's name is kept, the site's module path or function used when
/// there is none.
pub fn apply(f: &mut Frame, s: &Site) {
    let (_, file, line) = f.best();
    let agrees = line == Some(s.line) && file.is_some_and(|d| same_file(d, &s.file));
    if !agrees {
        f.file = Some(s.file.clone());
        f.line = Some(s.line);
        // The innermost inlined frame is where `best` looks: it is the
        // snap's, so it gets the site's position too.
        if let Some(i) = f
            .inlined
            .iter_mut()
            .rev()
            .find(|i| !crate::model::is_librip(&i.function, i.file.as_deref()))
        {
            i.file = Some(s.file.clone());
            i.line = Some(s.line);
        }
    }
    if f.function.is_none() {
        f.function.clone_from(&s.function);
    }
    f.function_offset = None;
    f.column = (s.column != 0).then_some(s.column);
    f.label.clone_from(&s.label);
    f.site = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_agree_by_suffix() {
        assert!(same_file("/w/tests/src/main.rs", "src/main.rs"));
        assert!(same_file("src/main.rs", "src/main.rs"));
        assert!(!same_file("/w/tests/src/xmain.rs", "main.rs"));
        assert!(!same_file("/w/a.rs", "b.rs"));
    }

    #[test]
    fn a_site_names_a_frame_without_lines() {
        let mut f = Frame {
            addr: 0x10,
            function: Some("app::main::{{closure}}".into()),
            function_offset: Some(0x1f),
            ..Frame::default()
        };
        let s = Site {
            addr: 0x10,
            file: "src/main.rs".into(),
            line: 12,
            column: 5,
            function: Some("app".into()),
            label: Some("waiting".into()),
        };
        apply(&mut f, &s);
        assert_eq!(
            f.describe(),
            "src/main.rs:12 app::main::{{closure}} — \"waiting\""
        );
        let mut g = Frame {
            addr: 0x10,
            ..Frame::default()
        };
        apply(&mut g, &s);
        assert_eq!(g.describe(), "src/main.rs:12 app — \"waiting\"");
    }
}
