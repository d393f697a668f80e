//! The site table: where every snap of a binary is, written at compile time.
//!
//! Each `snap!()` (Rust) and `RIP_SNAP()`/`rip_snap()` (C) emits, beside
//! its instructions, one fixed-size record into the allocated section
//! [`SECTION`] of the object it is compiled into: the address the snap
//! stores, and its file, line, column, module path (Rust) or function (C)
//! and optional label. The linker concatenates the records, `strip` keeps
//! them (it removes symbols and debug sections, never allocated ones), and
//! inlining, generics and LTO give one record per copy of the code. So a
//! reader names every snap exactly, even in a release build without debug
//! information or a stripped one.
//!
//! Every field is relative (`target - address of the field`, resolved by
//! the linker, no dynamic relocation), so the file's bytes are the truth
//! for PIE executables and shared libraries alike, and a record read from
//! the file gives link-time virtual addresses. `docs/FORMAT.md` ("The site
//! table") specifies the layout; this module is the writer's constants
//! and the reference parser.
//!
//! A table comes from a binary the target chose: the parser bounds-checks
//! every offset, count and string and returns an error, never panics.

/// Name of the ELF section holding the records (a C identifier, so GNU ld
/// also defines `__start_rip_sites` and `__stop_rip_sites`).
pub const SECTION: &str = "rip_sites";

/// First word of every record: `RIPS` in the file's bytes.
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"RIPS");

/// Bytes per record: seven 32-bit words.
pub const RECORD_SIZE: usize = 28;

/// Longest string (file, function, label) a reader accepts, in bytes
/// before the terminating NUL.
pub const MAX_STRING: usize = 4096;

/// Most records a reader accepts from one binary (a table of 28 MB):
/// bounds the work a hostile binary can cause.
pub const MAX_RECORDS: usize = 1 << 20;

/// One snap site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The address the snap stores (a link-time virtual address when
    /// parsed; see [`SiteTable::translate`]).
    pub addr: u64,
    /// Source file, as the compiler named it (`file!()`, `__FILE__`).
    pub file: String,
    /// Line of the snap (1-based).
    pub line: u32,
    /// Column (1-based), 0 when not recorded (C).
    pub column: u32,
    /// Module path (Rust's `module_path!()`) or function (C's `__func__`).
    pub function: Option<String>,
    /// The label given to `snap!("…")` / `RIP_SNAP_LABEL("…")`.
    pub label: Option<String>,
}

/// Why a site table was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SitesError {
    /// The section's size is not a whole number of records and padding.
    Truncated {
        /// Offset in the section of the incomplete record.
        offset: usize,
    },
    /// A word that is neither padding (0) nor [`RECORD_MAGIC`].
    BadMagic {
        /// Offset in the section.
        offset: usize,
    },
    /// A relative field points outside the address space.
    BadOffset {
        /// Offset in the section of the record.
        offset: usize,
    },
    /// A string is not inside the binary's image, or has no NUL within
    /// [`MAX_STRING`] bytes.
    BadString {
        /// Offset in the section of the record.
        offset: usize,
    },
    /// More than [`MAX_RECORDS`] records.
    TooMany,
}

impl std::fmt::Display for SitesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SitesError::Truncated { offset } => {
                write!(f, "site table truncated at byte {offset}")
            }
            SitesError::BadMagic { offset } => {
                write!(f, "site table: no record at byte {offset}")
            }
            SitesError::BadOffset { offset } => {
                write!(f, "site table: record at byte {offset} points nowhere")
            }
            SitesError::BadString { offset } => {
                write!(
                    f,
                    "site table: record at byte {offset} has an unreadable string"
                )
            }
            SitesError::TooMany => write!(f, "site table: more than {MAX_RECORDS} records"),
        }
    }
}

impl std::error::Error for SitesError {}

/// The sites of one binary, sorted by address, for lookup by binary search.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteTable {
    sites: Vec<Site>,
}

