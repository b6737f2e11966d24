//! The planner's passes, in the order they run:
//!
//! 1. [`lifetimes`]: when each tensor is produced, read, and idle.
//! 2. [`cost`]: seconds for operators and transfers on the profile.
//! 3. (policy: [`crate::policy`] chooses fates)
//! 4. [`schedule`]: fates become transfers and recomputations.
//! 5. [`memory`]: bytes per tier at every position; over-budget plans stop here.
//! 6. [`predict`]: the iteration time.
//! 7. [`sanity`]: an independent replay that only checks and rejects.
//!
//! [`timeline`] is the shared ordering of positions used by 5 and 6.

pub mod cost;
pub mod lifetimes;
pub mod memory;
pub mod predict;
pub mod sanity;
pub mod schedule;
pub mod timeline;
