//! The two CPython encodings a frame's name and line are read through,
//! decoded from bytes copied out of the target (which may be torn or
//! hostile: every length is checked, nothing panics): `str` objects
//! (PEP 393 compact strings) and code objects' location tables
//! (`co_linetable`, the format of CPython 3.11 and later; 3.10's
//! `co_linetable` and 3.8/3.9's `co_lnotab`).

/// The fields of a `str` object's header that say where its characters
/// are and how wide they are (`PyASCIIObject.state`, `length`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrHeader {
    /// Code points.
    pub length: u64,
    /// Bytes per code point: 1, 2 or 4.
    pub kind: u8,
    /// Stored right after the `PyASCIIObject` header (pure ASCII), not
    /// after the larger `PyCompactUnicodeObject` one.
    pub ascii: bool,
    /// A compact string (characters inline after the header); a legacy
    /// string keeps them elsewhere and is not read.
    pub compact: bool,
}

/// Longest name or path read (a code object's names are short; a longer
/// "string" is garbage read from a moving target).
pub const MAX_STR: u64 = 4096;

impl StrHeader {
    /// Decodes the `state` bit field (interned:2, kind:3, compact:1,
    /// ascii:1, the same low bits in 3.11, 3.12 and 3.13) and the length.
    pub fn new(length: u64, state: u32) -> StrHeader {
        StrHeader {
            length,
            kind: ((state >> 2) & 7) as u8,
            compact: (state >> 5) & 1 == 1,
            ascii: (state >> 6) & 1 == 1,
        }
    }

    /// How many bytes of characters to read, if the header is one of a
    /// readable string.
    pub fn byte_len(&self) -> Option<u64> {
        if !self.compact || !matches!(self.kind, 1 | 2 | 4) || self.length > MAX_STR {
            return None;
        }
        if self.ascii && self.kind != 1 {
            return None;
        }
        Some(self.length * u64::from(self.kind))
    }

    /// The string of `data` (the `byte_len` bytes read), if they are what
    /// the header says (ASCII holds only ASCII; no surrogates).
    pub fn decode(&self, data: &[u8]) -> Option<String> {
        if Some(data.len() as u64) != self.byte_len() {
            return None;
        }
        match self.kind {
            1 if self.ascii => data
                .is_ascii()
                .then(|| data.iter().map(|&b| b as char).collect()),
            1 => Some(data.iter().map(|&b| b as char).collect()),
            2 => data
                .chunks_exact(2)
                .map(|c| char::from_u32(u32::from(u16::from_le_bytes([c[0], c[1]]))))
                .collect(),
            4 => data
                .chunks_exact(4)
                .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            _ => None,
        }
    }
}

/// The source line of the instruction at byte offset `offset` of a code
/// object's bytecode, from its location table (`co_linetable`, 3.11+:
/// entries of a first byte `1 code:4 length-1:3` and varints) starting
/// at `first_line` (`co_firstlineno`). `None` when the table does not
/// reach `offset` or is malformed, or the instruction has no line.
pub fn line_at(table: &[u8], first_line: i32, offset: u64) -> Option<u32> {
    let mut line = i64::from(first_line);
    let mut addr = 0u64;
    let mut i = 0;
    while i < table.len() {
        let head = table[i];
        if head & 0x80 == 0 {
            return None;
        }
        i += 1;
        let code = (head >> 3) & 15;
        // Code units of 2 bytes.
        let end = addr + (u64::from(head & 7) + 1) * 2;
        let mut has_line = true;
        match code {
            15 => has_line = false,
            14 => {
                line = line.checked_add(signed_varint(table, &mut i)?)?;
                for _ in 0..3 {
                    varint(table, &mut i)?;
                }
            }
            13 => line = line.checked_add(signed_varint(table, &mut i)?)?,
            10..=12 => {
                line += i64::from(code) - 10;
                i += 2;
            }
            _ => i += 1,
        }
        if i > table.len() {
            return None;
        }
        if offset < end {
            return has_line
                .then(|| u32::try_from(line).ok())
                .flatten()
                .filter(|&l| l > 0);
        }
        addr = end;
    }
    None
}

