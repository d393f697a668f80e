//! The perf map a JIT writes for profilers (`/tmp/perf-PID.map`: Java's
//! `jcmd PID Compiler.perfmap` and `-XX:+DumpPerfMapAtExit`, Node's
//! `--perf-basic-prof`, .NET's `DOTNET_PerfMapEnabled`): one line per
//! piece of generated code, `START SIZE NAME`, the two numbers in hex
//! (with or without `0x`), the name the rest of the line.
//!
//! The file is written by the target, so it is hostile input: lines that
//! do not parse, empty or overflowing ranges and overlong names are left
//! out or cut, never a panic, and memory stays proportional to the bytes
//! given (the caller caps those).

use super::RangeIndex;

/// Longest name kept, in bytes (cut at a character boundary): Java's
/// signatures run to a few hundred bytes; the cap bounds what one line of
/// a hostile file can make a report print.
pub const MAX_NAME: usize = 1024;

/// A parsed perf map: the code ranges it names, the later of overlapping
/// lines winning (a JIT reuses freed code memory, and appends the new
/// code's line).
#[derive(Debug)]
pub struct PerfMap {
    entries: Vec<Entry>,
    /// All names, one after the other; entries hold ranges of it.
    names: String,
    index: RangeIndex,
    skipped: usize,
}

#[derive(Debug)]
struct Entry {
    start: u64,
    size: u64,
    name: (u32, u32),
}

/// A symbol of a [`PerfMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfMapSymbol<'a> {
    /// First address of the code.
    pub start: u64,
    /// Its size in bytes.
    pub size: u64,
    /// The name the runtime gave it.
    pub name: &'a str,
}

impl PerfMap {
    /// Parses the bytes of a perf map. Lines that are not `START SIZE NAME`
    /// with hex numbers, an empty name, a zero size or a range past the
    /// end of the address space are counted in [`PerfMap::skipped`]; bytes
    /// that are not UTF-8 become U+FFFD.
    pub fn parse(bytes: &[u8]) -> PerfMap {
        let mut entries = Vec::new();
        let mut names = String::new();
        let mut skipped = 0;
        for line in bytes.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match parse_line(line) {
                Some((start, size, name)) if names.len() < u32::MAX as usize - MAX_NAME => {
                    let name = String::from_utf8_lossy(name);
                    let name = cut(&name, MAX_NAME);
                    let from = names.len() as u32;
                    names.push_str(name);
                    entries.push(Entry {
                        start,
                        size,
                        name: (from, names.len() as u32),
                    });
                }
                _ => skipped += 1,
            }
        }
        let index = RangeIndex::new(entries.iter().map(|e| (e.start, e.start + e.size)));
        PerfMap {
            entries,
            names,
            index,
            skipped,
        }
    }

    /// The symbol whose code holds `addr`.
    pub fn find(&self, addr: u64) -> Option<PerfMapSymbol<'_>> {
        let e = self.entries.get(self.index.find(addr)?)?;
        Some(PerfMapSymbol {
            start: e.start,
            size: e.size,
            name: self.names.get(e.name.0 as usize..e.name.1 as usize)?,
        })
    }

    /// Every symbol read, in the file's order (overlapped ones included).
    pub fn symbols(&self) -> impl Iterator<Item = PerfMapSymbol<'_>> {
        self.entries.iter().map(|e| PerfMapSymbol {
            start: e.start,
            size: e.size,
            name: self
                .names
                .get(e.name.0 as usize..e.name.1 as usize)
                .unwrap_or_default(),
        })
    }

    /// Symbols read (overlapped ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No symbol was read.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Lines left out because they did not parse.
    pub fn skipped(&self) -> usize {
        self.skipped
    }
}

/// `START SIZE NAME` → its parts; `None` if it is not that.
fn parse_line(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    let mut parts = line.splitn(3, |&b| b == b' ');
    let start = hex(parts.next()?)?;
    let size = hex(parts.next()?)?;
    let name = parts.next()?;
    if size == 0 || name.is_empty() {
        return None;
    }
    start.checked_add(size)?;
    Some((start, size, name))
}

/// A hex number, with or without `0x`, at most 16 digits.
fn hex(b: &[u8]) -> Option<u64> {
    let b = b
        .strip_prefix(b"0x")
        .or_else(|| b.strip_prefix(b"0X"))
        .unwrap_or(b);
    if b.is_empty() || b.len() > 16 {
        return None;
    }
    b.iter().try_fold(0u64, |n, &c| {
        let d = (c as char).to_digit(16)?;
        Some((n << 4) | u64::from(d))
    })
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_and_node_lines_parse_and_the_later_overlap_wins() {
        let text = b"0x00007f7aa0ec7620 0x0000000000000178 int Hold.hold(java.lang.Object, int)\n\
            7f00001000 40 LazyCompile:*work /app/x.js:3\r\n\
            \n\
            0x00007f7aa0ec7600 0x40 Interpreter\n";
        let m = PerfMap::parse(text);
        assert_eq!((m.len(), m.skipped()), (3, 0));
        let s = m.find(0x7f7a_a0ec_7700).unwrap();
        assert_eq!(s.name, "int Hold.hold(java.lang.Object, int)");
        assert_eq!((s.start, s.size), (0x7f7a_a0ec_7620, 0x178));
        // The later line covers the first bytes of the earlier one.
        assert_eq!(m.find(0x7f7a_a0ec_7630).unwrap().name, "Interpreter");
        assert_eq!(
            m.find(0x7f_0000_1000).unwrap().name,
            "LazyCompile:*work /app/x.js:3"
        );
        assert_eq!(m.find(0x7f_0000_1040), None);
        assert_eq!(m.find(0x7f7a_a0ec_7620 + 0x178), None);
    }

    #[test]
    fn garbage_is_counted_not_kept() {
        let long = "y".repeat(MAX_NAME * 3);
        let text = format!(
            "zz 10 bad-hex\n10 0 zero-size\nffffffffffffffff 2 overflow\n10 20\n\
             12345678901234567 1 too-many-digits\nnot a line\n20 10 {long}\n30 10 caf\u{e9}\u{e9}\n"
        );
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(b"40 10 \xff name\n");
        let m = PerfMap::parse(&bytes);
        assert_eq!((m.len(), m.skipped()), (3, 6));
        assert_eq!(m.find(0x20).unwrap().name.len(), MAX_NAME);
        assert_eq!(m.find(0x30).unwrap().name, "caf\u{e9}\u{e9}");
        assert_eq!(m.find(0x40).unwrap().name, "\u{fffd} name");
        // A cut in the middle of a two-byte character keeps whole ones.
        let odd = format!("50 10 {}\n", "\u{e9}".repeat(MAX_NAME));
        let m = PerfMap::parse(odd.as_bytes());
        assert_eq!(m.find(0x50).unwrap().name.len(), MAX_NAME);
    }
}
