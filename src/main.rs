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

/// Never give freed memory back to the system, unless
/// `MIMALLOC_PURGE_DELAY` says otherwise. By default mimalloc returns freed
/// memory after a delay, and a CPU training iteration then faulted its
/// tensors in again every time and the kernel zeroed them: about 3,500
/// faults of 2 MiB pages per epoch, a quarter of `perf`'s samples
/// (`docs/profile.md`). The process keeps its high-water mark instead,
/// which a plan bounds.
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets one of mimalloc's options before any thread but this one
    // exists; `mi_option_set` only stores the value.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

mod cli;
mod members;
mod partition;
mod profile;
mod simulate;
mod study;
mod train;

fn main() -> std::process::ExitCode {
    keep_freed_memory();
    // Before any other thread starts: an interruption then removes the
    // run's temporary and spill files.
    fateplan::runtime::cleanup::install();
    cli::main()
}
