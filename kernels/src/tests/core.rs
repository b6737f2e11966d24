//! SpMM, dense, activation, loss and Adam.

use super::*;
use crate::activation::*;
use crate::dense::*;
use crate::dropout::{Dropout, MaskBits, RowKeys};
use crate::isa::Isa;
use crate::loss::*;
use crate::optim::Adam;
use crate::sparse::*;
use crate::sparse::{gather, scatter_pair, Masking, ScatterOut};
use crate::{reference as reference64, Error, Init, Write, REDUCE_GROUP, REDUCE_ROWS};

/// Sizes that cross the chunk boundaries: rows over `ROW_CHUNK`, source
/// rows over `SCATTER_MIN_ROWS`, reductions over `REDUCE_ROWS`.
const BIG_ROWS: usize = 9000;

#[test]
fn spmm_matches_reference_and_accumulates() {
    let mut rng = Rng::new(1);
    for (rows, src_rows, width) in [(600, 700, 5), (1, 3, 1), (300, 1, 16), (0, 4, 3)] {
        let block = random_block(&mut rng, rows, src_rows, 4);
        let src = rng.vec(src_rows * width);
        let init = rng.vec(rows * width);
        let expect = reference64::spmm(block.as_ref(), &to64(&src), width);

        let mut out = vec![f32::NAN; rows * width];
        spmm(block.as_ref(), &src, width, Init::Zero, &mut out).unwrap();
        assert_close("spmm", &out, &expect, 1e-5);

        spmm(block.as_ref(), &src, width, Init::From(&init), &mut out).unwrap();
        let with_init: Vec<f64> = expect
            .iter()
            .zip(&init)
            .map(|(e, &i)| e + i as f64)
            .collect();
        assert_close("spmm init", &out, &with_init, 1e-5);

        let mut acc = init.clone();
        spmm(block.as_ref(), &src, width, Init::Out, &mut acc).unwrap();
        assert_eq!(acc, out, "Init::Out equals Init::From");
    }
}

#[test]
fn spmm_dropout_matches_dropped_input() {
    let mut rng = Rng::new(2);
    let (rows, src_rows, width) = (500, 400, 7);
    let block = random_block(&mut rng, rows, src_rows, 5);
    let src = rng.vec(src_rows * width);
    let d = Dropout::new(0.4, 99, 3).unwrap();
    let row0 = 1234;
    let dropped = reference64::dropout(&to64(&src), width, row0, &d);
    let expect = reference64::spmm(block.as_ref(), &dropped, width);
    let mut out = vec![0.0; rows * width];
    spmm_dropout(block.as_ref(), &src, width, Init::Zero, &mut out, &d, row0).unwrap();
    assert_close("spmm_dropout", &out, &expect, 1e-5);

    // p = 0 is plain spmm, bit for bit.
    let none = Dropout::new(0.0, 99, 3).unwrap();
    spmm_dropout(
        block.as_ref(),
        &src,
        width,
        Init::Zero,
        &mut out,
        &none,
        row0,
    )
    .unwrap();
    let mut plain = vec![0.0; rows * width];
    spmm(block.as_ref(), &src, width, Init::Zero, &mut plain).unwrap();
    assert_eq!(out, plain);
}

/// Asserts that `a` and `b` hold the same bits, naming the first element
/// that differs.
#[track_caller]
fn assert_same_bits(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!("{what}: element {i} is {:?}, expected {:?}", a[i], b[i]);
    }
}

/// The old formulation: each edge hashes its source row's mask again and
/// adds `w · (x · m)` in CSR order.
fn spmm_dropout_old(
    block: &Block,
    src: &[f32],
    width: usize,
    init: &[f32],
    d: &Dropout,
    src_row0: u64,
) -> Vec<f32> {
    let mut out = init.to_vec();
    for r in 0..block.as_ref().rows() {
        let out_row = &mut out[r * width..(r + 1) * width];
        for e in block.as_ref().edges(r) {
            let (c, w) = (block.columns[e] as usize, block.weights[e]);
            for (f, o) in out_row.iter_mut().enumerate() {
                let m = d.value((src_row0 + c as u64) * width as u64 + f as u64);
                *o += w * (src[c * width + f] * m);
            }
        }
    }
    out
}

/// `values[i]` into `src[i * stride]`, those that fit: the special values
/// a gather must carry through as the reference does.
fn set_special(src: &mut [f32], values: &[f32], stride: usize) {
    for (i, &special) in values.iter().enumerate() {
        if let Some(x) = src.get_mut(i * stride) {
            *x = special;
        }
    }
}

#[test]
fn spmm_dropout_equals_the_per_edge_formulation_bit_for_bit() {
    let mut rng = Rng::new(21);
    // Widths around the 8-lane blocks and 64-bit words; edges above and
    // below one per `MASK_WORKSPACE_ROWS_PER_EDGE` source rows (mask
    // workspace or per-edge masks), and between that and one a row, and
    // at most `USED_ROWS_EDGES_PER_ROW` a row (the workspace of the rows
    // read alone); signed zeros, infinities and NaN in `src` (a dropped
    // NaN stays NaN).
    for (rows, src_rows, width, degree) in [
        (600, 700, 128, 4),
        (200, 300, 72, 2),
        (300, 257, 7, 3),
        (300, 40, 64, 2),
        (257, 30, 72, 5),
        (20, 500, 130, 2),
        (50, 500, 130, 2),
        (9, 5, 1, 3),
        (700, 3, 17, 1),
    ] {
        let block = random_block(&mut rng, rows, src_rows, degree);
        let mut src = rng.vec(src_rows * width);
        set_special(
            &mut src,
            &[-0.0, 0.0, f32::INFINITY, f32::NAN, -f32::INFINITY],
            11,
        );
        let init = rng
            .vec(rows * width)
            .iter()
            .map(|x| -x * 0.0)
            .collect::<Vec<_>>();
        for (p, row0) in [(0.5, 0u64), (0.3, 1234), (0.9, 3)] {
            let d = Dropout::new(p, 5, 7).unwrap();
            let expect = spmm_dropout_old(&block, &src, width, &init, &d, row0);
            let mut out = vec![0.0; rows * width];
            spmm_dropout(
                block.as_ref(),
                &src,
                width,
                Init::From(&init),
                &mut out,
                &d,
                row0,
            )
            .unwrap();
            assert_same_bits(&format!("{rows}x{width} p {p}"), &out, &expect);
            spmm_dropout_per_edge(
                block.as_ref(),
                &src,
                width,
                Init::From(&init),
                &mut out,
                &d,
                row0,
            )
            .unwrap();
            assert_same_bits(&format!("per edge {rows}x{width} p {p}"), &out, &expect);
            // The mask workspace on every instruction set this CPU has,
            // whatever the edge count.
            let mask = d.mask();
            // The workspace of every row, and of the rows the edges read.
            let mut read = vec![false; src_rows];
            for &c in &block.columns {
                read[c as usize] = true;
            }
            for (isa, used) in Isa::available()
                .into_iter()
                .flat_map(|isa| [(isa, None), (isa, Some(&read))])
            {
                let used = used.map(Vec::as_slice);
                let keep = MaskBits::new(&mask, row0.into(), src_rows, width, isa, used);
                let masking = Masking::Bits(&keep, mask.scale, isa);
                assert!(gather(
                    block.as_ref(),
                    &src,
                    width,
                    Init::From(&init),
                    &mut out,
                    masking,
                ));
                let what = match used {
                    Some(_) => "the rows read",
                    None => "every row",
                };
                assert_same_bits(
                    &format!("{isa:?} {rows}x{width} p {p}, {what}"),
                    &out,
                    &expect,
                );
            }
        }
    }
}

#[test]
fn spmm_t_matches_reference_and_is_the_adjoint() {
    let mut rng = Rng::new(3);
    for (rows, src_rows, width) in [(700, 600, 4), (2, 1, 1), (0, 5, 2), (5, 0, 2)] {
        let block = random_block(&mut rng, rows, src_rows, 4);
        let grad = rng.vec(rows * width);
        let init = rng.vec(src_rows * width);
        let expect = reference64::spmm_t(block.as_ref(), &to64(&grad), width, src_rows);
        let mut out = vec![f32::NAN; src_rows * width];
        spmm_t(block.as_ref(), &grad, width, Init::Zero, &mut out).unwrap();
        assert_close("spmm_t", &out, &expect, 1e-5);
        let mut acc = init.clone();
        spmm_t(block.as_ref(), &grad, width, Init::Out, &mut acc).unwrap();
        let with_init: Vec<f64> = expect
            .iter()
            .zip(&init)
            .map(|(e, &i)| e + i as f64)
            .collect();
        assert_close("spmm_t accumulate", &acc, &with_init, 1e-5);

        // ⟨A x, g⟩ = ⟨x, Aᵀ g⟩ in the reference.
        let x: Vec<f64> = to64(&rng.vec(src_rows * width));
        let ax = reference64::spmm(block.as_ref(), &x, width);
        let lhs = dot(&ax, &to64(&grad));
        let rhs = dot(&x, &expect);
        assert!(
            (lhs - rhs).abs() < 1e-9 * (1.0 + lhs.abs()),
            "{lhs} vs {rhs}"
        );
    }
}

