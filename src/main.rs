//! The `sessionlog` command-line tool. See `sessionlog --help`.

fn main() -> std::process::ExitCode {
    sessionlog::cli::main()
}
