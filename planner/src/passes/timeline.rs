//! The order in which the compute stream runs things: for each step, the
//! recomputations placed before it, then its operator.
//!
//! Memory is counted at two slots per position of this order, its boundary
//! and its item ([`super::memory`]). A copy made at the start of step `s`
//! (a reload or load issued after step `s - 1`) counts from the boundary of
//! `step_start[s]`; a copy freed when a transfer finishes before step `d`
//! counts through that boundary, up to, not including, the item of
//! `step_start[d]`.

use crate::plan::{Action, ScheduleEntry};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    Op(u32),
    /// Index of a recompute entry in the schedule.
    Recompute(usize),
}

#[derive(Debug, Clone)]
pub struct Timeline {
    pub items: Vec<Item>,
    /// The step each position belongs to.
    pub step_of: Vec<u32>,
    /// First position of each step; one more entry, the number of positions.
    pub step_start: Vec<usize>,
}

impl Timeline {
    pub fn new(ops: usize, schedule: &[ScheduleEntry]) -> Timeline {
        let mut before: Vec<Vec<usize>> = vec![Vec::new(); ops];
        for (index, entry) in schedule.iter().enumerate() {
            if entry.action == Action::Recompute {
                before[entry.done_before_step as usize].push(index);
            }
        }
        let mut items = Vec::new();
        let mut step_of = Vec::new();
        let mut step_start = Vec::with_capacity(ops + 1);
        for (step, recomputes) in before.into_iter().enumerate() {
            step_start.push(items.len());
            for index in recomputes {
                items.push(Item::Recompute(index));
                step_of.push(step as u32);
            }
            items.push(Item::Op(step as u32));
            step_of.push(step as u32);
        }
        step_start.push(items.len());
        Timeline {
            items,
            step_of,
            step_start,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// First position after step `step` (after -1: position 0).
    pub fn after_step(&self, step: i64) -> usize {
        self.step_start[(step + 1) as usize]
    }
}
