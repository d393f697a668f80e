//! The ring file is created without trusting its path: a planted symlink
//! or a foreign file is refused and left untouched, the program runs on
//! untraced with the reason printed once; the default path lives in a
//! per-user 0700 directory; a file off tmpfs only warns.

use std::{
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    process::Command,
};

use rip_tests::{TempDir, facts, read_ring, run};

const WRITER: &str = env!("CARGO_BIN_EXE_ring-writer");

/// Runs the C-ABI writer against `path`: it must refuse the path, say why
/// in exactly one line, and run to the end untraced.
fn refused_untraced(path: &Path) -> String {
    let out = run(Command::new(WRITER).arg("untraced").arg(path));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the program must keep running: {stderr}"
    );
    assert_eq!(facts(&stdout, "created"), ["false"]);
    assert_eq!(facts(&stdout, "still"), ["running"]);
    let lines: Vec<_> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line of error, once: {stderr:?}");
    assert!(
        lines[0].starts_with("librip: ") && lines[0].contains(&*path.to_string_lossy()),
        "{stderr}"
    );
    lines[0].to_owned()
}

#[test]
fn a_planted_symlink_is_refused_and_its_target_untouched() {
    let dir = TempDir::new("/dev/shm", "symlink");
    let target = dir.join("precious");
    std::fs::write(&target, b"do not touch").unwrap();
    let link = dir.join("app.ring");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let msg = refused_untraced(&link);
    assert!(msg.contains("already exists"), "{msg}");
    assert_eq!(std::fs::read(&target).unwrap(), b"do not touch");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A dangling symlink must not be followed to create its target either.
    let nowhere = dir.join("nowhere");
    let dangling = dir.join("dangling.ring");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    refused_untraced(&dangling);
    assert!(!nowhere.exists(), "the symlink's target was created");
}

#[test]
fn a_foreign_or_existing_file_is_refused_and_untouched() {
    let dir = TempDir::new("/dev/shm", "foreign");
    let path = dir.join("app.ring");
    std::fs::write(&path, b"someone else's").unwrap();
    // As root, make it really foreign; otherwise it is at least existing.
    let _ = std::os::unix::fs::chown(&path, Some(65534), Some(65534));
    let before = std::fs::metadata(&path).unwrap();
    let msg = refused_untraced(&path);
    assert!(
        msg.contains("already exists") && msg.contains("move it away"),
        "{msg}"
    );
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    assert_eq!(
        (before.uid(), before.mode(), before.ino()),
        (after.uid(), after.mode(), after.ino())
    );
}

#[test]
fn a_missing_directory_is_reported_not_created() {
    let dir = TempDir::new("/dev/shm", "nodir");
    let msg = refused_untraced(&dir.join("sub/app.ring"));
    assert!(msg.contains("No such file"), "{msg}");
    assert!(!dir.join("sub").exists());
}

#[test]
fn the_default_path_is_in_a_private_directory() {
    let out = run(Command::new(WRITER).arg("default").arg("-"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = PathBuf::from(facts(&stdout, "path")[0]);
    let ring = read_ring(&path);
    let dir = path.parent().unwrap();
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(dir, Path::new(&format!("/dev/shm/rip-{uid}")));
    assert_eq!(
        path.file_name().unwrap().to_string_lossy(),
        format!("ring-writer.{}.ring", ring.header().pid)
    );
    let d = std::fs::symlink_metadata(dir).unwrap();
    assert!(d.is_dir());
    assert_eq!((d.permissions().mode() & 0o777, d.uid()), (0o700, uid));
    let f = std::fs::metadata(&path).unwrap();
    assert_eq!((f.mode() & 0o7777, f.uid(), f.nlink()), (0o600, uid, 1));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn off_tmpfs_it_warns_once_and_works() {
    let dir = TempDir::new("/tmp", "disk");
    let fs = run(Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir.path()));
    let fs = String::from_utf8_lossy(&fs.stdout).trim().to_owned();
    assert_ne!(fs, "tmpfs", "this test needs /tmp on a disk filesystem");
    let path = dir.join("disk.ring");
    let out = run(Command::new(WRITER).arg("basic").arg(&path));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(facts(&stdout, "tmpfs"), ["false"]);
    let warnings: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("not on tmpfs"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(read_ring(&path).slots().count() >= 4);
}
