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

/// One heap for the C library's own allocations, unless
/// `MALLOC_ARENA_MAX` says otherwise. fateplan allocates through mimalloc;
/// glibc's `malloc` serves the little that C code asks of it, yet each
/// thread that calls it reserved a heap of its own, 64 MiB of address
/// space: on two cores, seven of them took 448 MiB under an address-space
/// limit (`ulimit -v`), where a GCN on `rmat:scale=18` then trained from a
/// limit of 2,000,000 KiB instead of 2,150,000 (`docs/runtime.md`, "A
/// run's memory checked before it starts"). No resident memory is lost.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn one_system_heap() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    // SAFETY: `mallopt` sets one of glibc's malloc parameters; called
    // before any thread but this one exists.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn one_system_heap() {}

mod cli;
mod members;
mod partition;
mod profile;
mod simulate;
mod study;
mod train;

fn main() -> std::process::ExitCode {
    keep_freed_memory();
    one_system_heap();
    // Before any other thread starts: an interruption then removes the
    // run's temporary and spill files.
    fateplan::runtime::cleanup::install();
    let status = cli::main();
    fateplan::runtime::cleanup::park_if_interrupted();
    status
}