/// `block` with its weights replaced by `weighting`'s scales, and the
/// same block with those weights expanded per edge.
fn scaled_and_expanded(
    rng: &mut Rng,
    block: &Block,
    src_rows: usize,
    weighting: crate::Weighting,
) -> (Block, Block) {
    let rows = block.as_ref().rows();
    let mut scaled = block.clone();
    scaled.weighting = weighting;
    scaled.weights = (0..weighting.len(rows, src_rows, block.columns.len()))
        .map(|_| 0.25 + rng.unit() as f32)
        .collect();
    let mut expanded = block.clone();
    expanded.weights = (0..rows)
        .flat_map(|r| block.as_ref().edges(r))
        .map(|e| {
            let r = block.row_start.partition_point(|&s| s as usize <= e) - 1;
            scaled.as_ref().weight(r, e)
        })
        .collect();
    (scaled, expanded)
}

#[test]
fn scaled_weights_equal_their_per_edge_expansion_bit_for_bit() {
    use crate::Weighting;
    let mut rng = Rng::new(31);
    let d = Dropout {
        p: 0.4,
        seed: 3,
        stream: 9,
    };
    // Masks as keep bits, and per edge (fewer edges than source rows).
    let shapes = [
        (600, 700, 5),
        (300, 1, 16),
        (0, 4, 3),
        (BIG_ROWS, 40, 3),
        (20, 500, 8),
    ];
    for (rows, src_rows, width) in shapes {
        let block = random_block(&mut rng, rows, src_rows, 3);
        let src = rng.vec(src_rows * width);
        let grad = rng.vec(rows * width);
        for weighting in [Weighting::Row, Weighting::RowColumn, Weighting::Unit] {
            let (scaled, expanded) = scaled_and_expanded(&mut rng, &block, src_rows, weighting);
            if weighting == Weighting::Unit {
                assert!(scaled.weights.is_empty() && expanded.weights.iter().all(|&w| w == 1.0));
            }
            let what = format!("{weighting:?} {rows}x{src_rows}x{width}");
            let run = |b: &Block| {
                let mut out = vec![f32::NAN; rows * width];
                spmm(b.as_ref(), &src, width, Init::Zero, &mut out).unwrap();
                let mut dropped = vec![f32::NAN; rows * width];
                spmm_dropout(b.as_ref(), &src, width, Init::Zero, &mut dropped, &d, 7u64).unwrap();
                let mut back = vec![f32::NAN; src_rows * width];
                spmm_t(b.as_ref(), &grad, width, Init::Zero, &mut back).unwrap();
                (out, dropped, back)
            };
            let (a, b) = (run(&scaled), run(&expanded));
            assert_same_bits(&format!("spmm {what}"), &a.0, &b.0);
            assert_same_bits(&format!("spmm_dropout {what}"), &a.1, &b.1);
            assert_same_bits(&format!("spmm_t {what}"), &a.2, &b.2);
            let expect = reference64::spmm(scaled.as_ref(), &to64(&src), width);
            assert_close(&format!("spmm reference {what}"), &a.0, &expect, 1e-5);
            // Each layout checks its length.
            let mut broken = scaled.clone();
            broken.weights.push(1.0);
            let mut out = vec![0.0; rows * width];
            let e = spmm(broken.as_ref(), &src, width, Init::Zero, &mut out).unwrap_err();
            assert!(e.to_string().contains("`weights` has"), "{e}");
        }
    }
}

/// The plain gather gives the same bits on every instruction set this
/// CPU has: each weighting, each start (zero, a copy, the output as it
/// is), widths around the vector lanes, and special values in `src`.
#[test]
fn the_gather_gives_the_same_bits_on_every_instruction_set() {
    use crate::sparse::gather_on;
    use crate::Weighting;
    let mut rng = Rng::new(43);
    for (rows, src_rows, width, degree) in [
        (600, 700, 128, 4),
        (300, 257, 16, 3),
        (257, 30, 17, 5),
        (70, 90, 1, 2),
        (20, 500, 130, 2),
        (513, 64, 7, 1),
    ] {
        let block = random_block(&mut rng, rows, src_rows, degree);
        let mut src = rng.vec(src_rows * width);
        set_special(&mut src, &[-0.0, f32::INFINITY, f32::NAN, 1e-40], 13);
        let init = rng.vec(rows * width);
        for weighting in [
            Weighting::PerEdge,
            Weighting::Row,
            Weighting::RowColumn,
            Weighting::Unit,
        ] {
            let scaled = match weighting {
                Weighting::PerEdge => block.clone(),
                w => scaled_and_expanded(&mut rng, &block, src_rows, w).0,
            };
            let run = |isa: Isa, start: u8| {
                let mut out = match start {
                    2 => init.clone(),
                    _ => vec![f32::NAN; rows * width],
                };
                let init = match start {
                    0 => Init::Zero,
                    1 => Init::From(&init),
                    _ => Init::Out,
                };
                let b = scaled.as_ref();
                assert!(gather_on(
                    isa,
                    b,
                    &src,
                    width,
                    init,
                    &mut out,
                    Masking::None
                ));
                out
            };
            for start in 0..3 {
                let expect = run(Isa::Generic, start);
                if start == 0 {
                    let reference = reference64::spmm(scaled.as_ref(), &to64(&src), width);
                    let finite: Vec<usize> = (0..expect.len())
                        .filter(|&k| reference[k].is_finite())
                        .collect();
                    let got: Vec<f32> = finite.iter().map(|&k| expect[k]).collect();
                    let want: Vec<f64> = finite.iter().map(|&k| reference[k]).collect();
                    assert_close(&format!("{weighting:?} {width}"), &got, &want, 1e-5);
                }
                for isa in Isa::available() {
                    let what = format!("{isa:?} {weighting:?} {rows}x{src_rows}x{width} {start}");
                    assert_same_bits(&what, &run(isa, start), &expect);
                }
            }
            // The mask made per edge, on every build, as the generic one.
            let d = Dropout::new(0.4, 5, 7).unwrap();
            let masked = |isa: Isa| {
                let mut out = vec![f32::NAN; rows * width];
                let m = crate::sparse::MaskedSrc {
                    mask: d.mask(),
                    src_keys: RowKeys::Contiguous(11),
                    isa,
                };
                let b = scaled.as_ref();
                assert!(gather_on(
                    isa,
                    b,
                    &src,
                    width,
                    Init::Zero,
                    &mut out,
                    Masking::PerEdge(m),
                ));
                out
            };
            let expect = masked(Isa::Generic);
            for isa in Isa::available() {
                let what = format!("per edge {isa:?} {weighting:?} {rows}x{src_rows}x{width}");
                assert_same_bits(&what, &masked(isa), &expect);
            }
        }
    }
}

/// The gather over a block's transpose is the scatter over the block,
/// bit for bit, with every weighting and with an initial sum.
#[test]
fn the_gather_over_a_transpose_is_the_transposed_scatter() {
    use crate::Weighting;
    let mut rng = Rng::new(41);
    for (rows, src_rows, width) in [
        (600, 700, 5),
        (300, 1, 16),
        (0, 4, 3),
        (20, 500, 8),
        (3, 0, 2),
    ] {
        let block = random_block(&mut rng, rows, src_rows, 3);
        let grad = rng.vec(rows * width);
        let init = rng.vec(src_rows * width);
        for weighting in [
            Weighting::PerEdge,
            Weighting::Row,
            Weighting::RowColumn,
            Weighting::Unit,
        ] {
            let scaled = match weighting {
                Weighting::PerEdge => block.clone(),
                w => scaled_and_expanded(&mut rng, &block, src_rows, w).0,
            };
            let what = format!("{weighting:?} {rows}x{src_rows}x{width}");
            let t = scaled.as_ref().transpose(src_rows).unwrap();
            assert_eq!(t.as_ref().rows(), src_rows, "{what}");
            t.as_ref().validate("test", rows, true).unwrap();
            // Transposing twice gives the block back with each row's
            // columns in ascending order.
            let back = t.as_ref().transpose(rows).unwrap();
            let mut sorted = scaled.clone();
            for r in 0..rows {
                let edges = sorted.row_start[r] as usize..sorted.row_start[r + 1] as usize;
                sorted.columns[edges].sort_unstable();
            }
            assert!(
                back.row_start == sorted.row_start && back.columns == sorted.columns,
                "{what}"
            );
            for init in [Init::Zero, Init::From(&init)] {
                let mut scattered = vec![f32::NAN; src_rows * width];
                spmm_t(scaled.as_ref(), &grad, width, init, &mut scattered).unwrap();
                let mut gathered = vec![f32::NAN; src_rows * width];
                spmm(t.as_ref(), &grad, width, init, &mut gathered).unwrap();
                assert_same_bits(&what, &gathered, &scattered);
            }
        }
    }
    // A block that does not fit its source rows is refused, not cut.
    let block = random_block(&mut rng, 10, 8, 3);
    let e = block.as_ref().transpose(4).unwrap_err();
    assert!(e.to_string().contains("transpose"), "{e}");
}

