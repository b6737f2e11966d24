//! Tier arenas: hard byte budgets with exact accounting.
//!
//! The executor charges an arena when a copy's life starts and releases it
//! when the life ends, with the plan's byte sizes: the same lives the
//! planner's memory pass counts. A charge that would pass the budget is an
//! error, never a silent overrun, so `peak_bytes <= budget_bytes` holds for
//! every arena at every moment.

use fateplan_planner::Tier;

use crate::exec::ExecError;

#[derive(Debug, Clone)]
pub struct Arena {
    pub tier: Tier,
    pub budget_bytes: u64,
    used_bytes: u64,
    peak_bytes: u64,
}

impl Arena {
    pub fn new(tier: Tier, budget_bytes: u64) -> Arena {
        Arena {
            tier,
            budget_bytes,
            used_bytes: 0,
            peak_bytes: 0,
        }
    }

    /// Takes `bytes` for `what`, or refuses if that would pass the budget.
    pub fn charge(&mut self, bytes: u64, what: &str) -> Result<(), ExecError> {
        let needed = self.used_bytes + bytes;
        if needed > self.budget_bytes {
            return Err(ExecError::OverBudget {
                tier: self.tier,
                what: what.to_string(),
                needed_bytes: needed,
                budget_bytes: self.budget_bytes,
            });
        }
        self.used_bytes = needed;
        self.peak_bytes = self.peak_bytes.max(needed);
        debug_assert!(self.peak_bytes <= self.budget_bytes);
        Ok(())
    }

    /// Gives back bytes charged before.
    pub fn release(&mut self, bytes: u64, what: &str) -> Result<(), ExecError> {
        self.used_bytes = self.used_bytes.checked_sub(bytes).ok_or_else(|| {
            ExecError::Internal(format!(
                "{} arena releases {bytes} bytes for {what} but holds only {}",
                self.tier, self.used_bytes
            ))
        })?;
        Ok(())
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_budget_and_tracks_the_peak() {
        let mut arena = Arena::new(Tier::Hbm, 100);
        arena.charge(60, "a").unwrap();
        arena.charge(40, "b").unwrap();
        let error = arena.charge(1, "c").unwrap_err().to_string();
        assert!(
            error.contains("hbm") && error.contains("101") && error.contains("c"),
            "{error}"
        );
        arena.release(60, "a").unwrap();
        arena.charge(50, "c").unwrap();
        assert_eq!(arena.used_bytes(), 90);
        assert_eq!(arena.peak_bytes(), 100);
        assert!(arena.release(1000, "x").is_err());
    }
}
