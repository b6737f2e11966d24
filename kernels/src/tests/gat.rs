//! GAT: the reference against finite differences, and the block-by-block
//! kernels against the reference, across thread counts.

use super::*;
use crate::gat::*;
use crate::reference as reference64;
use crate::{BlockRef, Init, Write};

#[test]
fn reference_gat_backward_matches_finite_differences() {
    let mut rng = Rng::new(20);
    let (n, heads, c_n) = (7, 2, 3);
    let d = heads * c_n;
    let mut csr = random_csr(&mut rng, n, 20);
    // Vertex 0 has no in-edges.
    let keep: Vec<u32> = csr.row(0).to_vec();
    if !keep.is_empty() {
        let cut = csr.row_start[1] as usize;
        csr.columns.drain(..cut);
        for s in csr.row_start.iter_mut().skip(1) {
            *s -= cut as u64;
        }
    }
    let z = to64(&rng.vec(n * d));
    let att_src = to64(&rng.vec(d));
    let att_dst = to64(&rng.vec(d));
    let g = to64(&rng.vec(n * d));
    let dropped = reference_mask(&csr, heads);
    for mask in [None, Some(dropped.as_slice())] {
        let loss = |z: &[f64], s: &[f64], t: &[f64]| {
            dot(&reference64::gat(&csr, z, heads, c_n, s, t, mask), &g)
        };
        let (dz, ds, dt) = reference64::gat_bwd(&csr, &z, heads, c_n, &att_src, &att_dst, mask, &g);
        assert_close64(
            "dz",
            &dz,
            &numeric_grad(&z, |z| loss(z, &att_src, &att_dst)),
            1e-6,
        );
        assert_close64(
            "datt_src",
            &ds,
            &numeric_grad(&att_src, |s| loss(&z, s, &att_dst)),
            1e-6,
        );
        assert_close64(
            "datt_dst",
            &dt,
            &numeric_grad(&att_dst, |t| loss(&z, &att_src, t)),
            1e-6,
        );
    }
}

/// An attention-dropout factor for the edge from `c` into `r`, head `h`:
/// 0 or 2 (p = 0.5), a function of the edge so that blocks and the whole
/// graph agree.
fn drop_factor(r: usize, c: usize, h: usize) -> f32 {
    let mut rng = Rng::new(((r as u64) << 40) ^ ((c as u64) << 8) ^ h as u64);
    if rng.unit() < 0.5 {
        0.0
    } else {
        2.0
    }
}

/// [`drop_factor`] of every edge and head of `csr`, edge-major.
fn reference_mask(csr: &Csr, heads: usize) -> Vec<f64> {
    let mut mask = Vec::with_capacity(csr.columns.len() * heads);
    for r in 0..csr.rows() {
        for &c in csr.row(r) {
            mask.extend((0..heads).map(|h| drop_factor(r, c as usize, h) as f64));
        }
    }
    mask
}

