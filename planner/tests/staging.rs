//! The SSD's staging buffers are no larger than the workload's largest
//! tensor needs: a transfer moves one tensor, a buffer-sized chunk at a
//! time, so larger buffers hold nothing more, and the host memory they
//! held is left to the tensors.

mod common;

use fateplan_planner::planner::{SSD_STAGING_BUFFERS, SSD_STAGING_BYTES};
use fateplan_planner::{plan, PlanOptions, Policy};

#[test]
fn staging_is_sized_to_the_largest_tensor_and_no_more_than_the_default() {
    let profile = common::a100();
    let small = common::chain(6, 1 << 20, 1e-3);
    let mut options = PlanOptions::new(Policy::OffloadSsdAll, &profile);
    // Four default buffers (256 MiB) are over this host budget; four of
    // the largest tensor's 1 MiB are not.
    options.budgets.host_bytes = 8 << 20;
    let made = plan(&small, &profile, &options).unwrap();
    assert_eq!(made.ssd_staging_bytes, SSD_STAGING_BUFFERS << 20);
    assert!(made.predicted.bytes_moved.ssd_write > 0);
    assert!(made.predicted.peak_bytes.host <= 8 << 20);
    // A size that is not a whole page is rounded up to one.
    let odd = common::chain(6, (1 << 20) + 1, 1e-3);
    let made = plan(&odd, &profile, &options).unwrap();
    assert_eq!(
        made.ssd_staging_bytes,
        SSD_STAGING_BUFFERS * ((1 << 20) + 4096)
    );
    // Tensors larger than a default buffer keep the default.
    let large = common::chain(4, 100 << 20, 1e-3);
    let options = PlanOptions::new(Policy::OffloadSsdAll, &profile);
    let made = plan(&large, &profile, &options).unwrap();
    assert_eq!(made.ssd_staging_bytes, SSD_STAGING_BYTES);
}
