//! The `espalier` binary: parses the command line and hands over to [`espalier::cli`].

fn main() {
    std::process::exit(espalier::cli::main());
}