impl SiteTable {
    /// Parses the bytes of a [`SECTION`] loaded at virtual address
    /// `section_addr`. `image(addr)` returns the binary's bytes from
    /// virtual address `addr` to the end of the section or segment that
    /// holds it (or `None`): strings are read through it.
    ///
    /// Zero words between records (the linker's alignment padding) are
    /// skipped. Identical records (the same site seen twice) are kept once;
    /// of two different records for one address, the first in the section
    /// wins.
    pub fn parse<'a>(
        section: &[u8],
        section_addr: u64,
        image: &dyn Fn(u64) -> Option<&'a [u8]>,
    ) -> Result<SiteTable, SitesError> {
        let word = |off: usize| -> Option<u32> {
            let b = section.get(off..off.checked_add(4)?)?;
            Some(u32::from_le_bytes(b.try_into().ok()?))
        };
        let mut sites = Vec::new();
        let mut off = 0usize;
        while off < section.len() {
            let Some(w) = word(off) else {
                // A tail shorter than a word: padding if it is all zeros.
                if section[off..].iter().all(|&b| b == 0) {
                    break;
                }
                return Err(SitesError::Truncated { offset: off });
            };
            if w == 0 {
                off += 4;
                continue;
            }
            if w != RECORD_MAGIC {
                return Err(SitesError::BadMagic { offset: off });
            }
            if section.len() - off < RECORD_SIZE {
                return Err(SitesError::Truncated { offset: off });
            }
            if sites.len() >= MAX_RECORDS {
                return Err(SitesError::TooMany);
            }
            let bad = SitesError::BadOffset { offset: off };
            // The target of the relative field at record byte `at`.
            let target = |at: usize| -> Result<Option<u64>, SitesError> {
                let rel = word(off + at).ok_or(SitesError::Truncated { offset: off })? as i32;
                if rel == 0 {
                    return Ok(None);
                }
                section_addr
                    .checked_add((off + at) as u64)
                    .and_then(|field| field.checked_add_signed(i64::from(rel)))
                    .map(Some)
                    .ok_or(bad.clone())
            };
            let string = |at: usize| -> Result<Option<String>, SitesError> {
                let Some(addr) = target(at)? else {
                    return Ok(None);
                };
                read_cstr(image, addr)
                    .map(|s| Some(s).filter(|s| !s.is_empty()))
                    .ok_or(SitesError::BadString { offset: off })
            };
            let addr = target(4)?.ok_or(bad.clone())?;
            let file = string(8)?.ok_or(SitesError::BadString { offset: off })?;
            let function = string(12)?;
            let label = string(16)?;
            let line = word(off + 20).ok_or(bad.clone())?;
            let column = word(off + 24).ok_or(bad)?;
            sites.push(Site {
                addr,
                file,
                line,
                column,
                function,
                label,
            });
            off += RECORD_SIZE;
        }
        Ok(SiteTable::from_sites(sites))
    }

    /// A table of the given sites (sorted and deduplicated as
    /// [`SiteTable::parse`] does).
    pub fn from_sites(mut sites: Vec<Site>) -> SiteTable {
        // Stable: of records for one address, the first stays first.
        sites.sort_by_key(|s| s.addr);
        sites.dedup_by_key(|s| s.addr);
        SiteTable { sites }
    }

    /// The site whose snap stores exactly `addr`.
    pub fn find(&self, addr: u64) -> Option<&Site> {
        let i = self.sites.binary_search_by_key(&addr, |s| s.addr).ok()?;
        self.sites.get(i)
    }

    /// All sites, by address.
    pub fn sites(&self) -> &[Site] {
        &self.sites
    }

    /// Number of sites.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// Whether the table has no site.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// The same table with every address passed through `f` (e.g. from
    /// virtual address to file offset); sites `f` maps to `None` are
    /// dropped.
    pub fn translate(self, f: impl Fn(u64) -> Option<u64>) -> SiteTable {
        let sites = self
            .sites
            .into_iter()
            .filter_map(|mut s| {
                s.addr = f(s.addr)?;
                Some(s)
            })
            .collect();
        SiteTable::from_sites(sites)
    }
}

