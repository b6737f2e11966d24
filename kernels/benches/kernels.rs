//! Throughput of the hot kernels at a realistic partition size:
//! 200k rows, 16 edges a row, width 128; GEMM 200k × 128 × 128 and an
//! output layer of 16 classes (GEMM 200k × 128 × 16, the loss); GAT's
//! node scores, edge softmax and attention backward over the same edges
//! with 8 heads of 8.
//! `spmm_dropout_per_edge` is the masked gather that hashes the mask again
//! per edge (before the mask workspace), to compare with `spmm_dropout`;
//! `spmm_t_stored` is `spmm_t` as a gather over a stored transpose.
//! `weight_grad_1m_128` is a weight gradient over 1,048,576 rows, more
//! chunks than a reduction holds at once (`REDUCE_GROUP`).
//! `matmul_bwd_4096` is a weight gradient whose rows are 4 KiB apart
//! (1,024 features) or not (1,023); `weight_grad_4096`, one of a small
//! graph's partition (4,096 rows, one reduction chunk) at narrow widths.
//! `projection_677x16` is a first layer's projection and weight
//! gradient, plain and through dropout, at 1,023 and 1,024 features (its
//! counter: input elements).
//!
//! `relu_dropout_1600k_w16` and `relu_dropout_bwd_bits_25m` at 16 are
//! the same elements in rows of 16: the dropout mask of contiguous rows
//! is drawn as one flat run, so a narrow layer costs no more an element.
//!
//! `small_output` is a small graph's output layer (32,768 rows of 8
//! classes): the loss, its gradient and the accuracy over three masks,
//! where a cost per row counts more than at 16 classes.
//!
//! `spmm_chain_rmat_w128` is a GCN layer's forward aggregation over an
//! R-MAT graph of 262,144 vertices in 1, 4 and 16 partitions (every
//! block's product added into its destination's partial sum), plain and
//! with dropout on its input: what many partitions cost the gather.
//!
//! `cargo bench -p fateplan-kernels --bench kernels`. divan reports time;
//! the counters give bytes gathered (SpMM: one source row of `width`
//! floats per edge) and FLOPs (`2 · rows · d_in · d_out` per GEMM) per
//! second. Set `RAYON_NUM_THREADS=1` for single-thread figures.

use divan::counter::{BytesCount, ItemsCount};
use divan::Bencher;
use fateplan_kernels::activation::{
    dropout_into, elu_dropout, elu_dropout_biased, elu_dropout_bwd, elu_dropout_bwd_biased,
    positive_bits, relu_dropout, relu_dropout_biased, relu_dropout_bwd, relu_dropout_bwd_bits,
};
use fateplan_kernels::dense::{
    add_bias, linear, linear_bwd, matmul_rows, matmul_rows_bwd, matmul_rows_dropped,
    matmul_rows_dropped_bwd,
};
use fateplan_kernels::dropout::{Dropout, RowKeys};
use fateplan_kernels::gat::{
    aggregate, aggregate_bwd, edge_softmax, node_scores, BlockGrads, BlockInputs, Heads,
};
use fateplan_kernels::loss::{accuracy, softmax_cross_entropy, softmax_cross_entropy_bwd};

use fateplan_kernels::sparse::{spmm, spmm_dropout, spmm_dropout_per_edge, spmm_t};
use fateplan_kernels::{Block, Csr, Init, Weighting, Write};

const ROWS: usize = 200_000;
const DEGREE: usize = 16;
const WIDTH: usize = 128;
const CLASSES: usize = 16;
/// A narrow layer's width (a GCN of 16 hidden).
const NARROW: usize = 16;

fn main() {
    divan::main();
}

/// Deterministic pseudo-random values.
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// `ROWS × ROWS` block with `DEGREE` uniformly random sources a row.
fn block() -> Block {
    let mut state = 7u64;
    let mut block = Block {
        row_start: (0..=ROWS).map(|r| (r * DEGREE) as u64).collect(),
        ..Block::default()
    };
    for _ in 0..ROWS * DEGREE {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        block.columns.push(((state >> 33) % ROWS as u64) as u32);
        block.weights.push(1.0 / DEGREE as f32);
    }
    block
}

fn gathered_bytes() -> BytesCount {
    BytesCount::new(ROWS * DEGREE * WIDTH * 4)
}

#[divan::bench(sample_count = 10)]
fn spmm_200k_w128(bencher: Bencher) {
    let block = block();
    let src = values(ROWS * WIDTH, 1);
    let mut out = vec![0.0f32; ROWS * WIDTH];
    bencher
        .counter(gathered_bytes())
        .bench_local(|| spmm(block.as_ref(), &src, WIDTH, Init::Zero, &mut out).unwrap());
}

/// [`block`] with GCN's layout: a scale per destination and per source
/// row instead of a weight per edge.
fn scaled_block() -> Block {
    let mut block = block();
    block.weighting = Weighting::RowColumn;
    block.weights = values(2 * ROWS, 3).iter().map(|w| 0.5 + w.abs()).collect();
    block
}

