//! `rip-probe --pid` on threads blocked on Rust's std locks: the futex fits
//! no glibc layout, and the waiter's stack is in std's lock slow path, so
//! the owner is "not recorded" with the lock type — never a guessed
//! thread.

use std::process::Command;

use rip_tests::{Workload, bpf_tests_enabled, json_thread, rip_probe_json, rip_probe_ok};

const EXE: &str = env!("CARGO_BIN_EXE_rip-probe-cli");

#[test]
fn rust_std_locks_record_no_owner() {
    if !bpf_tests_enabled("rust_std_locks_record_no_owner") {
        return;
    }
    let w = Workload::start(Command::new(env!("CARGO_BIN_EXE_rip-std-locks")));
    let pid = w.pid().to_string();
    let v = rip_probe_json(EXE, &["--pid", &pid, "--duration", "200ms", "--json"]);
    let thread = |tid: u32| json_thread(&v, tid);
    for (role, ty) in [
        ("mutex-waiter", "Rust std::sync::Mutex"),
        ("rwlock-waiter", "Rust std::sync::RwLock"),
    ] {
        let wf = &thread(w.tid(role))["waits_for"];
        eprintln!("{role}: {wf}");
        assert_eq!(wf["owner"]["status"], "not_recorded", "{role}: {wf}");
        let reason = wf["owner"]["reason"].as_str().unwrap();
        assert!(
            reason.contains(ty) && reason.contains("records no owner"),
            "{reason}"
        );
        assert!(wf["owner_tid"].is_null(), "{wf}");
        assert_eq!(wf["kind"], "futex");
    }
    assert!(v["deadlocks"].as_array().unwrap().is_empty());
    // The text says the same, in the waiter's sentence.
    let text = rip_probe_ok(EXE, &["--pid", &pid, "--duration", "200ms"]);
    let waiter = w.tid("mutex-waiter");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{waiter} (")) && l.contains("waits for"))
        .unwrap_or_else(|| panic!("no sentence for {waiter}: {text}"));
    assert!(
        line.contains("Rust std::sync::Mutex") && line.contains("records no owner"),
        "{line}"
    );
}