/// The NUL-terminated string at `addr`, at most [`MAX_STRING`] bytes,
/// invalid UTF-8 replaced.
fn read_cstr<'a>(image: &dyn Fn(u64) -> Option<&'a [u8]>, addr: u64) -> Option<String> {
    let bytes = image(addr)?;
    let bytes = &bytes[..bytes.len().min(MAX_STRING + 1)];
    let end = bytes.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// `s` as a NUL-terminated byte array of length `N` (`s.len() + 1`): the
/// strings `snap!` records, as statics its asm can name.
#[doc(hidden)]
pub const fn cstr<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < b.len() && i + 1 < N {
        out[i] = b[i];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A section at 0x1000 whose strings live in an image at 0x2000.
    fn record(at: u64, site: u64, file: u64, func: u64, label: u64, line: u32) -> Vec<u8> {
        let rel = |field: u64, target: u64| {
            if target == 0 {
                0i32
            } else {
                (target as i64 - field as i64) as i32
            }
        };
        let mut v = Vec::new();
        v.extend(RECORD_MAGIC.to_le_bytes());
        v.extend(rel(at + 4, site).to_le_bytes());
        v.extend(rel(at + 8, file).to_le_bytes());
        v.extend(rel(at + 12, func).to_le_bytes());
        v.extend(rel(at + 16, label).to_le_bytes());
        v.extend(line.to_le_bytes());
        v.extend(7u32.to_le_bytes());
        v
    }

    const STRS: &[u8] = b"src/a.rs\0crate::m\0waiting\0\0";

    fn image(addr: u64) -> Option<&'static [u8]> {
        STRS.get(usize::try_from(addr.checked_sub(0x2000)?).ok()?..)
    }

    #[test]
    fn records_padding_and_duplicates() {
        let mut sec = record(0x1000, 0x500, 0x2000, 0x2009, 0x2012, 88);
        sec.extend([0u8; 4]);
        let at = 0x1000 + sec.len() as u64;
        sec.extend(record(at, 0x400, 0x2000, 0, 0x201a, 9));
        let at = 0x1000 + sec.len() as u64;
        sec.extend(record(at, 0x500, 0x2000, 0x2009, 0x2012, 88));
        sec.extend([0u8; 2]);
        let t = SiteTable::parse(&sec, 0x1000, &image).unwrap();
        assert_eq!(t.len(), 2);
        let s = t.find(0x500).unwrap();
        assert_eq!((s.file.as_str(), s.line, s.column), ("src/a.rs", 88, 7));
        assert_eq!(s.function.as_deref(), Some("crate::m"));
        assert_eq!(s.label.as_deref(), Some("waiting"));
        // An empty label is no label.
        let s = t.find(0x400).unwrap();
        assert_eq!((s.function.as_deref(), s.label.as_deref()), (None, None));
        assert!(t.find(0x401).is_none());
        let t = t.translate(|a| a.checked_sub(0x450));
        assert_eq!(t.len(), 1);
        assert_eq!(t.find(0xb0).unwrap().line, 88);
    }

    #[test]
    fn malformed_tables_are_errors() {
        let good = record(0x1000, 0x500, 0x2000, 0, 0, 1);
        assert!(matches!(
            SiteTable::parse(&good[..20], 0x1000, &image),
            Err(SitesError::Truncated { .. })
        ));
        let mut bad = good.clone();
        bad[0] = 1;
        assert!(matches!(
            SiteTable::parse(&bad, 0x1000, &image),
            Err(SitesError::BadMagic { .. })
        ));
        // A string outside the image, and one without NUL.
        let out = record(0x1000, 0x500, 0x9000, 0, 0, 1);
        assert!(SiteTable::parse(&out, 0x1000, &image).is_err());
        let nonul = record(0x1000, 0x500, 0x2000 + STRS.len() as u64 - 1, 0, 0, 1);
        assert!(SiteTable::parse(&nonul[..], 0x1000, &|_| Some(&b"abc"[..])).is_err());
        // The address wraps below zero.
        let wrap = record(0, 0, 0x2000, 0, 0, 1);
        let mut wrap = wrap;
        wrap[4..8].copy_from_slice(&(-100i32).to_le_bytes());
        assert!(matches!(
            SiteTable::parse(&wrap, 0, &image),
            Err(SitesError::BadOffset { .. })
        ));
        assert_eq!(SiteTable::parse(&[], 0, &image), Ok(SiteTable::default()));
    }

    #[test]
    fn cstr_terminates() {
        let a: [u8; 4] = cstr("abc");
        assert_eq!(&a, b"abc\0");
    }
}
