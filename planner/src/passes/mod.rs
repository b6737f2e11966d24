//! The planner's passes, in the order they run:
//!
//! 1. [`lifetimes`]: when each tensor is produced, read, and idle.
//! 2. [`cost`]: seconds for operators and transfers on the profile, and
//!    every tensor's choices of fate and timing with what each costs and frees.
//! 3. [`milp`]: the exact reference over those choices (small instances).
//! 4. [`dp`]: the default planner's search over those choices; the peer
//!    policies in [`crate::policy`] choose fates their own way instead.
//! 5. [`schedule`]: fates and timings become transfers and recomputations.
//! 6. [`memory`]: bytes per tier at every position; over-budget plans stop
//!    here. For `dp` and the MILP, [`keep`] then keeps a copy on the device
//!    instead of bringing it again, where the budget has room.
//! 7. [`predict`]: the iteration time.
//! 8. [`sanity`]: an independent replay that only checks and rejects.
//!
//! [`timeline`] is the shared ordering of positions used by 6 and 7;
//! [`segtree`] the range-maximum tree the searches keep per tier;
//! [`grouped`] the per-key lists the passes that run on every candidate
//! build.

pub mod cost;
pub mod dp;
pub mod grouped;
pub mod keep;
pub mod lifetimes;
pub mod memory;
pub mod milp;
pub mod predict;
pub mod sanity;
pub mod schedule;
pub mod segtree;
pub mod timeline;
