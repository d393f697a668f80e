//! Python threads: each thread's Python frames (read from the interpreter
//! at report time) put in place of the native `_PyEval_EvalFrameDefault`
//! frames that run them, as a debugger that knows CPython would show the
//! stack, and who holds the GIL. Computed from what collection read;
//! nothing here reads the process.

use std::sync::Arc;

use crate::{
    collect::runtime::python::{GilState, PyFrame, Snapshot},
    model::{Frame, Python, PythonThread, Report},
};

/// The native function that runs a run of Python frames.
const EVAL: &str = "_PyEval_EvalFrameDefault";

/// Sets each thread's [`PythonThread`] from `snap`, merges its Python
/// frames into its native stack where the two agree, and says who holds
/// the GIL.
pub(crate) fn merge(report: &mut Report, snap: &Snapshot) {
    let holder = match snap.gil {
        GilState::Held(tstate) => snap.threads.iter().find(|p| p.tstate == tstate),
        _ => None,
    };
    let mut gil_waiters = Vec::new();
    for t in &mut report.threads {
        let Some(p) = snap.threads.iter().find(|p| p.tid == t.tid) else {
            continue;
        };
        let holds_gil = holder.is_some_and(|h| h.tid == p.tid);
        // The holder waits for nothing of its own: a wait seen on it is
        // from before it took the GIL, and is not claimed.
        let gil_wait = gil_wait(t, snap).filter(|_| !holds_gil);
        if gil_wait.is_some() {
            gil_waiters.push(t.tid);
        }
        if let Some(name) = &p.name
            && t.name_source == "comm"
        {
            t.name = name.clone();
            t.name_source = "python";
        }
        let Some(py) = &p.frames else {
            t.python = Some(PythonThread {
                ident: p.ident,
                name: p.name.clone(),
                frames: Vec::new(),
                merged: false,
                note: Some("its Python frames changed at every read".into()),
                holds_gil,
                gil_wait,
            });
            continue;
        };
        let frames: Vec<Frame> = py.iter().map(frame).collect();
        let (merged, note) = if t.frames.is_empty() {
            (false, None)
        } else if t.stack_samples.is_some() {
            (
                false,
                Some(
                    "it ran: its native stack is the window's hottest, its Python frames are \
                     from report time, so they are shown apart"
                        .into(),
                ),
            )
        } else {
            match merged(&t.frames, py, &frames) {
                Ok(m) => {
                    t.frames = m.into();
                    (true, None)
                }
                Err(e) => (false, Some(e)),
            }
        };
        t.python = Some(PythonThread {
            ident: p.ident,
            name: p.name.clone(),
            frames,
            merged,
            note,
            holds_gil,
            gil_wait,
        });
    }
    gil_waiters.sort_unstable();
    report.python = Some(Python {
        version: snap.version.clone(),
        gil: match (snap.gil, holder) {
            (GilState::Held(_), Some(_)) => "held",
            (GilState::Free, _) => "free",
            _ => "changing",
        }
        .into(),
        gil_holder: holder.map(|p| p.tid),
        gil_waiters,
    });
}

/// The function in which a thread waits to take the GIL (3.11–3.13).
const TAKE_GIL: &str = "take_gil";

/// Why thread `t` is said to wait for the GIL, when what was read says
/// it does: asleep in a futex wait on the GIL's condition variable or
/// mutex (what `take_gil` sleeps on; the kernel says where it sleeps), or
/// blocked with `take_gil` on its native stack (unwound while it was
/// blocked). A thread that ran, or sleeps elsewhere, is not claimed.
fn gil_wait(t: &crate::model::Thread, snap: &Snapshot) -> Option<String> {
    if t.state != crate::model::ThreadState::Sleeping {
        return None;
    }
    let futex = t
        .syscall
        .as_ref()
        .filter(|s| s.name == "futex")
        .and_then(|s| s.args.iter().find(|a| a.name == "uaddr"))
        .map(|a| a.raw);
    if let (Some(at), Some(gil)) = (futex, &snap.gil_waits)
        && gil.contains(&at)
    {
        return Some(format!(
            "asleep in futex_wait on {at:#x}, the GIL's condition variable or mutex"
        ));
    }
    if t.stack_samples.is_none()
        && t.frames
            .iter()
            .any(|f| f.function.as_deref() == Some(TAKE_GIL))
    {
        return Some(format!("blocked with {TAKE_GIL} on its native stack"));
    }
    None
}

/// The model's frame of a Python frame.
fn frame(p: &PyFrame) -> Frame {
    Frame {
        addr: p.code,
        function: p.function.clone(),
        file: p.file.clone(),
        line: p.line,
        python: true,
        ..Frame::default()
    }
}