/// The executor's sequence on partitions `bounds`: forward per destination
/// partition over its source blocks, backward per block, then the node
/// score path per partition. Returns `out`, `dz`, `datt_src`, `datt_dst`
/// concatenated.
fn blockwise(
    csr: &Csr,
    bounds: &[usize],
    z: &[f32],
    heads: Heads,
    att: (&[f32], &[f32]),
    dout: &[f32],
    dropout: bool,
) -> Vec<f32> {
    let (att_src, att_dst) = att;
    let (h_n, d) = (heads.heads, heads.width());
    let parts = bounds.len() - 1;
    let range = |p: usize| bounds[p]..bounds[p + 1];
    let rows = |p: usize| bounds[p + 1] - bounds[p];
    let ones = vec![1.0; csr.columns.len()];
    let blocks: Vec<Vec<Block>> = (0..parts)
        .map(|i| {
            (0..parts)
                .map(|j| Block::from_csr(csr, &ones, range(i), range(j)))
                .collect()
        })
        .collect();
    let zp: Vec<&[f32]> = (0..parts)
        .map(|p| &z[bounds[p] * d..bounds[p + 1] * d])
        .collect();
    let mut a_src: Vec<Vec<f32>> = (0..parts).map(|p| vec![0.0; rows(p) * h_n]).collect();
    let mut a_dst = a_src.clone();
    for p in 0..parts {
        node_scores(zp[p], heads, att_src, att_dst, &mut a_src[p], &mut a_dst[p]).unwrap();
    }

    // alpha times the attention-dropout factors of block (i, j).
    let drop = |i: usize, j: usize, alpha: &[f32]| -> Vec<f32> {
        let b = blocks[i][j].as_ref();
        let mut kept = alpha.to_vec();
        for r in 0..b.rows() {
            for e in b.row_start[r] as usize..b.row_start[r + 1] as usize {
                let c = bounds[j] + b.columns[e] as usize;
                for h in 0..h_n {
                    kept[e * h_n + h] *= drop_factor(bounds[i] + r, c, h);
                }
            }
        }
        kept
    };
    let mut alpha: Vec<Vec<Vec<f32>>> = Vec::new();
    let mut out: Vec<Vec<f32>> = Vec::new();
    for i in 0..parts {
        let mut scores: Vec<Vec<f32>> = (0..parts)
            .map(|j| {
                let b = blocks[i][j].as_ref();
                let mut s = vec![0.0; b.nnz() * h_n];
                edge_scores(b, &a_dst[i], &a_src[j], h_n, &mut s).unwrap();
                s
            })
            .collect();
        let refs: Vec<BlockRef> = blocks[i].iter().map(Block::as_ref).collect();
        let mut slices: Vec<&mut [f32]> = scores.iter_mut().map(Vec::as_mut_slice).collect();
        edge_softmax(&refs, h_n, &mut slices).unwrap();
        let mut o = vec![f32::NAN; rows(i) * d];
        for j in 0..parts {
            let init = if j == 0 { Init::Zero } else { Init::Out };
            let a = if dropout {
                drop(i, j, &scores[j])
            } else {
                scores[j].clone()
            };
            aggregate(refs[j], &a, zp[j], heads, init, &mut o).unwrap();
        }
        alpha.push(scores);
        out.push(o);
    }

    let mut gz: Vec<Vec<f32>> = (0..parts).map(|p| vec![0.0; rows(p) * d]).collect();
    let mut ga_src: Vec<Vec<f32>> = (0..parts).map(|p| vec![0.0; rows(p) * h_n]).collect();
    let mut ga_dst = ga_src.clone();
    for i in 0..parts {
        let grad_out = &dout[bounds[i] * d..bounds[i + 1] * d];
        for j in 0..parts {
            let kept = dropout.then(|| drop(i, j, &alpha[i][j]));
            let inputs = BlockInputs {
                block: blocks[i][j].as_ref(),
                alpha: &alpha[i][j],
                alpha_dropped: kept.as_deref(),
                a_dst: &a_dst[i],
                a_src: &a_src[j],
                z_src: zp[j],
                grad_out,
                out: &out[i],
            };
            let grads = BlockGrads {
                grad_z_src: &mut gz[j],
                grad_a_src: &mut ga_src[j],
                grad_a_dst: &mut ga_dst[i],
            };
            aggregate_bwd(inputs, heads, grads, Write::Accumulate).unwrap();
        }
    }
    let mut gatt_src = vec![f32::NAN; d];
    let mut gatt_dst = vec![f32::NAN; d];
    for p in 0..parts {
        let grads = NodeScoreGrads {
            grad_z: &mut gz[p],
            grad_att_src: &mut gatt_src,
            grad_att_dst: &mut gatt_dst,
        };
        let write = if p == 0 {
            Write::Overwrite
        } else {
            Write::Accumulate
        };
        node_scores_bwd(
            zp[p], heads, att_src, att_dst, &ga_src[p], &ga_dst[p], grads, write,
        )
        .unwrap();
    }
    let mut all: Vec<f32> = out.concat();
    all.extend(gz.concat());
    all.extend(gatt_src);
    all.extend(gatt_dst);
    all
}

