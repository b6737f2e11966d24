// Adam with PyTorch's semantics and L2 weight decay added to the
// gradient, as kernels/src/optim.rs computes it. `step_size` is
// lr / (1 - beta1^t) and `bias_correction2_sqrt` sqrt(1 - beta2^t), both
// formed on the host in f64 and rounded to f32 as the CPU does.
extern "C" __global__ void adam_f32(
    float* w, const float* g, float* m, float* v, u64 n,
    float beta1, float beta2, float eps, float weight_decay,
    float step_size, float bias_correction2_sqrt)
{
    GRID_STRIDE(i, n) {
        float grad = weight_decay != 0.0f ? g[i] + weight_decay * w[i] : g[i];
        float mi = m[i] + (1.0f - beta1) * (grad - m[i]);
        float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
        float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
        w[i] = w[i] - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
}
