//! A report's table of distinct stacks: in JSON, each stack of a thread,
//! group, goroutine or asyncio task is written once, in
//! [`super::Report::stacks`], and referred to by its index. A hundred
//! thousand threads (or goroutines) blocked in one place then cost a
//! hundred thousand small integers, not a hundred thousand copies of
//! their frames.
//!
//! The table is made while the report is serialized (a report is always
//! written whole, so there is nothing to keep in step between writes): the
//! stacks shared in memory ([`Arc`]) are found by address, equal stacks
//! held apart by their frames' addresses, and the indexes are handed to
//! the fields that refer to them through a table kept for the current
//! thread while its report is being written.

use std::{cell::RefCell, collections::HashMap, rc::Rc, sync::Arc};

use serde::{Serialize, Serializer, ser::SerializeSeq};

use super::{Frame, Report};

/// The report's distinct stacks (kernel and user, of threads and groups;
/// goroutines' stacks, asyncio tasks' await chains), each once, in the
/// order the threads, the groups and then the tasks first name them; the
/// stacks of `threads`, `groups` and `tasks` are indexes into it. Made
/// when the report is written: it holds nothing in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackTable;

/// What tells two stacks apart: each frame's address, whether it is a
/// Python frame (whose address is a code object's) and its line (Python
/// frames of one code object differ by line).
type Frames = Vec<(u64, bool, u32)>;

/// The distinct stacks of one report, and each one's index.
#[derive(Default)]
struct Table {
    /// Stacks shared in memory are one stack, found by address.
    by_address: HashMap<(*const Frame, usize), u32>,
    /// Copies are matched by their frames.
    by_frames: HashMap<Frames, u32>,
    stacks: Vec<Arc<[Frame]>>,
}

impl Table {
    fn of(report: &Report) -> Table {
        let mut t = Table::default();
        for th in &report.threads {
            t.add(&th.kernel_stack);
            t.add(&th.frames);
        }
        for g in report.groups.iter().chain(&report.task_groups) {
            t.add(&g.frames);
        }
        for c in &report.tasks {
            if let Some(g) = &c.go {
                t.add(&g.stack);
            }
            if let Some(p) = &c.python {
                t.add(&p.frames);
            }
        }
        t
    }

    fn add(&mut self, stack: &Arc<[Frame]>) {
        let address = (stack.as_ptr(), stack.len());
        if self.by_address.contains_key(&address) {
            return;
        }
        // Stacks are few beside the threads holding them: the frames are
        // looked at once per distinct allocation, not once per thread.
        let frames = stack
            .iter()
            .map(|f| (f.addr, f.python, f.line.unwrap_or(0)))
            .collect();
        let next = self.stacks.len() as u32;
        let id = *self.by_frames.entry(frames).or_insert_with(|| {
            self.stacks.push(stack.clone());
            next
        });
        self.by_address.insert(address, id);
    }

    fn id(&self, stack: &Arc<[Frame]>) -> Option<u32> {
        self.by_address.get(&(stack.as_ptr(), stack.len())).copied()
    }
}

thread_local! {
    /// The table of the report being written on this thread.
    static CURRENT: RefCell<Option<Rc<Table>>> = const { RefCell::new(None) };
}

/// Runs `write` with the table of `report`'s stacks current on this
/// thread (the one before it is restored after: reports are not nested,
/// but a failed write must not leave its table behind).
pub(super) fn with_table<R>(report: &Report, write: impl FnOnce() -> R) -> R {
    let table = Rc::new(Table::of(report));
    let before = CURRENT.with(|c| c.replace(Some(table)));
    let out = write();
    CURRENT.with(|c| *c.borrow_mut() = before);
    out
}

fn current() -> Option<Rc<Table>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Serializes a stack as its index in the current report's table.
pub(super) fn stack_id<S: Serializer>(stack: &Arc<[Frame]>, s: S) -> Result<S::Ok, S::Error> {
    match current().and_then(|t| t.id(stack)) {
        Some(id) => s.serialize_u32(id),
        None => Err(serde::ser::Error::custom(
            "a stack is written by its index in its report's table: write the whole report",
        )),
    }
}

