//! The guests' initramfs: a gzipped cpio (newc) archive with a static
//! busybox, the static binaries under test, and an /init that mounts what
//! rip-probe needs, runs rip-vmcheck and powers off. Written here rather
//! than with `cpio(1)` so that it needs no staging tree and can hold the
//! /dev/console node the kernel opens before devtmpfs is mounted.

use std::{io::Write, path::Path};

use anyhow::{Context, Result};
use flate2::{Compression, write::GzEncoder};

/// The guest's /init: runs the suite on the serial console, then powers
/// off (init exiting would panic the kernel).
pub const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
echo RIPBOOT
/bin/rip-vmcheck --probe /bin/rip-probe --stuck /bin/vm_stuck --uninstrumented /bin/uninstrumented --dmesg-all
echo "RIPEXIT $?"
poweroff -f
"#;

/// An entry of the archive.
pub enum Entry<'a> {
    /// A directory (mode 0755).
    Dir(&'a str),
    /// A regular file with its mode and contents.
    File(&'a str, u32, &'a [u8]),
    /// A character device (mode 0600) with its major and minor numbers.
    CharDev(&'a str, u32, u32),
}

/// A cpio "newc" archive of `entries`, ended by the trailer.
pub fn newc(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for (ino, e) in entries.iter().enumerate() {
        let (name, mode, data, rdev): (&str, u32, &[u8], (u32, u32)) = match *e {
            Entry::Dir(n) => (n, 0o040_755, &[], (0, 0)),
            Entry::File(n, m, d) => (n, 0o100_000 | m, d, (0, 0)),
            Entry::CharDev(n, maj, min) => (n, 0o020_600, &[], (maj, min)),
        };
        header(
            &mut out,
            ino as u32 + 1,
            mode,
            name,
            data.len() as u32,
            rdev,
        );
        out.extend_from_slice(data);
        pad4(&mut out);
    }
    header(&mut out, 0, 0, "TRAILER!!!", 0, (0, 0));
    out
}

fn header(out: &mut Vec<u8>, ino: u32, mode: u32, name: &str, size: u32, rdev: (u32, u32)) {
    let nlink = if mode & 0o040_000 != 0 { 2 } else { 1 };
    // magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
    // devminor, rdevmajor, rdevminor, namesize (with its NUL), check.
    let fields = [
        ino,
        mode,
        0,
        0,
        nlink,
        0,
        size,
        0,
        0,
        rdev.0,
        rdev.1,
        name.len() as u32 + 1,
        0,
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// Writes the gzipped initramfs to `out`: busybox, /init, and `bins`
/// (`(name in /bin, host path)`).
pub fn write(out: &Path, busybox: &Path, bins: &[(&str, &Path)]) -> Result<()> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let busybox = read(busybox)?;
    let contents: Vec<(String, Vec<u8>)> = bins
        .iter()
        .map(|(n, p)| Ok((format!("bin/{n}"), read(p)?)))
        .collect::<Result<_>>()?;
    let mut entries = vec![];
    for d in ["bin", "dev", "proc", "sys", "tmp", "root", "etc"] {
        entries.push(Entry::Dir(d));
    }
    entries.push(Entry::CharDev("dev/console", 5, 1));
    entries.push(Entry::File("bin/busybox", 0o755, &busybox));
    entries.push(Entry::File("init", 0o755, INIT.as_bytes()));
    for (n, d) in &contents {
        entries.push(Entry::File(n, 0o755, d));
    }
    let cpio = newc(&entries);
    let f = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    // Fast compression: the archive is rebuilt on every run and the
    // guest's decompression time under TCG matters more than its size.
    let mut gz = GzEncoder::new(std::io::BufWriter::new(f), Compression::fast());
    gz.write_all(&cpio)?;
    gz.finish()?.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_round_trips_through_cpio() {
        let a = newc(&[
            Entry::Dir("bin"),
            Entry::File("bin/hello", 0o755, b"hi\n"),
            Entry::CharDev("console", 5, 1),
        ]);
        assert_eq!(&a[..6], b"070701");
        assert_eq!(a.len() % 4, 0);
        assert!(a.windows(10).any(|w| w == b"TRAILER!!!"), "trailer present");
        // When cpio(1) is installed (vmtest installs it), it must list the
        // same entries.
        let dir = std::env::temp_dir().join(format!("rip-newc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.cpio");
        std::fs::write(&f, &a).unwrap();
        let listed = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("cpio -it --quiet < {}", f.display()))
            .output();
        let _ = std::fs::remove_dir_all(&dir);
        if let Ok(o) = listed
            && o.status.success()
        {
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                "bin\nbin/hello\nconsole\n"
            );
        }
    }
}
