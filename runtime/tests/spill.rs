//! The SSD spill store: round trips in every I/O mode, the budget, and
//! the faults it must survive or report (unwritable directory, full disk,
//! corrupted block, no io_uring, no O_DIRECT, short and interrupted
//! transfers).

use std::os::unix::fs::FileExt;

use fateplan_runtime::exec::{Data, ExecError, SsdTier};
use fateplan_runtime::spill::{
    spill_file_is_held, tier_key, Faults, OpKind, SpillOptions, SpillStore, ALIGN_BYTES,
    BUFFERS_PER_TRANSFER, KEPT_BUFFERS,
};
use fateplan_runtime::Error;

const MIB: u64 = 1 << 20;

/// A scratch directory under the target directory (a real file system,
/// unlike a tmpfs /tmp), deleted when dropped.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("spill-test-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

fn options(budget_bytes: u64, force_fallback: bool) -> SpillOptions {
    SpillOptions {
        force_fallback,
        // Small requests so multi-request blocks are common in tests.
        request_bytes: 256 << 10,
        queue_depth: 8,
        ..SpillOptions::with_budget(budget_bytes)
    }
}

/// Bytes that differ per key and position.
fn pattern(key: u64, len: usize) -> Vec<u8> {
    let mut state = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn round_trip(store: &SpillStore, sizes: &[usize]) {
    let tickets: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(key, &len)| store.write(key as u64, &pattern(key as u64, len)).unwrap())
        .collect();
    for ticket in tickets {
        let done = store.wait(ticket).unwrap();
        assert_eq!(done.kind, OpKind::Write);
    }
    let tickets: Vec<_> = (0..sizes.len())
        .map(|key| store.read(key as u64).unwrap())
        .collect();
    for (ticket, &len) in tickets.into_iter().zip(sizes) {
        let key = ticket.key();
        let done = store.wait(ticket).unwrap();
        assert_eq!(done.kind, OpKind::Read);
        assert_eq!(done.buf.len(), len, "key {key}");
        assert!(
            done.buf[..] == pattern(key, len)[..],
            "key {key}: bytes differ"
        );
    }
}

const SIZES: [usize; 8] = [0, 1, 4095, 4096, 4097, 1 << 20, (3 << 20) + 123, 100_000];

#[test]
fn round_trip_uring_direct() {
    let dir = scratch();
    let store = SpillStore::open(dir.path(), options(64 * MIB, false)).unwrap();
    // This machine has io_uring and an O_DIRECT-capable file system; say
    // so when another does not, rather than fail.
    eprintln!("spill store mode: {}", store.mode());
    round_trip(&store, &SIZES);
    let expected: u64 = SIZES.iter().map(|&s| s as u64).sum();
    assert_eq!(store.bytes_written(), expected);
    assert_eq!(store.bytes_read(), expected);
    let aligned: u64 = SIZES
        .iter()
        .map(|&s| (s as u64).div_ceil(ALIGN_BYTES as u64) * ALIGN_BYTES as u64)
        .sum();
    assert_eq!(store.used_bytes(), aligned);
    assert_eq!(store.peak_bytes(), aligned);
}

#[test]
fn no_uring_gives_identical_bytes_and_says_so() {
    let dir = scratch();
    let forced = SpillStore::open(dir.path(), options(64 * MIB, true)).unwrap();
    assert!(!forced.mode().uring);
    assert!(
        forced.mode().to_string().contains("pread/pwrite"),
        "{}",
        forced.mode()
    );
    assert!(forced.mode().to_string().contains("force_fallback"));
    round_trip(&forced, &SIZES);

    let injected = SpillStore::open(
        dir.path(),
        SpillOptions {
            faults: Faults {
                fail_uring_setup: true,
                ..Faults::default()
            },
            ..options(64 * MIB, false)
        },
    )
    .unwrap();
    assert!(!injected.mode().uring);
    assert!(
        injected
            .mode()
            .to_string()
            .contains("io_uring setup failed"),
        "{}",
        injected.mode()
    );
    round_trip(&injected, &SIZES);
}

