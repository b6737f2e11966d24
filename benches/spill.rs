//! Spill store throughput against a plain sequential O_DIRECT loop on the
//! same file system, measured side by side in one run.
//!
//! - Store: blocks of `FATEPLAN_SPILL_BENCH_BLOCK_MIB` (default 32) written
//!   with `write_buf` and read back with `read_into` (checksums verified),
//!   [`IN_FLIGHT_BLOCKS`] blocks in flight, buffers reused.
//! - Baseline: one file, aligned 4 MiB `pwrite`s then `pread`s in a loop,
//!   O_DIRECT set the same way.
//!
//! Each round writes then reads `FATEPLAN_SPILL_BENCH_MIB` (default 1024)
//! MiB with the baseline and with the store, in alternating order; the
//! medians over `FATEPLAN_SPILL_BENCH_ROUNDS` (default 5) rounds are
//! reported, with the median of the per-round store/baseline ratios. The
//! directory is `FATEPLAN_SPILL_DIR`, else a folder under the target
//! directory (not /tmp, which may be tmpfs). A last round runs the store
//! in its pread/pwrite fallback. `FATEPLAN_SPILL_BENCH_QUEUE_DEPTH` and
//! `FATEPLAN_SPILL_BENCH_REQUEST_KIB` override the store's defaults.
//!
//! Then the SSD tier as the executor uses it: `FATEPLAN_SPILL_BENCH_TENSORS`
//! (default 4) f32 tensors of `FATEPLAN_SPILL_BENCH_TENSOR_MIB` (default
//! 256) MiB each stored with `SsdTier::put_data` and read back with
//! `get_data`, through staging shares of 64 MiB (the planner's default:
//! chunks, two in flight) and through one share holding a tensor whole
//! (one chunk each: as the store moved every tensor before it streamed
//! them), alternating, the medians and the median per-round ratio
//! reported; each read back is checked against the tensor (untimed).
//! Last, that tensor's byte form in memory: written as into a staging
//! buffer, read back, and a plain copy of it, GB/s.
//!
//! The bench allocates through mimalloc, keeping freed memory, as the
//! `fateplan` binary does (`src/main.rs`): a tensor read back lands in
//! reused memory, not in pages faulted in afresh.
//!
//! Run: `cargo bench --bench spill`.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fateplan::runtime::exec::{Data, SsdTier};
use fateplan::runtime::spill::{set_direct, AlignedBuf, SpillOptions, SpillStore, Ticket};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` (`src/main.rs`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

const MIB: u64 = 1 << 20;
const BASELINE_REQUEST_BYTES: usize = 4 << 20;
const IN_FLIGHT_BLOCKS: usize = 4;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value.parse().unwrap_or_else(|_| {
            eprintln!("{name}={value} is not a whole number; using {default}");
            default
        }),
        Err(_) => default,
    }
}

fn main() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options before any other thread
        // exists; `mi_option_set` only stores the value.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this
    // binary without it, and then one small round only checks that it works.
    let benching = std::env::args().any(|a| a == "--bench");
    let (default_mib, default_block_mib, default_rounds) =
        if benching { (1024, 32, 5) } else { (8, 4, 1) };
    let total_bytes = env_u64("FATEPLAN_SPILL_BENCH_MIB", default_mib) * MIB;
    let block_bytes = env_u64("FATEPLAN_SPILL_BENCH_BLOCK_MIB", default_block_mib) * MIB;
    let rounds = env_u64("FATEPLAN_SPILL_BENCH_ROUNDS", default_rounds).max(1);
    let dir = match std::env::var_os("FATEPLAN_SPILL_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_TARGET_TMPDIR")).join("spill-bench"),
    };
    std::fs::create_dir_all(&dir).expect("spill bench directory");
    let blocks = total_bytes.div_ceil(block_bytes).max(1);
    println!(
        "spill bench: {} MiB in {blocks} blocks of {} MiB, {rounds} rounds, in {}",
        total_bytes / MIB,
        block_bytes / MIB,
        dir.display()
    );

    // Per round: [store write, baseline write, store read, baseline read].
    let mut figures: Vec<[f64; 4]> = Vec::new();
    let mut mode = String::new();
    for round in 0..rounds {
        // Alternate which goes first, so drift in the device's speed
        // (shared disks, host caches) does not favour one side.
        let (store_figures, baseline_figures) = if round % 2 == 0 {
            let baseline_figures = baseline(&dir, total_bytes);
            (
                store(&dir, blocks, block_bytes as usize, false),
                baseline_figures,
            )
        } else {
            let store_figures = store(&dir, blocks, block_bytes as usize, false);
            (store_figures, baseline(&dir, total_bytes))
        };
        let (store_write, store_read, store_mode) = store_figures;
        let (baseline_write, baseline_read) = baseline_figures;
        mode = store_mode;
        println!(
            "round {round}: write MB/s store {store_write:.0} baseline {baseline_write:.0} \
             ({:.2}); read MB/s store {store_read:.0} baseline {baseline_read:.0} ({:.2})",
            store_write / baseline_write,
            store_read / baseline_read
        );
        figures.push([store_write, baseline_write, store_read, baseline_read]);
    }
    let median = |f: &dyn Fn(&[f64; 4]) -> f64| {
        let mut values: Vec<f64> = figures.iter().map(f).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    println!("store mode: {mode}");
    println!(
        "median write: store {:.0} MB/s, baseline {:.0} MB/s, ratio {:.2} (median of per-round ratios)",
        median(&|f| f[0]),
        median(&|f| f[1]),
        median(&|f| f[0] / f[1])
    );
    println!(
        "median read:  store {:.0} MB/s, baseline {:.0} MB/s, ratio {:.2} (median of per-round ratios)",
        median(&|f| f[2]),
        median(&|f| f[3]),
        median(&|f| f[2] / f[3])
    );
    let (fallback_write, fallback_read, fallback_mode) =
        store(&dir, blocks, block_bytes as usize, true);
    println!(
        "fallback ({fallback_mode}): write {fallback_write:.0} MB/s, read {fallback_read:.0} MB/s"
    );

    let (default_tensors, default_tensor_mib) = if benching { (4, 256) } else { (2, 3) };
    let tensors = env_u64("FATEPLAN_SPILL_BENCH_TENSORS", default_tensors).max(1);
    let tensor_bytes = env_u64("FATEPLAN_SPILL_BENCH_TENSOR_MIB", default_tensor_mib) * MIB;
    // Under `cargo test` a share of 1 MiB, so that the tensors still move
    // in chunks.
    let share = if benching { 64 * MIB } else { MIB } as usize;
    let values: Vec<f32> = (0..tensor_bytes / 4).map(|i| (i % 1013) as f32).collect();
    let tensor = Data::F32(values);
    // A share holding the whole form, rounded to the store's blocks.
    let whole = tensor.byte_form_len().div_ceil(4096) * 4096;
    println!(
        "ssd tier: {tensors} tensors of {} MiB, shares of {} MiB against one share a tensor",
        tensor_bytes / MIB,
        share as u64 / MIB
    );
    // Per round: [chunked write, whole write, chunked read, whole read].
    let mut figures: Vec<[f64; 4]> = Vec::new();
    for round in 0..rounds {
        let (chunked, one) = if round % 2 == 0 {
            let chunked = tier(&dir, tensors, &tensor, share);
            (chunked, tier(&dir, tensors, &tensor, whole))
        } else {
            let one = tier(&dir, tensors, &tensor, whole);
            (tier(&dir, tensors, &tensor, share), one)
        };
        println!(
            "round {round}: write MB/s chunks {:.0} whole {:.0} ({:.2}); read MB/s chunks {:.0} \
             whole {:.0} ({:.2})",
            chunked.0,
            one.0,
            chunked.0 / one.0,
            chunked.1,
            one.1,
            chunked.1 / one.1
        );
        figures.push([chunked.0, one.0, chunked.1, one.1]);
    }
    let median = |f: &dyn Fn(&[f64; 4]) -> f64| {
        let mut values: Vec<f64> = figures.iter().map(f).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    println!(
        "ssd tier median write: chunks {:.0} MB/s, whole {:.0} MB/s, ratio {:.2}; read: chunks \
         {:.0} MB/s, whole {:.0} MB/s, ratio {:.2} (medians of per-round ratios)",
        median(&|f| f[0]),
        median(&|f| f[1]),
        median(&|f| f[0] / f[1]),
        median(&|f| f[2]),
        median(&|f| f[3]),
        median(&|f| f[2] / f[3])
    );

    // The byte form in memory, where the tier's copies are: the form
    // written (`write_byte_form`, as into a staging buffer) and read back
    // (`Data::from_bytes`, `FormReader` in one piece), against copying
    // the same bytes into a fresh buffer; GB/s of the form.
    let mut form = vec![0u8; tensor.byte_form_len()];
    let mut figures: Vec<[f64; 3]> = Vec::new();
    let form_bytes = form.len() as f64;
    let gb_per_s = |seconds: f64| form_bytes / 1e9 / seconds;
    for _ in 0..rounds {
        let start = Instant::now();
        tensor.write_byte_form(&mut form).expect("byte form");
        let written = gb_per_s(start.elapsed().as_secs_f64());
        let start = Instant::now();
        let back = Data::from_bytes(&form).expect("byte form read back");
        let read = gb_per_s(start.elapsed().as_secs_f64());
        assert!(back == tensor, "the byte form read back differs");
        drop(back);
        let start = Instant::now();
        let copy = std::hint::black_box(form.to_vec());
        let copied = gb_per_s(start.elapsed().as_secs_f64());
        drop(copy);
        figures.push([written, read, copied]);
    }
    let median = |k: usize| {
        let mut values: Vec<f64> = figures.iter().map(|f| f[k]).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    println!(
        "byte form of {} MiB (medians of {rounds} rounds): written {:.1} GB/s, read back {:.1} \
         GB/s, a copy into a fresh buffer {:.1} GB/s",
        tensor_bytes / MIB,
        median(0),
        median(1),
        median(2)
    );
}

/// Stores `tensors` copies of `tensor` through the SSD tier with staging
/// shares of `share` bytes, then reads each back (checked); write and
/// read rates in MB/s of the tensors' bytes.
fn tier(dir: &Path, tensors: u64, tensor: &Data, share: usize) -> (f64, f64) {
    let form = tensor.byte_form_len() as u64;
    let store = SpillStore::open(
        dir,
        SpillOptions::with_budget(tensors * form.div_ceil(4096) * 4096),
    )
    .expect("spill store");
    let bytes = tensors * tensor.byte_len();
    let start = Instant::now();
    for key in 0..tensors {
        SsdTier::put_data(&store, key, tensor, share).expect("tier write");
    }
    let write = mb_per_s(bytes, start.elapsed().as_secs_f64());
    // The reads alone are timed, not the checks.
    let mut read_s = 0.0;
    for key in 0..tensors {
        let start = Instant::now();
        let back = SsdTier::get_data(&store, key, share).expect("tier read");
        read_s += start.elapsed().as_secs_f64();
        assert!(&back == tensor, "tensor {key} read back differs");
    }
    let read = mb_per_s(bytes, read_s);
    store.close().expect("close spill store");
    settle(dir);
    (write, read)
}

/// Lets the file system finish freeing a deleted file (a journal commit,
/// and discards on a file system mounted with `discard`) before the next
/// measurement, so that one side does not pay for the other's cleanup.
fn settle(dir: &Path) {
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
}

fn mb_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / 1e6 / seconds
}

/// Sequential aligned 4 MiB pwrite then pread over one O_DIRECT file.
fn baseline(dir: &Path, total_bytes: u64) -> (f64, f64) {
    let path = dir.join(format!("baseline-{}.bin", std::process::id()));
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("baseline file");
    if let Err(e) = set_direct(&file) {
        println!("baseline: O_DIRECT refused ({e}): figures include the page cache");
    }
    let mut buf = AlignedBuf::zeroed(BASELINE_REQUEST_BYTES).expect("baseline buffer");
    buf.iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i * 7) as u8);
    let requests = total_bytes.div_ceil(BASELINE_REQUEST_BYTES as u64);
    let bytes = requests * BASELINE_REQUEST_BYTES as u64;
    let start = Instant::now();
    for i in 0..requests {
        file.write_all_at(&buf, i * BASELINE_REQUEST_BYTES as u64)
            .expect("baseline write");
    }
    let write = mb_per_s(bytes, start.elapsed().as_secs_f64());
    let start = Instant::now();
    for i in 0..requests {
        file.read_exact_at(&mut buf, i * BASELINE_REQUEST_BYTES as u64)
            .expect("baseline read");
    }
    let read = mb_per_s(bytes, start.elapsed().as_secs_f64());
    drop(file);
    std::fs::remove_file(&path).expect("remove baseline file");
    settle(dir);
    (write, read)
}

/// Writes `blocks` blocks through a fresh store, then reads them back.
fn store(dir: &Path, blocks: u64, block_bytes: usize, force_fallback: bool) -> (f64, f64, String) {
    let defaults = SpillOptions::with_budget(blocks * block_bytes as u64);
    let options = SpillOptions {
        force_fallback,
        queue_depth: env_u64(
            "FATEPLAN_SPILL_BENCH_QUEUE_DEPTH",
            defaults.queue_depth.into(),
        ) as u32,
        request_bytes: env_u64(
            "FATEPLAN_SPILL_BENCH_REQUEST_KIB",
            defaults.request_bytes >> 10,
        ) << 10,
        ..defaults
    };
    let store = SpillStore::open(dir, options).expect("spill store");
    let mut free: Vec<AlignedBuf> = (0..IN_FLIGHT_BLOCKS)
        .map(|seed| {
            let mut buf = AlignedBuf::zeroed(block_bytes).expect("block buffer");
            buf.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (i * 13 + seed) as u8);
            buf
        })
        .collect();
    let mut in_flight: VecDeque<Ticket> = VecDeque::new();
    let start = Instant::now();
    for key in 0..blocks {
        if free.is_empty() {
            let oldest = in_flight.pop_front().expect("a block in flight");
            free.push(store.wait(oldest).expect("spill write").buf);
        }
        let buf = free.pop().expect("a free buffer");
        in_flight.push_back(store.write_buf(key, buf).expect("spill write"));
    }
    for ticket in in_flight.drain(..) {
        free.push(store.wait(ticket).expect("spill write").buf);
    }
    let write = mb_per_s(blocks * block_bytes as u64, start.elapsed().as_secs_f64());

    let start = Instant::now();
    for key in 0..blocks {
        if free.is_empty() {
            let oldest = in_flight.pop_front().expect("a block in flight");
            free.push(store.wait(oldest).expect("spill read").buf);
        }
        let buf = free.pop().expect("a free buffer");
        in_flight.push_back(store.read_into(key, buf).expect("spill read"));
    }
    for ticket in in_flight.drain(..) {
        free.push(store.wait(ticket).expect("spill read").buf);
    }
    let read = mb_per_s(blocks * block_bytes as u64, start.elapsed().as_secs_f64());
    let mode = store.mode().to_string();
    store.close().expect("close spill store");
    settle(dir);
    (write, read, mode)
}
