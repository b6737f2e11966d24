//! The keep pass: a tensor copied to the device, dropped, and copied there
//! again keeps its first copy instead, where the device has room for it in
//! between.
//!
//! It runs after the memory pass, for fateplan's own planners (`dp` and
//! the MILP), whose searches count a tensor's memory per fate: they do not
//! see that a recomputation copies in a tensor whose own fate keeps it
//! away (the schedule then brings it twice in a row, once for the
//! recomputation and once for its own use just after), nor where their
//! plan left the device room that a copy could have stayed in. The peer
//! policies keep their schedules as the systems they stand for run them.
//!
//! A pair of copies to the device is merged when nothing else creates the
//! tensor between them, no offload of it is issued between them, and the
//! device stays within its budget with the first copy held until the
//! second's would have started. Pairs are taken shortest wait first, the
//! larger tensor first among equal waits: the fewest slots held for each
//! byte moved less. The second transfer is dropped; where it was the
//! `reload` that frees the away copy, the first becomes that `reload`.
//!
//! Then an offloaded tensor left with one copy in is retained where the
//! device has room for it from its offload's end to that copy's start:
//! the offload and the copy in are dropped, and its fate becomes retain.

use super::grouped::Grouped;
use super::memory::{boundary_slot, CopyLife, Occupancy};
use super::segtree::MaxTree;
use super::timeline::Timeline;
use crate::plan::{Action, Fate, ScheduleEntry};
use crate::workload::Workload;
use crate::Tier;