#[test]
fn file_system_without_o_direct_falls_back_to_buffered_io() {
    let dir = scratch();
    for force_fallback in [false, true] {
        let store = SpillStore::open(
            dir.path(),
            SpillOptions {
                faults: Faults {
                    reject_direct: true,
                    ..Faults::default()
                },
                ..options(64 * MIB, force_fallback)
            },
        )
        .unwrap();
        assert!(!store.mode().direct);
        assert!(
            store.mode().to_string().contains("buffered"),
            "{}",
            store.mode()
        );
        round_trip(&store, &SIZES);
    }
}

#[test]
fn unwritable_directory_is_named_at_open() {
    let dir = scratch();
    // A path under a regular file cannot be a directory, even for root.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let spill_dir = file.join("spill");
    let error = SpillStore::open(&spill_dir, options(MIB, false)).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, Error::SpillIo { .. }), "{error:?}");
    assert!(message.contains(&*spill_dir.to_string_lossy()), "{message}");
    assert!(message.contains("spill directory"), "{message}");
}

#[test]
fn bad_options_are_named() {
    let dir = scratch();
    for (options, field) in [
        (
            SpillOptions {
                queue_depth: 0,
                ..SpillOptions::with_budget(MIB)
            },
            "queue_depth",
        ),
        (
            SpillOptions {
                request_bytes: 1000,
                ..SpillOptions::with_budget(MIB)
            },
            "request_bytes",
        ),
    ] {
        let message = SpillStore::open(dir.path(), options)
            .unwrap_err()
            .to_string();
        assert!(message.contains(field), "{message}");
    }
}

#[test]
fn budget_is_checked_before_any_io() {
    let dir = scratch();
    let budget = 3 * 4096 + 100;
    for force_fallback in [false, true] {
        let store = SpillStore::open(dir.path(), options(budget, force_fallback)).unwrap();
        let ticket = store.write(1, &pattern(1, 8000)).unwrap();
        store.wait(ticket).unwrap();
        assert_eq!(store.used_bytes(), 8192);
        let error = store.write(2, &pattern(2, 4097)).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("tier ssd")
                && message.contains("key 2")
                && message.contains("needs 8.00 KiB (8192 bytes)")
                && message.contains(&format!(
                    "but 8.00 KiB (8192 bytes) of the budget of 12.1 KiB ({budget} bytes) are in use"
                )),
            "{message}"
        );
        assert!(!store.contains(2));
        assert_eq!(store.used_bytes(), 8192);
        // Exactly what is left (4096) still fits, and nothing more.
        store.wait(store.write(3, &[7; 4096]).unwrap()).unwrap();
        assert!(store.write(4, &[1]).is_err());
        // Empty blocks take no space.
        store.wait(store.write(5, &[]).unwrap()).unwrap();
        store.remove(1).unwrap();
        assert_eq!(store.used_bytes(), 4096);
        store
            .wait(store.write(2, &pattern(2, 4097)).unwrap())
            .unwrap();
        assert_eq!(store.peak_bytes(), 3 * 4096);
    }
}

/// A file system with less room than a growth step still takes blocks
/// that fit it: the file is reserved at what they need, and only a block
/// past the room fails, naming the file and the bytes.
#[test]
fn a_small_file_system_takes_what_fits_it() {
    let dir = scratch();
    let store = SpillStore::open(
        dir.path(),
        SpillOptions {
            faults: Faults {
                room_bytes: Some(3 * MIB),
                ..Faults::default()
            },
            // A budget of many growth steps, as a profile's SSD gives.
            ..options(1 << 30, false)
        },
    )
    .unwrap();
    for key in 0..2 {
        store
            .wait(store.write(key, &pattern(key, MIB as usize)).unwrap())
            .unwrap();
    }
    let done = store.wait(store.read(1).unwrap()).unwrap();
    assert!(done.buf[..] == pattern(1, MIB as usize)[..]);
    let error = store
        .write(2, &pattern(2, 2 * MIB as usize))
        .and_then(|ticket| store.wait(ticket))
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("reserving space for key 2")
            && message.contains("No space left on device"),
        "{message}"
    );
    let done = store.wait(store.read(0).unwrap()).unwrap();
    assert!(done.buf[..] == pattern(0, MIB as usize)[..]);
}

