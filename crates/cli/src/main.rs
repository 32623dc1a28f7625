//! The `vramscope` binary: see the `vramscope_cli` library.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(vramscope_cli::run_and_end(std::env::args_os()))
}
