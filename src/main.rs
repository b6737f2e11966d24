//! The `fateplan` command line. The only code that reads argv, the
//! environment or file paths.

mod cli;
mod simulate;
mod study;
mod train;

fn main() -> std::process::ExitCode {
    cli::main()
}
