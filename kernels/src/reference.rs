//! The oracle: every kernel as plain loops in `f64`, written for clarity,
//! not speed. Tests compare the `f32` kernels against these, and check
//! these backward functions against finite differences. Shapes are
//! trusted (callers are tests).

use crate::dropout::Dropout;
use crate::BlockRef;

/// The weight of edge `e` of row `r`, its scales multiplied in `f64`.
fn edge_weight(block: BlockRef, r: usize, e: usize) -> f64 {
    use crate::Weighting;
    let w = |k: usize| block.weights[k] as f64;
    match block.weighting {
        Weighting::PerEdge => w(e),
        Weighting::Row => w(r),
        Weighting::RowColumn => w(r) * w(block.rows() + block.columns[e] as usize),
        Weighting::Unit => 1.0,
    }
}

/// `Σ_e w_e · src[c_e]` per destination row.
pub fn spmm(block: BlockRef, src: &[f64], width: usize) -> Vec<f64> {
    let mut out = vec![0.0; block.rows() * width];
    for r in 0..block.rows() {
        for e in block.edges(r) {
            let (c, w) = (block.columns[e] as usize, edge_weight(block, r, e));
            for f in 0..width {
                out[r * width + f] += w * src[c * width + f];
            }
        }
    }
    out
}

/// `src` with dropout applied, element `(c, f)` taking the mask value of
/// `(row0 + c) * width + f`.
pub fn dropout(x: &[f64], width: usize, row0: u64, dropout: &Dropout) -> Vec<f64> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let (r, f) = ((i / width) as u64, (i % width) as u64);
            v * dropout.value((row0 + r) * width as u64 + f) as f64
        })
        .collect()
}

/// `blockᵀ · grad` into `src_rows` rows.
pub fn spmm_t(block: BlockRef, grad: &[f64], width: usize, src_rows: usize) -> Vec<f64> {
    let mut out = vec![0.0; src_rows * width];
    for r in 0..block.rows() {
        for e in block.edges(r) {
            let (c, w) = (block.columns[e] as usize, edge_weight(block, r, e));
            for f in 0..width {
                out[c * width + f] += w * grad[r * width + f];
            }
        }
    }
    out
}

/// `Σ_k x_k · W_k (+ b)`; `w` holds the `inputs.len()` matrices then, if
/// `bias`, the bias.
pub fn linear(
    inputs: &[&[f64]],
    rows: usize,
    d_in: usize,
    w: &[f64],
    d_out: usize,
    bias: bool,
) -> Vec<f64> {
    let mut out = vec![0.0; rows * d_out];
    for r in 0..rows {
        for o in 0..d_out {
            let mut z = 0.0;
            for (k, x) in inputs.iter().enumerate() {
                for i in 0..d_in {
                    z += x[r * d_in + i] * w[k * d_in * d_out + i * d_out + o];
                }
            }
            if bias {
                z += w[inputs.len() * d_in * d_out + o];
            }
            out[r * d_out + o] = z;
        }
    }
    out
}

/// Backward of [`linear`]: `(dw, dx)`, `dw` in the layout of `w`.
pub fn linear_bwd(
    dz: &[f64],
    inputs: &[&[f64]],
    rows: usize,
    d_in: usize,
    w: &[f64],
    d_out: usize,
    bias: bool,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let mut dw = vec![0.0; w.len()];
    let mut dx = vec![vec![0.0; rows * d_in]; inputs.len()];
    for r in 0..rows {
        for o in 0..d_out {
            let g = dz[r * d_out + o];
            for (k, x) in inputs.iter().enumerate() {
                for i in 0..d_in {
                    dw[k * d_in * d_out + i * d_out + o] += x[r * d_in + i] * g;
                    dx[k][r * d_in + i] += g * w[k * d_in * d_out + i * d_out + o];
                }
            }
            if bias {
                dw[inputs.len() * d_in * d_out + o] += g;
            }
        }
    }
    (dw, dx)
}

/// The mask value (0, 1 or `1 / (1 − p)`) of every element.
fn mask(len: usize, width: usize, row0: u64, d: Option<&Dropout>) -> Vec<f64> {
    let ones = vec![1.0; len];
    match d {
        Some(d) => dropout(&ones, width, row0, d),
        None => ones,
    }
}