/// The source line of the instruction at byte offset `offset` from a
/// 3.8/3.9 `co_lnotab`: pairs of (bytecode increment, signed line
/// increment), each line increment taking effect once the address reached
/// is past the instruction's no longer (`PyCode_Addr2Line`). A negative
/// offset (the frame has run no instruction yet) is the first line.
pub fn line_at_lnotab(table: &[u8], first_line: i32, offset: i64) -> Option<u32> {
    let mut line = i64::from(first_line);
    let mut addr = 0i64;
    for pair in table.chunks_exact(2) {
        addr += i64::from(pair[0]);
        if addr > offset {
            break;
        }
        line += i64::from(pair[1] as i8);
    }
    u32::try_from(line).ok().filter(|&l| l > 0)
}

/// The source line of the instruction at byte offset `offset` from a
/// 3.10 `co_linetable`: pairs of (bytes covered, signed line delta), each
/// a range of bytecode starting where the previous ended, a delta of -128
/// meaning the range has no line (the deltas of empty ranges still add
/// up). A negative offset is the first line (`PyCode_Addr2Line`).
pub fn line_at_3_10(table: &[u8], first_line: i32, offset: i64) -> Option<u32> {
    if offset < 0 {
        return u32::try_from(first_line).ok().filter(|&l| l > 0);
    }
    let mut line = i64::from(first_line);
    let mut end = 0i64;
    for pair in table.chunks_exact(2) {
        let start = end;
        end += i64::from(pair[0]);
        let delta = pair[1] as i8;
        let has_line = delta != -128;
        if has_line {
            line += i64::from(delta);
        }
        if start <= offset && offset < end {
            return has_line
                .then(|| u32::try_from(line).ok())
                .flatten()
                .filter(|&l| l > 0);
        }
    }
    None
}

/// An unsigned varint of the location table: 6 bits a byte, bit 6 says
/// more follow.
fn varint(t: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = *t.get(*i)?;
        *i += 1;
        v |= u64::from(b & 63).checked_shl(shift)?;
        if b & 64 == 0 {
            return Some(v);
        }
        shift += 6;
        if shift > 60 {
            return None;
        }
    }
}

