//! A goroutine in a cgo call runs C on its thread's own stack (the runtime
//! switched to it in `runtime.asmcgocall`): the goroutine's saved frames
//! end at `runtime.cgocall`, and its C frames are the innermost frames of
//! the thread it is on. They are joined here, from what was read: the
//! goroutine in a system call (cgo calls count as one) on that thread,
//! whose stack holds `runtime.cgocall`, and the thread's unwound stack up
//! to the first frame of the Go runtime.

use std::{collections::HashMap, sync::Arc};

use crate::model::{Frame, GoStatus, Report};

/// Whether `f` is Go code of the runtime (where C was called from): the
/// thread's C frames end at the first one.
fn is_go_runtime(f: &Frame) -> bool {
    f.function
        .as_deref()
        .is_some_and(|n| n.starts_with("runtime."))
}

/// Puts the C frames of each goroutine blocked in a cgo call before its
/// Go frames (its location becomes the innermost C frame).
pub(crate) fn join_c_frames(report: &mut Report) {
    let threads: HashMap<u64, Arc<[Frame]>> = report
        .threads
        .iter()
        .filter(|t| !t.frames.is_empty())
        .map(|t| (t.tid, t.frames.clone()))
        .collect();
    for t in &mut report.tasks {
        let (Some(tid), Some(g)) = (t.polling_tid, t.go.as_mut()) else {
            continue;
        };
        let in_cgo = g.status == GoStatus::Syscall
            && g.stack
                .iter()
                .any(|f| f.function.as_deref() == Some("runtime.cgocall"));
        let Some(thread) = threads.get(&u64::from(tid)).filter(|_| in_cgo) else {
            continue;
        };
        let c: Vec<Frame> = thread
            .iter()
            .take_while(|f| !is_go_runtime(f))
            .cloned()
            .collect();
        // A thread stack with no runtime frame was not unwound to the call.
        if c.is_empty() || c.len() == thread.len() {
            continue;
        }
        g.stack = c.iter().chain(g.stack.iter()).cloned().collect();
        if let Some(l) = &mut t.location {
            l.frame = c[0].clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Coroutine, Goroutine, Location, LocationSource, Origin, Thread, ThreadState,
    };

    fn named(n: &str) -> Frame {
        Frame {
            function: Some(n.into()),
            ..Frame::default()
        }
    }

    fn goroutine(status: GoStatus, tid: u32, stack: &[&str]) -> Coroutine {
        let stack: Arc<[Frame]> = stack.iter().map(|n| named(n)).collect();
        Coroutine {
            origin: Origin::Go,
            id: 7,
            generation: 0,
            name: String::new(),
            state: crate::model::CoroutineState::Polling,
            polling_tid: Some(tid),
            polls: 0,
            idle_ns: None,
            polling_ns: None,
            lower_bound: false,
            since_unix_ns: None,
            created_unix_ns: None,
            location: Some(Location {
                source: LocationSource::UserPc,
                seq: None,
                ago_ns: None,
                frame: stack[0].clone(),
            }),
            history: Vec::new(),
            python: None,
            go: Some(Goroutine {
                status,
                wait_reason: None,
                stack,
                stack_note: None,
                created_by: None,
                waits_on: None,
                labels: Default::default(),
                labels_note: None,
                torn: false,
            }),
        }
    }

    fn names(f: &[Frame]) -> Vec<&str> {
        f.iter().filter_map(|f| f.function.as_deref()).collect()
    }

    #[test]
    fn a_goroutine_in_c_gets_its_threads_c_frames_and_no_other_does() {
        let go = [
            "runtime.cgocall",
            "main._Cfunc_block",
            "main.inC",
            "runtime.goexit",
        ];
        let thread = |tid| {
            let mut t = Thread::new(tid, "app".into(), "comm", ThreadState::Sleeping);
            t.frames = [
                "pause",
                "block",
                "_cgo_1234_Cfunc_block",
                "runtime.asmcgocall",
            ]
            .iter()
            .map(|n| named(n))
            .collect();
            t
        };
        let mut r = Report {
            schema: crate::model::SCHEMA_VERSION,
            stacks: crate::model::StackTable,
            mode: crate::model::Mode::Pid,
            process: Default::default(),
            rings: Vec::new(),
            window_ns: 0,
            threads: vec![thread(40), thread(41)],
            tasks: Vec::new(),
            groups: Vec::new(),
            task_groups: Vec::new(),
            warnings: Vec::new(),
            deadlocks: Vec::new(),
            python: None,
        };
        r.tasks = vec![
            goroutine(GoStatus::Syscall, 40, &go),
            // In a system call of Go's own: no cgocall, nothing joined.
            goroutine(GoStatus::Syscall, 41, &["syscall.Syscall", "main.read"]),
            // Waiting: not on a thread's stack.
            goroutine(GoStatus::Waiting, 41, &go),
        ];
        join_c_frames(&mut r);
        let g = r.tasks[0].go.as_ref().unwrap();
        assert_eq!(
            names(&g.stack),
            [
                "pause",
                "block",
                "_cgo_1234_Cfunc_block",
                "runtime.cgocall",
                "main._Cfunc_block",
                "main.inC",
                "runtime.goexit"
            ]
        );
        let loc = &r.tasks[0].location.as_ref().unwrap().frame;
        assert_eq!(loc.function.as_deref(), Some("pause"));
        assert_eq!(r.tasks[1].go.as_ref().unwrap().stack.len(), 2);
        assert_eq!(r.tasks[2].go.as_ref().unwrap().stack.len(), 4);
    }
}