#[divan::bench(sample_count = 10)]
fn spmm_200k_w128_scaled(bencher: Bencher) {
    let block = scaled_block();
    let src = values(ROWS * WIDTH, 1);
    let mut out = vec![0.0f32; ROWS * WIDTH];
    bencher
        .counter(gathered_bytes())
        .bench_local(|| spmm(block.as_ref(), &src, WIDTH, Init::Zero, &mut out).unwrap());
}

#[divan::bench(sample_count = 10)]
fn spmm_dropout_200k_w128(bencher: Bencher) {
    let block = block();
    let src = values(ROWS * WIDTH, 1);
    let mut out = vec![0.0f32; ROWS * WIDTH];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher.counter(gathered_bytes()).bench_local(|| {
        spmm_dropout(
            block.as_ref(),
            &src,
            WIDTH,
            Init::Zero,
            &mut out,
            &dropout,
            0,
        )
        .unwrap()
    });
}

/// The mask hashed again per edge (the formulation before the mask
/// workspace), for comparison.
#[divan::bench(sample_count = 10)]
fn spmm_dropout_per_edge_200k_w128(bencher: Bencher) {
    let block = block();
    let src = values(ROWS * WIDTH, 1);
    let mut out = vec![0.0f32; ROWS * WIDTH];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher.counter(gathered_bytes()).bench_local(|| {
        spmm_dropout_per_edge(
            block.as_ref(),
            &src,
            WIDTH,
            Init::Zero,
            &mut out,
            &dropout,
            0,
        )
        .unwrap()
    });
}

#[divan::bench(sample_count = 10)]
fn spmm_t_200k_w128(bencher: Bencher) {
    let block = block();
    let grad = values(ROWS * WIDTH, 1);
    let mut out = vec![0.0f32; ROWS * WIDTH];
    bencher
        .counter(gathered_bytes())
        .bench_local(|| spmm_t(block.as_ref(), &grad, WIDTH, Init::Zero, &mut out).unwrap());
}

/// What `spmm_t_200k_w128` computes, as a gather over the block's
/// transpose (built once, outside the timing): the stored transposes'
/// transposed aggregation.
#[divan::bench(sample_count = 10)]
fn spmm_t_stored_200k_w128(bencher: Bencher) {
    let transpose = block().as_ref().transpose(ROWS).unwrap();
    let grad = values(ROWS * WIDTH, 1);
    let mut out = vec![0.0f32; ROWS * WIDTH];
    bencher
        .counter(gathered_bytes())
        .bench_local(|| spmm(transpose.as_ref(), &grad, WIDTH, Init::Zero, &mut out).unwrap());
}

/// Building the transpose of `spmm_t_stored_200k_w128`.
#[divan::bench(sample_count = 10)]
fn transpose_200k(bencher: Bencher) {
    let block = block();
    bencher.bench_local(|| block.as_ref().transpose(ROWS).unwrap());
}

fn gemm_flops() -> ItemsCount {
    ItemsCount::new(2 * ROWS * WIDTH * WIDTH)
}

#[divan::bench(sample_count = 10)]
fn linear_200k_128x128(bencher: Bencher) {
    let x = values(ROWS * WIDTH, 1);
    let w = values(WIDTH * WIDTH + WIDTH, 2);
    let mut z = vec![0.0f32; ROWS * WIDTH];
    bencher
        .counter(gemm_flops())
        .bench_local(|| linear(&[&x], ROWS, WIDTH, &w, WIDTH, &mut z).unwrap());
}

/// A classifier's output layer: 128 -> 16.
#[divan::bench(sample_count = 10)]
fn linear_200k_128x16(bencher: Bencher) {
    let x = values(ROWS * WIDTH, 1);
    let w = values(WIDTH * CLASSES + CLASSES, 2);
    let mut z = vec![0.0f32; ROWS * CLASSES];
    bencher
        .counter(ItemsCount::new(2 * ROWS * WIDTH * CLASSES))
        .bench_local(|| linear(&[&x], ROWS, WIDTH, &w, CLASSES, &mut z).unwrap());
}

/// Two GEMMs: the weight gradient and the input gradient.
#[divan::bench(sample_count = 10, args = [WIDTH, CLASSES])]
fn linear_bwd_200k_128(bencher: Bencher, d_out: usize) {
    let x = values(ROWS * WIDTH, 1);
    let w = values(WIDTH * d_out + d_out, 2);
    let dz = values(ROWS * d_out, 3);
    let mut dw = vec![0.0f32; w.len()];
    let mut dx = vec![0.0f32; ROWS * WIDTH];
    bencher
        .counter(ItemsCount::new(2 * 2 * ROWS * WIDTH * d_out))
        .bench_local(|| {
            linear_bwd(
                &dz,
                &[&x],
                ROWS,
                WIDTH,
                &w,
                d_out,
                &mut dw,
                &mut [Some(&mut dx)],
                Write::Overwrite,
            )
            .unwrap()
        });
}

