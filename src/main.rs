//! The `fateplan` command line. The only code that reads argv, the
//! environment or file paths.

/// Training allocates and frees tensors of tens of MiB every step; the
/// system allocator maps and unmaps each one, paying page faults every
/// time, where mimalloc reuses the memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in `mimalloc.h` (the same in mimalloc 2 and 3;
/// the Rust bindings do not name it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Never give freed memory back to the system. mimalloc's default returns
/// it 10 ms after it is freed, and an iteration frees a step's tensors and
/// allocates the next step's later than that: every iteration then faults
/// its memory in again and the kernel zeroes it, a quarter of a CPU
/// training iteration. The process keeps its high-water mark instead,
/// which a plan bounds.
fn keep_freed_memory() {
    // SAFETY: sets one of mimalloc's options before any thread but this one
    // exists; `mi_option_set` only stores the value.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

mod cli;
mod partition;
mod profile;
mod simulate;
mod study;
mod train;

fn main() -> std::process::ExitCode {
    keep_freed_memory();
    cli::main()
}
