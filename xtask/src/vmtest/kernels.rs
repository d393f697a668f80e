//! The guest kernels: Debian's, fetched from the Debian archive apt already
//! uses, with a private apt state (the host's package lists and status are
//! never touched), cached in `~/.cache/rip/vmtest/<name>/` so a second run
//! downloads nothing.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::util::{exec, output};

/// One kernel of the matrix.
pub struct Kernel {
    /// The name on the command line and in the matrix (`6.1-rt`).
    pub name: &'static str,
    /// The Debian suite that has it.
    suite: &'static str,
    /// The metapackage naming the current versioned image.
    meta: &'static str,
}

/// Every kernel `vmtest` knows, oldest first.
pub const KERNELS: &[Kernel] = &[
    Kernel {
        name: "5.10",
        suite: "bullseye",
        meta: "linux-image-amd64",
    },
    Kernel {
        name: "6.1",
        suite: "bookworm",
        meta: "linux-image-amd64",
    },
    Kernel {
        name: "6.1-rt",
        suite: "bookworm",
        meta: "linux-image-rt-amd64",
    },
    Kernel {
        name: "6.12",
        suite: "trixie",
        meta: "linux-image-amd64",
    },
    Kernel {
        name: "backports",
        suite: "trixie-backports",
        meta: "linux-image-amd64",
    },
];

/// The kernel called `name`, or a message listing the known ones.
pub fn by_name(name: &str) -> Result<&'static Kernel> {
    KERNELS.iter().find(|k| k.name == name).with_context(|| {
        let names: Vec<&str> = KERNELS.iter().map(|k| k.name).collect();
        format!("unknown kernel {name:?}: use one of {}", names.join(", "))
    })
}

/// A kernel image on disk and the Debian package version it came from.
pub struct Image {
    /// The bootable image.
    pub vmlinuz: PathBuf,
    /// e.g. `linux-image-6.1.0-40-amd64 6.1.153-1`.
    pub package: String,
}

fn cache_root() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache"));
    base.join("rip/vmtest")
}

/// The archive URI apt uses (from /etc/apt/sources.list.d/debian.sources
/// or /etc/apt/sources.list), `http://deb.debian.org/debian` otherwise.
pub(crate) fn archive_uri() -> String {
    let deb822 =
        std::fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default();
    let from_deb822 = deb822
        .lines()
        .filter_map(|l| l.strip_prefix("URIs:"))
        .flat_map(str::split_whitespace)
        .find(|u| u.trim_end_matches('/').ends_with("/debian"));
    let list = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    let from_list = list
        .lines()
        .filter(|l| l.starts_with("deb "))
        .flat_map(str::split_whitespace)
        .find(|u| u.contains("://") && u.trim_end_matches('/').ends_with("/debian"));
    from_deb822
        .or(from_list)
        .unwrap_or("http://deb.debian.org/debian")
        .to_string()
}

/// apt-get / apt-cache with a private state under `dir`.
pub(crate) fn apt(tool: &str, dir: &Path) -> Command {
    let mut c = Command::new(tool);
    c.current_dir(dir)
        .arg("-q")
        .arg(format!(
            "-o=Dir::Etc::SourceList={}",
            dir.join("sources.list").display()
        ))
        .arg("-o=Dir::Etc::SourceParts=/dev/null")
        .arg(format!(
            "-o=Dir::State::Lists={}",
            dir.join("lists").display()
        ))
        .arg("-o=Dir::State::Status=/dev/null")
        .arg(format!("-o=Dir::Cache={}", dir.join("cache").display()))
        // Downloads land in `dir`, which the _apt user may not write.
        .arg("-o=APT::Sandbox::User=root");
    c
}

