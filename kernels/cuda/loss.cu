// Softmax cross-entropy over the masked rows of a partition and accuracy,
// as kernels/src/loss.rs computes them (log-sum-exp in f64).

// Per row: loss[r] = log sum exp(x - max) - (x[label] - max) in f64 when
// train_mask[r] (0 otherwise), and correct[r] = 1 when the first index of
// the largest logit equals a label in range.
extern "C" __global__ void softmax_xent_rows_f32(
    const float* logits, u64 rows, u64 classes, const i64* labels, const u8* train_mask,
    double* loss, u8* correct)
{
    GRID_STRIDE(r, rows) {
        const float* row = logits + r * classes;
        float m = NEG_INFINITY_F;
        u64 best = 0;
        for (u64 c = 0; c < classes; ++c) {
            m = fmaxf(m, row[c]);
            if (row[c] > row[best]) best = c;
        }
        i64 label = labels[r];
        bool valid = label >= 0 && (u64)label < classes;
        correct[r] = valid && (i64)best == label ? 1 : 0;
        double value = 0.0;
        if (train_mask[r] && valid) {
            double sum = 0.0;
            for (u64 c = 0; c < classes; ++c) sum += exp((double)(row[c] - m));
            value = log(sum) - (double)(row[label] - m);
        }
        loss[r] = value;
    }
}

// One partial per `chunk_rows` rows, seven values each: the training loss
// summed in row order, then (correct, total) over the train, val and test
// masks.
extern "C" __global__ void loss_partials_f64(
    const double* loss, const u8* correct, const u8* train_mask, const u8* val_mask,
    const u8* test_mask, u64 rows, u64 chunk_rows, double* partials)
{
    u64 chunks = (rows + chunk_rows - 1) / chunk_rows;
    GRID_STRIDE(k, chunks) {
        u64 hi = (k + 1) * chunk_rows < rows ? (k + 1) * chunk_rows : rows;
        double sum = 0.0;
        u64 n[6] = {0, 0, 0, 0, 0, 0};
        for (u64 r = k * chunk_rows; r < hi; ++r) {
            if (train_mask[r]) { sum += loss[r]; n[0] += correct[r]; n[1] += 1; }
            if (val_mask[r]) { n[2] += correct[r]; n[3] += 1; }
            if (test_mask[r]) { n[4] += correct[r]; n[5] += 1; }
        }
        partials[k * 7] = sum;
        for (int j = 0; j < 6; ++j) partials[k * 7 + 1 + j] = (double)n[j];
    }
}

// grad[r, c] = (softmax(x)[c] - onehot(label)[c]) * inv_normaliser on
// masked rows, 0 elsewhere.
extern "C" __global__ void softmax_xent_bwd_f32(
    const float* logits, u64 rows, u64 classes, const i64* labels, const u8* train_mask,
    double inv_normaliser, float* grad)
{
    GRID_STRIDE(r, rows) {
        const float* row = logits + r * classes;
        float* g = grad + r * classes;
        i64 label = labels[r];
        if (!train_mask[r] || label < 0 || (u64)label >= classes) {
            for (u64 c = 0; c < classes; ++c) g[c] = 0.0f;
            continue;
        }
        float m = NEG_INFINITY_F;
        for (u64 c = 0; c < classes; ++c) m = fmaxf(m, row[c]);
        double sum = 0.0;
        for (u64 c = 0; c < classes; ++c) sum += exp((double)(row[c] - m));
        double lse = log(sum);
        for (u64 c = 0; c < classes; ++c) {
            double p = exp((double)(row[c] - m) - lse);
            double onehot = (i64)c == label ? 1.0 : 0.0;
            g[c] = (float)((p - onehot) * inv_normaliser);
        }
    }
}