pub fn relu_dropout(z: &[f64], width: usize, row0: u64, d: Option<&Dropout>) -> Vec<f64> {
    let m = mask(z.len(), width, row0, d);
    z.iter().zip(&m).map(|(&z, &m)| z.max(0.0) * m).collect()
}

pub fn relu_dropout_bwd(
    g: &[f64],
    z: &[f64],
    width: usize,
    row0: u64,
    d: Option<&Dropout>,
) -> Vec<f64> {
    let m = mask(z.len(), width, row0, d);
    (0..z.len())
        .map(|i| if z[i] > 0.0 { g[i] * m[i] } else { 0.0 })
        .collect()
}

pub fn elu_dropout(z: &[f64], width: usize, row0: u64, d: Option<&Dropout>) -> Vec<f64> {
    let m = mask(z.len(), width, row0, d);
    z.iter()
        .zip(&m)
        .map(|(&z, &m)| if z > 0.0 { z * m } else { z.exp_m1() * m })
        .collect()
}

pub fn elu_dropout_bwd(
    g: &[f64],
    z: &[f64],
    width: usize,
    row0: u64,
    d: Option<&Dropout>,
) -> Vec<f64> {
    let m = mask(z.len(), width, row0, d);
    (0..z.len())
        .map(|i| g[i] * m[i] * if z[i] > 0.0 { 1.0 } else { z[i].exp() })
        .collect()
}

/// Mean-style softmax cross-entropy over masked rows.
pub fn softmax_cross_entropy(
    logits: &[f64],
    classes: usize,
    labels: &[i64],
    mask: &[bool],
    normaliser: usize,
) -> f64 {
    let mut loss = 0.0;
    for (r, row) in logits.chunks(classes).enumerate() {
        if mask[r] {
            let lse = row.iter().map(|x| x.exp()).sum::<f64>().ln();
            loss += lse - row[labels[r] as usize];
        }
    }
    loss / normaliser as f64
}

pub fn softmax_cross_entropy_bwd(
    logits: &[f64],
    classes: usize,
    labels: &[i64],
    mask: &[bool],
    normaliser: usize,
) -> Vec<f64> {
    let mut grad = vec![0.0; logits.len()];
    for (r, row) in logits.chunks(classes).enumerate() {
        if mask[r] {
            let sum: f64 = row.iter().map(|x| x.exp()).sum();
            for c in 0..classes {
                let onehot = if c as i64 == labels[r] { 1.0 } else { 0.0 };
                grad[r * classes + c] = (row[c].exp() / sum - onehot) / normaliser as f64;
            }
        }
    }
    grad
}

/// One Adam step in `f64`, textbook form.
#[allow(clippy::too_many_arguments)]
pub fn adam_step(
    adam: &crate::optim::Adam,
    t: u32,
    w: &mut [f64],
    g: &[f64],
    m: &mut [f64],
    v: &mut [f64],
) {
    let (b1, b2) = (adam.beta1 as f64, adam.beta2 as f64);
    for i in 0..w.len() {
        let g = g[i] + adam.weight_decay as f64 * w[i];
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        let m_hat = m[i] / (1.0 - b1.powi(t as i32));
        let v_hat = v[i] / (1.0 - b2.powi(t as i32));
        w[i] -= adam.lr as f64 * m_hat / (v_hat.sqrt() + adam.eps as f64);
    }
}

/// Gradients of [`gat`]: `(dz, datt_src, datt_dst)`.
pub type GatGrads = (Vec<f64>, Vec<f64>, Vec<f64>);

/// Per-edge quantities of GAT on a whole graph: `(u, alpha)`, `nnz × H`.
fn gat_alpha(
    csr: &crate::Csr,
    z: &[f64],
    heads: usize,
    c_n: usize,
    att_src: &[f64],
    att_dst: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let d = heads * c_n;
    let score = |v: usize, h: usize, att: &[f64]| {
        (0..c_n)
            .map(|k| att[h * c_n + k] * z[v * d + h * c_n + k])
            .sum::<f64>()
    };
    let nnz = csr.columns.len();
    let mut u = vec![0.0; nnz * heads];
    let mut alpha = vec![0.0; nnz * heads];
    for r in 0..csr.rows() {
        let edges = csr.row_start[r] as usize..csr.row_start[r + 1] as usize;
        for h in 0..heads {
            for e in edges.clone() {
                u[e * heads + h] =
                    score(r, h, att_dst) + score(csr.columns[e] as usize, h, att_src);
            }
            let s = |e: usize| {
                let x = u[e * heads + h];
                if x > 0.0 {
                    x
                } else {
                    0.2 * x
                }
            };
            let total: f64 = edges.clone().map(|e| s(e).exp()).sum();
            for e in edges.clone() {
                alpha[e * heads + h] = s(e).exp() / total;
            }
        }
    }
    (u, alpha)
}

