//! Bytes on every tier over simulated time, against the budgets.
//!
//! Every allocation is checked at once. A tier that goes over its budget
//! is one violation, naming the time, the tier, the tensor whose bytes
//! crossed the line and the bytes held; it is reported again only after
//! the tier has come back within its budget.

use fateplan_planner::plan::{Budgets, PerTier};
use fateplan_planner::units::count;
use fateplan_planner::Tier;

use super::{Violation, ViolationKind, MAX_VIOLATIONS};

pub const TIERS: [Tier; 3] = [Tier::Hbm, Tier::Host, Tier::Ssd];

fn slot(tier: Tier) -> usize {
    match tier {
        Tier::Hbm => 0,
        Tier::Host => 1,
        Tier::Ssd => 2,
    }
}

/// Where a violation happened, for its message.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub step: u32,
    pub op: &'a str,
}

#[derive(Debug, Clone)]
pub struct Tiers {
    used: [u64; 3],
    budget: [u64; 3],
    over: [bool; 3],
    pub peak: [u64; 3],
    pub peak_time_s: [f64; 3],
    pub violations: Vec<Violation>,
    pub violations_total: u64,
    /// `(time, bytes per tier)` after every change, when recording.
    pub samples: Option<Vec<(f64, [u64; 3])>>,
}

impl Tiers {
    pub fn new(budgets: &Budgets, record: bool) -> Tiers {
        Tiers {
            used: [0; 3],
            budget: TIERS.map(|tier| budgets.of(tier)),
            over: [false; 3],
            peak: [0; 3],
            peak_time_s: [0.0; 3],
            violations: Vec::new(),
            violations_total: 0,
            samples: record.then(Vec::new),
        }
    }

    pub fn alloc(&mut self, t: f64, tier: Tier, bytes: u64, tensor: &str, at: Context) {
        let i = slot(tier);
        self.used[i] = self.used[i].saturating_add(bytes);
        if self.used[i] > self.peak[i] {
            self.peak[i] = self.used[i];
            self.peak_time_s[i] = t;
        }
        if self.used[i] > self.budget[i] && !self.over[i] {
            self.over[i] = true;
            let (used, budget) = (self.used[i], self.budget[i]);
            self.violation(Violation {
                kind: ViolationKind::OverBudget,
                time_s: t,
                tier,
                tensor: tensor.to_string(),
                bytes: used,
                budget_bytes: Some(budget),
                step: at.step,
                op: at.op.to_string(),
                message: format!(
                    "at {t:.6} s {tier} holds {} once {tensor:?} ({}) is allocated, over its \
                     budget of {} by {}",
                    count(used, "byte"),
                    count(bytes, "byte"),
                    count(budget, "byte"),
                    count(used - budget, "byte")
                ),
            });
        }
        self.sample(t);
    }

    pub fn free(&mut self, t: f64, tier: Tier, bytes: u64) {
        let i = slot(tier);
        self.used[i] = self.used[i].saturating_sub(bytes);
        if self.used[i] <= self.budget[i] {
            self.over[i] = false;
        }
        self.sample(t);
    }

    pub fn violation(&mut self, violation: Violation) {
        self.violations_total += 1;
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(violation);
        }
    }

    fn sample(&mut self, t: f64) {
        if let Some(samples) = &mut self.samples {
            match samples.last_mut() {
                Some(last) if last.0 == t => last.1 = self.used,
                _ => samples.push((t, self.used)),
            }
        }
    }

    pub fn peaks(&self) -> (PerTier<u64>, PerTier<f64>) {
        (
            PerTier {
                hbm: self.peak[0],
                host: self.peak[1],
                ssd: self.peak[2],
            },
            PerTier {
                hbm: self.peak_time_s[0],
                host: self.peak_time_s[1],
                ssd: self.peak_time_s[2],
            },
        )
    }
}
