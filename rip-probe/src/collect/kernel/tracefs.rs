//! tracefs: where it is mounted (mounting it when we may) and the layout of
//! a tracepoint's record, read from its `format` file.

use std::{collections::HashMap, path::PathBuf};

use super::Error;
use crate::collect::Result;

/// Where the kernel mounts tracefs by convention.
pub(crate) const TRACEFS: &str = "/sys/kernel/tracing";

/// Returns the tracefs mount point. When tracefs is not mounted and we are
/// root, mounts it at [`TRACEFS`] and says so on stderr (aya's attach needs
/// it); otherwise fails with [`Error::TracefsMissing`].
pub(crate) fn ensure_mounted() -> Result<PathBuf> {
    if let Some(p) = find_mount()? {
        readable(&p)?;
        return Ok(p);
    }
    if !rustix::process::geteuid().is_root() {
        return Err(Error::TracefsMissing.into());
    }
    rustix::mount::mount(
        "nodev",
        TRACEFS,
        "tracefs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .map_err(|_| Error::TracefsMissing)?;
    eprintln!("rip-probe: mounted tracefs at {TRACEFS} (it was not mounted)");
    Ok(PathBuf::from(TRACEFS))
}

/// Fails with [`Error::TracefsDenied`] when rip-probe may not read the
/// tracepoints' files under `tracefs` (root's, mode 0700 and 0440, and
/// rip-probe runs for another user without CAP_DAC_READ_SEARCH): checked
/// before anything is loaded, since aya's attach would only say that it
/// found no tracefs.
fn readable(tracefs: &std::path::Path) -> Result<()> {
    let probe = tracefs.join("events/sched/sched_switch/format");
    match std::fs::File::open(&probe) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(Error::TracefsDenied(probe).into())
        }
        // Anything else (a kernel without the event, say) is for the
        // reader of that file to report.
        _ => Ok(()),
    }
}

/// Finds a tracefs mount in /proc/self/mounts.
fn find_mount() -> Result<Option<PathBuf>> {
    let path = "/proc/self/mounts";
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.into(),
        source,
    })?;
    let mut debugfs = None;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(_dev), Some(dir), Some(fstype)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        match fstype {
            "tracefs" => return Ok(Some(PathBuf::from(dir))),
            "debugfs" => debugfs = Some(PathBuf::from(dir).join("tracing")),
            _ => {}
        }
    }
    // Older systems expose tracefs under debugfs.
    Ok(debugfs.filter(|p| p.join("events").is_dir()))
}

/// One field of a tracepoint record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    /// Byte offset in the record.
    pub(crate) offset: u32,
    /// Size in bytes.
    pub(crate) size: u32,
}

/// The fields of a tracepoint record, by name.
#[derive(Clone, Debug, Default)]
pub(crate) struct Format {
    fields: HashMap<String, Field>,
}

impl Format {
    /// Reads `<tracefs>/events/<category>/<name>/format`.
    pub(crate) fn read(tracefs: &std::path::Path, category: &str, name: &str) -> Result<Self> {
        let path = tracefs
            .join("events")
            .join(category)
            .join(name)
            .join("format");
        let text = std::fs::read_to_string(&path).map_err(|source| match source.kind() {
            std::io::ErrorKind::PermissionDenied => Error::TracefsDenied(path.clone()),
            _ => Error::Read {
                path: path.clone(),
                source,
            },
        })?;
        Self::parse(&text).map_err(|what| Error::Unexpected { path, what }.into())
    }

    /// Parses the text of a `format` file.
    pub(crate) fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut fields = HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            let Some(rest) = line.strip_prefix("field:") else {
                continue;
            };
            // "field:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;"
            let mut parts = rest.split(';').map(str::trim);
            let decl = parts.next().unwrap_or_default();
            let name = decl
                .rsplit(|c: char| c.is_whitespace() || c == '*')
                .next()
                .unwrap_or_default();
            // "char prev_comm[16]" names the array "prev_comm".
            let name = name.split('[').next().unwrap_or_default().to_string();
            let mut offset = None;
            let mut size = None;
            for p in parts {
                if let Some(v) = p.strip_prefix("offset:") {
                    offset = v.parse().ok();
                } else if let Some(v) = p.strip_prefix("size:") {
                    size = v.parse().ok();
                }
            }
            match (offset, size) {
                (Some(offset), Some(size)) if !name.is_empty() => {
                    fields.insert(name, Field { offset, size });
                }
                _ => return Err(format!("cannot parse field line `{line}`")),
            }
        }
        if fields.is_empty() {
            return Err("no fields".into());
        }
        Ok(Format { fields })
    }

    /// The field `name`, checked to have size `size`.
    pub(crate) fn field(&self, name: &str, size: u32) -> std::result::Result<Field, String> {
        match self.fields.get(name) {
            Some(f) if f.size == size => Ok(*f),
            Some(f) => Err(format!("field {name} has size {}, expected {size}", f.size)),
            None => Err(format!("no field {name}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHED_SWITCH: &str = "name: sched_switch
ID: 372
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;

print fmt: \"prev_comm=%s\"";

    #[test]
    fn parses_sched_switch() {
        let f = Format::parse(SCHED_SWITCH).unwrap();
        assert_eq!(f.field("prev_pid", 4).unwrap().offset, 24);
        assert_eq!(f.field("prev_state", 8).unwrap().offset, 32);
        assert_eq!(f.field("next_pid", 4).unwrap().offset, 56);
        assert_eq!(f.field("prev_comm", 16).unwrap().offset, 8);
        assert!(f.field("prev_state", 4).is_err());
        assert!(f.field("nope", 4).is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!(Format::parse("hello").is_err());
        assert!(Format::parse("field:int x; offset:zz; size:4;").is_err());
    }
}
