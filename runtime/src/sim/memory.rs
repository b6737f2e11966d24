//! Bytes on every tier over simulated time, against the budgets.
//!
//! Every allocation is checked at once. A tier that goes over its budget
//! is one violation until it comes back within it, reported at its worst:
//! the time, the tensor whose allocation brought the most bytes, and
//! those bytes, with where it first crossed the line.

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
    /// Per tier over its budget, the violation's index in `violations`
    /// (where it was kept) and where it first crossed: time and tensor.
    open: [Option<(usize, f64, String)>; 3],
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
            open: [None, None, None],
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
        let (used, budget) = (self.used[i], self.budget[i]);
        if used > budget && !self.over[i] {
            self.over[i] = true;
            let kept = self.violations.len();
            self.violation(self.over_budget(t, tier, (tensor, bytes), at, None));
            self.open[i] = Some((kept, t, tensor.to_string()));
        } else if used > budget {
            // Still over: the violation kept says the worst.
            if let Some((k, first_t, first)) = self.open[i].clone() {
                if self.violations.get(k).is_some_and(|v| used > v.bytes) {
                    let first = Some((first_t, first.as_str()));
                    self.violations[k] = self.over_budget(t, tier, (tensor, bytes), at, first);
                }
            }
        }
        self.sample(t);
    }

    /// The violation of `tier` holding its bytes once `tensor` is
    /// allocated at `t`; `first`: where it crossed its budget, where
    /// that was earlier.
    fn over_budget(
        &self,
        t: f64,
        tier: Tier,
        (tensor, bytes): (&str, u64),
        at: Context,
        first: Option<(f64, &str)>,
    ) -> Violation {
        let i = slot(tier);
        let (used, budget) = (self.used[i], self.budget[i]);
        let crossed = match first {
            Some((first_t, first)) => format!(
                " (the most while over it, from {first_t:.6} s, where {first:?} crossed it)"
            ),
            None => String::new(),
        };
        Violation {
            kind: ViolationKind::OverBudget,
            time_s: t,
            tier,
            tensor: tensor.to_string(),
            bytes: used,
            budget_bytes: Some(budget),
            step: at.step,
            op: at.op.to_string(),
            message: format!(
                "at {t:.6} s {tier} holds {} once {tensor:?} ({}) is allocated, over its budget \
                 of {} by {}{crossed}",
                count(used, "byte"),
                count(bytes, "byte"),
                count(budget, "byte"),
                count(used - budget, "byte")
            ),
        }
    }

    pub fn free(&mut self, t: f64, tier: Tier, bytes: u64) {
        let i = slot(tier);
        self.used[i] = self.used[i].saturating_sub(bytes);
        if self.used[i] <= self.budget[i] {
            self.over[i] = false;
            self.open[i] = None;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One violation while a tier stays over, reported at its worst; a
    /// second once it has come back and gone over again.
    #[test]
    fn a_stretch_over_budget_is_one_violation_at_its_worst() {
        let budgets = Budgets {
            hbm_bytes: 100,
            ..Budgets::UNLIMITED
        };
        let mut tiers = Tiers::new(&budgets, false);
        let at = |step| Context { step, op: "op" };
        tiers.alloc(1.0, Tier::Hbm, 60, "a", at(0));
        tiers.alloc(2.0, Tier::Hbm, 50, "b", at(1));
        tiers.alloc(3.0, Tier::Hbm, 30, "c", at(2));
        tiers.free(4.0, Tier::Hbm, 20);
        tiers.alloc(5.0, Tier::Hbm, 10, "d", at(3));
        assert_eq!(tiers.violations_total, 1);
        let worst = &tiers.violations[0];
        assert_eq!(
            (worst.bytes, worst.tensor.as_str(), worst.step),
            (140, "c", 2)
        );
        assert!(
            worst
                .message
                .contains("the most while over it, from 2.000000 s, where \"b\" crossed it"),
            "{}",
            worst.message
        );
        tiers.free(6.0, Tier::Hbm, 100);
        tiers.alloc(7.0, Tier::Hbm, 80, "e", at(4));
        assert_eq!(tiers.violations_total, 2);
        assert_eq!(tiers.violations[1].bytes, 110);
        assert!(!tiers.violations[1].message.contains("the most while"));
    }
}