/// GAT's attention aggregation on a whole graph (`csr` rows by
/// destination, square): `out[r]_h = Σ_e m_e alpha_e z[c]_h`, without
/// bias, where `mask` gives the attention-dropout factor `m_e` of each
/// edge and head (`nnz × H`; `None`: all 1).
#[allow(clippy::too_many_arguments)]
pub fn gat(
    csr: &crate::Csr,
    z: &[f64],
    heads: usize,
    c_n: usize,
    att_src: &[f64],
    att_dst: &[f64],
    mask: Option<&[f64]>,
) -> Vec<f64> {
    let d = heads * c_n;
    let (_, alpha) = gat_alpha(csr, z, heads, c_n, att_src, att_dst);
    let m = |k: usize| mask.map_or(1.0, |m| m[k]);
    let mut out = vec![0.0; csr.rows() * d];
    for r in 0..csr.rows() {
        for e in csr.row_start[r] as usize..csr.row_start[r + 1] as usize {
            let c = csr.columns[e] as usize;
            for f in 0..d {
                let k = e * heads + f / c_n;
                out[r * d + f] += m(k) * alpha[k] * z[c * d + f];
            }
        }
    }
    out
}

/// Backward of [`gat`] given `dout`, with the softmax backward summed
/// explicitly over each row's edges.
#[allow(clippy::too_many_arguments)]
pub fn gat_bwd(
    csr: &crate::Csr,
    z: &[f64],
    heads: usize,
    c_n: usize,
    att_src: &[f64],
    att_dst: &[f64],
    mask: Option<&[f64]>,
    dout: &[f64],
) -> GatGrads {
    let d = heads * c_n;
    let n = csr.rows();
    let (u, alpha) = gat_alpha(csr, z, heads, c_n, att_src, att_dst);
    let m = |k: usize| mask.map_or(1.0, |m| m[k]);
    let mut dz = vec![0.0; n * d];
    let mut da_src = vec![0.0; n * heads];
    let mut da_dst = vec![0.0; n * heads];
    for r in 0..n {
        let edges = csr.row_start[r] as usize..csr.row_start[r + 1] as usize;
        for h in 0..heads {
            // Gradient of alpha (not of the dropped alpha).
            let dalpha = |e: usize| {
                let c = csr.columns[e] as usize;
                m(e * heads + h)
                    * (0..c_n)
                        .map(|k| dout[r * d + h * c_n + k] * z[c * d + h * c_n + k])
                        .sum::<f64>()
            };
            let weighted: f64 = edges
                .clone()
                .map(|e| alpha[e * heads + h] * dalpha(e))
                .sum();
            for e in edges.clone() {
                let c = csr.columns[e] as usize;
                let a = alpha[e * heads + h];
                let ds = a * (dalpha(e) - weighted);
                let du = ds * if u[e * heads + h] > 0.0 { 1.0 } else { 0.2 };
                da_src[c * heads + h] += du;
                da_dst[r * heads + h] += du;
                for k in 0..c_n {
                    dz[c * d + h * c_n + k] += m(e * heads + h) * a * dout[r * d + h * c_n + k];
                }
            }
        }
    }
    let mut datt_src = vec![0.0; d];
    let mut datt_dst = vec![0.0; d];
    for v in 0..n {
        for f in 0..d {
            let h = f / c_n;
            dz[v * d + f] +=
                da_src[v * heads + h] * att_src[f] + da_dst[v * heads + h] * att_dst[f];
            datt_src[f] += da_src[v * heads + h] * z[v * d + f];
            datt_dst[f] += da_dst[v * heads + h] * z[v * d + f];
        }
    }
    (dz, datt_src, datt_dst)
}