#[test]
fn block_with_no_edges_gives_init() {
    let block = crate::Block {
        row_start: vec![0; 4],
        ..Default::default()
    };
    let src = vec![1.0; 6];
    let init = vec![2.0; 6];
    let mut out = vec![0.0; 6];
    spmm(block.as_ref(), &src, 2, Init::From(&init), &mut out).unwrap();
    assert_eq!(out, init);
    let mut back = vec![5.0; 6];
    spmm_t(block.as_ref(), &init, 2, Init::Zero, &mut back).unwrap();
    assert_eq!(back, vec![0.0; 6]);
}

#[test]
fn bad_shapes_are_errors() {
    let mut rng = Rng::new(4);
    let block = random_block(&mut rng, 10, 5, 3);
    let src = vec![0.0; 5 * 3];
    let mut out = vec![0.0; 10 * 3];
    let err = |r: crate::Result<()>| matches!(r, Err(Error::InvalidInput(_)));
    // Source partition too small for the columns.
    assert!(err(spmm(
        block.as_ref(),
        &src[..6],
        3,
        Init::Zero,
        &mut out
    )));
    assert!(err(spmm(
        block.as_ref(),
        &src,
        3,
        Init::Zero,
        &mut out[..3]
    )));
    assert!(err(spmm(block.as_ref(), &src, 0, Init::Zero, &mut out)));
    assert!(err(spmm(
        block.as_ref(),
        &src,
        3,
        Init::From(&src),
        &mut out
    )));
    let mut broken = block.clone();
    broken.row_start[3] = 1000;
    assert!(err(spmm(broken.as_ref(), &src, 3, Init::Zero, &mut out)));
    broken = block.clone();
    broken.weights.pop();
    assert!(err(spmm(broken.as_ref(), &src, 3, Init::Zero, &mut out)));
    let mut back = vec![0.0; 4 * 3];
    assert!(err(spmm_t(block.as_ref(), &out, 3, Init::Zero, &mut back)));
    let w = vec![0.0; 3 * 2 + 2];
    let mut z = vec![0.0; 10 * 2];
    assert!(err(linear(&[&out], 10, 3, &w[1..], 2, &mut z)));
    assert!(err(linear(&[&out, &out], 10, 3, &w, 2, &mut z)));
    assert!(err(relu_dropout(&out, &mut z, 3, 0, None)));
}

#[test]
fn a_fault_in_any_task_s_rows_is_named_by_every_gather() {
    // Rows of several tasks (`ROW_CHUNK` each): offsets that fall in the
    // last task's rows, in a middle one's, across the boundary of two
    // tasks, and past the edges in a middle task; a column past the
    // source rows in the first task's. Each is named as the whole
    // block's check names it, by the plain gather, the masked one and the
    // one masked per edge. The source rows take each path of the masked
    // gather: its keep bits of every row (40 rows), of the rows read
    // (1,000: the byte marks skip a column out of range) and per edge
    // (20,000).
    let chunk = crate::ROW_CHUNK;
    let rows = 3 * chunk + 5;
    let d = Dropout::new(0.3, 1, 2).unwrap();
    for src_rows in [40, 1000, 20_000] {
        let mut rng = Rng::new(12);
        let block = random_block(&mut rng, rows, src_rows, 2);
        let src = vec![1.0; src_rows * 2];
        let mut faults = Vec::new();
        for r in [3 * chunk + 1, chunk + 7] {
            let mut broken = block.clone();
            broken.row_start[r] = broken.row_start[r + 1] + 1;
            faults.push(broken);
        }
        let mut broken = block.clone();
        broken.row_start[chunk] = broken.row_start[chunk - 1] - 1;
        faults.push(broken);
        let mut broken = block.clone();
        broken.row_start[2 * chunk + 3] = broken.columns.len() as u64 + 5;
        faults.push(broken);
        let mut broken = block.clone();
        broken.columns[0] = src_rows as u32;
        faults.push(broken);
        for broken in &faults {
            let expect = broken.as_ref().validate("k", src_rows, true).unwrap_err();
            let named = |e: Error, kernel: &str| {
                let (Error::InvalidInput(m), Error::InvalidInput(want)) = (e, &expect) else {
                    panic!("not invalid input");
                };
                assert_eq!(m, want.replacen("k:", &format!("{kernel}:"), 1));
            };
            let mut out = vec![0.0; rows * 2];
            let b = broken.as_ref();
            named(spmm(b, &src, 2, Init::Zero, &mut out).unwrap_err(), "spmm");
            named(
                spmm_dropout(b, &src, 2, Init::Zero, &mut out, &d, 0u64).unwrap_err(),
                "spmm_dropout",
            );
            named(
                spmm_dropout_per_edge(b, &src, 2, Init::Zero, &mut out, &d, 0u64).unwrap_err(),
                "spmm_dropout_per_edge",
            );
        }
        // The block as made is sound on every path.
        let mut out = vec![0.0; rows * 2];
        spmm(block.as_ref(), &src, 2, Init::Zero, &mut out).unwrap();
        spmm_dropout(block.as_ref(), &src, 2, Init::Zero, &mut out, &d, 0u64).unwrap();
    }
    // A fall together with a wrong end is named as before: the fall.
    let mut rng = Rng::new(13);
    let mut broken = random_block(&mut rng, rows, 40, 2);
    broken.row_start[5] = broken.row_start[6] + 1;
    broken.columns.pop();
    let mut out = vec![0.0; rows * 2];
    let Error::InvalidInput(m) =
        spmm(broken.as_ref(), &vec![1.0; 80], 2, Init::Zero, &mut out).unwrap_err()
    else {
        panic!("not invalid input");
    };
    assert!(
        m.starts_with("spmm: block `row_start` decreases at row 5"),
        "{m}"
    );
}

#[test]
fn a_broken_block_is_named_where_it_breaks() {
    let mut rng = Rng::new(4);
    let block = random_block(&mut rng, 10, 5, 3);
    let src = vec![0.0; 5 * 3];
    let mut out = vec![0.0; 10 * 3];
    let mut message =
        |block: &crate::Block| match spmm(block.as_ref(), &src, 3, Init::Zero, &mut out) {
            Err(Error::InvalidInput(m)) => m,
            other => panic!("expected an error, got {other:?}"),
        };
    let mut broken = block.clone();
    broken.row_start[3] = broken.row_start[4] + 1;
    let (at, next) = (broken.row_start[3], broken.row_start[4]);
    assert_eq!(
        message(&broken),
        format!("spmm: block `row_start` decreases at row 3 ({at} > {next})")
    );
    broken = block.clone();
    let last = broken.columns.len() - 1;
    broken.columns[last] = 7;
    assert_eq!(
        message(&broken),
        "spmm: block column 7 is out of range for 5 source rows"
    );
}