/// Drops the copies to the device that a copy already made can stand in
/// for within `hbm_budget` (`lives`, and `occupancy` with what else the
/// device holds, counted for `entries`), and the offloads and copies in
/// of the offloaded tensors it then keeps through their gap (retained in
/// `fates`), and returns how many entries it dropped.
/// The entries left keep their order; a [`Timeline`] of them must be
/// built again (its recomputations' entry indices move).
pub fn keep_copies(
    workload: &Workload,
    entries: &mut Vec<ScheduleEntry>,
    fates: &mut [Fate],
    timeline: &Timeline,
    lives: &[CopyLife],
    occupancy: &Occupancy,
    hbm_budget: u64,
) -> usize {
    let n = workload.tensors.len();
    // Each tensor's device copies, by start slot.
    let mut device = Grouped::new(
        n,
        lives
            .iter()
            .filter(|life| life.tier == Tier::Hbm)
            .filter_map(|life| Some((life.tensor?.index(), (life.start, life.end)))),
    );
    for t in 0..n {
        device.of_mut(t).sort_unstable();
    }
    // Each tensor's copies in (entry indices) and offloads (issue slot and
    // entry index), in schedule order, which is issue order.
    let issued = |entry: &ScheduleEntry| boundary_slot(timeline.after_step(entry.issue_after_step));
    let ins = Grouped::new(
        n,
        (entries.iter().enumerate())
            .filter(|(_, e)| matches!(e.action, Action::Load | Action::Reload) && e.to == Tier::Hbm)
            .map(|(index, entry)| (entry.tensor.index(), index)),
    );
    let offloads = Grouped::new(
        n,
        (entries.iter().enumerate())
            .filter(|(_, entry)| entry.action == Action::Offload)
            .map(|(index, entry)| (entry.tensor.index(), (issued(entry), index))),
    );
    // (wait in slots, bytes, first entry, second entry, wait start, wait end)
    let mut pairs = Vec::new();
    for t in 0..n {
        for pair in ins.of(t).windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let (a_start, b_start) = (issued(&entries[a]), issued(&entries[b]));
            let copies = device.of(t);
            // The copy `a` makes, and the next one: `b`'s.
            let Some(k) = copies.iter().position(|&(start, _)| start == a_start) else {
                continue;
            };
            let (Some(&(_, a_end)), Some(&(next, _))) = (copies.get(k), copies.get(k + 1)) else {
                continue;
            };
            if next != b_start || a_end > b_start {
                continue;
            }
            if offloads
                .of(t)
                .iter()
                .any(|&(o, _)| a_start <= o && o < b_start)
            {
                continue;
            }
            let bytes = workload.tensors[t].bytes;
            pairs.push((b_start - a_end, bytes, a, b, a_end, b_start));
        }
    }
    pairs.sort_unstable_by_key(|&(wait, bytes, a, ..)| (wait, std::cmp::Reverse(bytes), a));
    let values: Vec<i64> = occupancy.bytes.hbm.iter().map(|&b| b as i64).collect();
    let mut tree = MaxTree::new(&values);
    let budget = i64::try_from(hbm_budget).unwrap_or(i64::MAX);
    // Which entry now makes the copy an entry stood for (itself if kept).
    let mut maker: Vec<usize> = (0..entries.len()).collect();
    let mut dropped = vec![false; entries.len()];
    for (_, bytes, a, b, from, to) in pairs {
        let bytes = bytes as i64;
        if from < to && tree.max(from, to).saturating_add(bytes) > budget {
            continue;
        }
        tree.add(from, to, bytes);
        // `a` may itself stand in a copy kept from before: that one's
        // transfer now lasts through `b`'s use.
        let mut root = a;
        while maker[root] != root {
            root = maker[root];
        }
        maker[b] = root;
        dropped[b] = true;
        if entries[b].action == Action::Reload {
            entries[root].action = Action::Reload;
        }
    }
    // Then an offloaded tensor whose copies in are now one: kept on the
    // device from its offload's end to that copy's start, where there is
    // room, it is retained (no offload, no copy in, no away copy).
    let mut wholes = Vec::new();
    for (t, fate) in fates.iter().enumerate() {
        if !matches!(fate, Fate::OffloadHost | Fate::OffloadSsd) {
            continue;
        }
        let mut left = ins.of(t).iter().copied().filter(|&i| !dropped[i]);
        let (Some(root), None, &[(_, offload)]) = (left.next(), left.next(), offloads.of(t)) else {
            continue;
        };
        let (leaving, back) = (issued(&entries[offload]), issued(&entries[root]));
        let copies = device.of(t);
        // The copy the offload takes away, and the next: the copy in's.
        let Some(k) = copies
            .iter()
            .position(|&(s, e)| s <= leaving && leaving < e)
        else {
            continue;
        };
        let (Some(&(_, gone)), Some(&(next, _))) = (copies.get(k), copies.get(k + 1)) else {
            continue;
        };
        if next == back && gone <= back {
            wholes.push((
                back - gone,
                workload.tensors[t].bytes,
                t,
                offload,
                root,
                gone,
                back,
            ));
        }
    }
    wholes.sort_unstable_by_key(|&(wait, bytes, t, ..)| (wait, std::cmp::Reverse(bytes), t));
    for (_, bytes, t, offload, root, from, to) in wholes {
        let bytes = bytes as i64;
        if from < to && tree.max(from, to).saturating_add(bytes) > budget {
            continue;
        }
        tree.add(from, to, bytes);
        dropped[offload] = true;
        dropped[root] = true;
        fates[t] = Fate::Retain;
    }
    let count = dropped.iter().filter(|&&d| d).count();
    if count > 0 {
        let mut index = 0;
        entries.retain(|_| {
            let keep = !dropped[index];
            index += 1;
            keep
        });
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::memory::{copy_lives, item_slot};
    use crate::plan::{Budgets, Stream};
    use crate::workload::{Cost, OpKind, Phase, TensorId, TensorKind};

    /// `a` (100 B) is made at step 0, offloaded to the host, and read at
    /// steps 2 and 4, copied in for each (a `load` for step 2, the `reload`
    /// that frees the host copy for step 4). `early` (`early_bytes`) and
    /// `big` (`big_bytes`), made at steps 1 and 3 and read by none, are
    /// what the device holds while `a` is away.
    fn case(early_bytes: u64, big_bytes: u64) -> (Workload, Vec<Fate>, Vec<ScheduleEntry>) {
        let mut w = Workload::new("keep");
        let a = w.add_tensor("a", 100, TensorKind::Activation, None);
        let big = w.add_tensor("big", big_bytes, TensorKind::Activation, None);
        let early = w.add_tensor("early", early_bytes, TensorKind::Activation, None);
        let outs: Vec<TensorId> = (0..4)
            .map(|k| w.add_tensor(format!("o{k}"), 1, TensorKind::Activation, None))
            .collect();
        let second = Cost::seconds(1.0);
        let (f, b) = (Phase::Forward, Phase::Backward);
        let g = OpKind::Generic;
        w.add_op("f0", g, f, vec![], vec![a], second);
        w.add_op("f1", g, f, vec![], vec![outs[0], early], second);
        w.add_op("f2", g, f, vec![a, outs[0]], vec![outs[1]], second);
        w.add_op("f3", g, f, vec![outs[1]], vec![big], second);
        w.add_op("b4", g, b, vec![a, outs[1]], vec![outs[2]], second);
        let entry = |action, from, to, stream, issue, done| ScheduleEntry {
            action,
            tensor: a,
            bytes: 100,
            from,
            to,
            stream,
            issue_after_step: issue,
            done_before_step: done,
            op: None,
        };
        let schedule = vec![
            entry(Action::Offload, Tier::Hbm, Tier::Host, Stream::D2h, 0, 1),
            entry(Action::Load, Tier::Host, Tier::Hbm, Stream::H2d, 1, 2),
            entry(Action::Reload, Tier::Host, Tier::Hbm, Stream::H2d, 3, 4),
        ];
        let mut fates = vec![Fate::Retain; w.tensors.len()];
        fates[a.index()] = Fate::OffloadHost;
        (w, fates, schedule)
    }

    /// The pass on `case(early_bytes, big_bytes)` under `hbm_budget`: the
    /// entries after it, `a`'s fate, and the occupancy of the schedule it
    /// leaves.
    fn kept(
        early_bytes: u64,
        big_bytes: u64,
        hbm_budget: u64,
    ) -> (Vec<ScheduleEntry>, Fate, Occupancy) {
        let (w, mut fates, mut schedule) = case(early_bytes, big_bytes);
        let timeline = Timeline::new(w.ops.len(), &schedule);
        let lives = copy_lives(&w, &fates, &schedule, &timeline, 0);
        let occupancy = Occupancy::from_lives(&lives, &timeline);
        keep_copies(
            &w,
            &mut schedule,
            &mut fates,
            &timeline,
            &lives,
            &occupancy,
            hbm_budget,
        );
        let timeline = Timeline::new(w.ops.len(), &schedule);
        let occupancy = Occupancy::compute(&w, &fates, &schedule, &timeline, 0);
        let budgets = Budgets {
            hbm_bytes: hbm_budget,
            host_bytes: 1000,
            ssd_bytes: 0,
        };
        occupancy.check(&timeline, &budgets, &w).unwrap();
        (schedule, fates[0], occupancy)
    }

    #[test]
    fn a_copy_stays_where_the_device_has_room_until_its_next_use() {
        // Step 3 holds `big` (50 B) and `o1`: with `a` kept, 151 B, within
        // 160. Step 1 holds `early` (100 B) and `o0`: no room for `a`
        // there, so it is still offloaded.
        let (schedule, fate, occupancy) = kept(100, 50, 160);
        assert_eq!(fate, Fate::OffloadHost);
        let actions: Vec<_> = schedule
            .iter()
            .map(|e| (e.action, e.issue_after_step))
            .collect();
        // The load for step 2 is now the reload, and step 4's is gone.
        assert_eq!(
            actions,
            [(Action::Offload, 0), (Action::Reload, 1)],
            "{schedule:?}"
        );
        // `a` is on the device from step 2's boundary through step 4, and
        // its host copy is freed when the copy in finishes.
        let hbm = &occupancy.bytes.hbm;
        assert!(hbm[boundary_slot(3)..boundary_slot(5)]
            .iter()
            .all(|&b| b >= 100));
        assert_eq!(occupancy.bytes.host[boundary_slot(3)], 0);
    }

    #[test]
    fn a_copy_is_brought_again_where_keeping_it_would_not_fit() {
        // With `big` at 100 B, `a` kept through step 3 needs 201 B.
        let (schedule, _, _) = kept(100, 100, 160);
        assert_eq!(schedule.len(), 3, "{schedule:?}");
        assert_eq!(schedule[1].action, Action::Load);
        assert_eq!(schedule[2].action, Action::Reload);
    }

    #[test]
    fn a_tensor_with_room_through_its_gap_is_retained() {
        // Room at step 1 (`early` 1 B) and at step 3: `a` stays on the
        // device from step 0 to step 4, with no transfer and no host copy.
        let (schedule, fate, occupancy) = kept(1, 50, 160);
        assert!(schedule.is_empty(), "{schedule:?}");
        assert_eq!(fate, Fate::Retain);
        assert!(occupancy.bytes.host.iter().all(|&b| b == 0));
        let hbm = &occupancy.bytes.hbm;
        assert!(hbm[item_slot(0)..item_slot(4)].iter().all(|&b| b >= 100));
    }
}