impl Serialize for StackTable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Some(table) = current() else {
            return Err(serde::ser::Error::custom(
                "the stack table is written with its report: write the whole report",
            ));
        };
        let mut seq = s.serialize_seq(Some(table.stacks.len()))?;
        for stack in &table.stacks {
            seq.serialize_element(&**stack)?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Group, GroupState, Mode, ProcessInfo, Thread, ThreadState};

    fn frame(addr: u64, line: u32, python: bool) -> Frame {
        Frame {
            addr,
            function: Some(format!("f{addr:x}")),
            line: Some(line),
            python,
            ..Frame::default()
        }
    }

    fn thread(tid: u64, kernel: &Arc<[Frame]>, user: &Arc<[Frame]>) -> Thread {
        Thread {
            kernel_stack: kernel.clone(),
            frames: user.clone(),
            ..Thread::new(tid, "w".into(), "comm", ThreadState::Sleeping)
        }
    }

    fn report(threads: Vec<Thread>, groups: Vec<Group>) -> Report {
        Report {
            schema: crate::model::SCHEMA_VERSION,
            mode: Mode::Pid,
            process: ProcessInfo::default(),
            rings: Vec::new(),
            window_ns: 0,
            stacks: StackTable,
            threads,
            tasks: Vec::new(),
            groups,
            task_groups: Vec::new(),
            warnings: Vec::new(),
            deadlocks: Vec::new(),
            python: None,
        }
    }

    /// Each distinct stack is written once, and every thread and group
    /// names its own by index: shared ones, copies with the same frames,
    /// and the empty stack alike; Python frames of one code object at
    /// different lines are different stacks.
    #[test]
    fn each_distinct_stack_is_written_once_and_named_by_index() {
        let kernel: Arc<[Frame]> = vec![frame(0xffff_1000, 0, false)].into();
        let user: Arc<[Frame]> = vec![frame(0x1000, 3, false), frame(0x2000, 9, false)].into();
        let copy: Arc<[Frame]> = user.to_vec().into();
        let py_a: Arc<[Frame]> = vec![frame(0x7000, 10, true)].into();
        let py_b: Arc<[Frame]> = vec![frame(0x7000, 11, true)].into();
        let empty: Arc<[Frame]> = Vec::new().into();
        let other_empty: Arc<[Frame]> = Vec::new().into();
        let group = Group {
            origin: None,
            count: 3,
            ids: vec![1, 2, 3],
            state: GroupState::Thread(ThreadState::Sleeping),
            wait: None,
            min_ns: None,
            lower_bound: false,
            location: None,
            source: None,
            frames: copy.clone(),
            stack_samples: None,
            max_ns: None,
            created_by: None,
            waits_on: Vec::new(),
            labels: Vec::new().into(),
        };
        let r = report(
            vec![
                thread(1, &kernel, &user),
                thread(2, &kernel, &user),
                thread(3, &kernel, &copy),
                thread(4, &empty, &py_a),
                thread(5, &other_empty, &py_b),
            ],
            vec![group],
        );
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        let stacks = v["stacks"].as_array().unwrap();
        // kernel, user, empty, py_a, py_b.
        assert_eq!(stacks.len(), 5, "{v}");
        let ids = |field: &str| -> Vec<u64> {
            v["threads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t[field].as_u64().unwrap())
                .collect()
        };
        assert_eq!(ids("kernel_stack"), [0, 0, 0, 2, 2]);
        assert_eq!(ids("frames"), [1, 1, 1, 3, 4]);
        assert_eq!(v["groups"][0]["frames"], 1);
        assert_eq!(stacks[0][0]["addr"], 0xffff_1000u64);
        assert_eq!(stacks[1][1]["addr"], 0x2000);
        assert_eq!(stacks[2], serde_json::json!([]));
        assert_eq!(stacks[3][0]["line"], 10);
        assert_eq!(stacks[4][0]["line"], 11);
    }

    /// A thread alone has no table to name its stacks in: writing it is
    /// an error that says so, not a panic or a wrong index.
    #[test]
    fn a_stack_outside_its_report_is_an_error() {
        let user: Arc<[Frame]> = vec![frame(0x1000, 3, false)].into();
        let t = thread(1, &user, &user);
        let e = serde_json::to_string(&t).unwrap_err().to_string();
        assert!(e.contains("whole report"), "{e}");
        // And a report written after it is whole.
        let r = report(vec![t], Vec::new());
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["threads"][0]["frames"], 0, "{v}");
    }
}
