//! `fateplan profile` and `train --compare-simulated` as a user runs them.
//! Sizes are `--quick` and tiny graphs; no figure's speed is asserted.

mod common;
use common::*;

use fateplan::planner::profile::DeviceKind;
use fateplan::planner::workload::ComputeClass;
use fateplan::planner::Profile;

#[test]
fn a_quick_profile_is_valid_measured_and_plans() {
    let dir = scratch("profile-quick");
    let path = dir.join("machine.json");
    let output = fateplan(&[
        "profile",
        "--quick",
        "--threads",
        "1",
        "--name",
        "test-machine",
        "--ssd-dir",
        dir.to_str().unwrap(),
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("written"), "{}", stdout(&output));
    let text = std::fs::read_to_string(&path).unwrap();
    let profile = Profile::from_json(&text, "machine.json").unwrap();
    assert_eq!(profile.name, "test-machine");
    if fateplan::runtime::cuda::probe(0).is_ok() {
        // On a GPU machine the profile describes the GPU.
        assert_eq!(profile.device.kind, DeviceKind::Gpu);
    } else {
        assert!(stderr(&output).contains("no GPU: skipped"));
        assert_eq!(profile.device.kind, DeviceKind::Cpu);
        assert!(profile.device.model.contains("(CPU backend, 1 thread)"));
        assert_eq!(profile.device.threads, Some(1));
        // Training at another thread count is told that the prediction is
        // of the profile's; at its own, nothing is said.
        let run = |threads: &str, json: &[&str]| {
            let graph = "planted:nodes=200,classes=3,features=8,seed=1";
            let p = path.to_str().unwrap();
            let args = ["train", "--graph", graph, "--epochs", "1", "--profile", p];
            let output = fateplan(&[&args[..], &["--threads", threads], json].concat());
            assert!(output.status.success(), "{}", stderr(&output));
            output.stdout
        };
        let train = |threads: &str| String::from_utf8_lossy(&run(threads, &[])).into_owned();
        let train_json = |threads: &str| -> serde_json::Value {
            serde_json::from_slice(&run(threads, &["--json"])).unwrap()
        };
        let note = "was measured with the CPU backend at 1 thread, and this run trains at 2 \
                    threads";
        let other = train("2");
        assert!(other.contains(note), "{other}");
        assert!(
            other.contains("--threads 2` measures the rates at 2"),
            "{other}"
        );
        let own = train("1");
        assert!(!own.contains("was measured with the CPU backend"), "{own}");
        // `--json` carries the note and both counts.
        let json = train_json("2");
        assert_eq!(json["device_threads"], 2, "{json}");
        assert_eq!(json["profile_threads"], 1, "{json}");
        let note = json["threads_note"].as_str().unwrap_or_default();
        assert!(
            note.contains("at 1 thread, and this run trains at 2"),
            "{json}"
        );
        assert!(train_json("1").get("threads_note").is_none());
        // The probe at each stage's start and at the end, on the
        // profile's thread; timed again around a run on as many threads,
        // and compared, or said not to compare on others.
        let steadiness = profile.steadiness.as_ref().unwrap();
        assert_eq!((steadiness.threads, steadiness.points.len()), (1, 11));
        assert_eq!(steadiness.points[6].before, "training iterations");
        assert_eq!(steadiness.points[10].before, "the end");
        assert!(steadiness.other_cores.is_some_and(|c| c >= 0.0));
        assert!(
            stdout(&output).contains("steady    the probe took"),
            "{}",
            stdout(&output)
        );
        let compared = |threads: &str, more: &[&str]| -> serde_json::Value {
            let args = [&["--json", "--compare-simulated"][..], more].concat();
            let json: serde_json::Value = serde_json::from_slice(&run(threads, &args)).unwrap();
            json["compare_simulated"].clone()
        };
        let own = compared("1", &[]);
        let machine = &own["machine"];
        assert_eq!(machine["profiled_s"], steadiness.median_s(), "{own}");
        let (now, ratio) = (machine["now_s"].as_f64(), machine["ratio"].as_f64());
        assert!(now.is_some_and(|s| s > 0.0), "{own}");
        assert_eq!(ratio, now.map(|s| s / steadiness.median_s()));
        assert!(own.get("machine_note").is_none(), "{own}");
        // A shipped profile records no probe: said so.
        let graph = "planted:nodes=200,classes=3,features=8,seed=1";
        let shipped = fateplan(&[
            "train",
            "--graph",
            graph,
            "--epochs",
            "1",
            "--compare-simulated",
            "--json",
        ]);
        assert!(shipped.status.success(), "{}", stderr(&shipped));
        let shipped: serde_json::Value = serde_json::from_slice(&shipped.stdout).unwrap();
        let note = shipped["compare_simulated"]["machine_note"].as_str();
        assert!(
            note.unwrap_or_default()
                .contains("profile cpu-small records no probe"),
            "{shipped}"
        );
        let other = compared("2", &[]);
        assert!(other.get("machine").is_none(), "{other}");
        let note = other["machine_note"].as_str().unwrap_or_default();
        assert!(
            note.contains("ran on 1 thread, this run has 2 threads"),
            "{other}"
        );
        let shared = compared("2", &["--devices", "2"]);
        assert!(shared.get("machine").is_none(), "{shared}");
        let note = shared["machine_note"].as_str().unwrap_or_default();
        assert!(
            note.contains("timed around a run on one device"),
            "{shared}"
        );
        // The gathers alone at three widths on the quick profile's three
        // graphs (scales 12, 14 and 16), and the gathers' fits made on
        // them.
        let curve = &profile.device.gather_curve;
        assert_eq!(curve.len(), 9, "{curve:?}");
        assert!(profile.sources["device.gather_curve"].contains("scales 12, 14, 16"));
        assert!(
            stdout(&output).contains("gathers   "),
            "{}",
            stdout(&output)
        );
        let on_curve: Vec<bool> = profile
            .device
            .class_rates
            .iter()
            .filter(|r| matches!(r.class, ComputeClass::Sparse | ComputeClass::SparseMasked))
            .map(|r| r.on_curve)
            .collect();
        // Both gathers' fits, masked or not, are on the curve.
        assert_eq!(on_curve, [true, true]);
    }
    for (field, value) in profile.figures() {
        let source = &profile.sources[field];
        assert!(source.starts_with("measured: "), "{field}: {source}");
        assert!(value.is_finite(), "{field}: {value}");
    }
    // The GEMM shapes hold the dropout measurement's wide-to-narrow
    // projection, in order of intensity, beside the GCN runs' four.
    let shapes = &profile.device.dense_shapes;
    assert_eq!(shapes.len(), 5, "{shapes:?}");
    assert!(shapes
        .windows(2)
        .all(|w| w[0].flops_per_byte < w[1].flops_per_byte));
    let source = &profile.sources["device.dense_shapes"];
    assert!(
        source.contains("the first layer's projection and its backward"),
        "{source}"
    );
    // Only the profile is left: the spill file and the temporary are gone.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("machine.json")]);

    let plan = fateplan(&[
        "plan",
        "--dataset",
        "ogbn-arxiv",
        "--layers",
        "2",
        "--hidden",
        "64",
        "--profile",
        path.to_str().unwrap(),
        "--json",
    ]);
    assert!(plan.status.success(), "{}", stderr(&plan));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["profile"]["name"], "test-machine");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--graph`: the GCN's operators are timed on the graph given (its own
/// features and classes), and the sources say so; the other figures are
/// measured as without it. A graph that does not load is refused by its
/// flag before anything is measured.
#[test]
fn a_profile_times_the_gcn_on_the_graph_given() {
    let dir = scratch("profile-graph");
    let spec = "planted:nodes=3000,classes=4,features=24,degree=6,seed=5";
    let output = fateplan(&[
        "profile",
        "--quick",
        "--threads",
        "1",
        "--ssd-dir",
        dir.to_str().unwrap(),
        "--graph",
        spec,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    // Under 4,096 nodes: said to price a larger graph poorly.
    assert!(
        stderr(&output).contains(&format!(
            "note: the graph given ({spec}) has 3000 nodes: its operators take microseconds"
        )),
        "{}",
        stderr(&output)
    );
    let profile = Profile::from_json(&stdout(&output), "stdout").unwrap();
    for field in [
        "device.sparse_bytes_per_s",
        "device.scatter_bytes_per_s",
        "device.class_rates",
        "device.dense_shapes",
    ] {
        let source = &profile.sources[field];
        assert!(
            source.contains(&format!("on the graph {spec} (3000 nodes"))
                && source.contains("24 features, 4 classes, given by --graph"),
            "{field}: {source}"
        );
    }
    assert!(
        profile.description.ends_with(&format!(
            "; the GCN's operators timed on the graph {spec} (--graph)"
        )),
        "{}",
        profile.description
    );
    // Its GEMM shapes start from the graph's 24 features.
    assert!(
        profile.sources["device.dense_shapes"].contains("24 -> "),
        "{}",
        profile.sources["device.dense_shapes"]
    );
    // The masks are priced on their own graph, as without --graph.
    assert!(
        profile.sources["device.mask_seconds_per_element"].contains("R-MAT"),
        "{}",
        profile.sources["device.mask_seconds_per_element"]
    );
    // The graph's own arrays are not an output's to overwrite.
    let folder = dir.join("graph");
    let generated = fateplan(&[
        "generate",
        "--graph",
        spec,
        "--out",
        folder.to_str().unwrap(),
    ]);
    assert!(generated.status.success(), "{}", stderr(&generated));
    let onto = folder.join("y.npy");
    let before = std::fs::read(&onto).unwrap();
    let refused = fateplan(&[
        "profile",
        "--quick",
        "--ssd-dir",
        dir.to_str().unwrap(),
        "--graph",
        folder.to_str().unwrap(),
        "-o",
        onto.to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("is an array of the --graph folder"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(std::fs::read(&onto).unwrap(), before);
    let bad = fateplan(&[
        "profile",
        "--quick",
        "--ssd-dir",
        dir.to_str().unwrap(),
        "--graph",
        "planted:nodes=0",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).starts_with("error: --graph planted:nodes=0: "),
        "{}",
        stderr(&bad)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_an_output_file_the_profile_is_printed() {
    let dir = scratch("profile-stdout");
    let output = fateplan(&[
        "profile",
        "--quick",
        "--threads",
        "1",
        "--ssd-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let profile = Profile::from_json(&stdout(&output), "stdout").unwrap();
    assert_eq!(profile.name, "measured");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_profile_input_names_what_is_wrong() {
    let dir = scratch("profile-bad");
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let missing = dir.join("missing");
    let in_missing = missing.join("p.json");
    let dir_arg = dir.to_str().unwrap();
    let cases: [(Vec<&str>, &[&str]); 11] = [
        (
            vec!["--ssd-dir", missing.to_str().unwrap()],
            &["--ssd-dir", "missing", "no such directory"],
        ),
        // The name `train` gives the folder is the same flag.
        (
            vec!["--spill-dir", missing.to_str().unwrap()],
            &["--ssd-dir", "missing", "no such directory"],
        ),
        (
            vec!["--ssd-dir", file.to_str().unwrap()],
            &["--ssd-dir", "a-file", "is not a directory"],
        ),
        (
            vec!["--ssd-dir", dir_arg, "-o", in_missing.to_str().unwrap()],
            &["-o", "missing/p.json", "no such directory"],
        ),
        (
            vec!["--ssd-dir", dir_arg, "-o", dir_arg],
            &["-o", "is a directory"],
        ),
        // A folder with no room for the measurement's file: named by its
        // flag.
        (
            vec!["--ssd-dir", "/proc"],
            &["--ssd-dir /proc: ", "/proc: free space: 0 bytes free"],
        ),
        (
            vec!["--ssd-dir", dir_arg, "--name", " "],
            &["--name", "needs a name"],
        ),
        (
            vec!["--ssd-dir", dir_arg, "--name", "A100-80G"],
            &["--name A100-80G: the name of a profile shipped with fateplan"],
        ),
        (
            vec!["--ssd-dir", dir_arg, "--threads", "0"],
            &["'--threads <THREADS>': 0 is less than 1"],
        ),
        (
            vec!["--ssd-dir", dir_arg, "--threads", "100000"],
            &["--threads 100000", "cores"],
        ),
        // Fewer nodes than the partitions the GCN is timed in, named
        // before anything is measured.
        (
            vec!["--ssd-dir", dir_arg, "--graph", "rmat:scale=1,classes=2"],
            &[
                "--graph rmat:scale=1,classes=2: 2 nodes, fewer than the 4 partitions",
                "with --quick; give a graph of at least 4 nodes",
            ],
        ),
    ];
    for (args, expected) in cases {
        let output = fateplan(&[&["profile", "--quick"][..], &args].concat());
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let message = stderr(&output);
        for part in expected {
            assert!(message.contains(part), "{args:?}: {message}");
        }
        assert!(!message.contains("panicked"), "{message}");
    }
    // Nothing was written next to the a-file.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn train_compares_with_the_simulator() {
    let spill = scratch("compare-spill");
    let graph = "planted:nodes=600,classes=4,features=16,val=100,test=200,seed=2";
    let output = fateplan(&[
        "train",
        "--graph",
        graph,
        "--epochs",
        "3",
        "--partitions",
        "4",
        "--policy",
        "offload-ssd-all",
        "--spill-dir",
        spill.to_str().unwrap(),
        "--compare-simulated",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let c = &report["compare_simulated"];
    assert_eq!(c["profile"], "cpu-small");
    assert_eq!(c["simulated_violations"], 0);
    let iteration = &c["iteration_s"];
    // The median iteration of the epochs after the first (a steady one),
    // with its own parts; the report's `iteration_s` is their mean.
    assert_eq!(iteration["measured"], report["median"]["iteration_s"]);
    assert_eq!(c["compute_s"]["measured"], report["median"]["compute_s"]);
    assert_eq!(
        c["measured_epochs"],
        "the median of the 2 epochs after the first (the faster middle one)"
    );
    // Of two timed epochs the median is the lower: never above the mean.
    let mean = report["iteration_s"].as_f64().unwrap();
    assert!(iteration["measured"].as_f64().unwrap() <= mean, "{report}");
    let (measured, simulated) = (
        iteration["measured"].as_f64().unwrap(),
        iteration["simulated"].as_f64().unwrap(),
    );
    assert!(measured > 0.0 && simulated > 0.0);
    assert_eq!(iteration["ratio"].as_f64().unwrap(), measured / simulated);
    // Both sides move the plan's bytes, on every link and stream.
    let names: Vec<&str> = c["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pcie_h2d", "pcie_d2h", "ssd"]);
    for row in c["links"]
        .as_array()
        .unwrap()
        .iter()
        .chain(c["streams"].as_array().unwrap())
    {
        assert_eq!(row["bytes"]["measured"], row["bytes"]["simulated"], "{row}");
    }
    let ssd = &c["links"][2];
    assert!(ssd["bytes"]["measured"].as_u64().unwrap() > 0);
    assert!(ssd["busy_s"]["measured"].as_f64().unwrap() > 0.0);
    // The traced iteration's operators by family: a linear layer per
    // layer and partition (2 × 4), each family timed and modelled.
    let families = c["operators"].as_array().unwrap();
    let count = |name: &str| {
        families
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| f["count"].as_u64().unwrap())
    };
    assert_eq!(count("linear"), Some(8), "{families:?}");
    assert_eq!(count("linear_bwd"), Some(8), "{families:?}");
    assert!(count("agg").unwrap() >= 8, "{families:?}");
    assert!(count("loss").unwrap() >= 1, "{families:?}");
    for family in families {
        assert!(
            family["seconds"]["measured"].as_f64().unwrap() > 0.0,
            "{family}"
        );
        assert!(
            family["seconds"]["simulated"].as_f64().unwrap() > 0.0,
            "{family}"
        );
    }

    let text = fateplan(&[
        "train",
        "--graph",
        graph,
        "--epochs",
        "2",
        "--partitions",
        "4",
        "--compare-simulated",
    ]);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    for part in [
        "compared",
        "iteration",
        "pcie_h2d",
        "ratio",
        "operators",
        "linear_bwd",
        "note      profile cpu-small is one shipped with fateplan, not this machine",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    // A profile of its own (here the shipped one with another figure,
    // under a name of its own) gets no note.
    let own = spill.join("own.json");
    let shipped = include_str!("../profiles/cpu-small.json");
    let changed = shipped.replacen("\"op_overhead_s\": 2e-6", "\"op_overhead_s\": 3e-6", 1);
    assert_ne!(changed, shipped);
    // Under the shipped one's name it is refused: reports would name
    // that profile for figures that are not its.
    std::fs::write(&own, &changed).unwrap();
    let refused = fateplan(&["plan", "--profile", own.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("name: \"cpu-small\" is the name of a built-in profile"),
        "{}",
        stderr(&refused)
    );
    let changed = changed.replacen("\"name\": \"cpu-small\"", "\"name\": \"cpu-edited\"", 1);
    std::fs::write(&own, changed).unwrap();
    let own = own.to_str().unwrap();
    let args = ["train", "--graph", graph, "--epochs", "2", "--profile", own];
    let text = fateplan(&[&args[..], &["--compare-simulated"]].concat());
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(
        text.contains("on profile cpu-edited") && !text.contains("note "),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&spill);
}

/// A plan that recomputes: the measured compute holds its
/// recomputations, so the simulated one beside it does too (the
/// simulator's operators and recomputations together), and the
/// recomputations have a row of their own, on both sides.
#[test]
fn compare_simulated_counts_recomputation_in_compute_on_both_sides() {
    let dir = scratch("compare-recompute");
    let plan = dir.join("plan.json");
    let graph = "planted:nodes=600,classes=4,features=16,val=100,test=200,seed=2";
    let args = [
        "train",
        "--graph",
        graph,
        "--epochs",
        "3",
        "--partitions",
        "4",
        "--policy",
        "recompute-all",
        "--compare-simulated",
    ];
    let json_args = [
        &args[..],
        &["--json", "--save-plan", plan.to_str().unwrap()],
    ]
    .concat();
    let output = fateplan(&json_args);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let c = &report["compare_simulated"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    assert_eq!(
        c["recompute_s"]["measured"],
        report["median"]["recompute_s"]
    );
    assert!(f(&c["recompute_s"]["measured"]) > 0.0, "{c}");
    assert!(f(&c["compute_s"]["measured"]) >= f(&c["recompute_s"]["measured"]));
    // The simulated side is the simulator's report of the same plan.
    let sim = fateplan(&["simulate", plan.to_str().unwrap(), "--json"]);
    assert!(sim.status.success(), "{}", stderr(&sim));
    let sim: serde_json::Value = serde_json::from_slice(&sim.stdout).unwrap();
    assert!(f(&sim["recompute_s"]) > 0.0, "{sim}");
    assert_eq!(f(&c["recompute_s"]["simulated"]), f(&sim["recompute_s"]));
    assert_eq!(
        f(&c["compute_s"]["simulated"]),
        f(&sim["compute_s"]) + f(&sim["recompute_s"])
    );
    // The text has the row; a plan that recomputes nothing has none.
    let text = fateplan(&args);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(text.contains("\n          recompute "), "{text}");
    // Of 3 epochs, the time line gives the median of the two after the
    // first beside their mean.
    assert!(
        text.contains("(the mean after the first epoch; their median "),
        "{text}"
    );
    let retain = [
        &args[..7],
        &["--policy", "retain-all", "--compare-simulated"],
    ]
    .concat();
    let text = fateplan(&retain);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(
        text.contains("compute") && !text.contains(" recompute "),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A profile measured on a machine other programs shared is warned of
/// where it is loaded, and so is a plan made on it, where `simulate` and
/// `train --plan` read it; a fraction given to `curve` as a budget is
/// told how a share is written.
#[test]
fn an_unsteady_profile_is_warned_of_in_its_plans_too() {
    let dir = scratch("unsteady");
    let mut profile: serde_json::Value =
        serde_json::from_str(include_str!("../profiles/cpu-small.json")).unwrap();
    profile["name"] = "shared-machine".into();
    profile["steadiness"] = serde_json::json!({
        "probe": "spmm-gemm-copy/1",
        "threads": 2,
        "points": [
            {"before": "host memory", "seconds": 0.02},
            {"before": "the end", "seconds": 0.021}
        ],
        "other_cores": 1.5
    });
    let path = dir.join("shared.json");
    std::fs::write(&path, profile.to_string()).unwrap();
    let plan = dir.join("plan.json");
    let warning = "other programs took 1.50 cores' worth of CPU time while it was measured";
    let made = fateplan(&[
        "plan",
        "--dataset",
        "ogbn-arxiv",
        "--partitions",
        "4",
        "--profile",
        path.to_str().unwrap(),
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(made.status.success(), "{}", stderr(&made));
    assert!(stderr(&made).contains(warning), "{}", stderr(&made));
    let replayed = fateplan(&["simulate", plan.to_str().unwrap()]);
    assert!(replayed.status.success(), "{}", stderr(&replayed));
    let said = format!(
        "warning: {}: the plan's profile shared-machine: {warning}",
        plan.display()
    );
    assert!(stderr(&replayed).contains(&said), "{}", stderr(&replayed));
    // `train --json` carries it.
    let graph = "planted:nodes=200,classes=3,features=8,seed=1";
    let p = path.to_str().unwrap();
    let trained = fateplan(&[
        "train",
        "--graph",
        graph,
        "--epochs",
        "1",
        "--profile",
        p,
        "--json",
    ]);
    assert!(trained.status.success(), "{}", stderr(&trained));
    let json: serde_json::Value = serde_json::from_slice(&trained.stdout).unwrap();
    let why = json["profile_unsteady"].as_str().unwrap_or_default();
    assert!(why.contains(warning), "{json}");
    let curve = fateplan(&["curve", "--dataset", "ogbn-arxiv", "--budgets", "0.5"]);
    assert_eq!(curve.status.code(), Some(1));
    let hint = "a share of the retain-all peak is written 50%";
    assert!(stderr(&curve).contains(hint), "{}", stderr(&curve));
    std::fs::remove_dir_all(&dir).unwrap();
}
