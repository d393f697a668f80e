//! Where ring bytes come from: a file read with `pread`, or a private
//! buffer. Both formats' parsers (`parse`, `original`) read through it.

use std::path::PathBuf;

use super::ReadError;

/// Where ring bytes come from.
pub(crate) trait Source {
    /// Bytes available.
    fn len(&self) -> u64;
    /// Bytes the file really stores (its allocated blocks): a sparse file
    /// may claim a size far beyond the data it holds, and no more than
    /// this (plus the header) is ever copied.
    fn allocated(&self) -> u64 {
        self.len()
    }
    /// Copies `out.len()` words at the 8-aligned `off`. A range past the
    /// end (a file truncated while being read) is an error, never a signal.
    fn words(&self, off: u64, out: &mut [u64]) -> Result<(), ReadError>;
    /// The byte ranges that hold data, in order (all of it, unless the
    /// source knows its holes).
    fn data_extents(&self) -> Result<Vec<(u64, u64)>, ReadError> {
        Ok(vec![(0, self.len())])
    }
}

/// A ring file read with `pread` into private buffers: no mapping, so a
/// file truncated by its writer (or anyone) during the read gives a short
/// read and a typed error instead of SIGBUS, and holes are read as zeros
/// without the kernel allocating pages for them.
pub(crate) struct FileSource {
    pub(crate) fd: std::os::fd::OwnedFd,
    pub(crate) len: u64,
    pub(crate) allocated: u64,
}

impl Source for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn allocated(&self) -> u64 {
        self.allocated
    }

    fn words(&self, off: u64, out: &mut [u64]) -> Result<(), ReadError> {
        let want = (out.len() as u64)
            .checked_mul(8)
            .and_then(|b| b.checked_add(off))
            .ok_or_else(|| ReadError::inconsistent("a read past 2^64"))?;
        if out.is_empty() {
            return Ok(());
        }
        // Read through a bounded buffer, converted piece by piece: a
        // whole region (57 MB for 100,000 slots) is never held twice.
        const PIECE_WORDS: usize = 16 * 1024;
        let mut buf = [0u8; 8 * 256];
        let mut big = Vec::new();
        let buf: &mut [u8] = if out.len() <= 256 {
            &mut buf[..8 * out.len()]
        } else {
            big.resize(8 * PIECE_WORDS.min(out.len()), 0u8);
            &mut big
        };
        for (i, piece) in out.chunks_mut(buf.len() / 8).enumerate() {
            let at = off + (i * buf.len()) as u64;
            let bytes = &mut buf[..8 * piece.len()];
            let mut done = 0usize;
            while done < bytes.len() {
                match rustix::io::pread(&self.fd, &mut bytes[done..], at + done as u64) {
                    Ok(0) => {
                        return Err(ReadError::Truncated {
                            needed: want,
                            len: at + done as u64,
                        });
                    }
                    Ok(n) => done += n,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(ReadError::Io(PathBuf::new(), e.into())),
                }
            }
            for (w, c) in piece.iter_mut().zip(bytes.chunks_exact(8)) {
                *w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            }
        }
        Ok(())
    }

    fn data_extents(&self) -> Result<Vec<(u64, u64)>, ReadError> {
        use rustix::fs::{SeekFrom, seek};
        let mut v = Vec::new();
        let mut at = 0u64;
        while at < self.len {
            let start = match seek(&self.fd, SeekFrom::Data(at)) {
                Ok(s) => s,
                // ENXIO: no data past `at`.
                Err(rustix::io::Errno::NXIO) => break,
                Err(e) => return Err(ReadError::Io(PathBuf::new(), e.into())),
            };
            let end = seek(&self.fd, SeekFrom::Hole(start))
                .map_err(|e| ReadError::Io(PathBuf::new(), e.into()))?
                .min(self.len);
            if end <= start {
                break;
            }
            v.push((start, end));
            at = end;
        }
        Ok(v)
    }
}

/// A private byte buffer.
pub(crate) struct Bytes<'a>(pub(crate) &'a [u8]);

impl Source for Bytes<'_> {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn words(&self, off: u64, out: &mut [u64]) -> Result<(), ReadError> {
        let end = usize::try_from(off)
            .ok()
            .and_then(|o| o.checked_add(8 * out.len()).map(|e| (o, e)))
            .filter(|&(_, e)| e <= self.0.len());
        let Some((start, end)) = end else {
            return Err(ReadError::Truncated {
                needed: off.saturating_add(8 * out.len() as u64),
                len: self.0.len() as u64,
            });
        };
        for (w, c) in out.iter_mut().zip(self.0[start..end].chunks_exact(8)) {
            *w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Word reads of every size, from none to several of the pieces a
    /// long read goes through, and one past the end of the file.
    #[test]
    fn words_of_any_length_read_what_the_file_holds() {
        let words: Vec<u64> = (0..40_000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9))
            .collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let path = std::env::temp_dir().join(format!("rip-source-{}", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let fd = std::fs::File::open(&path).unwrap().into();
        std::fs::remove_file(&path).unwrap();
        let src = FileSource {
            fd,
            len: bytes.len() as u64,
            allocated: bytes.len() as u64,
        };
        for (first, n) in [
            (0, 0),
            (3, 1),
            (5, 256),
            (7, 257),
            (1, 16 * 1024 + 3),
            (0, 40_000),
        ] {
            let mut out = vec![0u64; n];
            src.words(8 * first as u64, &mut out).unwrap();
            assert_eq!(out[..], words[first..first + n], "{n} words at {first}");
        }
        let mut past = vec![0u64; 2];
        assert!(matches!(
            src.words(8 * 39_999, &mut past),
            Err(ReadError::Truncated { .. })
        ));
    }
}
