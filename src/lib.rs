//! fateplan plans and executes memory for full-graph GNN training whose
//! intermediate data do not fit in GPU memory.
//!
//! This crate is the facade: it re-exports the [`planner`], [`runtime`] and
//! [`kernels`] crates and carries the built-in hardware profiles.
//!
//! ```
//! use fateplan::planner::blocks::BlockCounts;
//! use fateplan::planner::datasets::dataset;
//! use fateplan::planner::gnn::{build_gnn, GnnModel, GnnSpec};
//! use fateplan::planner::{plan, PlanOptions, Policy};
//!
//! // ogbn-arxiv's statistics, in 16 partitions.
//! let stats = dataset("ogbn-arxiv").unwrap();
//! // `fateplan plan`'s default model (a 3-layer GCN of 256 hidden), here of 2 layers.
//! let spec = GnnSpec {
//!     layers: 2,
//!     ..GnnSpec::new(GnnModel::Gcn, stats.features, stats.classes, stats.name)
//! };
//! let blocks = BlockCounts::skewed(stats.nodes, stats.edges, 16)?;
//! let workload = build_gnn(&spec, &blocks)?;
//!
//! // Plan it on an A100 with only 100 MiB of device memory.
//! let profile = fateplan::profiles::builtin("a100-80g").unwrap();
//! let mut options = PlanOptions::new(Policy::Greedy, &profile);
//! options.budgets.hbm_bytes = 100 << 20;
//! let plan = plan(&workload, &profile, &options)?;
//!
//! assert!(plan.predicted.peak_bytes.hbm <= 100 << 20);
//! println!("{:.3} s per iteration", plan.predicted.iteration_s);
//! # Ok::<(), fateplan::planner::Error>(())
//! ```

pub use fateplan_kernels as kernels;
pub use fateplan_planner as planner;
pub use fateplan_runtime as runtime;

/// The text of the file at `path` (a plan, a profile, a workload), or
/// why it cannot be had: the system's error, or where the file stops
/// being UTF-8 text (its line, column and byte, and whether it is UTF-16
/// by its byte-order mark), for the caller to put after the file's name.
pub fn read_text(path: &std::path::Path) -> Result<String, String> {
    if path.is_dir() {
        return Err("a folder, not a file".into());
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    if bytes.is_empty() {
        return Err("the file is empty (0 bytes)".into());
    }
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
            return "UTF-16 text (it starts with a UTF-16 byte-order mark); fateplan reads \
                    UTF-8: save it as UTF-8"
                .to_string();
        }
        let at = e.utf8_error().valid_up_to();
        let before = &bytes[..at];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |k| k + 1);
        // Characters, not bytes, before it on its line.
        let column = String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1;
        format!(
            "line {line}, column {column}: not UTF-8 text (byte {at}, 0x{:02X}); fateplan reads \
             UTF-8",
            bytes[at]
        )
    })
}

pub mod profiles {
    //! The hardware profiles shipped in `profiles/`, compiled in.

    use fateplan_planner::Profile;

    const BUILTIN: &[(&str, &str)] = &[
        ("a100-80g", include_str!("../profiles/a100-80g.json")),
        ("h100-sxm", include_str!("../profiles/h100-sxm.json")),
        ("h200", include_str!("../profiles/h200.json")),
        (
            "h100-measured",
            include_str!("../profiles/h100-measured.json"),
        ),
        (
            "h200-measured",
            include_str!("../profiles/h200-measured.json"),
        ),
        ("cpu-small", include_str!("../profiles/cpu-small.json")),
    ];

    /// The built-in profile called `name`.
    pub fn builtin(name: &str) -> Option<Profile> {
        let (file, text) = BUILTIN.iter().find(|(n, _)| *n == name)?;
        Some(
            Profile::from_json(text, &format!("profiles/{file}.json"))
                .expect("shipped profiles are valid"),
        )
    }

