//! The `espalier` binary: parses the command line and hands over to [`espalier::cli`].
//! Owns: nothing else — every subcommand lives in the library.

fn main() {
    std::process::exit(espalier::cli::main());
}