/// A signed varint: the sign in the lowest bit.
fn signed_varint(t: &[u8], i: &mut usize) -> Option<i64> {
    let v = varint(t, i)?;
    let m = (v >> 1) as i64;
    Some(if v & 1 == 1 { -m } else { m })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_of_each_width() {
        // interned 0, kind 1, compact, ascii: state = 1<<2 | 1<<5 | 1<<6.
        let h = StrHeader::new(3, 0b110_0100);
        assert_eq!(h.byte_len(), Some(3));
        assert_eq!(h.decode(b"abc").as_deref(), Some("abc"));
        assert_eq!(h.decode(b"ab\xff"), None);
        assert_eq!(h.decode(b"ab"), None);
        let latin = StrHeader::new(2, 0b010_0100);
        assert_eq!(latin.decode(b"\xe9t").as_deref(), Some("ét"));
        let ucs2 = StrHeader::new(1, 0b010_1000);
        assert_eq!(ucs2.decode(&0x4e2du16.to_le_bytes()).as_deref(), Some("中"));
        let ucs4 = StrHeader::new(1, 0b011_0000);
        assert_eq!(
            ucs4.decode(&0x1f600u32.to_le_bytes()).as_deref(),
            Some("😀")
        );
        // A lone surrogate is not a string; nor is a legacy (non-compact) one.
        assert_eq!(ucs2.decode(&0xd800u16.to_le_bytes()), None);
        assert_eq!(StrHeader::new(3, 0b100_0100).byte_len(), None);
        assert_eq!(StrHeader::new(MAX_STR + 1, 0b110_0100).byte_len(), None);
    }

    #[test]
    fn lines_from_a_location_table() {
        // A table of the shape CPython 3.11 writes for:
        //   def f():        # line 1
        //       x = 1       # 2
        //       return x    # 3
        // Long form (code 14, 1 unit: line +0, end +0, columns), then
        // one-line forms (code 11: +1) of 2 units each.
        let t = [0xf0, 0, 0, 1, 1, 0xd9, 0, 0, 0xd9, 0, 0];
        assert_eq!(line_at(&t, 1, 0), Some(1));
        assert_eq!(line_at(&t, 1, 2), Some(2));
        assert_eq!(line_at(&t, 1, 5), Some(2));
        assert_eq!(line_at(&t, 1, 6), Some(3));
        assert_eq!(line_at(&t, 1, 10), None);
        // No-location entries (code 15) give no line; a short form keeps it.
        assert_eq!(line_at(&[0xf8, 0x80, 0x00], 7, 0), None);
        assert_eq!(line_at(&[0xf8, 0x80, 0x00], 7, 2), Some(7));
        // A negative delta (code 13, signed varint 3 = -1).
        assert_eq!(line_at(&[0xe8, 0x03], 7, 0), Some(6));
        // Truncated or not a table.
        assert_eq!(line_at(&[0xf0], 1, 0), None);
        assert_eq!(line_at(&[0x10], 1, 0), None);
    }

    /// The line of every instruction, as `dis` says it starts them, of
    ///
    /// ```text
    /// 3 def f(a):
    /// 4     x = 1
    /// 5
    /// 6     if a:
    /// 7         y = [i
    /// 8              for i in range(3)]
    /// 9     while a:
    /// 10        a -= 1
    /// 11        # c
    /// 12        pass
    /// 13    return x
    /// ```
    ///
    /// compiled by each version (its table copied from `f.__code__`).
    fn lines_of(line: impl Fn(i64) -> Option<u32>, starts: &[(i64, u32)], end: i64) {
        assert_eq!(line(-1), Some(3));
        for (i, &(at, l)) in starts.iter().enumerate() {
            let next = starts.get(i + 1).map_or(end, |s| s.0);
            for off in (at..next).step_by(2) {
                assert_eq!(line(off), Some(l), "offset {off}");
            }
        }
    }

    #[test]
    fn lines_from_3_8_and_3_9_lnotab() {
        // The same bytes from 3.8.18 and 3.9.18.
        let t = [0, 1, 4, 2, 4, 1, 6, 1, 6, 255, 6, 2, 4, 1, 8, 2, 2, 1];
        let starts = [
            (0, 4),
            (4, 6),
            (8, 7),
            (14, 8),
            (20, 7),
            (26, 9),
            (30, 10),
            (38, 12),
            (40, 13),
        ];
        lines_of(|off| line_at_lnotab(&t, 3, off), &starts, 44);
        assert_eq!(line_at_lnotab(&[], 3, 10), Some(3));
        // An odd byte at the end (a torn read) is ignored.
        assert_eq!(line_at_lnotab(&[0, 1, 4], 3, 10), Some(4));
    }

    #[test]
    fn lines_from_a_3_10_linetable() {
        let t = [
            4, 1, 4, 2, 6, 1, 6, 1, 6, 255, 4, 2, 8, 1, 2, 2, 4, 253, 4, 4,
        ];
        let starts = [
            (0, 4),
            (4, 6),
            (8, 7),
            (14, 8),
            (20, 7),
            (26, 9),
            (30, 10),
            (38, 12),
            (40, 9),
            (44, 13),
        ];
        lines_of(|off| line_at_3_10(&t, 3, off), &starts, 48);
        // Past the table; a range without a line (-128).
        assert_eq!(line_at_3_10(&t, 3, 48), None);
        assert_eq!(line_at_3_10(&[2, 0x80, 2, 1], 3, 0), None);
        assert_eq!(line_at_3_10(&[2, 0x80, 2, 1], 3, 2), Some(4));
        // An empty range's delta still counts.
        assert_eq!(line_at_3_10(&[0, 5, 2, 1], 3, 0), Some(9));
    }
}