#[test]
fn linear_matches_reference() {
    let mut rng = Rng::new(5);
    // Wide inputs take fewer rows a task and split the weight gradient's
    // features over tasks; many rows sum several partials.
    let shapes = [
        (1, 300, 7, 5),
        (2, 257, 4, 3),
        (1, 0, 3, 2),
        (2, 1, 1, 1),
        (2, 300, 300, 5),
        (1, BIG_ROWS, 3, 2),
        // Rows 4 KiB apart: the weight gradient packs its columns, in
        // blocks of 256 rows and a short one.
        (2, 600, 1024, 3),
    ];
    for (inputs, rows, d_in, d_out) in shapes {
        // The forward of two inputs of 1,024 sums 2,048 products in f32.
        let tol = if d_in >= 1024 { 1e-4 } else { 1e-5 };
        let xs: Vec<Vec<f32>> = (0..inputs).map(|_| rng.vec(rows * d_in)).collect();
        let x_refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let w = rng.vec(linear_weight_len(inputs, d_in, d_out));
        let mut z = vec![f32::NAN; rows * d_out];
        linear(&x_refs, rows, d_in, &w, d_out, &mut z).unwrap();
        let xs64: Vec<Vec<f64>> = xs.iter().map(|x| to64(x)).collect();
        let x64_refs: Vec<&[f64]> = xs64.iter().map(Vec::as_slice).collect();
        let expect = reference64::linear(&x64_refs, rows, d_in, &to64(&w), d_out, true);
        assert_close("linear", &z, &expect, tol);

        let dz = rng.vec(rows * d_out);
        let mut dw = vec![f32::NAN; w.len()];
        let mut dx_store: Vec<Vec<f32>> =
            (0..inputs).map(|_| vec![f32::NAN; rows * d_in]).collect();
        let mut dx: Vec<Option<&mut [f32]>> = dx_store
            .iter_mut()
            .map(|v| Some(v.as_mut_slice()))
            .collect();
        linear_bwd(
            &dz,
            &x_refs,
            rows,
            d_in,
            &w,
            d_out,
            &mut dw,
            &mut dx,
            Write::Overwrite,
        )
        .unwrap();
        let (dw64, dx64) =
            reference64::linear_bwd(&to64(&dz), &x64_refs, rows, d_in, &to64(&w), d_out, true);
        assert_close("linear_bwd dw", &dw, &dw64, 1e-5);
        for k in 0..inputs {
            assert_close("linear_bwd dx", &dx_store[k], &dx64[k], 1e-5);
        }

        // Accumulate adds to what is there; a missing dx is skipped.
        let mut dw2 = dw.clone();
        let mut only_first: Vec<Option<&mut [f32]>> = vec![None];
        linear_bwd(
            &dz,
            &x_refs,
            rows,
            d_in,
            &w,
            d_out,
            &mut dw2,
            &mut only_first,
            Write::Accumulate,
        )
        .unwrap();
        // Twice the sums, twice their rounding.
        let twice: Vec<f64> = dw64.iter().map(|v| 2.0 * v).collect();
        assert_close("linear_bwd accumulate", &dw2, &twice, 2e-5);
    }
}

#[test]
fn matmul_rows_dropped_is_matmul_rows_on_the_dropped_input() {
    let mut rng = Rng::new(61);
    let ids: Vec<u64> = (0..BIG_ROWS as u64).map(|r| r * 3 + 7).collect();
    let shapes = [
        (677, 300, 5, false),
        // Wide rows: slabs of `DROPPED_SLAB_ROWS`, several a lane.
        (1200, 600, 3, true),
        (BIG_ROWS, 70, 3, true),
        // More chunks than a group holds (`REDUCE_GROUP / DROPPED_LANES`).
        (9 * REDUCE_ROWS + 100, 3, 2, false),
        (5, 1, 1, true),
        (0, 4, 2, false),
    ];
    let d = Dropout::new(0.4, 99, 3).unwrap();
    for (rows, d_in, d_out, renumbered) in shapes {
        let keys = match renumbered {
            false => RowKeys::Contiguous(1234),
            true => RowKeys::Ids(&ids[..rows]),
        };
        let what = format!("{rows} x {d_in} -> {d_out}, renumbered {renumbered}");
        let x = rng.vec(rows * d_in);
        let w = rng.vec(d_in * d_out);
        let dz = rng.vec(rows * d_out);
        let dropped64: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let (r, f) = (i / d_in, (i % d_in) as u64);
                v as f64 * d.value(keys.key(r) * d_in as u64 + f) as f64
            })
            .collect();

        let mut z = vec![f32::NAN; rows * d_out];
        matmul_rows_dropped(&x, rows, d_in, &w, d_out, &mut z, keys, &d).unwrap();
        let expect = reference64::linear(&[&dropped64], rows, d_in, &to64(&w), d_out, false);
        assert_close(&what, &z, &expect, 1e-5);
        // The products of the dropped copy's, bit for bit.
        let mut dropped = vec![0.0; x.len()];
        dropout_into(&x, &mut dropped, d_in, keys, &d).unwrap();
        let mut plain = vec![0.0; rows * d_out];
        matmul_rows(&dropped, rows, d_in, &w, d_out, &mut plain).unwrap();
        assert_same_bits(&what, &z, &plain);

        let mut dw = vec![f32::NAN; d_in * d_out];
        let dropped_bwd = |dw: &mut [f32], d: &Dropout, write| {
            matmul_rows_dropped_bwd(&dz, &x, rows, d_in, d_out, dw, keys, d, write).unwrap()
        };
        dropped_bwd(&mut dw, &d, Write::Overwrite);
        let (dw64, _) = reference64::linear_bwd(
            &to64(&dz),
            &[&dropped64],
            rows,
            d_in,
            &to64(&w),
            d_out,
            false,
        );
        // A weight of 9,000 rows sums 9,000 products in f32.
        let tol = if rows > 1000 { 1e-4 } else { 1e-5 };
        assert_close(&what, &dw, &dw64, tol);
        dropped_bwd(&mut dw, &d, Write::Accumulate);
        let twice: Vec<f64> = dw64.iter().map(|v| 2.0 * v).collect();
        assert_close(&what, &dw, &twice, tol);
        same_bits_across_threads(&what, || {
            let mut dw = vec![0.0; d_in * d_out];
            dropped_bwd(&mut dw, &d, Write::Overwrite);
            dw
        });

        // Without dropout: the plain products.
        let none = Dropout::new(0.0, 99, 3).unwrap();
        matmul_rows_dropped(&x, rows, d_in, &w, d_out, &mut z, keys, &none).unwrap();
        matmul_rows(&x, rows, d_in, &w, d_out, &mut plain).unwrap();
        assert_same_bits(&what, &z, &plain);
        dropped_bwd(&mut dw, &none, Write::Overwrite);
        let mut plain_dw = vec![0.0; dw.len()];
        let write = Write::Overwrite;
        matmul_rows_bwd(&dz, &x, rows, d_in, &w, d_out, &mut plain_dw, None, write).unwrap();
        assert_same_bits(&what, &dw, &plain_dw);
    }
    // Too few row keys.
    let (x, w) = (rng.vec(4 * 2), rng.vec(2 * 2));
    let short = RowKeys::Ids(&ids[..3]);
    let mut z = vec![0.0; 4 * 2];
    assert!(matmul_rows_dropped(&x, 4, 2, &w, 2, &mut z, short, &d).is_err());
    let mut dw = vec![0.0; 4];
    let dz = rng.vec(4 * 2);
    let write = Write::Overwrite;
    assert!(matmul_rows_dropped_bwd(&dz, &x, 4, 2, 2, &mut dw, short, &d, write).is_err());
}

/// `acc` plus `partial(c)` for each chunk `c` of `chunks`, added in order.
fn add_in_chunk_order(
    mut acc: Vec<f32>,
    chunks: std::ops::Range<usize>,
    partial: impl Fn(usize) -> Vec<f32>,
) -> Vec<f32> {
    for c in chunks {
        acc.iter_mut().zip(partial(c)).for_each(|(a, v)| *a += v);
    }
    acc
}

/// `x[r0..r0 + n]ᵀ · dz[r0..r0 + n]` as one sequential faer product: a
/// weight gradient's partial over those rows (`d_in` at most one task's
/// rows).
fn weight_grad_gemm(
    dz: &[f32],
    x: &[f32],
    (r0, n): (usize, usize),
    d_in: usize,
    d_out: usize,
) -> Vec<f32> {
    use faer::linalg::matmul::matmul;
    use faer::{Accum, MatMut, MatRef, Par};
    let mut p = vec![0.0f32; d_in * d_out];
    let x = MatRef::from_row_major_slice(&x[r0 * d_in..][..n * d_in], n, d_in);
    let g = MatRef::from_row_major_slice(&dz[r0 * d_out..][..n * d_out], n, d_out);
    let o = MatMut::from_row_major_slice_mut(&mut p, d_in, d_out);
    matmul(o, Accum::Replace, x.transpose(), g, 1.0f32, Par::Seq);
    p
}

/// Chunk `c`'s first row and rows, of `rows`.
fn chunk_rows(c: usize, rows: usize) -> (usize, usize) {
    (c * REDUCE_ROWS, REDUCE_ROWS.min(rows - c * REDUCE_ROWS))
}