/// `native` with each `_PyEval_EvalFrameDefault` frame replaced by the
/// run of Python frames it executes (innermost first both), or why not:
/// the counts must match, else the thread moved between the two reads.
fn merged(native: &Arc<[Frame]>, py: &[PyFrame], frames: &[Frame]) -> Result<Vec<Frame>, String> {
    let evals = native
        .iter()
        .filter(|f| f.function.as_deref() == Some(EVAL))
        .count();
    let runs = py.iter().filter(|f| f.entry).count();
    if evals != runs {
        return Err(format!(
            "its native stack has {evals} {EVAL} frames for {runs} runs of Python frames: \
             it moved between the two reads, so they are shown apart"
        ));
    }
    let mut out = Vec::with_capacity(native.len() + frames.len());
    let mut next = 0;
    for f in native.iter() {
        if f.function.as_deref() == Some(EVAL) {
            // This run: up to and including the next entry frame.
            let end = py[next..]
                .iter()
                .position(|p| p.entry)
                .map_or(py.len(), |i| next + i + 1);
            out.extend_from_slice(&frames[next..end]);
            next = end;
        } else {
            out.push(f.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        collect::runtime::python::PyThread,
        model::{Mode, ProcessInfo, StackTable, Thread, ThreadState},
    };

    fn native(name: &str) -> Frame {
        Frame {
            addr: 0x1000 + name.len() as u64,
            function: Some(name.into()),
            ..Frame::default()
        }
    }

    fn py(name: &str, line: u32, entry: bool) -> PyFrame {
        PyFrame {
            frame: 0x9000 + u64::from(line),
            code: 0x7000 + u64::from(line),
            function: Some(name.into()),
            file: Some("app.py".into()),
            line: Some(line),
            entry,
        }
    }

    fn report(frames: Vec<Frame>, py_frames: Option<Vec<PyFrame>>, gil: GilState) -> Report {
        let mut r = Report {
            schema: crate::model::SCHEMA_VERSION,
            mode: Mode::Pid,
            process: ProcessInfo::default(),
            rings: Vec::new(),
            window_ns: 0,
            stacks: StackTable,
            threads: Vec::new(),
            tasks: Vec::new(),
            groups: Vec::new(),
            task_groups: Vec::new(),
            warnings: Vec::new(),
            deadlocks: Vec::new(),
            python: None,
        };
        let mut t = Thread::new(7, "python3".into(), "comm", ThreadState::Sleeping);
        t.frames = frames.into();
        r.threads.push(t);
        let snap = Snapshot {
            version: "3.11".into(),
            threads: vec![PyThread {
                tid: 7,
                ident: 99,
                tstate: 0x5000,
                frames: py_frames,
                name: Some("worker-1".into()),
            }],
            gil,
            gil_waits: None,
            asyncio: None,
        };
        merge(&mut r, &snap);
        r
    }

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames
            .iter()
            .map(|f| f.function.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn each_eval_frame_becomes_its_run_of_python_frames() {
        let r = report(
            vec![
                native("sem_wait"),
                native("lock_acquire"),
                native(EVAL),
                native("_PyFunction_Vectorcall"),
                native(EVAL),
                native("start_thread"),
            ],
            Some(vec![
                py("worker", 9, false),
                py("run", 3, true),
                py("Thread._bootstrap", 1, true),
            ]),
            GilState::Held(0x5000),
        );
        let t = &r.threads[0];
        assert_eq!(
            names(&t.frames),
            [
                "sem_wait",
                "lock_acquire",
                "worker",
                "run",
                "_PyFunction_Vectorcall",
                "Thread._bootstrap",
                "start_thread"
            ]
        );
        let p = t.python.as_ref().unwrap();
        assert!(p.merged && p.holds_gil && p.note.is_none());
        let py = r.python.unwrap();
        assert_eq!((py.gil.as_str(), py.gil_holder), ("held", Some(7)));
    }

    #[test]
    fn a_stack_that_does_not_match_is_left_alone_and_says_why() {
        let r = report(
            vec![native("sem_wait"), native(EVAL), native("start_thread")],
            Some(vec![
                py("worker", 9, true),
                py("Thread._bootstrap", 1, true),
            ]),
            GilState::Changing,
        );
        let t = &r.threads[0];
        assert_eq!(names(&t.frames), ["sem_wait", EVAL, "start_thread"]);
        let p = t.python.as_ref().unwrap();
        assert!(!p.merged && !p.holds_gil);
        assert!(
            p.note
                .as_ref()
                .unwrap()
                .contains("1 _PyEval_EvalFrameDefault frames for 2")
        );
        assert_eq!(names(&p.frames), ["worker", "Thread._bootstrap"]);
        let py = r.python.unwrap();
        assert_eq!((py.gil.as_str(), py.gil_holder), ("changing", None));
    }

    #[test]
    fn frames_that_never_held_still_are_not_shown() {
        let r = report(vec![native(EVAL)], None, GilState::Free);
        let p = r.threads[0].python.as_ref().unwrap();
        assert!(p.frames.is_empty() && !p.merged);
        assert_eq!(r.python.unwrap().gil, "free");
    }
}
