//! `fateplan simulate` as a user runs it.

use std::path::{Path, PathBuf};

mod common;
use common::*;

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Plans ogbn-arxiv on a100-80g with `extra` flags into `dir/plan.json`.
fn plan_arxiv(dir: &Path, extra: &[&str]) -> PathBuf {
    let plan = dir.join("plan.json");
    let mut args = vec!["plan", "--dataset", "ogbn-arxiv", "-o", path(&plan)];
    args.extend_from_slice(extra);
    let out = fateplan(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    plan
}

/// The a100-80g profile, changed by `edit`, written to `dir/name.json`.
fn profile_file(dir: &Path, name: &str, edit: impl Fn(&mut fateplan::planner::Profile)) -> PathBuf {
    let mut profile = fateplan::profiles::builtin("a100-80g").unwrap();
    profile.name = name.to_string();
    edit(&mut profile);
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, profile.to_json_pretty()).unwrap();
    file
}

/// The plan in `plan` as a build before some of its counts wrote it:
/// `clear` applied to each operator, the digest made again, written to
/// `dir/older.json`.
fn older_plan(
    dir: &Path,
    plan: &Path,
    clear: impl Fn(&mut fateplan::planner::workload::Op),
) -> PathBuf {
    let text = std::fs::read_to_string(plan).unwrap();
    let mut older = fateplan::planner::plan::Plan::from_json(&text, "plan.json").unwrap();
    older.workload.definition.ops.iter_mut().for_each(clear);
    older.workload.digest = older.workload.definition.digest();
    let file = dir.join("older.json");
    std::fs::write(&file, older.to_json()).unwrap();
    file
}