/// A reduction over more chunks than [`REDUCE_GROUP`] adds them group
/// after group: the bits of adding every chunk's partial, in order, at
/// once.
#[test]
fn reductions_past_a_group_add_every_partial_in_chunk_order() {
    let mut rng = Rng::new(62);
    let width = 3;
    let rows = (REDUCE_GROUP + 2) * REDUCE_ROWS + 5;
    let chunks = rows.div_ceil(REDUCE_ROWS);
    let x = rng.vec(rows * width);
    let partial = |c: usize| {
        let (r0, n) = chunk_rows(c, rows);
        let mut p = vec![0.0f32; width];
        for row in x[r0 * width..(r0 + n) * width].chunks_exact(width) {
            for (o, &v) in p.iter_mut().zip(row) {
                *o += v;
            }
        }
        p
    };
    let expect = add_in_chunk_order(partial(0), 1..chunks, partial);
    let sums = same_bits_across_threads("column_sums past a group", || {
        let mut s = vec![f32::NAN; width];
        column_sums(&x, width, &mut s, Write::Overwrite).unwrap();
        s
    });
    assert_same_bits("column_sums past a group", &sums, &expect);
    // Accumulating starts from what is there.
    let start = [1.0f32, -2.0, 0.5];
    let mut s = start.to_vec();
    column_sums(&x, width, &mut s, Write::Accumulate).unwrap();
    let expect = add_in_chunk_order(start.to_vec(), 0..chunks, partial);
    assert_same_bits("column_sums accumulated past a group", &s, &expect);

    // The weight gradient of the same rows: within f32 of the reference,
    // and bit for bit each chunk's partial (the kernel over that chunk
    // alone) added in chunk order.
    let (d_in, d_out) = (width, 2);
    let dz = rng.vec(rows * d_out);
    let w = rng.vec(d_in * d_out);
    let write = Write::Overwrite;
    let mut dw = vec![f32::NAN; d_in * d_out];
    matmul_rows_bwd(&dz, &x, rows, d_in, &w, d_out, &mut dw, None, write).unwrap();
    let (dz64, x64, w64) = (to64(&dz), to64(&x), to64(&w));
    let (dw64, _) = reference64::linear_bwd(&dz64, &[&x64], rows, d_in, &w64, d_out, false);
    assert_close("matmul_rows_bwd past a group", &dw, &dw64, 1e-3);
    let gemm = |r0: usize, n: usize| weight_grad_gemm(&dz, &x, (r0, n), d_in, d_out);
    let partial = |c: usize| {
        let (r0, n) = chunk_rows(c, rows);
        gemm(r0, n)
    };
    let expect = add_in_chunk_order(partial(0), 1..chunks, partial);
    assert_same_bits("matmul_rows_bwd past a group", &dw, &expect);

    // Fewer than `FEW_CHUNKS` chunks: each chunk's lanes of a quarter of
    // its rows added in order onto its first, then the chunks in order;
    // the same bits whatever the threads.
    let rows = 2 * REDUCE_ROWS + 5;
    assert!(rows.div_ceil(REDUCE_ROWS) < FEW_CHUNKS);
    let (xs, dzs) = (&x[..rows * d_in], &dz[..rows * d_out]);
    let dw = same_bits_across_threads("matmul_rows_bwd in lanes", || {
        let mut dw = vec![f32::NAN; d_in * d_out];
        matmul_rows_bwd(dzs, xs, rows, d_in, &w, d_out, &mut dw, None, write).unwrap();
        dw
    });
    let lane_rows = REDUCE_ROWS / GRAD_LANES;
    let chunk = |c: usize| {
        let (r0, n) = chunk_rows(c, rows);
        let lanes = (r0..r0 + n).step_by(lane_rows);
        let mut sums = lanes.map(|l0| gemm(l0, lane_rows.min(r0 + n - l0)));
        let first = sums.next().unwrap();
        sums.fold(first, |mut acc, p| {
            acc.iter_mut().zip(p).for_each(|(a, v)| *a += v);
            acc
        })
    };
    let expect = add_in_chunk_order(chunk(0), 1..3, chunk);
    assert_same_bits("matmul_rows_bwd in lanes", &dw, &expect);
    // A gradient of more than `GRAD_LANE_MAX_VALUES` takes no lanes: one
    // partial over the chunk's 1,025 rows, as one product.
    {
        let (rows, d_in, d_out) = (1025, 128, 513);
        assert!(d_in * d_out > GRAD_LANE_MAX_VALUES);
        let (x, dz, w) = (
            rng.vec(rows * d_in),
            rng.vec(rows * d_out),
            rng.vec(d_in * d_out),
        );
        let mut dw = vec![f32::NAN; d_in * d_out];
        matmul_rows_bwd(&dz, &x, rows, d_in, &w, d_out, &mut dw, None, write).unwrap();
        let one = weight_grad_gemm(&dz, &x, (0, rows), d_in, d_out);
        assert_same_bits("matmul_rows_bwd past the lanes' bound", &dw, &one);
    }
    assert_close(
        "matmul_rows_bwd in lanes",
        &dw,
        &{
            let (dz64, x64) = (to64(dzs), to64(xs));
            reference64::linear_bwd(&dz64, &[&x64], rows, d_in, &w64, d_out, false).0
        },
        1e-4,
    );

    // The same through dropout, past its group of 8 chunks of 8 lanes.
    let rows = 9 * REDUCE_ROWS + 100;
    let (x, dz) = (&x[..rows * d_in], &dz[..rows * d_out]);
    let d = Dropout::new(0.4, 99, 3).unwrap();
    let first = 1234u64;
    let mut dw = vec![f32::NAN; d_in * d_out];
    let keys = RowKeys::Contiguous(first);
    matmul_rows_dropped_bwd(dz, x, rows, d_in, d_out, &mut dw, keys, &d, write).unwrap();
    let partial = |c: usize| {
        let (r0, n) = chunk_rows(c, rows);
        let (dz, x) = (&dz[r0 * d_out..][..n * d_out], &x[r0 * d_in..][..n * d_in]);
        let keys = RowKeys::Contiguous(first + r0 as u64);
        let mut p = vec![0.0f32; d_in * d_out];
        matmul_rows_dropped_bwd(dz, x, n, d_in, d_out, &mut p, keys, &d, write).unwrap();
        p
    };
    let expect = add_in_chunk_order(partial(0), 1..rows.div_ceil(REDUCE_ROWS), partial);
    assert_same_bits("matmul_rows_dropped_bwd past a group", &dw, &expect);
}

/// A narrow weight gradient over four lanes of rows takes its columns in
/// groups (one, or three of 1,100), in slabs of rows: within f32 of the
/// reference, the same bits whatever the threads, and added onto what is
/// there when accumulating. An input a multiple of 1,024 wide keeps its
/// packed tasks per columns.
#[test]
fn a_narrow_weight_gradient_in_slabs() {
    use crate::dense::{in_slabs, slab_columns};
    let mut rng = Rng::new(61);
    let lane_rows = REDUCE_ROWS / GRAD_LANES;
    let rows = 3 * lane_rows + 77;
    let lanes = rows.div_ceil(lane_rows);
    assert!(in_slabs(lanes, 16));
    assert!(!in_slabs(lanes, SLAB_MAX_OUTPUTS + 1));
    assert!(!in_slabs(SLAB_MIN_LANES - 1, 16));
    assert_eq!(slab_columns(lanes, 333), 333);
    assert_eq!(slab_columns(lanes, 1100), 367);
    assert_eq!(slab_columns(8, 1433), 717);
    assert_eq!(slab_columns(64, 1433), 1433);
    for (d_in, d_out) in [(333, 16), (1100, 8), (1024, 4)] {
        let (x, dz, w) = (
            rng.vec(rows * d_in),
            rng.vec(rows * d_out),
            rng.vec(d_in * d_out),
        );
        let what = format!("matmul_rows_bwd in slabs, {d_in} -> {d_out}");
        let dw = same_bits_across_threads(&what, || {
            let mut dw = vec![f32::NAN; d_in * d_out];
            let write = Write::Overwrite;
            matmul_rows_bwd(&dz, &x, rows, d_in, &w, d_out, &mut dw, None, write).unwrap();
            dw
        });
        let (dz64, x64) = (to64(&dz), to64(&x));
        let (dw64, _) =
            reference64::linear_bwd(&dz64, &[&x64], rows, d_in, &to64(&w), d_out, false);
        assert_close(&what, &dw, &dw64, 1e-4);
        let start = rng.vec(d_in * d_out);
        let mut sum = start.clone();
        let write = Write::Accumulate;
        matmul_rows_bwd(&dz, &x, rows, d_in, &w, d_out, &mut sum, None, write).unwrap();
        let expect: Vec<f64> = start
            .iter()
            .zip(&dw64)
            .map(|(&s, &g)| f64::from(s) + g)
            .collect();
        assert_close(&format!("{what}, accumulated"), &sum, &expect, 1e-4);
    }
}