    /// The built-in profiles' names, as [`builtin`] takes them.
    pub fn names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// A profile as `--profile` takes one: the built-in profile called
    /// `name`, else the profile file at that path (checked as
    /// [`Profile::from_json`] checks it), else a built-in profile whose
    /// name differs from `name` in case alone. A name that is none, or a
    /// file that cannot be read, is an `InvalidInput` naming it.
    pub fn load(name: &str) -> Result<Profile, fateplan_planner::Error> {
        if let Some(profile) = builtin(name) {
            return Ok(profile);
        }
        let path = std::path::Path::new(name);
        // A link that leads nowhere is a file to read, and fails as one.
        if std::fs::symlink_metadata(path).is_err() {
            // A built-in name in another case (`H100-SXM`), where no file
            // has it.
            if let Some(profile) = BUILTIN
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(n, _)| builtin(n))
            {
                return Ok(profile);
            }
            return Err(fateplan_planner::Error::InvalidInput {
                context: format!("profile {name:?}"),
                message: format!(
                    "not a built-in profile ({}) nor a file{}",
                    names().join(", "),
                    fateplan_planner::units::did_you_mean(name, &names())
                ),
            });
        }
        let text = crate::read_text(path).map_err(|e| fateplan_planner::Error::InvalidInput {
            context: path.display().to_string(),
            message: format!("cannot read: {e}"),
        })?;
        let profile = Profile::from_json(&text, &path.display().to_string())?;
        // A file may be a copy of a built-in profile, but not another
        // machine under its name: plans and reports would name that one.
        let same_name = BUILTIN
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(&profile.name))
            .and_then(|(n, _)| builtin(n));
        if let Some(shipped) = same_name.filter(|shipped| !shipped.same_figures(&profile)) {
            return Err(fateplan_planner::Error::InvalidInput {
                context: format!("{}: name", path.display()),
                message: format!(
                    "{:?} is the name of a built-in profile whose figures differ from this \
                     file's; plans and reports would name that profile: give this one a name \
                     of its own",
                    shipped.name
                ),
            });
        }
        Ok(profile)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn a_file_under_a_built_in_name_is_that_profile_or_refused() {
            let dir = std::env::temp_dir().join(format!("fateplan-named-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("p.json");
            let mut profile = super::builtin("a100-80g").unwrap();
            std::fs::write(&path, profile.to_json_pretty()).unwrap();
            assert_eq!(super::load(path.to_str().unwrap()).unwrap(), profile);
            // Other words, the same figures: that profile, described anew.
            profile.description = "the same figures".into();
            std::fs::write(&path, profile.to_json_pretty()).unwrap();
            assert_eq!(super::load(path.to_str().unwrap()).unwrap(), profile);
            profile.pcie.h2d_bytes_per_s *= 2.0;
            profile.name = "A100-80G".into();
            std::fs::write(&path, profile.to_json_pretty()).unwrap();
            let error = super::load(path.to_str().unwrap()).unwrap_err().to_string();
            assert!(
                error.contains(&format!("{}: name", path.display()))
                    && error.contains("\"a100-80g\" is the name of a built-in profile"),
                "{error}"
            );
            profile.name = "a100-fast".into();
            std::fs::write(&path, profile.to_json_pretty()).unwrap();
            assert_eq!(
                super::load(path.to_str().unwrap()).unwrap().name,
                "a100-fast"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }

        #[test]
        fn a_profile_loads_by_name_or_path_and_a_bad_one_is_named() {
            assert_eq!(super::load("cpu-small").unwrap().name, "cpu-small");
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/h200.json");
            assert_eq!(super::load(path).unwrap(), super::builtin("h200").unwrap());
            let error = super::load("no-such-profile").unwrap_err().to_string();
            assert!(error.contains("profile \"no-such-profile\": not a built-in profile (a100-80g"));
            // A built-in name in another case, where no file has it.
            assert_eq!(super::load("H100-SXM").unwrap().name, "h100-sxm");
            let folder = super::load(env!("CARGO_MANIFEST_DIR"))
                .unwrap_err()
                .to_string();
            assert!(folder.contains("cannot read"), "{folder}");
        }
    }
}

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[cfg(test)]
mod read_text_tests {
    #[test]
    fn a_file_not_utf8_is_said_where_it_stops_being_text() {
        let dir = std::env::temp_dir().join(format!("fateplan-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plan.json");
        std::fs::write(&path, b"{\n  \"name\": \"\xC3\xA9t\xFF\"\n}").unwrap();
        let error = super::read_text(&path).unwrap_err();
        assert_eq!(
            error,
            "line 2, column 14: not UTF-8 text (byte 16, 0xFF); fateplan reads UTF-8"
        );
        std::fs::write(&path, [0xFF, 0xFE, b'{', 0, b'}', 0]).unwrap();
        let error = super::read_text(&path).unwrap_err();
        assert!(error.starts_with("UTF-16 text"), "{error}");
        std::fs::write(&path, "{\"name\": \"é\"}").unwrap();
        assert_eq!(super::read_text(&path).unwrap(), "{\"name\": \"é\"}");
        std::fs::write(&path, "").unwrap();
        assert_eq!(
            super::read_text(&path).unwrap_err(),
            "the file is empty (0 bytes)"
        );
        assert_eq!(super::read_text(&dir).unwrap_err(), "a folder, not a file");
        let error = super::read_text(&dir.join("absent.json")).unwrap_err();
        assert!(error.contains("No such file"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
