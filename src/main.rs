//! The `fateplan` command line. The only code that reads argv, the
//! environment or file paths.

/// Training allocates and frees tensors of tens of MiB every step; the
/// system allocator maps and unmaps each one, paying page faults every
/// time, where mimalloc reuses the memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cli;
mod partition;
mod profile;
mod simulate;
mod study;
mod train;

fn main() -> std::process::ExitCode {
    cli::main()
}