#[test]
fn matmul_rows_and_bias_helpers() {
    let mut rng = Rng::new(6);
    let (rows, d_in, d_out) = (400, 6, 4);
    let x = rng.vec(rows * d_in);
    let w = rng.vec(d_in * d_out);
    let mut z = vec![0.0; rows * d_out];
    matmul_rows(&x, rows, d_in, &w, d_out, &mut z).unwrap();
    let x64 = to64(&x);
    assert_close(
        "matmul_rows",
        &z,
        &reference64::linear(&[&x64], rows, d_in, &to64(&w), d_out, false),
        1e-5,
    );
    let dz = rng.vec(rows * d_out);
    let mut dw = vec![0.0; w.len()];
    let mut dx = vec![0.0; x.len()];
    matmul_rows_bwd(
        &dz,
        &x,
        rows,
        d_in,
        &w,
        d_out,
        &mut dw,
        Some(&mut dx),
        Write::Overwrite,
    )
    .unwrap();
    let (dw64, dx64) =
        reference64::linear_bwd(&to64(&dz), &[&x64], rows, d_in, &to64(&w), d_out, false);
    assert_close("matmul_rows_bwd dw", &dw, &dw64, 1e-5);
    assert_close("matmul_rows_bwd dx", &dx, &dx64[0], 1e-5);

    let mut sums = vec![0.0; d_out];
    column_sums(&dz, d_out, &mut sums, Write::Overwrite).unwrap();
    let expect: Vec<f64> = (0..d_out)
        .map(|f| (0..rows).map(|r| dz[r * d_out + f] as f64).sum())
        .collect();
    assert_close("column_sums", &sums, &expect, 1e-5);
    let bias = rng.vec(d_out);
    let mut zb = z.clone();
    add_bias(&mut zb, d_out, &bias).unwrap();
    assert_eq!(zb[d_out + 1], z[d_out + 1] + bias[1]);

    let parts = [rng.vec(5), rng.vec(5), rng.vec(5)];
    let mut out = vec![0.0; 5];
    sum_into(&[&parts[0], &parts[1], &parts[2]], &mut out).unwrap();
    for i in 0..5 {
        assert_eq!(out[i], (parts[0][i] + parts[1][i]) + parts[2][i]);
    }
    // The running sum, each part added in turn into the sum before it,
    // is the same bits (the weight gradients' chain over partitions).
    let mut running = parts[0].clone();
    add_into(&parts[1], &mut running).unwrap();
    add_into(&parts[2], &mut running).unwrap();
    assert_eq!(running, out);
    assert!(add_into(&parts[0][..4], &mut running).is_err());
    sum_into(&[], &mut out).unwrap();
    assert_eq!(out, vec![0.0; 5]);
}

#[test]
fn reference_linear_backward_matches_finite_differences() {
    let mut rng = Rng::new(7);
    let (rows, d_in, d_out) = (3, 4, 2);
    let x1 = to64(&rng.vec(rows * d_in));
    let x2 = to64(&rng.vec(rows * d_in));
    let w = to64(&rng.vec(linear_weight_len(2, d_in, d_out)));
    let g = to64(&rng.vec(rows * d_out));
    let loss = |x1: &[f64], x2: &[f64], w: &[f64]| {
        dot(
            &reference64::linear(&[x1, x2], rows, d_in, w, d_out, true),
            &g,
        )
    };
    let (dw, dx) = reference64::linear_bwd(&g, &[&x1, &x2], rows, d_in, &w, d_out, true);
    assert_close64("dw", &dw, &numeric_grad(&w, |w| loss(&x1, &x2, w)), 1e-6);
    assert_close64(
        "dx1",
        &dx[0],
        &numeric_grad(&x1, |x| loss(x, &x2, &w)),
        1e-6,
    );
    assert_close64(
        "dx2",
        &dx[1],
        &numeric_grad(&x2, |x| loss(&x1, x, &w)),
        1e-6,
    );
}

#[test]
fn activations_match_reference_and_finite_differences() {
    // The second size spans two flat masking tasks, the first ending
    // inside a row.
    for rows in [300, 3500] {
        activations_match_reference_at(rows);
    }
}

fn activations_match_reference_at(rows: usize) {
    let mut rng = Rng::new(8);
    let (width, row0) = (5, 77);
    assert!(rows < 1000 || (rows * width > FLAT_CHUNK && !FLAT_CHUNK.is_multiple_of(width)));
    let z = rng.vec(rows * width);
    let g = rng.vec(rows * width);
    let (z64, g64) = (to64(&z), to64(&g));
    let d = Dropout::new(0.5, 5, 9).unwrap();
    for dropout in [None, Some(&d)] {
        let mut h = vec![0.0; z.len()];
        let mut dz = vec![0.0; z.len()];
        relu_dropout(&z, &mut h, width, row0, dropout).unwrap();
        assert_close(
            "relu",
            &h,
            &reference64::relu_dropout(&z64, width, row0, dropout),
            1e-6,
        );
        relu_dropout_bwd(&g, &z, width, row0, dropout, &mut dz).unwrap();
        let expect = reference64::relu_dropout_bwd(&g64, &z64, width, row0, dropout);
        assert_close("relu_bwd", &dz, &expect, 1e-6);
        elu_dropout(&z, &mut h, width, row0, dropout).unwrap();
        assert_close(
            "elu",
            &h,
            &reference64::elu_dropout(&z64, width, row0, dropout),
            1e-6,
        );
        elu_dropout_bwd(&g, &z, width, row0, dropout, &mut dz).unwrap();
        let expect = reference64::elu_dropout_bwd(&g64, &z64, width, row0, dropout);
        assert_close("elu_bwd", &dz, &expect, 1e-6);

        // Finite differences of the reference on a few rows (away from the
        // ReLU kink: random values are never within 1e-6 of 0 here).
        let small = &z64[..3 * width];
        let gs = &g64[..3 * width];
        let relu_fd = numeric_grad(small, |x| {
            dot(&reference64::relu_dropout(x, width, row0, dropout), gs)
        });
        let relu_an = reference64::relu_dropout_bwd(gs, small, width, row0, dropout);
        assert_close64("relu fd", &relu_an, &relu_fd, 1e-6);
        let elu_fd = numeric_grad(small, |x| {
            dot(&reference64::elu_dropout(x, width, row0, dropout), gs)
        });
        let elu_an = reference64::elu_dropout_bwd(gs, small, width, row0, dropout);
        assert_close64("elu fd", &elu_an, &elu_fd, 1e-6);
    }
    let mut x = z.clone();
    dropout_in_place(&mut x, width, row0, &d).unwrap();
    assert_close(
        "dropout_in_place",
        &x,
        &reference64::dropout(&z64, width, row0, &d),
        1e-6,
    );
}

/// Two outputs scattered in one walk, over more source rows than one
/// task takes (three tasks at three threads): each output row gets its
/// edges' calls in CSR order from its own starting sum, as a sequential
/// walk gives them, at one thread and at three.
#[test]
fn scatter_pair_matches_a_sequential_walk() {
    let mut rng = Rng::new(7);
    let (rows, src_rows) = (300, 2 * crate::SCATTER_MIN_ROWS + 100);
    let block = random_block(&mut rng, rows, src_rows, 6);
    let (init_a, init_b) = (rng.vec(src_rows * 3), rng.vec(src_rows * 2));
    let values = rng.vec(block.columns.len());
    let add = |e: usize, r: usize, a: &mut [f32], b: &mut [f32]| {
        for (k, x) in a.iter_mut().enumerate() {
            *x = *x * 0.5 + values[e] * (k + 1) as f32;
        }
        b[0] += values[e] - r as f32;
        b[1] += 1.0;
    };
    let mut expect_a = init_a.clone();
    let mut expect_b = init_b.clone();
    for r in 0..rows {
        for e in block.as_ref().edges(r) {
            let c = block.columns[e] as usize;
            let (a, b) = (&mut expect_a[c * 3..][..3], &mut expect_b[c * 2..][..2]);
            add(e, r, a, b);
        }
    }
    let got = same_bits_across_threads("scatter_pair", || {
        let mut a = vec![f32::NAN; src_rows * 3];
        let mut b = vec![f32::NAN; src_rows * 2];
        let first = ScatterOut {
            out: &mut a,
            width: 3,
            init: Init::From(&init_a),
        };
        let second = ScatterOut {
            out: &mut b,
            width: 2,
            init: Init::From(&init_b),
        };
        scatter_pair(block.as_ref(), src_rows, first, second, add);
        a.extend(b);
        a
    });
    expect_a.extend(expect_b);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&expect_a));
}

/// Narrow rows over several of `dropout_in_place`'s tasks, from rows that
/// start off a mask group: every element gets its own global index's
/// mask value, as one element at a time gives it.
#[test]
fn dropout_in_place_masks_narrow_rows_by_their_global_index() {
    let d = Dropout::new(0.3, 11, 2).unwrap();
    for (rows, width, row0) in [(40_000, 1, 13), (9_001, 8, 5), (7, 3, 0)] {
        let x: Vec<f32> = (0..rows * width).map(|i| 1.0 + i as f32).collect();
        let mut got = x.clone();
        dropout_in_place(&mut got, width, row0, &d).unwrap();
        for (k, (&g, &v)) in got.iter().zip(&x).enumerate() {
            let expect = v * d.value(row0 * width as u64 + k as u64);
            assert_eq!(g.to_bits(), expect.to_bits(), "{rows}x{width}, element {k}");
        }
    }
}

