//! The rip-probe command line, built inside the test package so the
//! end-to-end tests can run it as a process (`CARGO_BIN_EXE_rip-probe-cli`):
//! the same one line as rip-probe's own `main.rs`.

fn main() {
    std::process::exit(rip_probe::cli::main());
}
