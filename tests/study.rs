//! `fateplan compare --simulate` and `fateplan study` as a user runs them.

mod common;
use common::*;

#[test]
fn compare_simulate_json_has_simulated_fields_for_fitting_policies() {
    let out = fateplan(&[
        "compare",
        "--dataset",
        "ogbn-arxiv",
        "--layers",
        "2",
        "--hbm-budget",
        "200MiB",
        "--simulate",
        "--json",
        // The MILP would search its default minute on this workload.
        "--milp-time-limit",
        "2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["simulated"], true);
    // The MILP's plan, where it found one in 2 s, says whether it was
    // proven; where it found none in time, the row says the limit ran
    // out (which of the two depends on the machine's speed).
    let milp = doc["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["policy"] == "milp");
    let milp = milp.unwrap();
    match &milp["fits"] {
        serde_json::Value::Bool(true) => {
            assert!(milp["proven_optimal"].is_boolean(), "{milp}");
            assert_eq!(milp["milp_time_limit_s"], 2.0, "{milp}");
        }
        serde_json::Value::Null => {
            // Out of time, or stopped by the solver (microlp's singular
            // matrix).
            let skipped = milp["skipped"].as_str().unwrap_or_default();
            assert!(
                skipped.contains("time limit of 2 s") || skipped.contains("solver (microlp)"),
                "{milp}"
            );
        }
        // No fates fit once the bytes the memory pass found are charged.
        _ => assert!(
            milp["error"].as_str().unwrap().contains("infeasible"),
            "{milp}"
        ),
    }
    let rows = doc["policies"].as_array().unwrap();
    let fitting: Vec<&serde_json::Value> = rows.iter().filter(|r| r["fits"] == true).collect();
    assert!(fitting.iter().any(|r| r["policy"] == "dp"), "{doc}");
    for row in &fitting {
        let predicted = row["iteration_s"].as_f64().unwrap();
        let simulated = row["simulated_iteration_s"].as_f64();
        let simulated = simulated.unwrap_or_else(|| panic!("no simulated time: {row}"));
        assert!(simulated > 0.0, "{row}");
        let percent = row["disagreement_percent"].as_f64().unwrap();
        let expected = 100.0 * (simulated - predicted) / predicted;
        assert!((percent - expected).abs() < 1e-6, "{row}");
        let violations = row["simulated_violations"].as_u64().unwrap();
        // A plan with violations is marked with the first of them.
        assert_eq!(violations > 0, row["first_violation"].is_string(), "{row}");
    }
    for row in rows.iter().filter(|r| r["fits"] != true) {
        assert!(row.get("simulated_iteration_s").is_none(), "{row}");
    }
    // Without --simulate, no simulated fields.
    let plain = fateplan(&["compare", "--dataset", "ogbn-arxiv", "--json"]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let doc: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(doc["policies"][0].get("simulated_iteration_s").is_none());
}

#[test]
fn compare_simulate_table_marks_violations() {
    let out = fateplan(&[
        "compare",
        "--dataset",
        "ogbn-arxiv",
        "--hbm-budget",
        "200MiB",
        "--simulate",
        "--milp-time-limit",
        "2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("simulated") && text.contains("sim-pred"),
        "{text}"
    );
    let json = fateplan(&[
        "compare",
        "--dataset",
        "ogbn-arxiv",
        "--hbm-budget",
        "200MiB",
        "--simulate",
        "--json",
        "--milp-time-limit",
        "2",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    for row in doc["policies"].as_array().unwrap() {
        let name = row["policy"].as_str().unwrap();
        // What the MILP finds in 2 s can differ between the two runs.
        if name == "milp" {
            continue;
        }
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap();
        let marked = line.contains("! ");
        let violated = row["simulated_violations"].as_u64().unwrap_or(0) > 0;
        assert_eq!(marked, violated, "{name}: {line}");
        if violated {
            assert!(
                text.contains(&format!("! {name}: first violation: ")),
                "{text}"
            );
        }
    }
}

#[test]
fn study_on_a_reduced_grid_writes_one_row_per_point() {
    let dir = scratch("grid");
    let md = dir.join("study.md");
    // A space after a comma is taken as the lists of numbers take it.
    let out = fateplan(&[
        "study",
        "--datasets",
        "ogbn-arxiv, reddit",
        "--models",
        "gcn, gat",
        "--layers",
        "2",
        "--gpus",
        "1,4",
        "--out",
        md.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&md).unwrap();
    // Flags at their defaults (models gcn,gat and GPUs 1,4) are left out.
    assert!(
        text.contains("Command: `fateplan study --layers 2 --datasets ogbn-arxiv,reddit --out "),
        "{text}"
    );
    let header = text
        .lines()
        .find(|l| l.starts_with("| model |"))
        .expect("a table header");
    for column in ["dp simulated", "best peer", "greedy", "offload-ssd-all"] {
        assert!(header.contains(column), "{header}");
    }
    assert!(!header.contains("milp"), "{header}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("| gcn |") || l.starts_with("| gat |"))
        .collect();
    assert_eq!(rows.len(), 2 * 2 * 2, "{text}");
    for model in ["gcn", "gat"] {
        for dataset in ["ogbn-arxiv", "reddit"] {
            for gpus in ["1", "4"] {
                let prefix = format!("| {model} | 2 | {dataset} | {gpus} |");
                assert!(rows.iter().any(|r| r.starts_with(&prefix)), "{prefix}");
            }
        }
    }
    for row in &rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // Leading and trailing empties, 9 fixed columns, 8 peers.
        assert_eq!(cells.len(), 2 + 9 + 8, "{row}");
        assert!(cells[6].ends_with('s'), "dp's simulated time: {row}");
        assert!(cells[7].ends_with('%'), "dp's disagreement: {row}");
        for cell in &cells[10..18] {
            assert!(
                *cell == "OOM" || cell.contains('x'),
                "a speedup or OOM: {row}"
            );
        }
    }
    assert!(text.contains("## Summary"), "{text}");
    assert!(text.contains("`milp` is skipped"), "{text}");
    // stdout has the same table.
    let printed = stdout(&out);
    for row in &rows {
        assert!(printed.contains(row), "{printed}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn study_json_has_a_row_per_point() {
    let out = fateplan(&[
        "study",
        "--datasets",
        "ogbn-arxiv",
        "--models",
        "gcn",
        "--layers",
        "2,3",
        "--gpus",
        "1",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_eq!(row["dataset"], "ogbn-arxiv");
        let policies = row["policies"].as_array().unwrap();
        assert!(policies.iter().all(|p| p["policy"] != "milp"));
        let dp = policies.iter().find(|p| p["policy"] == "dp").unwrap();
        assert!(dp["simulated_iteration_s"].as_f64().is_some(), "{dp}");
        assert!(row["dp_speedup"]["greedy"].as_f64().is_some(), "{row}");
    }
    assert_eq!(doc["skipped_policies"][0], "milp");
}

#[test]
fn study_names_the_bad_flag_and_value() {
    for (args, expected) in [
        (&["study", "--datasets", "nope"][..], "--datasets nope"),
        (&["study", "--models", "mlp"][..], "--models mlp"),
        (
            &["study", "--gpus", "0"][..],
            "'--gpus <GPUS>': 0 is less than 1",
        ),
        (&["study", "--gpus", "9"][..], "--gpus 9"),
        (
            &["study", "--layers", "0"][..],
            "'--layers <LAYERS>': 0 is less than 1",
        ),
        (
            &["study", "--out", "no-such-folder/study.md"][..],
            "--out no-such-folder/study.md: no such directory no-such-folder",
        ),
        (&["study", "--out", "."][..], "--out .: is a directory"),
        (&["study", "--gpus", "1,1"][..], "--gpus: 1 is given twice"),
        // An empty entry is said to be one, not an unknown name "".
        (
            &["study", "--datasets", "reddit,,ogbn-arxiv"][..],
            "'--datasets <DATASETS>': an empty entry (two commas in a row",
        ),
        (
            &["study", "--models", "gcn,"][..],
            "'--models <MODELS>': an empty entry",
        ),
    ] {
        let out = fateplan(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
        assert!(stdout(&out).is_empty(), "nothing planned: {}", stdout(&out));
    }
}

/// A reader that quits early (a pager, `| head`) does not cost the
/// report asked for as a file: the grid goes on and `--out` is written
/// whole. Without `--out` the study stops, as a reader gone leaves
/// nothing to write for.
#[test]
fn study_out_is_written_when_standard_output_closes_early() {
    let dir = scratch("closed-stdout");
    let md = dir.join("study.md");
    for json in [&[][..], &["--json"]] {
        let args = [
            &[
                "study",
                "--models",
                "gcn",
                "--layers",
                "2",
                "--datasets",
                "ogbn-arxiv,reddit",
                "--gpus",
                "1",
                "--out",
                md.to_str().unwrap(),
            ][..],
            json,
        ]
        .concat();
        let out = with_stdout_closed(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = std::fs::read_to_string(&md).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(text.contains("| gcn | 2 | ogbn-arxiv |"), "{text}");
        assert!(text.contains("| gcn | 2 | reddit |"), "{text}");
        assert!(text.contains("## Summary"), "{text}");
        assert!(
            stderr(&out).contains("study     row 2 of 2"),
            "{}",
            stderr(&out)
        );
        std::fs::remove_file(&md).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