#[test]
fn full_disk_names_the_file_and_bytes_and_frees_the_space() {
    let dir = scratch();
    for force_fallback in [false, true] {
        let store = SpillStore::open(
            dir.path(),
            SpillOptions {
                faults: Faults {
                    enospc_after_bytes: Some(MIB + 4096),
                    ..Faults::default()
                },
                ..options(64 * MIB, force_fallback)
            },
        )
        .unwrap();
        store
            .wait(store.write(1, &pattern(1, MIB as usize)).unwrap())
            .unwrap();
        let ticket = store.write(2, &pattern(2, 2 * MIB as usize)).unwrap();
        let error = store.wait(ticket).unwrap_err();
        let message = error.to_string();
        let Error::SpillBlockIo {
            path,
            key,
            block_bytes,
            bytes,
            source,
            ..
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(path, store.path());
        assert_eq!((*key, *block_bytes), (2, 2 * MIB));
        assert!(*bytes > 0 && *bytes <= 256 << 10, "{message}");
        assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{message}");
        assert!(
            message.contains(&*store.path().to_string_lossy())
                && message.contains("writing key 2 (2097152 bytes)")
                && message.contains("No space left on device"),
            "{message}"
        );
        // The failed block is gone and its space is free; the earlier one is intact.
        assert!(!store.contains(2));
        assert_eq!(store.used_bytes(), MIB);
        let done = store.wait(store.read(1).unwrap()).unwrap();
        assert!(done.buf[..] == pattern(1, MIB as usize)[..]);
        // A read of a block whose write failed and was never waited for
        // reports that failure.
        let _dropped = store.write(3, &pattern(3, 8192)).unwrap();
        let error = store.read(3).unwrap_err().to_string();
        assert!(
            error.contains("writing key 3") && error.contains("No space"),
            "{error}"
        );
        store.remove(3).unwrap();
        assert_eq!(store.used_bytes(), MIB);
    }
}

#[test]
fn corrupted_block_is_a_checksum_error_not_wrong_bytes() {
    let dir = scratch();
    for force_fallback in [false, true] {
        let store = SpillStore::open(dir.path(), options(64 * MIB, force_fallback)).unwrap();
        let len = 3 * MIB as usize + 10;
        store.wait(store.write(1, &[0; 4096]).unwrap()).unwrap();
        store
            .wait(store.write(7, &pattern(7, len)).unwrap())
            .unwrap();
        let (path, offset) = store.block_location(7).unwrap();
        assert_eq!(path, store.path());
        // Flip one byte in the block's third MiB.
        let target = offset + 2 * MIB + 12345;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, target).unwrap();
        byte[0] ^= 0x5a;
        file.write_all_at(&byte, target).unwrap();
        file.sync_all().unwrap();

        let error = store.wait(store.read(7).unwrap()).unwrap_err();
        let message = error.to_string();
        let Error::SpillChecksum {
            path: error_path,
            key,
            offset: bad_offset,
            expected,
            actual,
            ..
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!((error_path.as_path(), *key), (store.path(), 7));
        assert_eq!(*bad_offset, offset + 2 * MIB, "{message}");
        assert_ne!(expected, actual);
        assert!(
            message.contains("key 7") && message.contains("checksum mismatch"),
            "{message}"
        );
        // Other blocks still read back.
        store.wait(store.read(1).unwrap()).unwrap();
        // Through the executor's SSD tier the error stays whole: the
        // store's own, to match on. The tier keeps its key 7 as chunks
        // (`tier_key`); its first is damaged the same way.
        SsdTier::put(&store, 7, &pattern(7, len)).unwrap();
        let (_, offset) = store.block_location(tier_key(7, 0).unwrap()).unwrap();
        let target = offset + 2 * MIB + 12345;
        file.read_exact_at(&mut byte, target).unwrap();
        byte[0] ^= 0x5a;
        file.write_all_at(&byte, target).unwrap();
        file.sync_all().unwrap();
        let through = SsdTier::get(&store, 7).unwrap_err();
        assert!(
            through.to_string().starts_with("ssd tier: ")
                && through.to_string().contains("checksum mismatch"),
            "{through}"
        );
        let ExecError::Ssd(inner) = &through else {
            panic!("{through:?}");
        };
        assert!(
            matches!(
                inner.downcast_ref::<Error>(),
                Some(Error::SpillChecksum { key, .. }) if Some(*key) == tier_key(7, 0)
            ),
            "{inner:?}"
        );
        let source = std::error::Error::source(&through).expect("a source");
        assert_eq!(source.to_string(), inner.to_string());
    }
}

#[test]
fn short_and_interrupted_transfers_are_resubmitted() {
    let dir = scratch();
    for force_fallback in [false, true] {
        let store = SpillStore::open(
            dir.path(),
            SpillOptions {
                faults: Faults {
                    short_transfers: true,
                    transient_error_every: Some(3),
                    ..Faults::default()
                },
                ..options(64 * MIB, force_fallback)
            },
        )
        .unwrap();
        round_trip(&store, &SIZES);
    }
}

#[test]
fn endless_transient_errors_fail_after_bounded_retries() {
    let dir = scratch();
    let store = SpillStore::open(
        dir.path(),
        SpillOptions {
            faults: Faults {
                transient_error_every: Some(1),
                ..Faults::default()
            },
            ..options(64 * MIB, false)
        },
    )
    .unwrap();
    let error = store.wait(store.write(1, &[1; 5000]).unwrap()).unwrap_err();
    assert!(error.to_string().contains("no progress after"), "{error}");
    assert_eq!(store.used_bytes(), 0);
}

#[test]
fn keys_and_tickets_are_checked() {
    let dir = scratch();
    let store = SpillStore::open(dir.path(), options(MIB, false)).unwrap();
    let other = SpillStore::open(dir.path(), options(MIB, false)).unwrap();
    store.wait(store.write(1, b"abc").unwrap()).unwrap();
    let message = store.write(1, b"def").unwrap_err().to_string();
    assert!(
        message.contains("key: 1 is already in the spill store"),
        "{message}"
    );
    let message = store.read(2).unwrap_err().to_string();
    assert!(
        message.contains("key: 2 is not in the spill store"),
        "{message}"
    );
    assert!(store.remove(2).is_err());
    let message = other.wait(store.read(1).unwrap()).unwrap_err().to_string();
    assert!(message.contains("another spill store"), "{message}");
    // A buffer too small for read_into is refused.
    let small = fateplan_runtime::spill::AlignedBuf::zeroed(0).unwrap();
    let message = store.read_into(1, small).unwrap_err().to_string();
    assert!(message.contains("buf"), "{message}");
}

#[test]
fn read_waits_for_a_write_in_flight_and_remove_for_reads() {
    let dir = scratch();
    let store = SpillStore::open(dir.path(), options(64 * MIB, false)).unwrap();
    let data = pattern(9, 5 * MIB as usize);
    let write = store.write(9, &data).unwrap();
    // Read before waiting for the write: it waits for it.
    let read = store.read(9).unwrap();
    let read2 = store.read(9).unwrap();
    store.remove(9).unwrap();
    assert_eq!(store.used_bytes(), 0);
    assert!(store.wait(read).unwrap().buf[..] == data[..]);
    assert!(store.wait(read2).unwrap().buf[..] == data[..]);
    let written = store.wait(write).unwrap();
    // The written buffer comes back for reuse.
    assert!(written.buf[..] == data[..]);
}

#[test]
fn buffers_are_reused_without_copies() {
    let dir = scratch();
    let store = SpillStore::open(dir.path(), options(64 * MIB, false)).unwrap();
    let mut buf = fateplan_runtime::spill::AlignedBuf::zeroed(10_000).unwrap();
    buf.copy_from_slice(&pattern(4, 10_000));
    let buf = store.wait(store.write_buf(4, buf).unwrap()).unwrap().buf;
    let mut buf = buf;
    buf.fill(0);
    let read = store.wait(store.read_into(4, buf).unwrap()).unwrap();
    assert!(read.buf[..] == pattern(4, 10_000)[..]);
}

#[test]
fn close_and_drop_delete_the_spill_file_and_created_directory() {
    let dir = scratch();
    // The spill folder and the parents it lacked go; a parent that
    // holds another file by then stays.
    let top = dir.path().join("made");
    let spill_dir = top.join("by").join("store");
    let store = SpillStore::open(&spill_dir, options(MIB, false)).unwrap();
    store.close().unwrap();
    assert!(!top.exists());
    let store = SpillStore::open(&spill_dir, options(MIB, false)).unwrap();
    std::fs::write(top.join("other"), b"not the store's").unwrap();
    store.close().unwrap();
    assert!(!top.join("by").exists());
    assert!(top.join("other").exists());
    std::fs::remove_dir_all(&top).unwrap();

    let spill_dir = dir.path().join("made-by-store");
    let store = SpillStore::open(&spill_dir, options(MIB, false)).unwrap();
    let path = store.path().to_path_buf();
    store.wait(store.write(1, &[3; 10]).unwrap()).unwrap();
    // A write never waited for is finished before the file goes.
    let _pending = store.write(2, &[4; 100_000]).unwrap();
    assert!(path.exists());
    drop(store);
    assert!(!path.exists());
    assert!(!spill_dir.exists());

    let store = SpillStore::open(dir.path(), options(MIB, true)).unwrap();
    let path = store.path().to_path_buf();
    store.close().unwrap();
    assert!(!path.exists());
    assert!(
        dir.path().exists(),
        "a directory the store did not create stays"
    );
}

#[test]
fn an_open_store_holds_its_file_and_a_file_left_behind_is_not_held() {
    let dir = scratch();
    let store = SpillStore::open(dir.path(), options(MIB, false)).unwrap();
    assert!(store.mode().notes.iter().all(|n| !n.contains("locked")));
    assert!(spill_file_is_held(store.path()).unwrap());
    // What a killed process leaves: a spill file nobody holds.
    let left = dir.path().join("fateplan-spill-1-0.bin");
    std::fs::write(&left, b"left").unwrap();
    assert!(!spill_file_is_held(&left).unwrap());
    store.close().unwrap();
    assert!(spill_file_is_held(&dir.path().join("absent.bin")).is_err());
}

/// A process whose pid a killed one had finds that one's files under
/// the names it would take: it takes the next free one and leaves them.
#[test]
fn names_a_killed_process_left_are_passed_over() {
    let dir = scratch();
    let pid = std::process::id();
    let left: Vec<_> = (0..300)
        .map(|id| dir.path().join(format!("fateplan-spill-{pid}-{id}.bin")))
        .collect();
    for path in &left {
        std::fs::write(path, b"left").unwrap();
    }
    let store = SpillStore::open(dir.path(), options(MIB, false)).unwrap();
    assert!(!left.contains(&store.path().to_path_buf()));
    round_trip(&store, &[5000]);
    store.close().unwrap();
    assert!(left.iter().all(|p| std::fs::read(p).unwrap() == b"left"));
}

#[test]
fn spill_files_never_outgrow_the_budget() {
    let dir = scratch();
    let budget = 10 * MIB + 12345;
    let store = SpillStore::open(dir.path(), options(budget, false)).unwrap();
    store.wait(store.write(1, &[1; 4096]).unwrap()).unwrap();
    let len = std::fs::metadata(store.path()).unwrap().len();
    assert!(
        len <= budget,
        "spill file of {len} bytes for a budget of {budget}"
    );
}

#[test]
fn threads_share_one_store() {
    let dir = scratch();
    for force_fallback in [false, true] {
        let store = SpillStore::open(dir.path(), options(64 * MIB, force_fallback)).unwrap();
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let store = &store;
                scope.spawn(move || {
                    for i in 0..8u64 {
                        let key = thread * 100 + i;
                        let len = (key as usize * 7919) % (600 << 10);
                        store
                            .wait(store.write(key, &pattern(key, len)).unwrap())
                            .unwrap();
                        let done = store.wait(store.read(key).unwrap()).unwrap();
                        assert!(done.buf[..] == pattern(key, len)[..], "key {key}");
                        if i % 2 == 0 {
                            store.remove(key).unwrap();
                        }
                    }
                });
            }
        });
        assert!(store.used_bytes() <= store.budget_bytes());
        assert_eq!(
            store.used_bytes(),
            (0..4u64)
                .flat_map(|t| (1..8u64).step_by(2).map(move |i| t * 100 + i))
                .map(|key| ((key * 7919) % (600 << 10)).div_ceil(4096) * 4096)
                .sum::<u64>()
        );
    }
}