/// The image of `k`, from the cache or downloaded into it.
pub fn fetch(k: &Kernel) -> Result<Image> {
    let dir = cache_root().join(k.name);
    let vmlinuz = dir.join("vmlinuz");
    let version = dir.join("package");
    if let (true, Ok(package)) = (vmlinuz.is_file(), std::fs::read_to_string(&version)) {
        return Ok(Image {
            vmlinuz,
            package: package.trim().to_string(),
        });
    }
    let apt_dir = dir.join("apt");
    std::fs::create_dir_all(apt_dir.join("lists/partial"))
        .with_context(|| format!("creating {}", apt_dir.display()))?;
    std::fs::create_dir_all(apt_dir.join("cache/archives/partial"))?;
    std::fs::write(
        apt_dir.join("sources.list"),
        format!(
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {} {} main\n",
            archive_uri(),
            k.suite
        ),
    )?;
    exec(
        apt("apt-get", &apt_dir).arg("update"),
        &format!("apt-get update ({})", k.suite),
    )
    .with_context(|| {
        format!(
            "cannot read the {} package lists: is the Debian mirror reachable?",
            k.suite
        )
    })?;
    let image = versioned_dep(&apt_dir, k.meta, "linux-image-")?;
    // From 7.x the image package only depends on linux-binary-VER, which
    // holds the kernel.
    let binary = versioned_dep(&apt_dir, &image, "linux-binary-").ok();
    let pkg = binary.unwrap_or(image);
    let show = output(apt("apt-cache", &apt_dir).args(["show", "--no-all-versions", &pkg]))
        .with_context(|| format!("apt-cache show {pkg} failed"))?;
    let pkg_version = show
        .lines()
        .find_map(|l| l.strip_prefix("Version: "))
        .with_context(|| format!("no Version in apt-cache show {pkg}"))?
        .to_string();
    let _ = std::fs::remove_dir_all(apt_dir.join("dl"));
    std::fs::create_dir_all(apt_dir.join("dl"))?;
    exec(
        apt("apt-get", &apt_dir)
            .current_dir(apt_dir.join("dl"))
            .args(["download", &pkg]),
        &format!("apt-get download {pkg}"),
    )?;
    let deb = std::fs::read_dir(apt_dir.join("dl"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| format!("apt-get download {pkg} left no .deb"))?;
    let x = apt_dir.join("x");
    let _ = std::fs::remove_dir_all(&x);
    std::fs::create_dir_all(&x)?;
    exec(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&x),
        &format!("dpkg-deb -x {}", deb.display()),
    )?;
    let found = find_vmlinuz(&x).with_context(|| format!("no vmlinuz in {}", deb.display()))?;
    std::fs::copy(&found, &vmlinuz)?;
    let package = format!("{pkg} {pkg_version}");
    std::fs::write(&version, format!("{package}\n"))?;
    // Keep only the image (the modules are hundreds of megabytes).
    let _ = std::fs::remove_dir_all(&x);
    let _ = std::fs::remove_dir_all(apt_dir.join("dl"));
    Ok(Image { vmlinuz, package })
}

/// The dependency of `pkg` whose name starts with `prefix` and carries a
/// version (not `pkg` itself), e.g. `linux-image-6.1.0-40-amd64`.
fn versioned_dep(apt_dir: &Path, pkg: &str, prefix: &str) -> Result<String> {
    let deps = output(apt("apt-cache", apt_dir).args(["depends", pkg]))
        .with_context(|| format!("apt-cache depends {pkg} failed"))?;
    parse_versioned_dep(&deps, pkg, prefix)
        .with_context(|| format!("{pkg} depends on no {prefix}VERSION package: {deps}"))
}

fn parse_versioned_dep(deps: &str, pkg: &str, prefix: &str) -> Option<String> {
    deps.lines()
        .filter_map(|l| l.trim().trim_start_matches('|').strip_prefix("Depends: "))
        .map(str::trim)
        .find(|d| {
            d.starts_with(prefix)
                && *d != pkg
                && !d.starts_with('<')
                && d[prefix.len()..].starts_with(|c: char| c.is_ascii_digit())
        })
        .map(String::from)
}

/// `boot/vmlinuz-*` (up to 6.x) or `usr/lib/modules/*/vmlinuz` (7.x).
fn find_vmlinuz(x: &Path) -> Option<PathBuf> {
    let boot = std::fs::read_dir(x.join("boot")).ok().into_iter().flatten();
    let from_boot = boot.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
    });
    from_boot.or_else(|| {
        std::fs::read_dir(x.join("usr/lib/modules"))
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("vmlinuz")))
            .find(|p| p.is_file())
    })
}

/// Fails with the fix when qemu is missing.
pub fn check_qemu() -> Result<()> {
    if output(Command::new("qemu-system-x86_64").arg("--version")).is_none() {
        bail!("qemu-system-x86_64 not found: run cargo xtask setup");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_versioned_image() {
        let deps = "linux-image-amd64\n  Depends: linux-base-amd64\n  Depends: linux-image-7.3.4+deb13-amd64\n  Depends: linux-modules-amd64\n";
        assert_eq!(
            parse_versioned_dep(deps, "linux-image-amd64", "linux-image-").as_deref(),
            Some("linux-image-7.3.4+deb13-amd64")
        );
        let deps = "linux-image-7.3.4+deb13-amd64\n  PreDepends: linux-base\n |Depends: <dracut>\n  Depends: linux-binary-7.3.4+deb13-amd64\n";
        assert_eq!(
            parse_versioned_dep(deps, "linux-image-7.3.4+deb13-amd64", "linux-binary-").as_deref(),
            Some("linux-binary-7.3.4+deb13-amd64")
        );
        assert_eq!(
            parse_versioned_dep(deps, "linux-image-7.3.4+deb13-amd64", "linux-image-"),
            None
        );
    }

    #[test]
    fn unknown_kernel_lists_the_known_ones() {
        let e = by_name("4.19").err().unwrap().to_string();
        assert!(e.contains("5.10, 6.1, 6.1-rt, 6.12, backports"), "{e}");
    }
}