fn check_blockwise(seed: u64, n: usize, edges: usize, bounds: &[usize], heads: Heads) {
    let mut rng = Rng::new(seed);
    let d = heads.width();
    let csr = random_csr(&mut rng, n, edges);
    let z = rng.vec(n * d);
    let att_src = rng.vec(d);
    let att_dst = rng.vec(d);
    let dout = rng.vec(n * d);
    let (h_n, c_n) = (heads.heads, heads.head_width);
    let mask = reference_mask(&csr, h_n);
    for dropout in [false, true] {
        let got = same_bits_across_threads("gat", || {
            blockwise(
                &csr,
                bounds,
                &z,
                heads,
                (&att_src, &att_dst),
                &dout,
                dropout,
            )
        });
        let mask = dropout.then_some(mask.as_slice());
        let z64 = to64(&z);
        let (s64, t64) = (to64(&att_src), to64(&att_dst));
        let out = reference64::gat(&csr, &z64, h_n, c_n, &s64, &t64, mask);
        let (dz, ds, dt) =
            reference64::gat_bwd(&csr, &z64, h_n, c_n, &s64, &t64, mask, &to64(&dout));
        let (got_out, rest) = got.split_at(n * d);
        let (got_dz, rest) = rest.split_at(n * d);
        let (got_ds, got_dt) = rest.split_at(d);
        assert_close("gat out", got_out, &out, 1e-5);
        assert_close("gat dz", got_dz, &dz, 1e-4);
        assert_close("gat datt_src", got_ds, &ds, 1e-4);
        assert_close("gat datt_dst", got_dt, &dt, 1e-4);
    }
}

#[test]
fn blockwise_gat_matches_reference() {
    // Uneven partitions, some rows without edges.
    check_blockwise(
        21,
        50,
        120,
        &[0, 13, 31, 50],
        Heads {
            heads: 2,
            head_width: 3,
        },
    );
    // One head of width 1, one partition.
    check_blockwise(
        22,
        9,
        20,
        &[0, 9],
        Heads {
            heads: 1,
            head_width: 1,
        },
    );
    // One head of 8 (GAT's output layer) over three partitions: the edge
    // softmax's one-head path across blocks.
    check_blockwise(
        26,
        45,
        140,
        &[0, 20, 33, 45],
        Heads {
            heads: 1,
            head_width: 8,
        },
    );
    // A partition with no rows.
    check_blockwise(
        23,
        12,
        30,
        &[0, 0, 12],
        Heads {
            heads: 3,
            head_width: 2,
        },
    );
    // Heads wider than the dot product's eight lanes: whole chunks and a
    // tail.
    check_blockwise(
        25,
        40,
        150,
        &[0, 17, 40],
        Heads {
            heads: 2,
            head_width: 19,
        },
    );
}

/// The eight-lane dot product against an f64 sum, for every length up to
/// four chunks and a tail, and for slices of unequal length (the shorter
/// one's).
#[test]
fn dot_matches_a_wide_sum_at_every_length() {
    let a: Vec<f32> = (0..40)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
        .collect();
    let b: Vec<f32> = (0..40)
        .map(|i| ((i * 53 % 29) as f32 - 14.0) / 5.0)
        .collect();
    let wide = |n: usize| (0..n).map(|i| a[i] as f64 * b[i] as f64).sum::<f64>();
    for n in 0..=33 {
        let got = crate::gat::lane_dot(&a[..n], &b[..n]) as f64;
        let scale: f64 = (0..n).map(|i| (a[i] as f64 * b[i] as f64).abs()).sum();
        assert!(
            (got - wide(n)).abs() <= 1e-6 * scale.max(1.0),
            "length {n}: {got} against {}",
            wide(n)
        );
        assert_eq!(
            crate::gat::lane_dot(&a[..n], &b[..n + 7]).to_bits(),
            crate::gat::lane_dot(&a[..n], &b[..n]).to_bits(),
            "length {n} against a longer slice"
        );
    }
}