/// The dropped copy of rows keyed contiguously or by ids, wide (the
/// tasks end inside a row and rows start off a mask word) and narrow: the
/// bits of copying and masking in place; no dropout copies; a short
/// output is refused.
#[test]
fn dropout_into_is_a_masked_copy() {
    let d = Dropout::new(0.4, 3, 9).unwrap();
    let ids: Vec<u64> = (0..700u64).map(|r| (r * 7919) % 5003).collect();
    for (rows, width) in [(700, 1433), (700, 3)] {
        let x: Vec<f32> = (0..rows * width).map(|i| 0.5 + i as f32).collect();
        let keys = [RowKeys::Contiguous(677), RowKeys::Ids(&ids)];
        for (keys, p) in keys
            .into_iter()
            .flat_map(|k| [(k, d), (k, Dropout { p: 0.0, ..d })])
        {
            let mut expect = x.clone();
            dropout_in_place(&mut expect, width, keys, &p).unwrap();
            // Both share their tasks: each element against its own mask value.
            for (k, (&e, &v)) in expect.iter().zip(&x).enumerate() {
                let index = keys.key(k / width) * width as u64 + (k % width) as u64;
                assert_eq!(e.to_bits(), (v * p.value(index)).to_bits(), "element {k}");
            }
            let mut got = vec![f32::NAN; x.len()];
            dropout_into(&x, &mut got, width, keys, &p).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&expect),
                "{rows}x{width} {keys:?} p {}",
                p.p
            );
        }
    }
    let mut short = vec![0.0; 5];
    let err = dropout_into(&[1.0; 6], &mut short, 3, 0, &d).unwrap_err();
    assert!(err.to_string().contains("`out` has 5 values"), "{err}");
}

#[test]
fn loss_matches_reference_and_finite_differences() {
    // 6 classes: the lanes' remainder alone; 19: eight lanes twice, then
    // the remainder; 150: the accuracy's search for the largest in three
    // words of 64 values, the last part-filled.
    for classes in [6, 19, 150] {
        loss_matches_reference(classes);
    }
}

fn loss_matches_reference(classes: usize) {
    let mut rng = Rng::new(9);
    let rows = 500;
    let logits: Vec<f32> = rng.vec(rows * classes).iter().map(|v| 8.0 * v).collect();
    let labels: Vec<i64> = (0..rows)
        .map(|r| {
            if r % 7 == 0 {
                -1
            } else {
                rng.below(classes) as i64
            }
        })
        .collect();
    let mask: Vec<bool> = labels.iter().map(|&l| l >= 0 && rng.unit() < 0.6).collect();
    let norm = mask.iter().filter(|&&m| m).count();
    let l64 = to64(&logits);
    let loss = softmax_cross_entropy(&logits, rows, classes, &labels, &mask, norm).unwrap();
    let expect = reference64::softmax_cross_entropy(&l64, classes, &labels, &mask, norm);
    assert!(
        (loss - expect).abs() < 1e-6 * (1.0 + expect),
        "{loss} vs {expect}"
    );
    let mut grad = vec![f32::NAN; logits.len()];
    softmax_cross_entropy_bwd(&logits, rows, classes, &labels, &mask, norm, &mut grad).unwrap();
    let expect = reference64::softmax_cross_entropy_bwd(&l64, classes, &labels, &mask, norm);
    assert_close("ce grad", &grad, &expect, 1e-6);

    let few = 4 * classes;
    let fd = numeric_grad(&l64[..few], |x| {
        reference64::softmax_cross_entropy(x, classes, &labels, &mask, norm)
    });
    let an = reference64::softmax_cross_entropy_bwd(&l64[..few], classes, &labels, &mask, norm);
    assert_close64("ce fd", &an, &fd, 1e-6);

    // Stable for huge logits.
    let huge = vec![1e30f32, 0.0, -1e30];
    let l = softmax_cross_entropy(&huge, 1, 3, &[1], &[true], 1).unwrap();
    assert!(l.is_finite() && l > 1e29);
    let mut g = vec![0.0; 3];
    softmax_cross_entropy_bwd(&huge, 1, 3, &[0], &[true], 1, &mut g).unwrap();
    assert_eq!(g, vec![0.0, 0.0, 0.0]);

    // Two masks at once, one of them with ties (rows of equal logits),
    // where the first index wins.
    let mut tied = logits.clone();
    for r in (0..rows).step_by(5) {
        tied[r * classes..(r + 1) * classes].fill(1.0);
    }
    let rest: Vec<bool> = (0..rows).map(|r| !mask[r] && labels[r] >= 0).collect();
    let expect = |logits: &[f32], mask: &[bool]| {
        let correct = (0..rows)
            .filter(|&r| mask[r])
            .filter(|&r| {
                let row = &logits[r * classes..(r + 1) * classes];
                let best = (0..classes).fold(0, |b, c| if row[c] > row[b] { c } else { b });
                best as i64 == labels[r]
            })
            .count();
        (correct as u64, mask.iter().filter(|&&m| m).count() as u64)
    };
    for z in [&logits, &tied] {
        let counts = accuracy(z, rows, classes, &labels, &[&mask, &rest]).unwrap();
        assert_eq!(counts, vec![expect(z, &mask), expect(z, &rest)]);
    }
    assert_eq!(
        accuracy(&logits, rows, classes, &labels, &[&mask]).unwrap()[0].1 as usize,
        norm
    );
}

#[test]
fn labels_out_of_range_are_errors() {
    let logits = vec![0.0; 6];
    let mut grad = vec![0.0; 6];
    for bad in [-1, 3, i64::MAX] {
        let labels = [0, bad];
        let mask = [true, true];
        assert!(softmax_cross_entropy(&logits, 2, 3, &labels, &mask, 2).is_err());
        assert!(softmax_cross_entropy_bwd(&logits, 2, 3, &labels, &mask, 2, &mut grad).is_err());
        assert!(accuracy(&logits, 2, 3, &labels, &[&mask]).is_err());
        // Unmasked rows may hold anything.
        assert!(softmax_cross_entropy(&logits, 2, 3, &labels, &[true, false], 1).is_ok());
    }
    assert!(softmax_cross_entropy(&logits, 2, 3, &[0, 0], &[true, true], 0).is_err());
}

#[test]
fn adam_matches_reference() {
    let mut rng = Rng::new(10);
    let n = 1000;
    let adam = Adam {
        lr: 0.01,
        weight_decay: 5e-4,
        ..Adam::default()
    };
    let mut w = rng.vec(n);
    let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
    let mut w64 = to64(&w);
    let (mut m64, mut v64) = (vec![0.0; n], vec![0.0; n]);
    for t in 1..=5 {
        let g = rng.vec(n);
        adam.step(t, &mut w, &g, &mut m, &mut v).unwrap();
        reference64::adam_step(&adam, t, &mut w64, &to64(&g), &mut m64, &mut v64);
    }
    assert_close("adam w", &w, &w64, 1e-5);
    assert_close("adam m", &m, &m64, 1e-5);
    assert_close("adam v", &v, &v64, 1e-5);
    assert!(adam.step(0, &mut w, &m.clone(), &mut m, &mut v).is_err());
}