/// Rows of a weight gradient over more chunks than a reduction holds at
/// once: 4 groups of `REDUCE_GROUP` chunks.
const MANY_ROWS: usize = 4 * fateplan_kernels::REDUCE_GROUP * fateplan_kernels::REDUCE_ROWS;

/// The weight gradient alone over [`MANY_ROWS`] rows, 128 -> 128, plain
/// and through dropout (a first layer's input).
#[divan::bench(sample_count = 10, args = [false, true])]
fn weight_grad_1m_128(bencher: Bencher, dropped: bool) {
    let x = values(MANY_ROWS * WIDTH, 1);
    let w = values(WIDTH * WIDTH, 2);
    let dz = values(MANY_ROWS * WIDTH, 3);
    let mut dw = vec![0.0f32; w.len()];
    let dropout = Dropout::new(if dropped { 0.5 } else { 0.0 }, 7, 1).unwrap();
    bencher
        .counter(ItemsCount::new(2 * MANY_ROWS * WIDTH * WIDTH))
        .bench_local(|| {
            let keys = RowKeys::Contiguous(0);
            let write = Write::Overwrite;
            matmul_rows_dropped_bwd(
                &dz, &x, MANY_ROWS, WIDTH, WIDTH, &mut dw, keys, &dropout, write,
            )
            .unwrap()
        });
}

/// A first layer over few rows of many features, as a partition of a
/// small citation graph has (Cora: 2,708 nodes in 4 partitions, 1,433
/// features, 16 hidden): the projection and its weight gradient.
const FEW_ROWS: usize = 677;
const MANY_FEATURES: usize = 1433;

fn few_rows_flops() -> ItemsCount {
    ItemsCount::new(2 * FEW_ROWS * MANY_FEATURES * CLASSES)
}

#[divan::bench(sample_count = 50)]
fn matmul_677_1433x16(bencher: Bencher) {
    let x = values(FEW_ROWS * MANY_FEATURES, 1);
    let w = values(MANY_FEATURES * CLASSES, 2);
    let mut z = vec![0.0f32; FEW_ROWS * CLASSES];
    bencher
        .counter(few_rows_flops())
        .bench_local(|| matmul_rows(&x, FEW_ROWS, MANY_FEATURES, &w, CLASSES, &mut z).unwrap());
}

/// The weight gradient alone (a first layer has no input gradient).
#[divan::bench(sample_count = 50)]
fn matmul_bwd_677_1433x16(bencher: Bencher) {
    let x = values(FEW_ROWS * MANY_FEATURES, 1);
    let w = values(MANY_FEATURES * CLASSES, 2);
    let dz = values(FEW_ROWS * CLASSES, 3);
    let mut dw = vec![0.0f32; w.len()];
    bencher.counter(few_rows_flops()).bench_local(|| {
        matmul_rows_bwd(
            &dz,
            &x,
            FEW_ROWS,
            MANY_FEATURES,
            &w,
            CLASSES,
            &mut dw,
            None,
            Write::Overwrite,
        )
        .unwrap()
    });
}

/// The projection of that first layer's input through dropout, each
/// task masking its own slab of rows, and its weight gradient, each of 8
/// lanes of rows masking its slabs in turn (rows keyed by scattered ids,
/// as a min-cut partition's).
#[divan::bench(sample_count = 50)]
fn matmul_dropped_677_1433x16(bencher: Bencher) {
    let x = values(FEW_ROWS * MANY_FEATURES, 1);
    let w = values(MANY_FEATURES * CLASSES, 2);
    let mut z = vec![0.0f32; FEW_ROWS * CLASSES];
    let ids = scattered_ids();
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher.counter(few_rows_flops()).bench_local(|| {
        let keys = RowKeys::Ids(&ids);
        matmul_rows_dropped(
            &x,
            FEW_ROWS,
            MANY_FEATURES,
            &w,
            CLASSES,
            &mut z,
            keys,
            &dropout,
        )
        .unwrap()
    });
}

#[divan::bench(sample_count = 50)]
fn matmul_dropped_bwd_677_1433x16(bencher: Bencher) {
    let x = values(FEW_ROWS * MANY_FEATURES, 1);
    let dz = values(FEW_ROWS * CLASSES, 3);
    let mut dw = vec![0.0f32; MANY_FEATURES * CLASSES];
    let ids = scattered_ids();
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher.counter(few_rows_flops()).bench_local(|| {
        let keys = RowKeys::Ids(&ids);
        matmul_rows_dropped_bwd(
            &dz,
            &x,
            FEW_ROWS,
            MANY_FEATURES,
            CLASSES,
            &mut dw,
            keys,
            &dropout,
            Write::Overwrite,
        )
        .unwrap()
    });
}