#[test]
fn blockwise_gat_is_deterministic_at_size() {
    // Crosses ROW_CHUNK, SCATTER_MIN_ROWS and REDUCE_ROWS.
    check_blockwise(
        24,
        9000,
        40_000,
        &[0, 4500, 9000],
        Heads {
            heads: 2,
            head_width: 2,
        },
    );
}

#[test]
fn edge_softmax_checks_its_inputs() {
    let a = Block {
        row_start: vec![0, 1],
        columns: vec![0],
        weights: vec![],
        weighting: crate::Weighting::Unit,
    };
    let b = Block {
        row_start: vec![0, 0, 0],
        ..Block::default()
    };
    let mut s = vec![0.5f32, 0.1];
    let mut empty: Vec<f32> = vec![];
    assert!(edge_softmax(&[a.as_ref(), b.as_ref()], 2, &mut [&mut s, &mut empty]).is_err());
    assert!(edge_softmax(&[a.as_ref()], 2, &mut [&mut s[..1]]).is_err());
    edge_softmax(&[a.as_ref()], 2, &mut [&mut s]).unwrap();
    assert_eq!(s, vec![1.0, 1.0]);
}

#[test]
fn edge_dropout_is_keyed_by_the_edges_ends() {
    use crate::dropout::{Dropout, RowKeys};
    let mut rng = Rng::new(11);
    let (rows, src_rows, nodes) = (300, 200, 1000u64);
    let block = random_block(&mut rng, rows, src_rows, 4);
    let dropout = Dropout::new(0.4, 5, 9).unwrap();
    let dst_ids: Vec<u64> = (0..rows as u64).map(|r| 999 - 2 * r).collect();
    let src_ids: Vec<u64> = (0..src_rows as u64).map(|c| 3 * c + 1).collect();
    // Heads that split groups (1, 3) and that fill them (4, 8).
    let keys = [
        (RowKeys::Contiguous(40), RowKeys::Contiguous(600)),
        (RowKeys::Ids(&dst_ids), RowKeys::Ids(&src_ids)),
    ];
    for (heads, (dst, src)) in [1, 3, 4, 8].into_iter().flat_map(|h| keys.map(|k| (h, k))) {
        let values = rng.vec(block.columns.len() * heads);
        let mut got = values.clone();
        dropout_edges(
            block.as_ref(),
            heads,
            dst,
            src,
            src_rows,
            nodes,
            &dropout,
            &mut got,
        )
        .unwrap();
        let mut dropped = 0;
        for r in 0..rows {
            for e in block.row_start[r] as usize..block.row_start[r + 1] as usize {
                let edge = dst.key(r) * nodes + src.key(block.columns[e] as usize);
                for h in 0..heads {
                    let k = e * heads + h;
                    let expected = values[k] * dropout.value(edge * heads as u64 + h as u64);
                    assert_eq!(got[k].to_bits(), expected.to_bits(), "edge {e} head {h}");
                    dropped += usize::from(got[k] == 0.0);
                }
            }
        }
        // About 40% dropped.
        let share = dropped as f64 / values.len() as f64;
        assert!(
            (0.3..0.5).contains(&share),
            "{share} dropped with {heads} heads"
        );
    }
    let heads = 3;
    // The same edge in another block order, or in a block of its own,
    // draws the same mask.
    let one = Block {
        row_start: vec![0, 1],
        columns: vec![7],
        ..Block::default()
    };
    let mut alone = vec![1.0f32; heads];
    dropout_edges(
        one.as_ref(),
        heads,
        RowKeys::Contiguous(40 + 5),
        RowKeys::Contiguous(600),
        8,
        nodes,
        &dropout,
        &mut alone,
    )
    .unwrap();
    let expected: Vec<f32> = (0..heads as u64)
        .map(|h| dropout.value((45 * nodes + 607) * heads as u64 + h))
        .collect();
    assert_eq!(alone, expected);
}

