//! Compiling the kernels' CUDA sources with NVRTC, and the libraries the
//! CUDA backend loads at run time.
//!
//! cudarc loads libcuda, libnvrtc and libcublas by name when first used
//! and panics when one is missing, so every entry point here checks for
//! the library first and returns an error that names it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use fateplan_kernels::cuda::Source;

/// What NVRTC is asked to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Machine code for one GPU (`sm_90`): loads on any driver of the
    /// toolkit's major version, whatever its minor version.
    Cubin,
    /// PTX for a virtual architecture (`compute_90`).
    Ptx,
}

/// Loads a shared library by path and keeps it loaded for the life of
/// the process, so that a later load by its soname (as cudarc does)
/// finds it: a library outside the loader's search path can be used
/// without setting `LD_LIBRARY_PATH` before the process starts.
pub fn preload_library(path: &Path) -> Result<(), String> {
    static KEPT: Mutex<Vec<libloading::Library>> = Mutex::new(Vec::new());
    // SAFETY: loading runs the library's initialisers; the libraries
    // loaded here are NVIDIA's CUDA libraries, made to be loaded so.
    let library = unsafe { libloading::Library::new(path) }
        .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
    KEPT.lock()
        .map_err(|_| "the preloaded library list is poisoned".to_string())?
        .push(library);
    Ok(())
}

/// Preloads the CUDA libraries the backend uses that lie in `dir`:
/// NVRTC (`libnvrtc*.so*`, with its builtins) and cuBLAS
/// (`libcublasLt*.so*`, `libcublas*.so*`), as NVIDIA's CUDA 13 wheels put
/// them side by side in `nvidia/cu13/lib`. Returns how many were loaded.
pub fn preload_nvrtc_dir(dir: &Path) -> Result<usize, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    // Dependencies first: NVRTC's builtins, then cuBLASLt.
    const ORDER: [&str; 4] = ["libnvrtc-builtins", "libnvrtc", "libcublasLt", "libcublas"];
    let rank = |name: &str| ORDER.iter().position(|prefix| name.starts_with(prefix));
    let mut paths: Vec<(usize, PathBuf)> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_string();
            let k = rank(&name).filter(|_| name.contains(".so"))?;
            Some((k, path))
        })
        .collect();
    paths.sort();
    for (_, path) in &paths {
        preload_library(path)?;
    }
    Ok(paths.len())
}

/// Whether libnvrtc can be loaded (by its name, or preloaded).
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Whether the CUDA driver library (libcuda) can be loaded.
pub fn driver_available() -> bool {
    // SAFETY: as above, for libcuda.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether libcublas can be loaded.
pub fn cublas_available() -> bool {
    // SAFETY: as above, for libcublas.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    if !nvrtc_available() {
        return Err(missing_nvrtc());
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| format!("nvrtcVersion: {e:?}"))?;
    Ok((major, minor))
}

/// What to do when libnvrtc cannot be loaded.
pub fn missing_nvrtc() -> String {
    "libnvrtc was not found: install CUDA's NVRTC (for instance `pip install \
     nvidia-cuda-nvrtc`) and put the folder of libnvrtc.so on LD_LIBRARY_PATH"
        .to_string()
}

/// Compiles one source for `arch` (`sm_90` for [`Output::Cubin`],
/// `compute_90` for [`Output::Ptx`]). The error is NVRTC's log, naming
/// the file and line.
pub fn compile(source: Source, arch: &str, output: Output) -> Result<Vec<u8>, String> {
    compile_text(source.file_name(), &source.code(), arch, output)
}

/// [`compile`] for any CUDA text, named `file_name` in messages.
pub fn compile_text(
    file_name: &str,
    code: &str,
    arch: &str,
    output: Output,
) -> Result<Vec<u8>, String> {
    use cudarc::nvrtc::{result, sys};
    if !nvrtc_available() {
        return Err(missing_nvrtc());
    }
    let code = std::ffi::CString::new(code).map_err(|_| format!("{file_name} holds a NUL byte"))?;
    let name =
        std::ffi::CString::new(file_name).map_err(|_| format!("{file_name:?} holds a NUL byte"))?;
    let program = result::create_program(&code, Some(&name))
        .map_err(|e| format!("{file_name}: nvrtcCreateProgram: {e:?}"))?;
    let options = [format!("--gpu-architecture={arch}"), "--std=c++17".into()];
    // SAFETY: `program` was created above and is destroyed once, below.
    let compiled = unsafe { result::compile_program(program, &options) };
    let outcome = match compiled {
        Err(e) => {
            // SAFETY: as above.
            let log = unsafe { result::get_program_log(program) }
                .map(|raw| {
                    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
                    String::from_utf8_lossy(&bytes)
                        .trim_end_matches('\0')
                        .trim()
                        .to_string()
                })
                .unwrap_or_default();
            Err(format!(
                "{file_name} does not compile for {arch} ({e:?}):\n{log}"
            ))
        }
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: the program compiled; NVRTC writes `size` bytes.
            unsafe {
                type SizeOf = unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult;
                type Get = unsafe fn(sys::nvrtcProgram, *mut std::ffi::c_char) -> sys::nvrtcResult;
                let (size_of, get): (SizeOf, Get) = match output {
                    Output::Cubin => (sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN),
                    Output::Ptx => (sys::nvrtcGetPTXSize, sys::nvrtcGetPTX),
                };
                size_of(program, &mut size)
                    .result()
                    .map_err(|e| format!("{file_name}: output size: {e:?}"))
                    .and_then(|()| {
                        let mut image = vec![0u8; size];
                        get(program, image.as_mut_ptr().cast())
                            .result()
                            .map_err(|e| format!("{file_name}: output: {e:?}"))?;
                        Ok(image)
                    })
            }
        }
    };
    // SAFETY: created above, destroyed once.
    let _ = unsafe { result::destroy_program(program) };
    outcome
}

/// [`compile`] through a folder of compiled images keyed by the source's
/// text, the architecture and NVRTC's version: a hit skips NVRTC.
/// A cache that cannot be read or written is only slower.
pub fn compile_cached(
    source: Source,
    arch: &str,
    cache_dir: Option<&Path>,
) -> Result<Vec<u8>, String> {
    let Some(dir) = cache_dir else {
        return compile(source, arch, Output::Cubin);
    };
    let version = nvrtc_version()?;
    let mut hasher = Sha256::new();
    hasher.update(source.code().as_bytes());
    hasher.update(format!("\0{arch}\0{}.{}", version.0, version.1).as_bytes());
    let digest: String = hasher.finalize()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let stem = source.file_name().trim_end_matches(".cu");
    let path = dir.join(format!("{stem}-{arch}-{digest}.cubin"));
    if let Ok(image) = std::fs::read(&path) {
        if !image.is_empty() {
            return Ok(image);
        }
    }
    let image = compile(source, arch, Output::Cubin)?;
    if std::fs::create_dir_all(dir).is_ok() {
        let partial = path.with_extension(format!("cubin.{}", std::process::id()));
        if std::fs::write(&partial, &image).is_ok() && std::fs::rename(&partial, &path).is_err() {
            let _ = std::fs::remove_file(&partial);
        }
    }
    Ok(image)
}
