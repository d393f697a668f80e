//! `cargo xtask bench --bulk-only`: rip-probe on many things at once.
//! Attaching and detaching uprobes on 1,000 functions (one `uprobe_multi`
//! link, then one uprobe per function as a kernel before 6.6 gets), and
//! `--cgroup` over 100 `sleep` processes: wall time and peak RSS of each
//! run. Printed and written to target/bench/bulk.md; docs/BENCHMARKS.md
//! is left as it is.

use std::{
    fmt::Write as _,
    fs::File,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::{Context, Result, bail};

use super::{out_dir, proc};
use crate::util::step;

/// Functions of `tests/c/many_functions.c`.
const FUNCTIONS: usize = 1000;
/// `sleep` processes in the `--cgroup` row.
const PROCESSES: usize = 100;

/// Runs the rows (only the `--cgroup` one if `cgroup_only`) and prints
/// their section.
pub fn run_bulk_only(cgroup_only: bool) -> Result<()> {
    let (probe, maxrss) = super::release_probe_and_maxrss()?;
    let out = out_dir();
    let s = if cgroup_only {
        let mut s = String::new();
        writeln!(s, "{}", cgroup_row(&probe, &maxrss)?)?;
        s
    } else {
        section(&probe, &maxrss)?
    };
    let md = out.join("bulk.md");
    std::fs::write(&md, &s).with_context(|| format!("writing {}", md.display()))?;
    println!("{s}");
    Ok(())
}

/// Measures the rows with rip-probe `probe` and the `maxrss` helper; their
/// section of docs/BENCHMARKS.md.
pub fn section(probe: &Path, maxrss: &Path) -> Result<String> {
    let out = out_dir();
    let many = super::cc("tests/c/many_functions.c", &out.join("many_functions"))?;
    let maxrss = maxrss.to_path_buf();
    let mut s = String::new();
    writeln!(s, "## Many at once\n")?;
    writeln!(
        s,
        "`cargo xtask bench --bulk-only` (release build; wall time and peak RSS of each \
         rip-probe run, `ru_maxrss` through `tests/bench/maxrss.c`). Kernel {}.\n",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim()
    )?;
    writeln!(
        s,
        "| run | how | attach | wall (attach, report, detach) | peak RSS |\n| --- | --- | ---: | ---: | ---: |"
    )?;
    for (how, env) in [
        ("one uprobe_multi link", vec![]),
        (
            "one uprobe per function (`RIP_PROBE_UPROBE_MULTI=0`, `RIP_PROBE_ONE_BY_ONE_MAX=1000`)",
            // Past what detaches in 2 s: allowed, to measure it.
            vec![
                ("RIP_PROBE_UPROBE_MULTI", "0"),
                ("RIP_PROBE_ONE_BY_ONE_MAX", "1000"),
            ],
        ),
    ] {
        step(&format!("bench: {FUNCTIONS} uprobes, {how}"));
        let w = Workload::start(&many)?;
        let args = words(&[
            &probe.to_string_lossy(),
            "--pid",
            &w.pid().to_string(),
            "--uprobe",
            "fn_*",
            "--duration",
            "0",
        ]);
        let mut env = env;
        env.push(("RIP_PROBE_TIMING", "1"));
        let err_path = out.join("bulk.stderr");
        let u = proc::measure(
            &maxrss,
            &args,
            &env,
            File::create(out.join("bulk.stdout"))?,
            File::create(&err_path)?,
        )?;
        let err = std::fs::read_to_string(&err_path)?;
        if !u.success {
            bail!("{} failed: {}", args.join(" "), err.trim());
        }
        let attach = err
            .lines()
            .find_map(|l| l.strip_prefix("rip-probe timing: attach uprobes: "))
            .unwrap_or("?");
        writeln!(
            s,
            "| `--pid P --uprobe 'fn_*' --duration 0` ({FUNCTIONS} functions) | {how} | {attach} | {:.2} s | {:.0} MiB |",
            u.wall.as_secs_f64(),
            u.max_rss_kib as f64 / 1024.0
        )?;
    }

    writeln!(s, "{}", cgroup_row(probe, &maxrss)?)?;
    Ok(s)
}

/// The `--cgroup` row: rip-probe over [`PROCESSES`] `sleep` processes
/// in a cgroup of the bench's own; its wall time, peak RSS and peak RSS
/// per process.
fn cgroup_row(probe: &Path, maxrss: &Path) -> Result<String> {
    let out = out_dir();
    step(&format!("bench: --cgroup over {PROCESSES} sleep processes"));
    let cg = Cgroup::new()?;
    let mut sleeps = Children(Vec::new());
    for _ in 0..PROCESSES {
        let c = Command::new("sleep").arg("3600").spawn()?;
        cg.add(c.id())?;
        sleeps.0.push(c);
    }
    let args = words(&[
        &probe.to_string_lossy(),
        "--cgroup",
        &cg.0.to_string_lossy(),
        "--duration",
        "1s",
        "--json",
    ]);
    let json = out.join("bulk-cgroup.json");
    let u = proc::measure(
        maxrss,
        &args,
        &[],
        File::create(&json)?,
        File::create(out.join("bulk.stderr"))?,
    )?;
    let text = std::fs::read_to_string(&json)?;
    // One object: the cgroup, and one report per process.
    let reports: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("--cgroup --json: not JSON: {}", text.trim()))?;
    let n = reports["processes"].as_array().map_or(0, Vec::len);
    if !u.success || n != PROCESSES {
        let err = std::fs::read_to_string(out.join("bulk.stderr")).unwrap_or_default();
        bail!(
            "--cgroup reported {n} of {PROCESSES} processes: {}",
            err.trim()
        );
    }
    let mib = u.max_rss_kib as f64 / 1024.0;
    let row = format!(
        "| `--cgroup DIR --duration 1s --json` ({PROCESSES} `sleep` processes, {n} reports) | one session after another | | {:.2} s | {mib:.0} MiB ({:.2} MiB per process) |",
        u.wall.as_secs_f64(),
        mib / PROCESSES as f64
    );
    drop(sleeps);
    drop(cg);
    Ok(row)
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// `many_functions`, started and ready; its stdin stays open (it waits
/// for commands) until it is dropped, which kills it.
struct Workload(Child);

impl Workload {
    fn start(exe: &Path) -> Result<Workload> {
        let mut c = Command::new(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let mut line = String::new();
        BufReader::new(c.stdout.take().expect("piped")).read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("{} said {line:?}, not ready", exe.display());
        }
        Ok(Workload(c))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Processes killed and reaped on drop.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A cgroup (v2) of the bench's own, removed on drop (once empty).
struct Cgroup(PathBuf);

impl Cgroup {
    fn new() -> Result<Cgroup> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        let root = v2_mount(&mountinfo).context(
            "no cgroup2 file system in /proc/self/mountinfo: mount one (mount -t cgroup2 none /sys/fs/cgroup)",
        )?;
        let dir = root.join(format!("rip-bench-{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        Ok(Cgroup(dir))
    }

    fn add(&self, pid: u32) -> Result<()> {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} into {}", self.0.display()))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes were killed; the kernel empties it soon after.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

/// Where the cgroup v2 hierarchy is mounted, from /proc/self/mountinfo's
/// text: /sys/fs/cgroup, or e.g. /sys/fs/cgroup/unified on a host whose
/// /sys/fs/cgroup is a tmpfs of v1 controllers. The mount point is field
/// 5; the file system type follows the ` - ` separator.
fn v2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (mount, fs) = l.split_once(" - ")?;
        (fs.split(' ').next() == Some("cgroup2"))
            .then(|| mount.split(' ').nth(4).map(unescape))
            .flatten()
    })
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(p: &str) -> PathBuf {
    let b = p.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b.get(i..i + 4) {
            Some([b'\\', d @ ..]) if d.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from(
        String::from_utf8_lossy(&out).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v2_mount_is_found_where_v1_controllers_hold_sys_fs_cgroup() {
        let info = "\
25 30 0:22 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/cpu rw shared:11 - cgroup cgroup rw,cpu
";
        assert_eq!(
            v2_mount(info),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        // Optional fields before the separator do not shift the type.
        let info = "30 1 0:26 / /sys/fs/cgroup rw shared:4 master:1 - cgroup2 cgroup2 rw\n";
        assert_eq!(v2_mount(info), Some(PathBuf::from("/sys/fs/cgroup")));
        let info = "31 1 0:27 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        assert_eq!(v2_mount(info), Some(PathBuf::from("/mnt/my cg")));
        assert_eq!(
            v2_mount("25 30 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n"),
            None
        );
    }
}
