//! Pass 1, lifetimes: for every tensor, the step that produces it, the steps
//! that read it, and the gap in which it could leave the device.
//!
//! It runs first because every later pass asks the same questions: is the
//! tensor needed at this step, and between which steps is it idle?

use crate::workload::{Phase, TensorKind, Workload};

/// A stretch between two uses in which a tensor is not needed on the device:
/// it may leave after step `after` and must be back before step `before`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub after: u32,
    pub before: u32,
}

impl Gap {
    /// Steps strictly inside the gap.
    pub fn idle_steps(&self) -> u32 {
        self.before - self.after - 1
    }

    pub fn contains(&self, step: u32) -> bool {
        self.after < step && step < self.before
    }
}

#[derive(Debug, Clone)]
pub struct TensorLife {
    /// `None` for inputs and parameters.
    pub producer: Option<u32>,
    /// Steps that read it, ascending, without repeats.
    pub uses: Vec<u32>,
    /// The longest idle stretch between production and uses (the earliest
    /// of equal ones), if at least one step long.
    pub gap: Option<Gap>,
    /// Every idle stretch at least one step long, in order.
    pub gaps: Vec<Gap>,
    /// Whether its producer may be re-run: a forward operator with one output.
    pub recomputable: bool,
}

impl TensorLife {
    /// The last step at which the original device copy is needed.
    pub fn last_use(&self) -> Option<u32> {
        self.uses.last().copied().or(self.producer)
    }
}

/// Lifetimes of all tensors, indexed by tensor id.
#[derive(Debug, Clone)]
pub struct Lifetimes {
    pub tensors: Vec<TensorLife>,
}

impl Lifetimes {
    pub fn compute(workload: &Workload) -> Lifetimes {
        let mut tensors: Vec<TensorLife> = workload
            .tensors
            .iter()
            .map(|_| TensorLife {
                producer: None,
                uses: Vec::new(),
                gap: None,
                gaps: Vec::new(),
                recomputable: false,
            })
            .collect();
        for (step, op) in workload.ops.iter().enumerate() {
            let step = step as u32;
            for input in &op.inputs {
                let uses = &mut tensors[input.index()].uses;
                if uses.last() != Some(&step) {
                    uses.push(step);
                }
            }
            for output in &op.outputs {
                let life = &mut tensors[output.index()];
                life.producer = Some(step);
                life.recomputable = op.phase == Phase::Forward && op.outputs.len() == 1;
            }
        }
        for (life, tensor) in tensors.iter_mut().zip(&workload.tensors) {
            if tensor.kind == TensorKind::Input || tensor.kind == TensorKind::Parameter {
                continue;
            }
            let Some(producer) = life.producer else {
                continue;
            };
            let mut previous = producer;
            for &step in &life.uses {
                if step >= previous + 2 {
                    let gap = Gap {
                        after: previous,
                        before: step,
                    };
                    if life
                        .gap
                        .is_none_or(|g| gap.before - gap.after > g.before - g.after)
                    {
                        life.gap = Some(gap);
                    }
                    life.gaps.push(gap);
                }
                previous = step;
            }
        }
        Lifetimes { tensors }
    }
}

/// Groups the uses of a streamed input into runs of adjacent steps; each
/// run needs one load. Returns `(first, last)` per run.
pub fn use_runs(uses: &[u32]) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &step in uses {
        match runs.last_mut() {
            Some(run) if step == run.1 + 1 => run.1 = step,
            _ => runs.push((step, step)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Cost, OpKind, TensorKind};
    use crate::Tier;

    #[test]
    fn finds_the_longest_gap() {
        let mut w = Workload::new("t");
        let x = w.add_tensor("x", 1, TensorKind::Input, Some(Tier::Host));
        let a = w.add_tensor("a", 1, TensorKind::Activation, None);
        let b = w.add_tensor("b", 1, TensorKind::Activation, None);
        w.add_op(
            "f0",
            OpKind::Generic,
            Phase::Forward,
            vec![x],
            vec![a],
            Cost::default(),
        );
        w.add_op(
            "f1",
            OpKind::Generic,
            Phase::Forward,
            vec![a],
            vec![b],
            Cost::default(),
        );
        for k in 0..3 {
            w.add_op(
                format!("g{k}"),
                OpKind::Generic,
                Phase::Forward,
                vec![b],
                vec![],
                Cost::default(),
            );
        }
        w.add_op(
            "bw",
            OpKind::Generic,
            Phase::Backward,
            vec![a, b],
            vec![],
            Cost::default(),
        );
        let lives = Lifetimes::compute(&w);
        assert_eq!(
            lives.tensors[a.index()].gap,
            Some(Gap {
                after: 1,
                before: 5
            })
        );
        assert_eq!(lives.tensors[b.index()].gap, None);
        assert_eq!(
            lives.tensors[a.index()].gaps,
            vec![Gap {
                after: 1,
                before: 5
            }]
        );
        assert_eq!(lives.tensors[x.index()].uses, vec![0]);
        assert_eq!(
            use_runs(&[1, 2, 3, 7, 9, 10]),
            vec![(1, 3), (7, 7), (9, 10)]
        );
    }
}
