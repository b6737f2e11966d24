//! Property: any sequence of writes, reads and removes of blocks of any
//! size (empty, unaligned, multi-MiB), with some waits deferred so
//! requests overlap, reads back exactly what was written, in every I/O
//! mode, with `used_bytes` never above the budget and writes refused
//! exactly when they would exceed it.

use std::collections::HashMap;

use fateplan_runtime::spill::{Faults, SpillOptions, SpillStore, Ticket, ALIGN_BYTES};
use fateplan_runtime::Error;
use proptest::prelude::*;

const BUDGET_BYTES: u64 = 12 << 20;

#[derive(Clone, Debug)]
enum Step {
    Write { key: u64, len: usize },
    Read { key: u64 },
    Remove { key: u64 },
    WaitAll,
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        1..9000usize,
        (1..4usize).prop_map(|pages| pages * ALIGN_BYTES),
        (1usize << 20)..(5 << 20),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..8u64, size()).prop_map(|(key, len)| Step::Write { key, len }),
        3 => (0..8u64).prop_map(|key| Step::Read { key }),
        2 => (0..8u64).prop_map(|key| Step::Remove { key }),
        1 => Just(Step::WaitAll),
    ]
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        })
        .collect()
}

fn aligned(len: usize) -> u64 {
    (len as u64).div_ceil(ALIGN_BYTES as u64) * ALIGN_BYTES as u64
}

/// A ticket and, for reads, the bytes it must return.
type Pending = Vec<(Ticket, Option<Vec<u8>>)>;

fn wait_all(store: &SpillStore, pending: &mut Pending) -> Result<(), TestCaseError> {
    for (ticket, expected) in pending.drain(..) {
        let key = ticket.key();
        let done = store
            .wait(ticket)
            .map_err(|e| TestCaseError::fail(format!("key {key}: {e}")))?;
        if let Some(expected) = expected {
            prop_assert!(done.buf[..] == expected[..], "key {}: bytes differ", key);
        }
    }
    Ok(())
}

fn check(steps: &[Step], force_fallback: bool, faults: Faults) -> Result<(), TestCaseError> {
    let dir = tempfile::Builder::new()
        .prefix("spill-props-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let store = SpillStore::open(
        dir.path(),
        SpillOptions {
            force_fallback,
            request_bytes: 512 << 10,
            queue_depth: 4,
            faults,
            ..SpillOptions::with_budget(BUDGET_BYTES)
        },
    )
    .unwrap();
    let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut pending: Pending = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let used: u64 = model.values().map(|d| aligned(d.len())).sum();
        match *step {
            Step::Write { key, len } => {
                let bytes = data(i as u64, len);
                let result = store.write(key, &bytes);
                let taken = model.contains_key(&key);
                if taken {
                    let refused = matches!(result, Err(Error::InvalidInput { .. }));
                    prop_assert!(refused, "step {}: rewrite of key {} not refused", i, key);
                } else if used + aligned(len) > BUDGET_BYTES {
                    let refused = matches!(result, Err(Error::ResourcesExhausted { .. }));
                    prop_assert!(
                        refused,
                        "step {}: expected a budget error, got {:?}",
                        i,
                        result
                    );
                } else {
                    pending.push((result.unwrap(), None));
                    model.insert(key, bytes);
                }
            }
            Step::Read { key } => match model.get(&key) {
                Some(bytes) => pending.push((store.read(key).unwrap(), Some(bytes.clone()))),
                None => prop_assert!(store.read(key).is_err()),
            },
            Step::Remove { key } => {
                let result = store.remove(key);
                prop_assert_eq!(result.is_ok(), model.remove(&key).is_some());
            }
            Step::WaitAll => wait_all(&store, &mut pending)?,
        }
        let used: u64 = model.values().map(|d| aligned(d.len())).sum();
        prop_assert_eq!(store.used_bytes(), used);
        prop_assert!(store.peak_bytes() <= BUDGET_BYTES);
    }
    wait_all(&store, &mut pending)?;
    for (key, bytes) in &model {
        let done = store.wait(store.read(*key).unwrap()).unwrap();
        prop_assert!(
            done.buf[..] == bytes[..],
            "key {}: bytes differ at the end",
            key
        );
    }
    store.close().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn blocks_round_trip_within_budget(
        steps in prop::collection::vec(step(), 1..40),
        force_fallback in any::<bool>(),
        faulty in any::<bool>(),
    ) {
        let faults = if faulty {
            Faults { short_transfers: true, transient_error_every: Some(5), ..Faults::default() }
        } else {
            Faults::default()
        };
        check(&steps, force_fallback, faults)?;
    }
}
