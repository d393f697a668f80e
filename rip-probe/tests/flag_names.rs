//! Only the command line speaks of its flags in errors: no error below it
//! names a `--flag`. The CLI's messages add the flag an error came from
//! (`cli/messages.rs`), so that the library's errors read right for a
//! program that uses it without the CLI. (Report texts that point at the
//! report's own options, in render and session, are not errors.)

use std::path::{Path, PathBuf};

/// The modules that make up the command line: its parsing, its commands
/// (which own their flags) and its messages.
const CLI: &[&str] = &["cli", "commands"];

/// The modules whose every string is an error's or a fact's, never a
/// report's: discovery, collection and the error they make up.
const ERRORS_ONLY: &[&str] = &["discover", "collect", "error"];

/// The string literals of Rust source `text` (comments, doc comments
/// included, are not literals), with their line numbers and offsets.
fn literals(text: &str) -> Vec<(usize, usize, String)> {
    let b = text.as_bytes();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    while i < b.len() {
        match b[i] {
            b'\n' => line += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                line += text[i..end].matches('\n').count();
                i = end;
                continue;
            }
            // A char literal ('"', '\'', 'x'); else a lifetime.
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 2,
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let start = i + 2 + hashes;
                let close = format!("\"{}", "#".repeat(hashes));
                let end = text[start..].find(&close).map_or(b.len(), |e| start + e);
                out.push((i, line, text[start..end].to_string()));
                line += text[start..end].matches('\n').count();
                i = end + close.len();
                continue;
            }
            b'"' => {
                let start = i + 1;
                i = start;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                out.push((start - 1, line, text[start..i.min(b.len())].to_string()));
                line += text[start..i.min(b.len())].matches('\n').count();
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The `--flag`s `s` names (`--` followed by a letter, not after a word
/// character: `a--b` is no flag).
fn flags(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    (0..b.len().saturating_sub(2))
        .filter(|&i| {
            b[i] == b'-'
                && b[i + 1] == b'-'
                && b[i + 2].is_ascii_lowercase()
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-'))
        })
        .map(|i| {
            let end = s[i + 2..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .map_or(s.len(), |e| i + 2 + e);
            s[i..end].to_string()
        })
        .collect()
}

/// Whether the literal at `at` is the message of an `#[error(...)]`
/// attribute (thiserror's).
fn is_error_message(text: &str, at: usize) -> bool {
    text[..at].trim_end().ends_with("#[error(")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_error_below_the_cli_names_a_flag() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let below: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            let rel = p.strip_prefix(&src).unwrap();
            let top = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let top = top.trim_end_matches(".rs");
            !CLI.contains(&top) && rel != Path::new("main.rs")
        })
        .collect();
    assert!(below.len() > 20, "read the sources: {}", below.len());
    let mut bad = Vec::new();
    for p in below {
        let rel = p.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let all = ERRORS_ONLY.contains(&top.trim_end_matches(".rs"));
        let text = std::fs::read_to_string(p).unwrap();
        for (at, line, lit) in literals(&text) {
            if !all && !is_error_message(&text, at) {
                continue;
            }
            for f in flags(&lit) {
                bad.push(format!("{}:{line}: {f} in {lit:?}", p.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "flags named below the CLI:\n{}",
        bad.join("\n")
    );
}

/// The scan finds what it looks for: a flag in a message, in a raw string
/// and after an escaped quote; not in comments, char literals or words.
#[test]
fn the_scan_finds_flags_in_literals_only() {
    let text = r##"
        // "--pid in a comment"
        /// "--pid in a doc comment"
        /* "--pid" in a block comment */
        let q = '"';
        let e = '\'';
        fn f<'a>(x: &'a str) {}
        let a = format!("--uprobe {spec}: bad pattern");
        let b = r#"see --cgroup"#;
        let c = "a \" quote, then --json";
        let d = "non-flag: a--b, ---, --";
        #[error("--pid {0} is gone")]
    "##;
    let found: Vec<String> = literals(text)
        .into_iter()
        .flat_map(|(_, _, l)| flags(&l))
        .collect();
    assert_eq!(found, ["--uprobe", "--cgroup", "--json", "--pid"]);
    let errors: Vec<String> = literals(text)
        .into_iter()
        .filter(|(at, _, _)| is_error_message(text, *at))
        .map(|(_, _, l)| l)
        .collect();
    assert_eq!(errors, ["--pid {0} is gone"]);
}
