//! The ELF symbol tables of a hostile binary, read as `rip-probe --uprobe`
//! and `calls` read them: blazesym's inspector over `.symtab`/`.dynsym`
//! (no DWARF), then the `object` walk that names an invalid symbol for the
//! error message. Either may refuse the file; neither may panic, loop or
//! run out of memory (the fuzzer's own checks).
#![no_main]

use std::{
    fs::File,
    ops::ControlFlow,
    os::unix::fs::FileExt,
    os::unix::io::AsRawFd,
    path::PathBuf,
    sync::OnceLock,
};

use blazesym::{
    SymType,
    inspect::{Inspector, source::Elf, source::Source},
};
use libfuzzer_sys::fuzz_target;

/// One scratch file per fuzzing process, rewritten for each input (the
/// inspector reads a path, as rip-probe gives it one). It is unlinked as
/// soon as it is made and read through `/proc/self/fd`, so that no run,
/// however it ends, leaves it behind.
fn scratch() -> &'static (File, PathBuf) {
    static SCRATCH: OnceLock<(File, PathBuf)> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        };
        let name = PathBuf::from(format!("{dir}/rip-fuzz-elf-{}", std::process::id()));
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&name)
            .unwrap();
        std::fs::remove_file(&name).unwrap();
        let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        (file, path)
    })
}

fuzz_target!(|data: &[u8]| {
    let (file, path) = scratch();
    file.set_len(0).unwrap();
    file.write_all_at(data, 0).unwrap();
    let mut elf = Elf::new(path);
    elf.debug_syms = false;
    let src = Source::Elf(elf);
    let mut functions = 0usize;
    let _ = Inspector::new().for_each(&src, |s| {
        functions += usize::from(s.sym_type == SymType::Function && s.file_offset.is_some());
        ControlFlow::Continue(())
    });
    std::hint::black_box(functions);
    use object::{Object, ObjectSymbol};
    if let Ok(file) = object::File::parse(data) {
        let _ = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter_map(|s| s.name_bytes().ok())
            .find(|n| std::str::from_utf8(n).is_err());
    }
});