#[test]
fn a_backend_that_fails_fails_every_request_and_hangs_none() {
    let dir = scratch();
    let ring_fails = Faults {
        backend_fails_after: Some(0),
        ..Faults::default()
    };
    // A panic's reason reaches the requests the thread held too, not
    // only those it never took.
    let thread_panics = Faults {
        io_thread_panics_after: Some(0),
        ..Faults::default()
    };
    let cases = [
        (ring_fails, "injected: the ring failed"),
        (thread_panics, "the I/O thread panicked"),
    ];
    for ((faults, reason), force_fallback) in cases
        .into_iter()
        .flat_map(|case| [(case.clone(), false), (case, true)])
    {
        let store = SpillStore::open(
            dir.path(),
            SpillOptions {
                faults,
                ..options(64 * MIB, force_fallback)
            },
        )
        .unwrap();
        let path = store.path().display().to_string();
        // Four threads write at once, each its writes one after another:
        // the first request stops the thread, and every write after it is
        // refused by a send to a thread that has stopped, which names the
        // file and the thread's reason (a request the thread never takes
        // is failed by its drop: `Request`'s own test in the engine).
        let (done, results) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let (store, done) = (&store, done.clone());
                scope.spawn(move || {
                    for k in 0..50u64 {
                        let key = t * 100 + k;
                        let outcome = store
                            .write(key, &pattern(key, 9000))
                            .and_then(|ticket| store.wait(ticket));
                        done.send(outcome.map_err(|e| e.to_string())).unwrap();
                    }
                });
            }
            drop(done);
            let mut failed = 0;
            loop {
                match results.recv_timeout(std::time::Duration::from_secs(30)) {
                    Ok(outcome) => {
                        let message = outcome.expect_err("a write through a failed backend");
                        assert!(message.starts_with(&path), "{message}");
                        assert!(
                            message.contains("the spill I/O thread stopped"),
                            "{message}"
                        );
                        assert!(message.contains(reason), "{message}");
                        failed += 1;
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        panic!("a write still waits after 30 s ({failed} failed)")
                    }
                }
            }
            assert_eq!(failed, 200);
        });
        assert_eq!(store.used_bytes(), 0, "failed writes free their space");
    }
}