#[test]
fn edge_dropout_checks_its_inputs() {
    use crate::dropout::{Dropout, RowKeys};
    let block = Block {
        row_start: vec![0, 2],
        columns: vec![0, 3],
        ..Block::default()
    };
    let dropout = Dropout::new(0.5, 1, 1).unwrap();
    let c = RowKeys::Contiguous(0);
    let mut v = vec![1.0f32; 4];
    let short = [0u64; 3];
    let err = |r: crate::Result<()>| r.unwrap_err().to_string();
    let e = err(dropout_edges(
        block.as_ref(),
        2,
        c,
        c,
        4,
        9,
        &dropout,
        &mut v[..3],
    ));
    assert!(e.contains("values"), "{e}");
    let e = err(dropout_edges(
        block.as_ref(),
        2,
        c,
        c,
        3,
        9,
        &dropout,
        &mut v,
    ));
    assert!(e.contains("column 3"), "{e}");
    let e = err(dropout_edges(
        block.as_ref(),
        2,
        c,
        RowKeys::Ids(&short),
        4,
        9,
        &dropout,
        &mut v,
    ));
    assert!(e.contains("row keys"), "{e}");
    let e = err(dropout_edges(
        block.as_ref(),
        0,
        c,
        c,
        4,
        9,
        &dropout,
        &mut v[..0],
    ));
    assert!(e.contains("heads"), "{e}");
    dropout_edges(block.as_ref(), 2, c, c, 4, 9, &dropout, &mut v).unwrap();
}

