//! Every CUDA source of the kernels compiles with NVRTC: no GPU needed,
//! only libnvrtc. It is found by the loader's path, or in the folder
//! named by `FATEPLAN_NVRTC_DIR` (`.ci/run` installs the pip wheel and
//! sets it). Without libnvrtc the tests say they skipped, unless
//! `FATEPLAN_REQUIRE_NVRTC=1`, when they fail.

use std::path::PathBuf;

use fateplan_kernels::cuda::Source;
use fateplan_runtime::cuda::nvrtc::{self, Output};

/// The architectures compiled for: A100 and H100 machine code.
const ARCHES: [&str; 2] = ["sm_80", "sm_90"];

/// Whether NVRTC can be used; `false` after saying why the test skips.
fn nvrtc_ready(test: &str) -> bool {
    if let Some(dir) = std::env::var_os("FATEPLAN_NVRTC_DIR") {
        let dir = PathBuf::from(dir);
        if let Err(e) = nvrtc::preload_nvrtc_dir(&dir) {
            panic!("FATEPLAN_NVRTC_DIR: {e}");
        }
    }
    if nvrtc::nvrtc_available() {
        return true;
    }
    let required = std::env::var("FATEPLAN_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "FATEPLAN_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded: {}",
        nvrtc::missing_nvrtc()
    );
    eprintln!(
        "skipped {test}: libnvrtc not found (pip install nvidia-cuda-nvrtc, then set \
         FATEPLAN_NVRTC_DIR to the folder of libnvrtc.so.13)"
    );
    false
}

#[test]
fn every_cuda_source_compiles_and_defines_its_kernels() {
    if !nvrtc_ready("every_cuda_source_compiles_and_defines_its_kernels") {
        return;
    }
    let (major, minor) = nvrtc::nvrtc_version().unwrap();
    eprintln!("NVRTC {major}.{minor}");
    for source in Source::ALL {
        for arch in ARCHES {
            let cubin =
                nvrtc::compile(source, arch, Output::Cubin).unwrap_or_else(|log| panic!("{log}"));
            assert!(
                cubin.starts_with(b"\x7fELF"),
                "{} for {arch}: not an ELF image",
                source.file_name()
            );
        }
        let ptx =
            nvrtc::compile(source, "compute_90", Output::Ptx).unwrap_or_else(|log| panic!("{log}"));
        let ptx = String::from_utf8_lossy(&ptx);
        for kernel in source.kernels() {
            assert!(
                ptx.contains(&format!(".entry {kernel}(")),
                "{}: kernel {kernel} is not an entry of the PTX",
                source.file_name()
            );
        }
    }
}

#[test]
fn a_kernel_that_does_not_compile_is_reported_with_its_file_and_line() {
    if !nvrtc_ready("a_kernel_that_does_not_compile_is_reported_with_its_file_and_line") {
        return;
    }
    let code =
        "extern \"C\" __global__ void broken_f32(float* x) {\n    x[0] = undefined_name;\n}\n";
    let error = nvrtc::compile_text("broken.cu", code, "sm_90", Output::Cubin).unwrap_err();
    assert!(
        error.contains("broken.cu") && error.contains("undefined_name") && error.contains("(2)"),
        "{error}"
    );
}

#[test]
fn compiled_kernels_are_cached_by_source_and_architecture() {
    if !nvrtc_ready("compiled_kernels_are_cached_by_source_and_architecture") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("fateplan-kernel-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let first = nvrtc::compile_cached(Source::Optim, "sm_90", Some(&dir)).unwrap();
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("optim-sm_90-") && name.ends_with(".cubin"),
        "{name}"
    );
    // A hit reads the file: change it and the change comes back.
    std::fs::write(&files[0], b"cached image").unwrap();
    let second = nvrtc::compile_cached(Source::Optim, "sm_90", Some(&dir)).unwrap();
    assert_eq!(second, b"cached image");
    // Another architecture is another entry.
    let other = nvrtc::compile_cached(Source::Optim, "sm_80", Some(&dir)).unwrap();
    assert_ne!(other, first);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