/// What masking the input adds to a first layer's projection and its
/// weight gradient, by the input's width: one short of a multiple of 64
/// (each row's mask starting inside a 64-bit word) and a multiple of 64
/// (rows 4 KiB apart, which the plain products read in place).
/// `DROPPED` false is the plain product and gradient, true the dropped.
#[divan::bench(sample_count = 50, consts = [false, true], args = [1023, 1024])]
fn projection_677x16<const DROPPED: bool>(bencher: Bencher, d_in: usize) {
    let x = values(FEW_ROWS * d_in, 1);
    let w = values(d_in * CLASSES, 2);
    let dz = values(FEW_ROWS * CLASSES, 3);
    let mut z = vec![0.0f32; FEW_ROWS * CLASSES];
    let mut dw = vec![0.0f32; w.len()];
    let ids = scattered_ids();
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    let write = Write::Overwrite;
    bencher
        .counter(ItemsCount::new(FEW_ROWS * d_in))
        .bench_local(|| {
            let keys = RowKeys::Ids(&ids);
            if DROPPED {
                matmul_rows_dropped(&x, FEW_ROWS, d_in, &w, CLASSES, &mut z, keys, &dropout)
                    .unwrap();
                matmul_rows_dropped_bwd(
                    &dz, &x, FEW_ROWS, d_in, CLASSES, &mut dw, keys, &dropout, write,
                )
                .unwrap();
            } else {
                matmul_rows(&x, FEW_ROWS, d_in, &w, CLASSES, &mut z).unwrap();
                matmul_rows_bwd(&dz, &x, FEW_ROWS, d_in, &w, CLASSES, &mut dw, None, write)
                    .unwrap();
            }
        });
}

/// The weight gradient of a partition of 4,096 rows, one reduction chunk,
/// at a small graph's widths: a GCN's first layer (64 features into 128)
/// and its output layer (128 into 8), and 128 into 128.
#[divan::bench(sample_count = 30, consts = [8, 128], args = [64, 128])]
fn weight_grad_4096<const OUT: usize>(bencher: Bencher, d_in: usize) {
    let rows = 4096;
    let x = values(rows * d_in, 1);
    let w = values(d_in * OUT + OUT, 2);
    let dz = values(rows * OUT, 3);
    let mut dw = vec![0.0f32; w.len()];
    bencher
        .counter(ItemsCount::new(2 * rows * d_in * OUT))
        .bench_local(|| {
            let write = Write::Overwrite;
            linear_bwd(&dz, &[&x], rows, d_in, &w, OUT, &mut dw, &mut [], write).unwrap()
        });
}

/// A weight gradient of 4,096 rows of about a thousand features, in
/// place and with its rows 4 KiB apart (1,024 features, whose tasks pack
/// their columns first), into 16 and 128 outputs.
#[divan::bench(sample_count = 30, consts = [16, 128], args = [1023, 1024])]
fn matmul_bwd_4096<const OUT: usize>(bencher: Bencher, d_in: usize) {
    let rows = 4096;
    let x = values(rows * d_in, 1);
    let w = values(d_in * OUT, 2);
    let dz = values(rows * OUT, 3);
    let mut dw = vec![0.0f32; w.len()];
    bencher
        .counter(ItemsCount::new(2 * rows * d_in * OUT))
        .bench_local(|| {
            matmul_rows_bwd(
                &dz,
                &x,
                rows,
                d_in,
                &w,
                OUT,
                &mut dw,
                None,
                Write::Overwrite,
            )
            .unwrap()
        });
}

fn scattered_ids() -> Vec<u64> {
    (0..FEW_ROWS as u64).map(|r| r * 4 + 1).collect()
}

/// The dropped copy of that first layer's input, its rows keyed in
/// order (one device, a range partition) or by scattered ids (a min-cut
/// partition).
#[divan::bench(sample_count = 50, args = [false, true])]
fn dropout_into_677_1433(bencher: Bencher, renumbered: bool) {
    let x = values(FEW_ROWS * MANY_FEATURES, 1);
    let mut out = vec![0.0f32; x.len()];
    let ids = scattered_ids();
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher
        .counter(ItemsCount::new(x.len()))
        .bench_local(|| match renumbered {
            false => dropout_into(&x, &mut out, MANY_FEATURES, 0, &dropout).unwrap(),
            true => {
                dropout_into(&x, &mut out, MANY_FEATURES, RowKeys::Ids(&ids), &dropout).unwrap()
            }
        });
}

fn logits() -> (Vec<f32>, Vec<i64>, Vec<bool>) {
    let z = values(ROWS * CLASSES, 1).iter().map(|v| 8.0 * v).collect();
    let labels = (0..ROWS).map(|r| (r * 7 % CLASSES) as i64).collect();
    let mask = (0..ROWS).map(|r| r % 10 < 6).collect();
    (z, labels, mask)
}

/// Softmax cross-entropy over 16 classes, 60% of rows labelled; the
/// counter is logits.
#[divan::bench(sample_count = 10)]
fn loss_200k_c16(bencher: Bencher) {
    let (z, labels, mask) = logits();
    bencher
        .counter(ItemsCount::new(ROWS * CLASSES))
        .bench_local(|| softmax_cross_entropy(&z, ROWS, CLASSES, &labels, &mask, ROWS).unwrap());
}

