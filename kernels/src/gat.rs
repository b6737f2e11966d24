//! Graph attention (in progress).
