//! `rip-probe`: see [`rip_probe::cli`].

fn main() {
    std::process::exit(rip_probe::cli::main());
}