#[divan::bench(sample_count = 10)]
fn loss_bwd_200k_c16(bencher: Bencher) {
    let (z, labels, mask) = logits();
    let mut g = vec![0.0f32; ROWS * CLASSES];
    bencher
        .counter(ItemsCount::new(ROWS * CLASSES))
        .bench_local(|| {
            softmax_cross_entropy_bwd(&z, ROWS, CLASSES, &labels, &mask, ROWS, &mut g).unwrap()
        });
}

fn elements() -> ItemsCount {
    ItemsCount::new(ROWS * WIDTH)
}

#[divan::bench(sample_count = 10)]
fn relu_dropout_200k_w128(bencher: Bencher) {
    let z = values(ROWS * WIDTH, 1);
    let mut h = vec![0.0f32; ROWS * WIDTH];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher
        .counter(elements())
        .bench_local(|| relu_dropout(&z, &mut h, WIDTH, 0, Some(&dropout)).unwrap());
}

/// The same elements in rows of 16 (8 times the rows): what a narrow
/// layer's row count costs the mask, to compare with `relu_dropout_200k_w128`.
#[divan::bench(sample_count = 10)]
fn relu_dropout_1600k_w16(bencher: Bencher) {
    let z = values(ROWS * WIDTH, 1);
    let mut h = vec![0.0f32; ROWS * WIDTH];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher
        .counter(elements())
        .bench_local(|| relu_dropout(&z, &mut h, NARROW, 0, Some(&dropout)).unwrap());
}

/// The backward from the mask bits, in rows of 128 and of 16.
#[divan::bench(sample_count = 10, args = [WIDTH, NARROW])]
fn relu_dropout_bwd_bits_25m(bencher: Bencher, width: usize) {
    let z = values(ROWS * WIDTH, 1);
    let g = values(ROWS * WIDTH, 3);
    let mut bits = vec![0u64; z.len().div_ceil(64)];
    positive_bits(&z, &mut bits).unwrap();
    let mut dz = vec![0.0f32; ROWS * WIDTH];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher.counter(elements()).bench_local(|| {
        relu_dropout_bwd_bits(&g, &bits, width, 0, Some(&dropout), &mut dz).unwrap()
    });
}

#[divan::bench(sample_count = 10)]
fn relu_dropout_bwd_200k_w128(bencher: Bencher) {
    let z = values(ROWS * WIDTH, 1);
    let g = values(ROWS * WIDTH, 3);
    let mut dz = vec![0.0f32; ROWS * WIDTH];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher
        .counter(elements())
        .bench_local(|| relu_dropout_bwd(&g, &z, WIDTH, 0, Some(&dropout), &mut dz).unwrap());
}

#[divan::bench(sample_count = 10)]
fn elu_dropout_200k_w128(bencher: Bencher) {
    let z = values(ROWS * WIDTH, 1);
    let mut h = vec![0.0f32; ROWS * WIDTH];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher
        .counter(elements())
        .bench_local(|| elu_dropout(&z, &mut h, WIDTH, 0, Some(&dropout)).unwrap());
}

#[divan::bench(sample_count = 10)]
fn elu_dropout_bwd_200k_w128(bencher: Bencher) {
    let z = values(ROWS * WIDTH, 1);
    let g = values(ROWS * WIDTH, 3);
    let mut dz = vec![0.0f32; ROWS * WIDTH];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher
        .counter(elements())
        .bench_local(|| elu_dropout_bwd(&g, &z, WIDTH, 0, Some(&dropout), &mut dz).unwrap());
}

/// How a layer that projects first takes its activation's input: the
/// bias added in the activation's own pass (`fused`), or to a copy of
/// the aggregation first (`copy`, as the CPU backend did before).
const BIASED: [&str; 2] = ["fused", "copy"];

/// `z + bias` as the `copy` way makes it, for the plain kernel.
fn biased_copy(z: &[f32], bias: &[f32]) -> Vec<f32> {
    let mut y = z.to_vec();
    add_bias(&mut y, bias.len(), bias).unwrap();
    y
}

#[divan::bench(sample_count = 10, args = BIASED)]
fn relu_dropout_biased_200k_w128(bencher: Bencher, way: &str) {
    let (z, bias) = (values(ROWS * WIDTH, 1), values(WIDTH, 7));
    let mut h = vec![0.0f32; ROWS * WIDTH];
    let dropout = Some(Dropout::new(0.5, 1, 2).unwrap());
    bencher.counter(elements()).bench_local(|| match way {
        "fused" => relu_dropout_biased(&z, &bias, &mut h, WIDTH, 0, dropout.as_ref()).unwrap(),
        _ => relu_dropout(&biased_copy(&z, &bias), &mut h, WIDTH, 0, dropout.as_ref()).unwrap(),
    });
}

