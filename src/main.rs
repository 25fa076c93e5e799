//! The `espalier` binary: parses the command line and hands over to [`espalier::cli`].
//! Owns: nothing else — every subcommand lives in the library — but naming the allocator
//! (chosen by the process's role: see `espalier::os::alloc`).

#[global_allocator]
static ALLOCATOR: espalier::os::alloc::ByRole = espalier::os::alloc::ByRole;

fn main() {
    std::process::exit(espalier::cli::main());
}