/// The SSD tier moves a tensor larger than its staging share a chunk at
/// a time: stored as chunks of the share (cut to whole aligned blocks),
/// read back whole and the same, through no more staging buffers than
/// the plan counts (two per transfer, kept for the next); a write that
/// fails part way leaves nothing of its key.
#[test]
fn the_tier_moves_a_tensor_through_staging_chunks() {
    let dir = scratch();
    let data = Data::F32((0..300_000).map(|i| i as f32 * 0.5 - 7.0).collect());
    let form = data.byte_form_len();
    let share = 64 * 1024 + 100;
    let chunk = 64 * 1024;
    let chunks = form.div_ceil(chunk) as u64;
    assert!(chunks > 2, "{chunks} chunks");
    for force_fallback in [false, true] {
        let store = SpillStore::open(dir.path(), options(64 * MIB, force_fallback)).unwrap();
        SsdTier::put_data(&store, 3, &data, share).unwrap();
        for i in 0..chunks {
            assert!(store.contains(tier_key(3, i).unwrap()), "chunk {i}");
        }
        assert!(!store.contains(tier_key(3, chunks).unwrap()));
        let last = form as u64 - (chunks - 1) * chunk as u64;
        assert_eq!(
            store.used_bytes(),
            (chunks - 1) * chunk as u64 + last.div_ceil(4096) * 4096
        );
        assert_eq!(SsdTier::get_data(&store, 3, share).unwrap(), data);
        assert_eq!(SsdTier::get(&store, 3).unwrap(), data.to_bytes().unwrap());
        // The staging buffers: a share each, kept for the next transfer.
        assert!(store.kept_bytes() > 0);
        assert!(store.kept_bytes() <= (KEPT_BUFFERS * chunk) as u64);
        // A block whose row starts are cut inside a word by a chunk's
        // end and end in the next chunk, where the columns begin; and a
        // tensor smaller than a chunk: the buffers stay a share each.
        let rows = 1000u64;
        let block = Data::Block(fateplan_runtime::exec::data::BlockData {
            row_start: (0..=rows).map(|r| r * 2).collect(),
            columns: (0..2 * rows as u32).map(|c| c * 7 % 1000).collect(),
            weights: (0..2 * rows).map(|w| w as f32 / 8.0).collect(),
            weighting: fateplan_kernels::Weighting::PerEdge,
        });
        let small = Data::I64(vec![-1, 2, -3]);
        for (key, tensor) in [(5, &block), (6, &small)] {
            SsdTier::put_data(&store, key, tensor, share).unwrap();
            assert_eq!(&SsdTier::get_data(&store, key, share).unwrap(), tensor);
            SsdTier::remove(&store, key).unwrap();
        }
        // One transfer at a time: two buffers of a share, reused.
        assert_eq!(store.kept_bytes(), (BUFFERS_PER_TRANSFER * chunk) as u64);
        // A key taken is refused, and the first copy stays whole.
        assert!(SsdTier::put_data(&store, 3, &data, share).is_err());
        assert_eq!(SsdTier::get_data(&store, 3, share).unwrap(), data);
        SsdTier::remove(&store, 3).unwrap();
        assert_eq!(store.used_bytes(), 0);
        assert!(!store.contains(tier_key(3, 0).unwrap()));
        assert!(SsdTier::get_data(&store, 3, share).is_err());
        store.close().unwrap();

        // A disk that fills after a few chunks: the error, and none of
        // the chunks written before it left behind.
        let full = SpillStore::open(
            dir.path(),
            SpillOptions {
                faults: Faults {
                    enospc_after_bytes: Some(3 * chunk as u64 + 10),
                    ..Faults::default()
                },
                ..options(64 * MIB, force_fallback)
            },
        )
        .unwrap();
        let error = SsdTier::put_data(&full, 4, &data, share).unwrap_err();
        assert!(error.to_string().contains("No space left"), "{error}");
        assert_eq!(full.used_bytes(), 0);
        for i in 0..chunks {
            assert!(!full.contains(tier_key(4, i).unwrap()), "chunk {i}");
        }
        full.close().unwrap();
    }
}