#[divan::bench(sample_count = 10, args = BIASED)]
fn elu_dropout_biased_200k_w128(bencher: Bencher, way: &str) {
    let (z, bias) = (values(ROWS * WIDTH, 1), values(WIDTH, 7));
    let mut h = vec![0.0f32; ROWS * WIDTH];
    let dropout = Some(Dropout::new(0.5, 1, 2).unwrap());
    bencher.counter(elements()).bench_local(|| match way {
        "fused" => elu_dropout_biased(&z, &bias, &mut h, WIDTH, 0, dropout.as_ref()).unwrap(),
        _ => elu_dropout(&biased_copy(&z, &bias), &mut h, WIDTH, 0, dropout.as_ref()).unwrap(),
    });
}

#[divan::bench(sample_count = 10, args = BIASED)]
fn elu_dropout_bwd_biased_200k_w128(bencher: Bencher, way: &str) {
    let (z, g, bias) = (
        values(ROWS * WIDTH, 1),
        values(ROWS * WIDTH, 3),
        values(WIDTH, 7),
    );
    let mut dz = vec![0.0f32; ROWS * WIDTH];
    let dropout = Some(Dropout::new(0.5, 1, 2).unwrap());
    let d = dropout.as_ref();
    bencher.counter(elements()).bench_local(|| match way {
        "fused" => elu_dropout_bwd_biased(&g, &z, &bias, WIDTH, 0, d, &mut dz).unwrap(),
        _ => elu_dropout_bwd(&g, &biased_copy(&z, &bias), WIDTH, 0, d, &mut dz).unwrap(),
    });
}

/// Softmax over each row's 16 edges, 8 heads; the scores are reset
/// before each run (outside the timing).
#[divan::bench(sample_count = 10)]
fn edge_softmax_200k_h8(bencher: Bencher) {
    const HEADS: usize = 8;
    let block = block();
    let scores = values(ROWS * DEGREE * HEADS, 5);
    bencher
        .counter(ItemsCount::new(ROWS * DEGREE * HEADS))
        .with_inputs(|| scores.clone())
        .bench_local_values(|mut s| {
            edge_softmax(&[block.as_ref()], HEADS, &mut [&mut s[..]]).unwrap();
            s
        });
}

/// `block()`'s edges dealt over `n` blocks of the same rows, each row
/// `DEGREE / n` of its edges in each: one row partition's blocks when
/// the graph is cut into `n` partitions.
fn dealt(n: usize) -> Vec<Block> {
    let whole = block();
    let per = DEGREE / n;
    (0..n)
        .map(|k| {
            let mut part = Block {
                row_start: (0..=ROWS).map(|r| (r * per) as u64).collect(),
                ..Block::default()
            };
            for r in 0..ROWS {
                let edges = r * DEGREE + k * per..r * DEGREE + (k + 1) * per;
                part.columns.extend(&whole.columns[edges.clone()]);
                part.weights.extend(&whole.weights[edges]);
            }
            part
        })
        .collect()
}

/// The same softmax at one head, each row's 16 edges dealt over `n`
/// blocks (the edges the same, `n` times the rows walked).
#[divan::bench(sample_count = 10, args = [1, 4, 16])]
fn edge_softmax_200k_h1_blocks(bencher: Bencher, n: usize) {
    let blocks = dealt(n);
    let refs: Vec<_> = blocks.iter().map(Block::as_ref).collect();
    let scores: Vec<Vec<f32>> = (0..n)
        .map(|k| values(ROWS * DEGREE / n, 5 + k as u64))
        .collect();
    bencher
        .counter(ItemsCount::new(ROWS * DEGREE))
        .with_inputs(|| scores.clone())
        .bench_local_values(|mut s| {
            let mut slices: Vec<&mut [f32]> = s.iter_mut().map(Vec::as_mut_slice).collect();
            edge_softmax(&refs, 1, &mut slices).unwrap();
            s
        });
}

/// GAT's heads in the benches: 8 of 8 (width 64).
const GAT: Heads = Heads {
    heads: 8,
    head_width: 8,
};

/// Both halves of the attention score of every row: 200k rows (from
/// memory) and 16,384 (a partition of the GAT runs in `docs/profile.md`,
/// in the caches as after the linear layer that writes it).
#[divan::bench(args = [ROWS, 16_384], sample_count = 10)]
fn node_scores_h8x8(bencher: Bencher, rows: usize) {
    let d = GAT.width();
    let z = values(rows * d, 1);
    let (att_src, att_dst) = (values(d, 2), values(d, 3));
    let mut a_src = vec![0.0f32; rows * GAT.heads];
    let mut a_dst = vec![0.0f32; rows * GAT.heads];
    bencher
        .counter(ItemsCount::new(rows * d))
        .bench_local(|| node_scores(&z, GAT, &att_src, &att_dst, &mut a_src, &mut a_dst).unwrap());
}

/// The attention-weighted aggregation of one block, heads of 8 (GAT's
/// hidden layers have 8 heads, its output layer one).
#[divan::bench(args = [8, 1], sample_count = 10)]
fn attention_agg_200k_c8(bencher: Bencher, heads: usize) {
    let heads = Heads {
        heads,
        head_width: 8,
    };
    let d = heads.width();
    let block = block();
    let alpha = values(ROWS * DEGREE * heads.heads, 4);
    let z = values(ROWS * d, 7);
    let mut out = vec![0.0f32; ROWS * d];
    bencher
        .counter(ItemsCount::new(ROWS * DEGREE))
        .bench_local(|| {
            aggregate(block.as_ref(), &alpha, &z, heads, Init::Zero, &mut out).unwrap()
        });
}