#[test]
fn a_fault_in_any_task_s_rows_is_named_by_every_gat_kernel() {
    // As the gathers' test (`core.rs`): rows of several tasks, offsets
    // that fall in the last task's rows, in a middle one's, across the
    // boundary of two tasks, and past the edges in a middle task; a
    // column past the source rows in the first task's and at a middle
    // task's first edge; offsets past the edges at a task's first row,
    // which the kernels refuse before their tasks run. Each kernel names
    // each fault as the whole block's check does (edge softmax reads no
    // source rows: a column is no fault there).
    use crate::dropout::{Dropout, RowKeys};
    use crate::Error;
    let chunk = crate::ROW_CHUNK;
    let (rows, src_rows, h) = (3 * chunk + 5, 1000, 2);
    let heads = Heads {
        heads: h,
        head_width: 2,
    };
    let d = heads.width();
    let mut rng = Rng::new(21);
    let block = random_block(&mut rng, rows, src_rows, 3);
    let mut faults = Vec::new();
    for r in [3 * chunk + 1, chunk + 7] {
        let mut broken = block.clone();
        broken.row_start[r] = broken.row_start[r + 1] + 1;
        faults.push((broken, true));
    }
    let mut broken = block.clone();
    broken.row_start[chunk] = broken.row_start[chunk - 1] - 1;
    faults.push((broken, true));
    let mut broken = block.clone();
    broken.row_start[2 * chunk + 3] = broken.columns.len() as u64 + 5;
    faults.push((broken, true));
    // Past the edges at a task's first row: refused before the tasks.
    let mut broken = block.clone();
    broken.row_start[2 * chunk] = broken.columns.len() as u64 + 5;
    faults.push((broken, true));
    let mut broken = block.clone();
    broken.columns[0] = src_rows as u32;
    faults.push((broken, false));
    // A column at a middle task's first edge, which the task before
    // looks ahead to as it prefetches.
    let mut broken = block.clone();
    let first = broken.row_start[chunk] as usize;
    broken.columns[first] = src_rows as u32;
    faults.push((broken, false));
    let dropout = Dropout::new(0.3, 1, 2).unwrap();
    let identity = Dropout::new(0.0, 1, 2).unwrap();
    let keys = RowKeys::Contiguous(0);
    let a_dst = vec![0.1f32; rows * h];
    let a_src = vec![0.2f32; src_rows * h];
    let z_src = vec![0.3f32; src_rows * d];
    let per_row = vec![0.4f32; rows * d];
    // `aggregate_bwd` of block `b` with `alpha`: its result and the
    // gradient into the source rows.
    let backward = |b: BlockRef, alpha: &[f32]| {
        let (mut gz, mut gas, mut gad) = (
            vec![0.0f32; src_rows * d],
            vec![0.0f32; src_rows * h],
            vec![0.0f32; rows * h],
        );
        let inputs = BlockInputs {
            block: b,
            alpha,
            alpha_dropped: None,
            a_dst: &a_dst,
            a_src: &a_src,
            z_src: &z_src,
            grad_out: &per_row,
            out: &per_row,
        };
        let grads = BlockGrads {
            grad_z_src: &mut gz,
            grad_a_src: &mut gas,
            grad_a_dst: &mut gad,
        };
        (aggregate_bwd(inputs, heads, grads, Write::Overwrite), gz)
    };
    for (broken, in_softmax) in &faults {
        let b = broken.as_ref();
        let nnz = b.nnz();
        let named = |result: crate::Result<()>, kernel: &str, src: usize| {
            let Error::InvalidInput(want) = b.validate(kernel, src, false).unwrap_err() else {
                panic!("not invalid input");
            };
            let Error::InvalidInput(got) = result.unwrap_err() else {
                panic!("not invalid input");
            };
            assert_eq!(got, want, "{kernel}");
        };
        let mut scores = vec![0.0f32; nnz * h];
        named(
            edge_scores(b, &a_dst, &a_src, h, &mut scores),
            "gat::edge_scores",
            src_rows,
        );
        named(
            dropout_edges(b, h, keys, keys, src_rows, 1 << 20, &dropout, &mut scores),
            "gat::dropout_edges",
            src_rows,
        );
        // With dropout 0 no task reads the rows; the block is checked whole.
        named(
            dropout_edges(b, h, keys, keys, src_rows, 1 << 20, &identity, &mut scores),
            "gat::dropout_edges",
            src_rows,
        );
        let mut out = vec![0.0f32; rows * d];
        named(
            aggregate(b, &scores, &z_src, heads, Init::Zero, &mut out),
            "gat::aggregate",
            src_rows,
        );
        named(backward(b, &scores).0, "gat::aggregate_bwd", src_rows);
        // Edge softmax, the broken block second of two.
        let mut first = vec![0.0f32; block.as_ref().nnz() * h];
        let result = edge_softmax(&[block.as_ref(), b], h, &mut [&mut first, &mut scores]);
        match in_softmax {
            true => named(result, "gat::edge_softmax", usize::MAX),
            false => result.unwrap(),
        }
    }
    // The block as made is sound in every kernel.
    let b = block.as_ref();
    let mut scores = vec![0.0f32; b.nnz() * h];
    edge_scores(b, &a_dst, &a_src, h, &mut scores).unwrap();
    edge_softmax(&[b], h, &mut [&mut scores]).unwrap();
    dropout_edges(b, h, keys, keys, src_rows, 1 << 20, &dropout, &mut scores).unwrap();
    let mut out = vec![0.0f32; rows * d];
    aggregate(b, &scores, &z_src, heads, Init::Zero, &mut out).unwrap();
    let (result, gz) = backward(b, &scores);
    result.unwrap();
    assert!(gz.iter().any(|&g| g != 0.0));
}
