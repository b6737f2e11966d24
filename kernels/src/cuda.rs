//! The CUDA sources of the kernels (`kernels/cuda/*.cu`), as named
//! sources for a runtime compiler (NVRTC): each is the shared prelude
//! followed by one file, a single translation unit without includes.
//! This crate only holds the text; compiling and launching is the
//! runtime's business, so the kernels crate never depends on CUDA.
//!
//! Every kernel mirrors a CPU kernel of this crate operation for
//! operation (the same terms added in the same order, the same dropout
//! mask bit for bit), but for the rows longer than a segment of a block's
//! edges, whose sums `sparse.cu` and `gat.cu` split in a fixed order of
//! their own (`prelude.cuh`); kernel names are `op_dtype`.

/// One CUDA source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// `sparse.cu`: SpMM over a block, its transpose (stable counting sort
    /// of the edges by source column, then a gather).
    Sparse,
    /// `gat.cu`: attention scores, edge softmax, aggregation and backward.
    Gat,
    /// `dense.cu`: bias, column sums, ordered sums, dropout.
    Dense,
    /// `activation.cu`: ReLU and ELU fused with dropout, and backward.
    Activation,
    /// `loss.cu`: softmax cross-entropy, accuracy, and the gradient.
    Loss,
    /// `optim.cu`: Adam with L2 weight decay.
    Optim,
}

const PRELUDE: &str = include_str!("../cuda/prelude.cuh");

impl Source {
    pub const ALL: [Source; 6] = [
        Source::Sparse,
        Source::Gat,
        Source::Dense,
        Source::Activation,
        Source::Loss,
        Source::Optim,
    ];

    /// The file's name under `kernels/cuda/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Source::Sparse => "sparse.cu",
            Source::Gat => "gat.cu",
            Source::Dense => "dense.cu",
            Source::Activation => "activation.cu",
            Source::Loss => "loss.cu",
            Source::Optim => "optim.cu",
        }
    }

    /// The file alone.
    pub fn body(self) -> &'static str {
        match self {
            Source::Sparse => include_str!("../cuda/sparse.cu"),
            Source::Gat => include_str!("../cuda/gat.cu"),
            Source::Dense => include_str!("../cuda/dense.cu"),
            Source::Activation => include_str!("../cuda/activation.cu"),
            Source::Loss => include_str!("../cuda/loss.cu"),
            Source::Optim => include_str!("../cuda/optim.cu"),
        }
    }

    /// What NVRTC compiles: the prelude, then the file.
    pub fn code(self) -> String {
        format!(
            "{PRELUDE}\n#line 1 \"{}\"\n{}",
            self.file_name(),
            self.body()
        )
    }

    /// The kernels the file defines (`extern "C" __global__`), in file
    /// order, read from the text so that the list cannot drift from it.
    pub fn kernels(self) -> Vec<&'static str> {
        const MARK: &str = "extern \"C\" __global__ void ";
        let body = self.body();
        body.match_indices(MARK)
            .filter_map(|(at, _)| {
                let rest = &body[at + MARK.len()..];
                rest.find('(').map(|end| rest[..end].trim())
            })
            .collect()
    }

    /// The source that defines kernel `name`.
    pub fn of_kernel(name: &str) -> Option<Source> {
        Source::ALL
            .into_iter()
            .find(|s| s.kernels().contains(&name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_defines_kernels_with_unique_typed_names() {
        let mut all = Vec::new();
        for source in Source::ALL {
            let kernels = source.kernels();
            assert!(
                !kernels.is_empty(),
                "{} defines no kernel",
                source.file_name()
            );
            for name in kernels {
                let dtype = name.rsplit('_').next().unwrap_or("");
                assert!(
                    ["f32", "f64", "u32", "u64"].contains(&dtype),
                    "{name}: kernel names end in their dtype"
                );
                all.push(name);
            }
            assert!(source.code().starts_with(PRELUDE));
        }
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "a kernel name appears twice");
        assert_eq!(Source::of_kernel("spmm_f32"), Some(Source::Sparse));
        assert_eq!(Source::of_kernel("adam_f32"), Some(Source::Optim));
        assert_eq!(Source::of_kernel("nothing_f32"), None);
    }
}