/// The backward of one block's attention aggregation (the per-edge
/// score gradients and both scatters), overwriting its outputs.
#[divan::bench(sample_count = 10)]
fn attention_bwd_200k_h8x8(bencher: Bencher) {
    let (h, d) = (GAT.heads, GAT.width());
    let block = block();
    let alpha = values(ROWS * DEGREE * h, 4);
    let (a_dst, a_src) = (values(ROWS * h, 5), values(ROWS * h, 6));
    let (z, grad_out, out) = (
        values(ROWS * d, 7),
        values(ROWS * d, 8),
        values(ROWS * d, 9),
    );
    let mut grad_z = vec![0.0f32; ROWS * d];
    let (mut grad_a_src, mut grad_a_dst) = (vec![0.0f32; ROWS * h], vec![0.0f32; ROWS * h]);
    bencher
        .counter(ItemsCount::new(ROWS * DEGREE * h))
        .bench_local(|| {
            let inputs = BlockInputs {
                block: block.as_ref(),
                alpha: &alpha,
                alpha_dropped: None,
                a_dst: &a_dst,
                a_src: &a_src,
                z_src: &z,
                grad_out: &grad_out,
                out: &out,
            };
            let grads = BlockGrads {
                grad_z_src: &mut grad_z,
                grad_a_src: &mut grad_a_src,
                grad_a_dst: &mut grad_a_dst,
            };
            aggregate_bwd(inputs, GAT, grads, Write::Overwrite).unwrap()
        });
}

/// Predictions counted against one mask.
#[divan::bench(sample_count = 10)]
fn accuracy_200k_c16(bencher: Bencher) {
    let (z, labels, mask) = logits();
    bencher
        .counter(ItemsCount::new(ROWS * CLASSES))
        .bench_local(|| accuracy(&z, ROWS, CLASSES, &labels, &[&mask]).unwrap());
}

/// R-MAT's scale in [`partitioned`]: 262,144 vertices.
const RMAT_SCALE: u32 = 18;

/// An R-MAT graph (probabilities 0.57, 0.19, 0.19, 0.05; 16 edges a
/// vertex; `RMAT_SCALE`) cut into `parts` ranges of vertices, its blocks
/// by destination range then source range, each with GCN's layout (a
/// scale per destination and per source row).
fn partitioned(parts: usize) -> Vec<Vec<Block>> {
    let nodes = 1usize << RMAT_SCALE;
    let mut state = 11u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 40) as f64 / (1u64 << 24) as f64
    };
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for _ in 0..nodes * DEGREE {
        let (mut s, mut d) = (0u64, 0u64);
        for _ in 0..RMAT_SCALE {
            let u = next();
            let (down, right) = match u {
                u if u < 0.57 => (0, 0),
                u if u < 0.76 => (0, 1),
                u if u < 0.95 => (1, 0),
                _ => (1, 1),
            };
            s = 2 * s + down;
            d = 2 * d + right;
        }
        src.push(s);
        dst.push(d);
    }
    let csr = Csr::from_edges(nodes, &src, &dst);
    let ones = vec![1.0f32; csr.columns.len()];
    let rows = nodes / parts;
    let scales = values(2 * nodes, 3);
    let scale = |v: usize| 0.5 + scales[v].abs();
    (0..parts)
        .map(|i| {
            (0..parts)
                .map(|j| {
                    let (d, s) = (i * rows..(i + 1) * rows, j * rows..(j + 1) * rows);
                    let mut block = Block::from_csr(&csr, &ones, d.clone(), s.clone());
                    block.weighting = Weighting::RowColumn;
                    block.weights = d.map(scale).chain(s.map(|v| scale(nodes + v))).collect();
                    block
                })
                .collect()
        })
        .collect()
}

/// The forward aggregation of a GCN layer over every block of an R-MAT
/// graph in `parts` partitions (`partitioned`): each destination
/// partition's chain of block products adds into its partial sum, as the
/// CPU backend runs it. `masked`: the first layer's, with dropout on its
/// input. Its counter is the bytes gathered, the same at every count, so
/// the rates show what many partitions cost.
#[divan::bench(sample_count = 10, args = [1, 4, 16], consts = [false, true])]
fn spmm_chain_rmat_w128<const MASKED: bool>(bencher: Bencher, parts: usize) {
    spmm_chain::<MASKED>(bencher, parts, WIDTH);
}

/// [`spmm_chain_rmat_w128`] at the width of a 16-class output layer that
/// projects first (its aggregation and the transposed one), plain.
#[divan::bench(sample_count = 10, args = [1, 4, 16])]
fn spmm_chain_rmat_w16(bencher: Bencher, parts: usize) {
    spmm_chain::<false>(bencher, parts, CLASSES);
}