#[test]
fn simulates_a_plan_with_json_trace_and_picture() {
    let dir = scratch("json");
    let plan = plan_arxiv(&dir, &["--hbm-budget", "200MiB"]);
    let (trace, svg) = (dir.join("trace.json"), dir.join("mem.svg"));
    let out = fateplan(&[
        "simulate",
        path(&plan),
        "--json",
        "--seed",
        "11",
        "--trace",
        path(&trace),
        "--memory-svg",
        path(&svg),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "iteration_s",
        "compute_s",
        "recompute_s",
        "exposed_transfer_s",
    ] {
        assert!(report[key].as_f64().is_some(), "missing {key}");
    }
    for tier in ["hbm", "host", "ssd"] {
        assert!(
            report["peak_bytes"][tier].is_u64(),
            "missing peak_bytes.{tier}"
        );
    }
    assert_eq!(report["violations"].as_array().map(Vec::len), Some(0));
    assert_eq!(report["seed"], 11);
    assert!(report["peak_bytes"]["hbm"].as_u64().unwrap() <= 200 << 20);
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    assert!(trace["traceEvents"].as_array().unwrap().len() > 100);
    slices_nest_or_follow(&trace);
    // A plan whose slices met end to start where each was rounded apart.
    let met = dir.join("met");
    std::fs::create_dir_all(&met).unwrap();
    let tight = plan_arxiv(
        &met,
        &["--layers", "2", "--partitions", "4", "--hbm-budget", "25%"],
    );
    let tight_trace = met.join("trace.json");
    let out = fateplan(&["simulate", path(&tight), "--trace", path(&tight_trace)]);
    assert!(out.status.success(), "{}", stderr(&out));
    slices_nest_or_follow(&serde_json::from_slice(&std::fs::read(&tight_trace).unwrap()).unwrap());
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(svg.matches("class=\"budget\"").count(), 3);

    // The human table names the seed and compares with the prediction.
    let out = fateplan(&["simulate", path(&plan)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("seed 0") && text.contains("predicted by the planner"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn what_if_less_host_memory_reports_the_violation_and_exits_3() {
    let dir = scratch("host");
    let plan = plan_arxiv(&dir, &["--policy", "offload-host-all"]);
    let small = profile_file(&dir, "small-host", |p| p.host.memory_bytes = 64 << 20);
    let out = fateplan(&["simulate", path(&plan), "--profile", path(&small), "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("violation"), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &report["violations"][0];
    assert_eq!(first["kind"], "over_budget");
    assert_eq!(first["tier"], "host");
    assert!(first["time_s"].is_number() && first["bytes"].as_u64().unwrap() > 64 << 20);
    assert!(first["tensor"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(report["budgets"]["host_bytes"], 64u64 << 20);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--hbm-budget` replays a plan under a smaller device: a plan made for
/// 200 MiB breaks 100 MiB (exit 3, the violations listed, the plan's
/// budgets beside the given), holds under its own peak; a profile that
/// holds less is said to lower the budget; a share is refused, and bad
/// values name the flag.
#[test]
fn what_if_a_smaller_device_budget_replays_the_plan_under_it() {
    let dir = scratch("hbm-what-if");
    let plan = plan_arxiv(&dir, &["--hbm-budget", "200MiB"]);
    let replay = |extra: &[&str]| {
        let mut args = vec!["simulate", path(&plan), "--json"];
        args.extend_from_slice(extra);
        fateplan(&args)
    };
    let report = |out: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let own = replay(&[]);
    assert!(own.status.success(), "{}", stderr(&own));
    let own = report(&own);
    assert!(own.get("planned_budgets").is_none(), "{own}");
    let peak = own["peak_bytes"]["hbm"].as_u64().unwrap();
    assert!(peak > 100 << 20 && peak <= 200 << 20, "{peak}");

    let smaller = replay(&["--hbm-budget", "100MiB"]);
    assert_eq!(smaller.status.code(), Some(3), "{}", stderr(&smaller));
    // The report's keys in their order, what it adds after them, as a
    // replay that adds nothing gives them.
    let keys = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("  \"") && !l.starts_with("   "))
            .map(|l| l.trim().split('"').nth(1).unwrap().to_string())
            .collect()
    };
    let (own_keys, smaller_keys) = (
        keys(&stdout(&fateplan(&["simulate", path(&plan), "--json"]))),
        keys(&stdout(&smaller)),
    );
    assert_eq!(own_keys[0], "format_version", "{own_keys:?}");
    assert_eq!(
        smaller_keys,
        [&own_keys[..], &["planned_budgets".to_string()]].concat()
    );
    let smaller = report(&smaller);
    assert_eq!(smaller["budgets"]["hbm_bytes"], 100u64 << 20);
    assert_eq!(smaller["planned_budgets"]["hbm_bytes"], 200u64 << 20);
    assert_eq!(smaller["violations"][0]["kind"], "over_budget");
    assert_eq!(smaller["violations"][0]["tier"], "hbm");

    // At its own peak it holds, and the text says what was replayed.
    let at_peak = fateplan(&["simulate", path(&plan), "--hbm-budget", &peak.to_string()]);
    assert!(at_peak.status.success(), "{}", stderr(&at_peak));
    let text = stdout(&at_peak);
    assert!(
        text.contains("what-if   replayed under hbm ") && text.contains("(the plan's: "),
        "{text}"
    );
    // Said before the figures it changes.
    assert!(
        text.find("what-if ").unwrap() < text.find("tier ").unwrap(),
        "{text}"
    );
    let same = fateplan(&["simulate", path(&plan), "--hbm-budget", "200MiB"]);
    assert!(
        stdout(&same).contains("what-if   replayed under hbm 200 MiB (the plan's own)"),
        "{}",
        stdout(&same)
    );

    // A profile that holds less lowers a budget, and the line says so.
    let small = profile_file(&dir, "small-device", |p| p.device.hbm_bytes = 150 << 20);
    let capped = fateplan(&["simulate", path(&plan), "--profile", path(&small)]);
    assert_eq!(capped.status.code(), Some(3), "{}", stderr(&capped));
    assert!(
        stdout(&capped).contains(
            "what-if   replayed under hbm 150 MiB (the plan's: 200 MiB; profile \"small-device\"'s capacity)"
        ),
        "{}",
        stdout(&capped)
    );
    // A bare number is bytes, and warned of.
    let bare = replay(&["--hbm-budget", "25"]);
    assert_eq!(bare.status.code(), Some(3), "{}", stderr(&bare));
    assert!(
        stderr(&bare).contains("25 is 25 bytes"),
        "{}",
        stderr(&bare)
    );
    // Which simulate reads as bytes, so it offers no share; the tier's
    // use says how far over.
    assert!(!stderr(&bare).contains('%'), "{}", stderr(&bare));
    let text = stdout(&fateplan(&[
        "simulate",
        path(&plan),
        "--hbm-budget",
        "1KiB",
    ]));
    let hbm = text.lines().find(|l| l.starts_with("hbm ")).unwrap();
    assert!(hbm.contains("1.00 KiB") && hbm.contains("x "), "{text}");
    for (value, said) in [
        ("0", "a device budget of 0 bytes holds nothing"),
        ("-5%", "expected a positive percentage"),
        ("25%", "simulate replays under bytes (such as 4GiB)"),
        ("0.5", "simulate replays under bytes (such as 4GiB); a share's bytes depend on how the plan was sized: `fateplan plan ... --hbm-budget 50%`"),
        ("10TiB", "; to replay on a larger machine, give its profile (--profile)"),
    ] {
        let out = replay(&["--hbm-budget", value]);
        assert_eq!(out.status.code(), Some(1), "{value}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{value}: {}", stderr(&out));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn what_if_half_the_ssd_bandwidth_is_slower() {
    let dir = scratch("ssd");
    let plan = plan_arxiv(&dir, &["--policy", "offload-ssd-all"]);
    let slow = profile_file(&dir, "half-ssd", |p| {
        p.ssd.read_bytes_per_s /= 2.0;
        p.ssd.write_bytes_per_s /= 2.0;
    });
    let iteration = |extra: &[&str]| {
        let mut args = vec!["simulate", path(&plan), "--json"];
        args.extend_from_slice(extra);
        let out = fateplan(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["iteration_s"].as_f64().unwrap()
    };
    let (fast, slow) = (iteration(&[]), iteration(&["--profile", path(&slow)]));
    assert!(slow > 1.5 * fast, "{fast} s against {slow} s");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_plans_name_the_file() {
    let dir = scratch("bad");
    let missing = dir.join("missing.json");
    let out = fateplan(&["simulate", path(&missing)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("missing.json"), "{}", stderr(&out));
    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{\"format_version\": 1}").unwrap();
    let out = fateplan(&["simulate", path(&broken)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("broken.json"), "{}", stderr(&out));
    let plan = plan_arxiv(&dir, &[]);
    let out = fateplan(&["simulate", path(&plan), "--profile", "tpu"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("a100-80g"), "{}", stderr(&out));
    // A plan of 4 GPUs on a profile with no link between devices is
    // refused by name, not left to the replay.
    let four = plan_arxiv(&dir, &["--gpus", "4"]);
    let out = fateplan(&["simulate", path(&four), "--profile", "cpu-small"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("gpus 4 on profile \"cpu-small\": the profile has no peer section"),
        "{}",
        stderr(&out)
    );
    // Fields a plan file cannot hold, each named with the file.
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit, &str); 4] = [
        (
            "gpus0.json",
            |p| p["gpus"] = 0.into(),
            "gpus0.json: plan field gpus: gpus 0",
        ),
        (
            "host.json",
            |p| p["budgets"]["host_bytes"] = 1_000_000_000_000_000u64.into(),
            "host.json: plan field budgets.host_bytes: 1000000000000000 bytes, above the",
        ),
        (
            "small-hbm.json",
            |p| p["profile"]["device"]["hbm_bytes"] = 1000.into(),
            "small-hbm.json: plan field budgets.hbm_bytes",
        ),
        (
            "negative.json",
            |p| p["predicted"]["iteration_s"] = (-1.0).into(),
            "negative.json: plan field predicted.iteration_s: -1",
        ),
    ];
    let text = std::fs::read_to_string(&plan).unwrap();
    // A profile named as another shipped one is replayed on its own
    // figures, and said to be.
    let mut renamed: serde_json::Value = serde_json::from_str(&text).unwrap();
    renamed["profile"]["name"] = "h200".into();
    let file = dir.join("renamed.json");
    std::fs::write(&file, renamed.to_string()).unwrap();
    let out = fateplan(&["simulate", path(&file)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("note      the plan's profile \"h200\" is not the one shipped"),
        "{}",
        stdout(&out)
    );
    // A profile file under a built-in profile's name with other figures
    // (an edited copy) is refused: reports would name that profile.
    let original: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut edited = original["profile"].clone();
    let h2d = edited["pcie"]["h2d_bytes_per_s"].as_f64().unwrap();
    edited["pcie"]["h2d_bytes_per_s"] = (h2d / 10.0).into();
    let file = dir.join("same-name-profile.json");
    std::fs::write(&file, edited.to_string()).unwrap();
    let out = fateplan(&["simulate", path(&plan), "--profile", path(&file)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("name: \"a100-80g\" is the name of a built-in profile"),
        "{}",
        stderr(&out)
    );
    // Under the plan's profile's own name (a profile measured again,
    // both `measured`) it is said to differ, in the text and the JSON.
    let mut measured: serde_json::Value = serde_json::from_str(&text).unwrap();
    measured["profile"]["name"] = "measured".into();
    let plan = dir.join("measured-plan.json");
    std::fs::write(&plan, measured.to_string()).unwrap();
    edited["name"] = "measured".into();
    std::fs::write(&file, edited.to_string()).unwrap();
    let out = fateplan(&["simulate", path(&plan), "--profile", path(&file)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("as the plan's is, with other figures: the replay is on its"),
        "{}",
        stdout(&out)
    );
    let out = fateplan(&["simulate", path(&plan), "--profile", path(&file), "--json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["profile_differs_from_planned"], true, "{json}");
    // The plan's own figures, given back, are not, with other words
    // (the description) or without.
    let mut words = measured["profile"].clone();
    words["description"] = "the same figures".into();
    for (name, profile) in [("same.json", &measured["profile"]), ("words.json", &words)] {
        let file = dir.join(name);
        std::fs::write(&file, profile.to_string()).unwrap();
        let out = fateplan(&["simulate", path(&plan), "--profile", path(&file)]);
        assert!(
            !stdout(&out).contains("with other figures"),
            "{}",
            stdout(&out)
        );
        let out = fateplan(&["simulate", path(&plan), "--profile", path(&file), "--json"]);
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert!(json.get("profile_differs_from_planned").is_none(), "{name}");
    }
    for (name, edit, expected) in edits {
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        edit(&mut value);
        let file = dir.join(name);
        std::fs::write(&file, value.to_string()).unwrap();
        let out = fateplan(&["simulate", path(&file)]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
    }
    // Predictions that differ from what the schedule gives (a plan edited
    // by hand) are derived again, and the replay says so.
    let recomputed: [(&str, Edit, &str); 2] = [
        (
            "moved.json",
            |p| p["predicted"]["bytes_moved"]["d2h"] = 1.into(),
            "predicted.bytes_moved.d2h: 1 -> ",
        ),
        (
            "peak-step.json",
            |p| p["predicted"]["peak_step"]["hbm"] = 99_999.into(),
            "predicted.peak_step.hbm: 99999 -> ",
        ),
    ];
    let replayed = fateplan(&["simulate", path(&plan), "--json"]);
    let replayed: serde_json::Value = serde_json::from_str(&stdout(&replayed)).unwrap();
    assert!(replayed.get("predictions_recomputed").is_none());
    for (name, edit, expected) in recomputed {
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        edit(&mut value);
        let file = dir.join(name);
        std::fs::write(&file, value.to_string()).unwrap();
        let out = fateplan(&["simulate", path(&file)]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        assert!(
            stdout(&out).contains(&format!(
                "note      the plan's recorded predictions differ from what its schedule gives \
                 (a plan edited by hand, or made by another build): predicted again ({expected}"
            )),
            "{}",
            stdout(&out)
        );
        let out = fateplan(&["simulate", path(&file), "--json"]);
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(
            json["predictions_recomputed"].as_array().unwrap().len(),
            1,
            "{json}"
        );
        // The same replay as the plan as written.
        assert_eq!(json["iteration_s"], replayed["iteration_s"], "{name}");
        assert_eq!(
            json["predicted_iteration_s"],
            replayed["predicted_iteration_s"]
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A plan edited to break its own budget, or to leave out the load an
/// operator needs, is replayed rather than refused: the report names the
/// tier, bytes and tensor, says what the planner's own check found, and
/// the exit status is 3 (`train --plan` still refuses it as bad input).
#[test]
fn a_plan_breaking_its_promises_is_replayed_and_marked() {
    let dir = scratch("broken-promises");
    let plan = plan_arxiv(&dir, &[]);
    let text = std::fs::read_to_string(&plan).unwrap();
    let original: serde_json::Value = serde_json::from_str(&text).unwrap();
    let out = fateplan(&["simulate", path(&plan)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("rejected"), "{}", stdout(&out));

    // Budget: a tenth of the device peak the plan records.
    let mut tight = original.clone();
    let peak = tight["predicted"]["peak_bytes"]["hbm"].as_u64().unwrap();
    tight["budgets"]["hbm_bytes"] = (peak / 10).into();
    let file = dir.join("tight.json");
    std::fs::write(&file, tight.to_string()).unwrap();
    let out = fateplan(&["simulate", path(&file), "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &report["violations"][0];
    assert_eq!(first["kind"], "over_budget");
    assert_eq!(first["tier"], "hbm");
    assert_eq!(first["budget_bytes"], peak / 10);
    assert!(first["bytes"].as_u64().unwrap() > peak / 10);
    let rejected = report["rejected_by_sanity_pass"].as_str().unwrap();
    assert!(rejected.contains("over its budget"), "{rejected}");
    let out = fateplan(&["simulate", path(&file)]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stdout(&out).contains("rejected  by the planner's own check"));
    assert!(
        stderr(&out).contains("violations of the plan (listed in the report)")
            || stderr(&out).contains("1 violation of the plan"),
        "{}",
        stderr(&out)
    );

    // The reload an operator waits for, left out of the schedule of a
    // plan at a quarter of the device peak (which moves tensors).
    let moving = plan_arxiv(&dir, &["--partitions", "4", "--hbm-budget", "25%"]);
    let text = std::fs::read_to_string(&moving).unwrap();
    let mut missing: serde_json::Value = serde_json::from_str(&text).unwrap();
    let schedule = missing["schedule"].as_array_mut().unwrap();
    let load = schedule
        .iter()
        .rposition(|e| e["action"] == "reload")
        .expect("the plan at a quarter of its peak reloads a tensor");
    schedule.remove(load);
    let file = dir.join("missing-reload.json");
    std::fs::write(&file, missing.to_string()).unwrap();
    let out = fateplan(&["simulate", path(&file), "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["violations"][0]["kind"], "missing_input", "{report}");
    assert!(report["rejected_by_sanity_pass"].is_string(), "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// On each track of a trace, a slice starts at or after the end of the
/// one before it, or lies within it, as trace viewers assume.
fn slices_nest_or_follow(trace: &serde_json::Value) {
    let nanos = |v: &serde_json::Value| (v.as_f64().unwrap() * 1000.0).round() as i64;
    // Per (pid, tid): each slice's start and end in nanoseconds, and name.
    type Slices = Vec<(i64, i64, String)>;
    let mut tracks: std::collections::BTreeMap<(i64, i64), Slices> = Default::default();
    for event in trace["traceEvents"].as_array().unwrap() {
        if event["ph"] == "X" {
            let start = nanos(&event["ts"]);
            let key = (
                event["pid"].as_i64().unwrap(),
                event["tid"].as_i64().unwrap(),
            );
            let name = event["name"].as_str().unwrap_or_default().to_string();
            tracks
                .entry(key)
                .or_default()
                .push((start, start + nanos(&event["dur"]), name));
        }
    }
    for (track, mut slices) in tracks {
        slices.sort();
        for pair in slices.windows(2) {
            let ((_, end, a), (start, last, b)) = (&pair[0], &pair[1]);
            assert!(
                start >= end || last <= end,
                "track {track:?}: {b} starts at {start} ns, before {a} ends at {end}"
            );
        }
    }
}

/// A GAT plan saved before its edge operators counted their edge heads
/// and rows, replayed on a profile with times for them, is replayed, and
/// the report says those operators are priced by their class's field; a
/// plan of this build is not told so.
#[test]
fn an_older_gat_plan_on_a_profile_with_head_and_row_times_is_told_so() {
    use fateplan::planner::profile::ClassRate;
    use fateplan::planner::workload::ComputeClass;
    let dir = scratch("older-gat");
    let plan = dir.join("plan.json");
    let out = fateplan(&[
        "plan",
        "--graph",
        "rmat:scale=10,features=16,classes=4,seed=1",
        "--model",
        "gat",
        "--layers",
        "2",
        "--hidden",
        "16",
        "--heads",
        "2",
        "--partitions",
        "2",
        "--profile",
        "a100-80g",
        "-o",
        path(&plan),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let profile = profile_file(&dir, "timed", |p| {
        p.device.class_rates = vec![ClassRate {
            class: ComputeClass::AttentionBackward,
            bytes_per_s: 1e12,
            seconds_per_edge: 1e-10,
            seconds_per_edge_head: 1e-11,
            seconds_per_row: 1e-10,
            on_curve: false,
        }];
    });
    let note = "records no edge heads or rows";
    let out = fateplan(&["simulate", path(&plan), "--profile", path(&profile)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains(note), "{}", stdout(&out));
    // The same plan as a build before the counts wrote it.
    let older_file = older_plan(&dir, &plan, |op| {
        (op.cost.edge_heads, op.cost.rows) = (0, 0)
    });
    let out = fateplan(&["simulate", path(&older_file), "--profile", path(&profile)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(note) && text.contains("attention_bwd[l") && text.contains("\"timed\""),
        "{text}"
    );
    // The JSON names the operator too; a plan of this build's has none.
    let json = |plan: &Path| {
        let out = fateplan(&[
            "simulate",
            path(plan),
            "--profile",
            path(&profile),
            "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let older_json = json(&older_file);
    assert!(
        older_json["priced_by_field"]
            .as_str()
            .is_some_and(|op| op.starts_with("attention_bwd[l")),
        "{older_json}"
    );
    assert!(json(&plan).get("priced_by_field").is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A GCN plan saved before its gathers recorded their working set,
/// replayed on a profile that prices gathers by it, is replayed at the
/// curve's largest working set, and the report says so; a plan of this
/// build is not told so.
#[test]
fn an_older_gcn_plan_on_a_profile_with_a_gather_curve_is_told_so() {
    use fateplan::planner::profile::{ClassRate, GatherPoint};
    use fateplan::planner::workload::ComputeClass;
    let dir = scratch("older-gcn");
    let plan = dir.join("plan.json");
    let out = fateplan(&[
        "plan",
        "--graph",
        "rmat:scale=10,features=16,classes=4,seed=1",
        "--layers",
        "2",
        "--hidden",
        "16",
        "--partitions",
        "2",
        "--profile",
        "a100-80g",
        "-o",
        path(&plan),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let profile = profile_file(&dir, "curved", |p| {
        p.device.gather_curve = [(1u64 << 16, 1e-9), (1 << 30, 4e-9)]
            .into_iter()
            .map(|(set_bytes, seconds_per_edge)| GatherPoint {
                width: 16,
                set_bytes,
                seconds_per_edge,
            })
            .collect();
        p.device.class_rates = vec![ClassRate {
            class: ComputeClass::Sparse,
            bytes_per_s: 1e12,
            seconds_per_edge: 1e-10,
            seconds_per_edge_head: 0.0,
            seconds_per_row: 1e-10,
            on_curve: true,
        }];
    });
    let note = "records no working set";
    let run = |plan: &Path, json: bool| {
        let mut args = vec!["simulate", path(plan), "--profile", path(&profile)];
        if json {
            args.push("--json");
        }
        let out = fateplan(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    assert!(!stdout(&run(&plan, false)).contains(note));
    let older_file = older_plan(&dir, &plan, |op| {
        (op.cost.gather_width, op.cost.gather_set_bytes) = (0, 0)
    });
    let text = stdout(&run(&older_file, false));
    assert!(
        text.contains(note) && text.contains("agg[l") && text.contains("\"curved\""),
        "{text}"
    );
    let json =
        |plan: &Path| serde_json::from_slice::<serde_json::Value>(&run(plan, true).stdout).unwrap();
    let older_json = json(&older_file);
    assert!(
        older_json["priced_at_curve_top"]
            .as_str()
            .is_some_and(|op| op.starts_with("agg")),
        "{older_json}"
    );
    assert!(json(&plan).get("priced_at_curve_top").is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}