#[test]
fn kernels_are_bit_identical_across_thread_counts() {
    let mut rng = Rng::new(11);
    let width = 3;
    let block = random_block(&mut rng, BIG_ROWS, BIG_ROWS, 3);
    let src = rng.vec(BIG_ROWS * width);
    let d = Dropout::new(0.3, 1, 2).unwrap();
    same_bits_across_threads("spmm", || {
        let mut out = vec![0.0; BIG_ROWS * width];
        spmm(block.as_ref(), &src, width, Init::Zero, &mut out).unwrap();
        out
    });
    same_bits_across_threads("spmm_dropout", || {
        let mut out = vec![0.0; BIG_ROWS * width];
        spmm_dropout(block.as_ref(), &src, width, Init::Zero, &mut out, &d, 10).unwrap();
        out
    });
    same_bits_across_threads("spmm_t", || {
        let mut out = vec![0.0; BIG_ROWS * width];
        spmm_t(block.as_ref(), &src, width, Init::From(&src), &mut out).unwrap();
        out
    });

    let (d_in, d_out) = (width, 4);
    let w = rng.vec(linear_weight_len(2, d_in, d_out));
    let dz = rng.vec(BIG_ROWS * d_out);
    same_bits_across_threads("linear", || {
        let mut z = vec![0.0; BIG_ROWS * d_out];
        linear(&[&src, &src], BIG_ROWS, d_in, &w, d_out, &mut z).unwrap();
        z
    });
    same_bits_across_threads("linear_bwd", || {
        let mut dw = vec![0.0; w.len()];
        let mut dx = vec![0.0; BIG_ROWS * d_in];
        linear_bwd(
            &dz,
            &[&src, &src],
            BIG_ROWS,
            d_in,
            &w,
            d_out,
            &mut dw,
            &mut [None, Some(&mut dx)],
            Write::Overwrite,
        )
        .unwrap();
        dw.extend(dx);
        dw
    });
    // A wide input: fewer rows a task, the weight gradient's features
    // split over tasks.
    let (rows, wide) = (700, 300);
    let x = rng.vec(rows * wide);
    let w_wide = rng.vec(linear_weight_len(1, wide, d_out));
    same_bits_across_threads("linear, wide", || {
        let mut z = vec![0.0; rows * d_out];
        linear(&[&x], rows, wide, &w_wide, d_out, &mut z).unwrap();
        let mut dw = vec![0.0; w_wide.len()];
        let mut dx = vec![0.0; x.len()];
        let dz = &dz[..rows * d_out];
        let write = Write::Overwrite;
        linear_bwd(
            dz,
            &[&x],
            rows,
            wide,
            &w_wide,
            d_out,
            &mut dw,
            &mut [Some(&mut dx)],
            write,
        )
        .unwrap();
        z.extend(dw);
        z.extend(dx);
        z
    });
    same_bits_across_threads("column_sums", || {
        let mut s = vec![0.0; d_out];
        column_sums(&dz, d_out, &mut s, Write::Overwrite).unwrap();
        s
    });
    same_bits_across_threads("activations", || {
        let mut out = vec![0.0; src.len()];
        let mut all = Vec::new();
        relu_dropout(&src, &mut out, width, 0, Some(&d)).unwrap();
        all.extend_from_slice(&out);
        elu_dropout_bwd(&src, &src, width, 0, Some(&d), &mut out).unwrap();
        all.extend_from_slice(&out);
        all
    });
    let labels: Vec<i64> = (0..BIG_ROWS).map(|r| (r % d_out) as i64).collect();
    let mask: Vec<bool> = (0..BIG_ROWS).map(|r| r % 3 != 0).collect();
    same_bits_across_threads("loss", || {
        let l = softmax_cross_entropy(&dz, BIG_ROWS, d_out, &labels, &mask, 100).unwrap();
        let mut g = vec![0.0; dz.len()];
        softmax_cross_entropy_bwd(&dz, BIG_ROWS, d_out, &labels, &mask, 100, &mut g).unwrap();
        g.push(l as f32);
        g.push((l.to_bits() >> 32) as f32);
        g.push(l.to_bits() as u32 as f32);
        g
    });
}

/// Renumbered rows (`RowKeys::Ids`) draw the masks of the rows they name:
/// every dropout kernel on rows `ids` of a tensor equals the same kernel
/// on the whole tensor, at those rows. 300 of 700 rows in shuffled order
/// cross a row chunk; the odd width puts mask groups across rows.
#[test]
fn renumbered_rows_draw_the_masks_of_their_ids() {
    let mut rng = Rng::new(31);
    let (n, width) = (700, 37);
    let mut ids: Vec<u64> = (0..n as u64).collect();
    for k in (1..n).rev() {
        ids.swap(k, rng.below(k + 1));
    }
    ids.truncate(300);
    let keys = RowKeys::Ids(&ids);
    let pick = |t: &[f32]| -> Vec<f32> {
        ids.iter()
            .flat_map(|&r| t[r as usize * width..(r as usize + 1) * width].to_vec())
            .collect()
    };
    let d = Dropout::new(0.4, 3, 9).unwrap();
    let (whole, grad) = (rng.vec(n * width), rng.vec(n * width));
    let (z, g) = (pick(&whole), pick(&grad));

    let mut all = vec![0.0; whole.len()];
    let mut some = vec![0.0; z.len()];
    relu_dropout(&whole, &mut all, width, 0, Some(&d)).unwrap();
    relu_dropout(&z, &mut some, width, keys, Some(&d)).unwrap();
    assert_eq!(some, pick(&all), "relu_dropout");
    assert_ne!(
        some,
        pick(&{
            let mut other = vec![0.0; whole.len()];
            relu_dropout(&whole, &mut other, width, 1, Some(&d)).unwrap();
            other
        })
    );
    relu_dropout_bwd(&grad, &whole, width, 0, Some(&d), &mut all).unwrap();
    relu_dropout_bwd(&g, &z, width, keys, Some(&d), &mut some).unwrap();
    assert_eq!(some, pick(&all), "relu_dropout_bwd");
    elu_dropout(&whole, &mut all, width, 0, Some(&d)).unwrap();
    elu_dropout(&z, &mut some, width, keys, Some(&d)).unwrap();
    assert_eq!(some, pick(&all), "elu_dropout");
    elu_dropout_bwd(&grad, &whole, width, 0, Some(&d), &mut all).unwrap();
    elu_dropout_bwd(&g, &z, width, keys, Some(&d), &mut some).unwrap();
    assert_eq!(some, pick(&all), "elu_dropout_bwd");
    let (mut all, mut some) = (whole.clone(), z.clone());
    dropout_in_place(&mut all, width, 0, &d).unwrap();
    dropout_in_place(&mut some, width, keys, &d).unwrap();
    assert_eq!(some, pick(&all), "dropout_in_place");
    // From row 10 of the share on: the keys skip along.
    let mut tail = z[10 * width..].to_vec();
    dropout_in_place(&mut tail, width, keys.skip(10), &d).unwrap();
    assert_eq!(tail, pick(&all)[10 * width..], "skip");

    // The gather: a block over the 300 picked rows with their keys equals
    // the block over the whole tensor whose columns name the same rows.
    // 400 rows of about one edge: at least 300 edges, so the picked rows
    // take the mask workspace, and fewer than 700, so the whole takes the
    // mask per edge.
    let block = random_block(&mut rng, 400, ids.len(), 1);
    assert!(
        (300..700).contains(&block.columns.len()),
        "{}",
        block.columns.len()
    );
    let mut wide = block.clone();
    for c in &mut wide.columns {
        *c = ids[*c as usize] as u32;
    }
    let (mut all, mut some) = (vec![0.0; 400 * width], vec![0.0; 400 * width]);
    spmm_dropout(wide.as_ref(), &whole, width, Init::Zero, &mut all, &d, 0).unwrap();
    spmm_dropout(block.as_ref(), &z, width, Init::Zero, &mut some, &d, keys).unwrap();
    assert_eq!(some, all, "spmm_dropout");
    spmm_dropout_per_edge(block.as_ref(), &z, width, Init::Zero, &mut some, &d, keys).unwrap();
    assert_eq!(some, all, "spmm_dropout_per_edge");

    // Too few keys is an error naming the kernel, not a panic.
    let short = RowKeys::Ids(&ids[..5]);
    let message = relu_dropout(&z, &mut vec![0.0; z.len()], width, short, Some(&d))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("relu_dropout") && message.contains("5 row keys"),
        "{message}"
    );
    let message = spmm_dropout(block.as_ref(), &z, width, Init::Zero, &mut some, &d, short)
        .unwrap_err()
        .to_string();
    assert!(message.contains("spmm_dropout"), "{message}");
    let message = dropout_in_place(&mut z.clone(), width, short, &d)
        .unwrap_err()
        .to_string();
    assert!(message.contains("dropout_in_place"), "{message}");
}

/// A transpose whose buffers cannot be had is an error naming the
/// buffer and its bytes, not an abort: a one-edge block over more
/// source rows than any machine holds.
#[test]
fn a_transpose_too_large_to_allocate_is_out_of_memory() {
    let block = Block {
        row_start: vec![0, 1],
        columns: vec![0],
        weights: vec![0.5],
        weighting: crate::Weighting::PerEdge,
    };
    for src_rows in [usize::MAX / 16, usize::MAX] {
        match block.as_ref().transpose(src_rows) {
            Err(Error::OutOfMemory { bytes, what }) => {
                assert_eq!(what, "transpose: the row starts");
                assert_eq!(bytes, (src_rows as u64).saturating_add(1).saturating_mul(8));
            }
            other => panic!("{src_rows}: {other:?}"),
        }
    }
    let e = crate::filled(usize::MAX / 4, 0u32, "the test's buffer").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "out of memory: {} bytes for the test's buffer could not be allocated",
            (usize::MAX / 4) as u64 * 4
        )
    );
}