/// The chains of [`spmm_chain_rmat_w128`] at `width`.
fn spmm_chain<const MASKED: bool>(bencher: Bencher, parts: usize, width: usize) {
    let blocks = partitioned(parts);
    let rows = (1usize << RMAT_SCALE) / parts;
    let src: Vec<Vec<f32>> = (0..parts)
        .map(|j| values(rows * width, j as u64 + 1))
        .collect();
    let mut sums: Vec<Vec<f32>> = vec![vec![0.0f32; rows * width]; parts];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    let edges: usize = blocks.iter().flatten().map(|b| b.columns.len()).sum();
    bencher
        .counter(BytesCount::new(edges * width * 4))
        .bench_local(|| {
            for (i, sum) in sums.iter_mut().enumerate() {
                for (j, block) in blocks[i].iter().enumerate() {
                    let init = if j == 0 { Init::Zero } else { Init::Out };
                    let row0 = (j * rows) as u64;
                    match MASKED {
                        true => {
                            spmm_dropout(block.as_ref(), &src[j], width, init, sum, &dropout, row0)
                        }
                        false => spmm(block.as_ref(), &src[j], width, init, sum),
                    }
                    .unwrap();
                }
            }
        });
}

/// A small graph's output layer: 32,768 rows of 8 classes, a third of
/// them in each of the train, validation and test masks (the counter is
/// logits): the loss over the train rows, its gradient, and the accuracy
/// over the three masks, as a training loss operator runs them.
mod small_output {
    use super::*;

    const R: usize = 32_768;
    const C: usize = 8;

    fn inputs() -> (Vec<f32>, Vec<i64>, Vec<Vec<bool>>) {
        let z = values(R * C, 1).iter().map(|v| 8.0 * v).collect();
        let labels = (0..R).map(|r| (r * 7 % C) as i64).collect();
        let masks = (0..3)
            .map(|k| (0..R).map(|r| r % 3 == k).collect())
            .collect();
        (z, labels, masks)
    }

    #[divan::bench(sample_count = 30)]
    fn loss_32k_c8(bencher: Bencher) {
        let (z, labels, masks) = inputs();
        bencher
            .counter(ItemsCount::new(R * C))
            .bench_local(|| softmax_cross_entropy(&z, R, C, &labels, &masks[0], R).unwrap());
    }

    #[divan::bench(sample_count = 30)]
    fn loss_bwd_32k_c8(bencher: Bencher) {
        let (z, labels, masks) = inputs();
        let mut g = vec![0.0f32; R * C];
        bencher.counter(ItemsCount::new(R * C)).bench_local(|| {
            softmax_cross_entropy_bwd(&z, R, C, &labels, &masks[0], R, &mut g).unwrap()
        });
    }

    #[divan::bench(sample_count = 30)]
    fn accuracy_32k_c8(bencher: Bencher) {
        let (z, labels, masks) = inputs();
        let views: Vec<&[bool]> = masks.iter().map(Vec::as_slice).collect();
        bencher
            .counter(ItemsCount::new(R * C))
            .bench_local(|| accuracy(&z, R, C, &labels, &views).unwrap());
    }
}

/// The weight gradient of a first layer over many rows of wide
/// features into 16 outputs (a large citation-like graph's partition),
/// plain and through dropout: `(rows, d_in)`.
#[divan::bench(
    sample_count = 10,
    consts = [false, true],
    args = [(2708, 1433), (32768, 1433), (65536, 512), (262144, 128)]
)]
fn weight_grad_tall<const DROPPED: bool>(bencher: Bencher, (rows, d_in): (usize, usize)) {
    let x = values(rows * d_in, 1);
    let w = values(d_in * CLASSES, 2);
    let dz = values(rows * CLASSES, 3);
    let mut dw = vec![0.0f32; w.len()];
    let dropout = Dropout::new(0.5, 1, 2).unwrap();
    bencher
        .counter(ItemsCount::new(2 * rows * d_in * CLASSES))
        .bench_local(|| {
            let write = Write::Overwrite;
            if DROPPED {
                let keys = RowKeys::Contiguous(0);
                matmul_rows_dropped_bwd(
                    &dz, &x, rows, d_in, CLASSES, &mut dw, keys, &dropout, write,
                )
                .unwrap()
            } else {
                matmul_rows_bwd(&dz, &x, rows, d_in, &w, CLASSES, &mut dw, None, write).unwrap()
            }
        });
}

#[divan::bench(sample_count = 10, args = [(32768, 1433), (65536, 512)])]
fn projection_tall(bencher: Bencher, (rows, d_in): (usize, usize)) {
    let x = values(rows * d_in, 1);
    let w = values(d_in * CLASSES, 2);
    let mut z = vec![0.0f32; rows * CLASSES];
    bencher
        .counter(ItemsCount::new(2 * rows * d_in * CLASSES))
        .bench_local(|| matmul_rows(&x, rows, d_in, &w, CLASSES, &mut z).unwrap());
}
