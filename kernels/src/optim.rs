//! Adam with the semantics of PyTorch's `torch.optim.Adam` (L2 weight
//! decay added to the gradient, not AdamW).

use rayon::prelude::*;

use crate::{check_len, ensure, Result};

/// Adam's hyper-parameters. Weight decay is per tensor: the caller builds
/// one `Adam` per decay value (Kipf's GCN decays only the first layer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adam {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

impl Default for Adam {
    /// PyTorch's defaults.
    fn default() -> Self {
        Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

impl Adam {
    /// Step `t` (counted from 1) on weights `w` with gradient `g` and
    /// moments `m`, `v` (zero before step 1):
    /// `g' = g + weight_decay · w`, `m = β1 m + (1 − β1) g'` (as
    /// `m + (1 − β1)(g' − m)`),
    /// `v = β2 v + (1 − β2) g'²`,
    /// `w −= (lr / (1 − β1^t)) · m / (sqrt(v) / sqrt(1 − β2^t) + eps)`,
    /// in PyTorch's order of operations.
    pub fn step(
        &self,
        t: u32,
        w: &mut [f32],
        g: &[f32],
        m: &mut [f32],
        v: &mut [f32],
    ) -> Result<()> {
        ensure(t >= 1, || {
            "adam: step `t` is 0, expected steps counted from 1".to_string()
        })?;
        check_len("adam", "g", g.len(), w.len())?;
        check_len("adam", "m", m.len(), w.len())?;
        check_len("adam", "v", v.len(), w.len())?;
        let Adam {
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
        } = *self;
        let bias_correction1 = 1.0 - (beta1 as f64).powi(t as i32);
        let bias_correction2 = 1.0 - (beta2 as f64).powi(t as i32);
        let step_size = (lr as f64 / bias_correction1) as f32;
        let bias_correction2_sqrt = bias_correction2.sqrt() as f32;
        const SPAN: usize = 16 * 1024;
        w.par_chunks_mut(SPAN)
            .zip(g.par_chunks(SPAN))
            .zip(m.par_chunks_mut(SPAN))
            .zip(v.par_chunks_mut(SPAN))
            .for_each(|(((w, g), m), v)| {
                for (((w, &g), m), v) in w.iter_mut().zip(g).zip(m).zip(v) {
                    let g = if weight_decay != 0.0 {
                        g + weight_decay * *w
                    } else {
                        g
                    };
                    // PyTorch: exp_avg.lerp_(grad, 1 - beta1).
                    *m += (1.0 - beta1) * (g - *m);
                    *v = beta2 * *v + (1.0 - beta2) * g * g;
                    let denom = v.sqrt() / bias_correction2_sqrt + eps;
                    *w -= step_size * (*m / denom);
                }
            });
        Ok(())
    }
}
