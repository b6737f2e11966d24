//! `fateplan train` as a user runs it.

use std::process::Output;

mod common;
use common::*;

fn json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "fateplan failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("--json prints JSON")
}

/// The `sweep` line of a run that must have succeeded.
fn sweep_line(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "fateplan failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .find(|l| l.starts_with("sweep "))
        .unwrap_or_else(|| panic!("no sweep line: {stdout}"))
        .to_string()
}

/// Kipf and Welling's GCN on Cora: 2 layers, 16 hidden, dropout 0.5,
/// lr 0.01, weight decay 5e-4 on the first layer, 200 epochs. The
/// published test accuracy is 0.815.
#[test]
fn cora_gcn_reaches_the_published_accuracy() {
    let Some(dir) = cora() else { return };
    let report = json(&fateplan(&[
        "train",
        "--graph",
        dir.to_str().unwrap(),
        "--model",
        "gcn",
        "--layers",
        "2",
        "--hidden",
        "16",
        "--dropout",
        "0.5",
        "--lr",
        "0.01",
        "--weight-decay",
        "5e-4",
        "--epochs",
        "200",
        "--json",
    ]));
    let test = report["test_accuracy"].as_f64().unwrap();
    assert!(test >= 0.80, "test accuracy {test}");
    for key in [
        "train_accuracy",
        "val_accuracy",
        "final_loss",
        "iteration_s",
    ] {
        assert!(report[key].as_f64().is_some(), "{key} missing");
    }
    assert_eq!(report["weights_sha256"].as_str().unwrap().len(), 64);
    for tier in ["hbm", "host", "ssd"] {
        assert!(
            report["peak_bytes"][tier].as_u64().is_some(),
            "peak_bytes.{tier} missing"
        );
    }
    for link in ["h2d", "d2h", "ssd_read", "ssd_write"] {
        assert!(
            report["bytes_moved"][link].as_u64().is_some(),
            "bytes_moved.{link} missing"
        );
    }
}

/// PyTorch Geometric's GAT example on Cora: 2 layers, 8 heads of 8
/// hidden features, dropout 0.6 on inputs and attention, lr 0.005,
/// weight decay 5e-4, 200 epochs. PyG reaches about 0.81-0.83.
#[test]
fn cora_gat_reaches_the_accuracy_of_pyg() {
    let Some(dir) = cora() else { return };
    let report = json(&fateplan(&[
        "train",
        "--graph",
        dir.to_str().unwrap(),
        "--model",
        "gat",
        "--hidden",
        "64",
        "--heads",
        "8",
        "--dropout",
        "0.6",
        "--lr",
        "0.005",
        "--weight-decay",
        "5e-4",
        "--epochs",
        "200",
        "--json",
    ]));
    let test = report["test_accuracy"].as_f64().unwrap();
    assert!(test >= 0.79, "test accuracy {test}");
    assert!(report["final_loss"].as_f64().unwrap().is_finite());
}

/// `--ssd-dir`, as `profile` names the SSD's folder, is `--spill-dir`:
/// a new user who profiled with it trains with it.
#[test]
fn the_profiles_ssd_dir_flag_is_the_spill_dir() {
    let spill = std::env::temp_dir().join(format!("fateplan-ssd-dir-{}", std::process::id()));
    let report = json(&fateplan(&[
        "train",
        "--graph",
        "planted:nodes=200,classes=4,features=8,seed=1",
        "--epochs",
        "1",
        "--policy",
        "offload-ssd-all",
        "--ssd-dir",
        spill.to_str().unwrap(),
        "--json",
    ]));
    assert!(
        report["bytes_moved"]["ssd_write"].as_u64().unwrap() > 0,
        "{report}"
    );
    let _ = std::fs::remove_dir_all(&spill);
}

/// Without a spill folder there is no SSD tier: a plan made for the run
/// has none to use, and asking for it is refused before anything is
/// planned (a plan that spilled was refused only once made, after the
/// MILP's whole time limit).
#[test]
fn without_a_spill_folder_the_plan_has_no_ssd_tier() {
    let graph = "planted:nodes=200,classes=4,features=8,seed=1";
    let dir = std::env::temp_dir().join(format!("fateplan-no-spill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("plan.json");
    let output = fateplan(&[
        "train",
        "--graph",
        graph,
        "--epochs",
        "1",
        "--hbm-budget",
        "60%",
        "--save-plan",
        saved.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    assert_eq!(plan["budgets"]["ssd_bytes"], 0, "{}", plan["budgets"]);
    assert!(plan["budgets"]["host_bytes"].as_u64().unwrap() > 0);
    let refused = [
        (
            &["--policy", "offload-ssd-all"][..],
            "--policy offload-ssd-all keeps tensors on the SSD tier: give --spill-dir DIR",
        ),
        (
            &["--ssd-budget", "1MiB"][..],
            "--ssd-budget 1MiB: the SSD tier needs --spill-dir DIR",
        ),
    ];
    for (flags, said) in refused {
        let mut args = vec!["train", "--graph", graph, "--epochs", "1"];
        args.extend_from_slice(flags);
        let output = fateplan(&args);
        assert_eq!(output.status.code(), Some(1), "{flags:?}");
        assert!(stderr(&output).contains(said), "{}", stderr(&output));
    }
    let output = fateplan(&[
        "train",
        "--graph",
        graph,
        "--epochs",
        "1",
        "--ssd-budget",
        "0",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--partitions auto` sizes the count as `plan --partitions auto` does
/// for the run's flags and budgets, trains that plan, and says the count;
/// the plan it saves trains the same weights.
#[test]
fn partitions_auto_sizes_the_run_as_plan_does() {
    let graph = "planted:nodes=400,classes=4,features=16,seed=3";
    let dir = std::env::temp_dir().join(format!("fateplan-auto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("plan.json");
    let run = |extra: &[&str]| {
        let mut args = vec!["train", "--graph", graph, "--epochs", "2", "--json"];
        args.extend_from_slice(extra);
        let output = fateplan(&args);
        assert!(output.status.success(), "{}", stderr(&output));
        json(&output)
    };
    let sized = run(&[
        "--partitions",
        "auto",
        "--hbm-budget",
        "25%",
        "--save-plan",
        saved.to_str().unwrap(),
    ]);
    let line = sized["partitions_auto"].as_str().unwrap().to_string();
    let count: u32 = line.split(' ').next().unwrap().parse().unwrap();
    assert!(line.contains("(auto: the fewest that fit"), "{line}");
    let workload = sized["workload"].as_str().unwrap();
    assert!(
        workload.ends_with(&format!("-p{count}")),
        "{workload} against {line}"
    );
    // As `plan` sizes it for the same flags (train's defaults given).
    let planned = fateplan(&[
        "plan",
        "--graph",
        graph,
        "--layers",
        "2",
        "--hidden",
        "16",
        "--profile",
        "cpu-small",
        "--partitions",
        "auto",
        "--hbm-budget",
        "25%",
        "--ssd-budget",
        "0",
    ]);
    assert!(planned.status.success(), "{}", stderr(&planned));
    assert!(
        stdout(&planned).contains(&format!("partitions {count} (auto:")),
        "{}",
        stdout(&planned)
    );
    let again = run(&["--plan", saved.to_str().unwrap()]);
    assert_eq!(again["weights_sha256"], sized["weights_sha256"]);
    for (flags, said) in [
        (
            &["--partitions", "auto", "--plan", saved.to_str().unwrap()][..],
            "--partitions auto: the plan given has its count",
        ),
        (
            &["--partitions", "auto", "--devices", "2"][..],
            "--partitions auto: sizes one device's run",
        ),
        // A share asks for the SSD tier as bytes do: not dropped.
        (
            &["--partitions", "auto", "--ssd-budget", "10%"][..],
            "--ssd-budget 10%: the SSD tier needs --spill-dir DIR",
        ),
    ] {
        let mut args = vec!["train", "--graph", graph, "--epochs", "1"];
        args.extend_from_slice(flags);
        let output = fateplan(&args);
        assert_eq!(output.status.code(), Some(1), "{flags:?}");
        assert!(stderr(&output).contains(said), "{}", stderr(&output));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plan whose profile has a shipped profile's name but other figures
/// (an edited plan) trains on its own figures, and says so, as
/// `simulate` does.
#[test]
fn a_plan_s_profile_under_a_shipped_name_is_said_to_be_its_own() {
    let graph = "planted:nodes=200,classes=4,features=8,seed=1";
    let dir = std::env::temp_dir().join(format!("fateplan-renamed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("plan.json");
    let train = |plan: &std::path::Path, save: bool| {
        let flag = if save { "--save-plan" } else { "--plan" };
        let output = fateplan(&[
            "train",
            "--graph",
            graph,
            "--epochs",
            "1",
            flag,
            plan.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    let said = train(&saved, true);
    assert!(
        said.contains("(shipped with fateplan, not this machine)"),
        "{said}"
    );
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    plan["profile"]["name"] = "a100-80g".into();
    std::fs::write(&saved, plan.to_string()).unwrap();
    let said = train(&saved, false);
    assert!(
        said.contains(
            "on profile \"a100-80g\" (the plan's own figures, not those of the profile shipped"
        ),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_generated_graph_trains_under_a_quarter_budget_with_the_same_weights() {
    let graph =
        "planted:nodes=600,classes=4,features=16,degree=6,homophily=0.8,val=100,test=200,seed=3";
    let spill = std::env::temp_dir().join(format!("fateplan-train-cli-{}", std::process::id()));
    let common = [
        "train",
        "--graph",
        graph,
        "--epochs",
        "5",
        "--partitions",
        "8",
        "--json",
    ];
    let retain = json(&fateplan(
        &[&common[..], &["--policy", "retain-all"]].concat(),
    ));
    let mixed = json(&fateplan(
        &[
            &common[..],
            &[
                "--policy",
                "dp",
                "--hbm-budget",
                "25%",
                "--spill-dir",
                spill.to_str().unwrap(),
            ],
        ]
        .concat(),
    ));
    assert_eq!(retain["weights_sha256"], mixed["weights_sha256"]);
    assert_eq!(retain["final_loss"], mixed["final_loss"]);
    let budget = mixed["budgets"]["hbm_bytes"].as_u64().unwrap();
    assert!(mixed["peak_bytes"]["hbm"].as_u64().unwrap() <= budget);
    assert!(budget * 3 < retain["peak_bytes"]["hbm"].as_u64().unwrap());
    let _ = std::fs::remove_dir_all(&spill);
}

/// A plan saved by a build from before the ReLU's backward read its mask
/// (`tests/fixtures/plan-before-relu-masks.json`: `fateplan plan --graph
/// rmat:scale=7,features=32,classes=4,seed=3 --layers 3 --hidden 16
/// --partitions 2 --hbm-budget 60%`, its first layer projecting first,
/// its second aggregating first, some tensors offloaded) still trains,
/// its `relu_bwd` reading the pre-activation, to the weights a plan of
/// this build trains.
#[test]
fn a_plan_from_before_the_relu_masks_trains_the_same_model() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/plan-before-relu-masks.json"
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let ops = saved["workload"]["definition"]["ops"].as_array().unwrap();
    assert!(ops
        .iter()
        .all(|op| !op["name"].as_str().unwrap().starts_with("relu_mask")));
    let common = [
        "train",
        "--graph",
        "rmat:scale=7,features=32,classes=4,seed=3",
        "--layers",
        "3",
        "--hidden",
        "16",
        "--partitions",
        "2",
        "--epochs",
        "2",
        "--json",
    ];
    let old = json(&fateplan(&[&common[..], &["--plan", fixture]].concat()));
    let now = json(&fateplan(&[&common[..], &["--hbm-budget", "60%"]].concat()));
    assert_eq!(old["weights_sha256"], now["weights_sha256"]);
    assert_eq!(old["final_loss"], now["final_loss"]);
    // Its own budget held: the executor charged what that plan counted.
    let budget = old["budgets"]["hbm_bytes"].as_u64().unwrap();
    assert!(old["peak_bytes"]["hbm"].as_u64().unwrap() <= budget);
}

#[test]
fn bad_training_input_names_what_is_wrong() {
    let cases: [(&[&str], &str); 14] = [
        (&["train", "--graph", "no-such-folder"], "no-such-folder"),
        (
            &["train", "--graph", ""],
            "a value is required for '--graph <GRAPH>'",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600",
                "--layer-order",
                "up",
            ],
            "--layer-order up: unknown layer order",
        ),
        (
            &["train", "--graph", "planted:nodes=600", "--transposes", "x"],
            "--transposes x: expected stored, built or mirrored",
        ),
        (
            &["train", "--graph", "planted:nodes=600,colour=3"],
            "colour",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600,val=100,test=200",
                "--dropout",
                "1.5",
            ],
            "--dropout",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600,val=100,test=200",
                "--policy",
                "offload-ssd-all",
            ],
            "--spill-dir",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600,val=100,test=200",
                "--model",
                "gat",
                "--hidden",
                "10",
                "--heads",
                "3",
            ],
            "heads",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600,val=100,test=200",
                "--model",
                "gat",
                "--layer-order",
                "aggregate-first",
            ],
            "applies to gcn only",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600,val=100,test=200",
                "--model",
                "gat",
                "--transposes",
                "built",
            ],
            "--transposes built: applies to gcn and sage",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600,val=100,test=200",
                "--model",
                "gat",
                "--sweep",
                "b2",
            ],
            "sweep b2: GAT has no transposed aggregation",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600,val=100,test=200",
                "--sweep",
                "columns",
            ],
            "sweep \"columns\": \"columns\" is not an aggregation",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600,val=100,test=200",
                "--lr",
                "inf",
            ],
            "'--lr <LR>': inf is not a finite positive number",
        ),
        (
            &[
                "train",
                "--graph",
                "planted:nodes=600,val=100,test=200",
                "--weight-decay",
                "inf",
            ],
            "'--weight-decay <WEIGHT_DECAY>': inf is not a finite number of 0 or more",
        ),
    ];
    for (args, needle) in cases {
        let output = fateplan(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn the_thread_count_does_not_change_the_model() {
    // Enough rows per partition that every kernel splits its work into
    // several chunks, so the thread count could change the order of sums.
    let graph = "planted:nodes=20000,classes=4,features=16,degree=6,homophily=0.8,val=2000,test=4000,seed=5";
    for (model, heads) in [("sage", "1"), ("gat", "4")] {
        let run = |threads: &str| {
            json(&fateplan(&[
                "train",
                "--graph",
                graph,
                "--model",
                model,
                "--heads",
                heads,
                "--epochs",
                "4",
                "--partitions",
                "2",
                "--threads",
                threads,
                "--json",
            ]))
        };
        let (one, three) = (run("1"), run("3"));
        assert_eq!(one["weights_sha256"], three["weights_sha256"], "{model}");
        assert_eq!(one["final_loss"], three["final_loss"], "{model}");
    }
}

/// `--transposes mirrored` on a symmetric graph trains the same weights
/// as stored and built transposes, holding less; a graph that is not
/// symmetric, or a model other than GCN, is refused before training.
#[test]
fn mirrored_transposes_train_the_same_weights_where_the_graph_is_symmetric() {
    let graph = "rmat:scale=11,edge_factor=8,symmetric=true,features=8,classes=4,seed=3";
    let run = |graph: &str, transposes: &str, model: &str| {
        fateplan(&[
            "train",
            "--graph",
            graph,
            "--model",
            model,
            "--epochs",
            "3",
            "--partitions",
            "3",
            "--transposes",
            transposes,
            "--json",
        ])
    };
    let weights: Vec<serde_json::Value> = ["stored", "built", "mirrored"]
        .iter()
        .map(|t| json(&run(graph, t, "gcn"))["weights_sha256"].clone())
        .collect();
    assert_eq!(weights[0], weights[1]);
    assert_eq!(weights[0], weights[2]);
    let directed = run(
        "rmat:scale=11,edge_factor=8,features=8,classes=4,seed=3",
        "mirrored",
        "gcn",
    );
    assert_eq!(directed.status.code(), Some(1));
    assert!(
        stderr(&directed).contains("--transposes mirrored: the graph is not symmetric: block"),
        "{}",
        stderr(&directed)
    );
    // Several devices' blocks are their shares': refused.
    let devices = fateplan(&[
        "train",
        "--graph",
        graph,
        "--epochs",
        "1",
        "--devices",
        "2",
        "--partitions",
        "1",
        "--transposes",
        "mirrored",
    ]);
    assert_eq!(devices.status.code(), Some(1));
    assert!(
        stderr(&devices).contains("--transposes mirrored: one device only"),
        "{}",
        stderr(&devices)
    );
    let sage = run(graph, "mirrored", "sage");
    assert_eq!(sage.status.code(), Some(1));
    assert!(
        stderr(&sage).contains("--transposes mirrored: applies to gcn"),
        "{}",
        stderr(&sage)
    );
}

#[test]
fn a_saved_plan_trains_and_a_budget_below_it_is_refused() {
    let dir = scratch("train-plan");
    let graph = dir.join("planted");
    let plan = dir.join("plan.json");
    let generated = fateplan(&[
        "generate",
        "--graph",
        "planted:nodes=600,classes=4,features=16,val=100,test=200,seed=2",
        "--out",
        graph.to_str().unwrap(),
    ]);
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let planned = fateplan(&[
        "plan",
        "--graph",
        graph.to_str().unwrap(),
        "--model",
        "gcn",
        "--layers",
        "2",
        "--hidden",
        "16",
        "--heads",
        "1",
        "--partitions",
        "4",
        "--profile",
        "cpu-small",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    let common = [
        "train",
        "--graph",
        graph.to_str().unwrap(),
        "--plan",
        plan.to_str().unwrap(),
        "--epochs",
        "2",
    ];
    let report = json(&fateplan(&[&common[..], &["--json"]].concat()));
    assert_eq!(report["epochs"], 2);
    // A negative size is refused by name, with or without a unit; a flag
    // where the value should be, after a space or an `=`, is refused as a
    // flag, not a size, as the command line is parsed.
    let cases = [
        (["--hbm-budget", "-5"], "\"-5\": a size cannot be negative"),
        (
            ["--hbm-budget", "-5MiB"],
            "\"-5MiB\": a size cannot be negative",
        ),
        (
            ["--ssd-budget", "--json"],
            "--json is a flag, not a size or a share: a budget takes a value such as 4GiB or 25%",
        ),
        (["--host-budget", "-o"], "-o is a flag, not a size"),
        (
            ["--hbm-budget=--json", "--json"],
            "--json is a flag, not a size",
        ),
    ];
    for (flag, needle) in cases {
        let refused = fateplan(&[&common[..], &flag[..]].concat());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{flag:?}: {stderr}");
        assert!(
            stderr.contains(flag[0].split('=').next().unwrap()) && stderr.contains(needle),
            "{flag:?}: {stderr}"
        );
    }
    let refused = fateplan(&[&common[..], &["--hbm-budget", "1KiB"]].concat());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--hbm-budget 1KiB: the plan {} needs ",
            plan.display()
        )) && stderr.contains(
            "of hbm at its peak, more than this budget (1.00 KiB); leave --hbm-budget out to \
             train with the plan's ("
        ),
        "{stderr}"
    );
    // A share says what it is of: the retain-all plan at the plan's
    // count, which `plan --partitions auto` may not have taken.
    let refused = fateplan(&[&common[..], &["--hbm-budget", "1%"]].concat());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--hbm-budget 1%: the plan ")
            && stderr.contains("1% of ")
            && stderr.contains(", the retain-all plan's device peak at the plan's ")
            && stderr.contains("`plan --partitions auto` takes its shares"),
        "{stderr}"
    );
    let other = fateplan(
        &[
            &common[..3],
            &["--plan", plan.to_str().unwrap(), "--hidden", "8"],
        ]
        .concat(),
    );
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(
        stderr.contains("--hidden 8: the plan") && stderr.contains("is for --hidden 16"),
        "{stderr}"
    );

    // A plan of another shape than `train`'s defaults trains that shape
    // with no flag repeated: the weights of the same model planned on
    // the spot (the CPU backend's bits do not depend on the plan).
    let sage = dir.join("sage.json");
    let shaped = [
        "--model",
        "sage",
        "--layers",
        "3",
        "--hidden",
        "8",
        "--partitions",
        "2",
    ];
    let planned = fateplan(
        &[
            &["plan", "--graph", graph.to_str().unwrap()][..],
            &shaped[..],
            &["--profile", "cpu-small", "-o", sage.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    let adopted = json(&fateplan(
        &[
            &common[..3],
            &["--plan", sage.to_str().unwrap(), "--epochs", "2", "--json"],
        ]
        .concat(),
    ));
    let flagged = json(&fateplan(
        &[
            &common[..3],
            &shaped[..],
            &["--epochs", "2", "--json", "--policy", "retain-all"],
        ]
        .concat(),
    ));
    assert_eq!(adopted["weights_sha256"], flagged["weights_sha256"]);
    // A plan from before plans recorded their model, trained with its
    // flags and saved again, records the model it was trained as.
    let read = |path: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let mut older = read(&sage);
    let model = older["workload"]
        .as_object_mut()
        .unwrap()
        .remove("model")
        .expect("the plan records its model");
    let (older_path, resaved) = (dir.join("older.json"), dir.join("resaved.json"));
    std::fs::write(&older_path, older.to_string()).unwrap();
    let trained = fateplan(
        &[
            &common[..3],
            &shaped[..],
            &["--plan", older_path.to_str().unwrap(), "--epochs", "1"],
            &["--save-plan", resaved.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(
        trained.status.success(),
        "{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    assert_eq!(read(&resaved)["workload"]["model"], model);
    // The same values given again are taken; another one is refused,
    // naming the flag, the plan and both values.
    let repeated = fateplan(
        &[
            &common[..3],
            &["--plan", sage.to_str().unwrap(), "--epochs", "1"],
            &["--model", "GraphSAGE", "--layers", "3"],
        ]
        .concat(),
    );
    assert!(
        repeated.status.success(),
        "{}",
        String::from_utf8_lossy(&repeated.stderr)
    );
    let conflicting = fateplan(
        &[
            &common[..3],
            &["--plan", sage.to_str().unwrap(), "--layers", "2"],
        ]
        .concat(),
    );
    let stderr = String::from_utf8_lossy(&conflicting.stderr);
    assert_eq!(conflicting.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--layers 2: the plan")
            && stderr.contains("sage.json")
            && stderr.contains("is for --layers 3"),
        "{stderr}"
    );

    // `plan --gpus --graph` plans the min-cut shares `train --devices`
    // builds: the plan `train --save-plan` writes for the same flags, and
    // `train --plan` trains it on two devices. (A run without
    // `--spill-dir` has no SSD tier: planned so, `--ssd-budget 0`.)
    let gpus = dir.join("gpus.json");
    let planned = fateplan(&[
        "plan",
        "--graph",
        graph.to_str().unwrap(),
        "--gpus",
        "2",
        "--partitions",
        "2",
        "--ssd-budget",
        "0",
        "-o",
        gpus.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&planned.stdout);
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    assert!(
        stdout.contains("min-cut shares at 2 partitions each"),
        "{stdout}"
    );
    let trained = fateplan(&[&common[..3], &["--plan", gpus.to_str().unwrap(), "--json"]].concat());
    assert!(
        trained.status.success(),
        "{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    let trained = json(&trained);
    assert_eq!(trained["devices"].as_array().map(Vec::len), Some(2));
    assert_eq!(trained["shares"]["method"], "mincut");
    // Each device's threads, the fewest of them as `device_threads`.
    let each = trained["device_threads_each"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t.as_u64()).collect::<Vec<_>>())
        .unwrap_or_default();
    assert_eq!(each.len(), 2, "{trained}");
    assert_eq!(
        trained["device_threads"].as_u64(),
        each.iter().copied().min(),
        "{trained}"
    );
    let saved = dir.join("saved-gpus.json");
    let again = fateplan(
        &[
            &common[..3],
            &[
                "--devices",
                "2",
                "--model",
                "gcn",
                "--layers",
                "3",
                "--hidden",
                "256",
                "--partitions",
                "2",
                "--profile",
                "a100-80g",
                "--json",
                "--save-plan",
                saved.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(json(&again)["weights_sha256"], trained["weights_sha256"]);
    assert_eq!(read(&gpus), read(&saved));

    // `plan --gpus --dataset` plans a share's statistics, which `train`
    // does not build: refused, saying which plan it takes.
    let stats = dir.join("stats.json");
    let planned = fateplan(&[
        "plan",
        "--dataset",
        "ogbn-arxiv",
        "--gpus",
        "2",
        "--partitions",
        "2",
        "-o",
        stats.to_str().unwrap(),
    ]);
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    let refused = fateplan(&[&common[..3], &["--plan", stats.to_str().unwrap()]].concat());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("plan --gpus 2")
            && stderr.contains("--devices 2 --model gcn --layers 3 --hidden 256")
            && stderr.contains("--partitions 2 --dropout 0.5 --save-plan FILE"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plan --sweep` records which aggregations run by inputs; `train
/// --plan` trains that order without the flag (the model is the same, bit
/// for bit), and refuses another order given with it. `--sweep auto`
/// says what it chose and records it.
#[test]
fn a_plan_s_sweep_is_trained_and_auto_says_what_it_chose() {
    let dir = std::env::temp_dir().join(format!("fateplan-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let graph = "planted:nodes=600,classes=4,features=16,val=100,test=200,seed=2";
    let shape = ["--layers", "3", "--hidden", "16", "--partitions", "3"];
    let plan = |sweep: &str, path: &std::path::Path| {
        let args = [
            &["plan", "--graph", graph, "--profile", "cpu-small"][..],
            &shape[..],
            &["--hbm-budget", "45%", "--sweep", sweep],
            &["-o", path.to_str().unwrap()],
        ]
        .concat();
        let out = fateplan(&args);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        // (Written only when not `outputs`.)
        let sweep = written["workload"]["model"]["sweep"]
            .as_str()
            .unwrap_or("outputs");
        (stdout, sweep.to_string())
    };
    let listed = dir.join("listed.json");
    let (_, recorded) = plan("b3,f1", &listed);
    assert_eq!(recorded, "f1,b3");
    // Every aggregation that can, listed, is recorded as `inputs`.
    let (_, recorded) = plan("f1,f2,f3,b2,b3", &dir.join("all.json"));
    assert_eq!(recorded, "inputs");
    let train = |extra: &[&str]| {
        let args = [&["train", "--graph", graph, "--epochs", "2"][..], extra].concat();
        fateplan(&args)
    };
    let adopted = json(&train(&["--plan", listed.to_str().unwrap(), "--json"]));
    let outputs = json(&train(
        &[&shape[..], &["--sweep", "outputs", "--json"]].concat(),
    ));
    assert_eq!(adopted["weights_sha256"], outputs["weights_sha256"]);
    assert_eq!(adopted["losses"], outputs["losses"]);
    // A refused run exits 1 and its error says each of `says`.
    let refused = |args: &[&str], says: &[&str]| {
        let output = train(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        for part in says {
            assert!(stderr.contains(part), "{part}: {stderr}");
        }
    };
    let listed_path = listed.to_str().unwrap();
    let mismatch = "is for --sweep f1,b3";
    refused(
        &["--plan", listed_path, "--sweep", "inputs"],
        &["--sweep inputs: the plan", mismatch],
    );
    refused(
        &["--plan", listed_path, "--sweep", "auto"],
        &["--sweep auto: the plan", mismatch],
    );
    // `auto` names the sweep it took, which the plan records.
    let chosen = dir.join("auto.json");
    let (stdout, recorded) = plan("auto", &chosen);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("sweep "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains("(auto") && line.contains("sweeps planned"),
        "{line}"
    );
    let taken = line.split_whitespace().nth(1).unwrap();
    assert_eq!(taken, recorded, "{line}");
    let trained = train(&["--plan", chosen.to_str().unwrap()]);
    assert!(
        trained.status.success(),
        "{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    // A plan that records no model (one from an earlier build) is
    // trained as made: `auto` is refused rather than read as outputs.
    let mut bare: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&listed).unwrap()).unwrap();
    bare["workload"]
        .as_object_mut()
        .unwrap()
        .remove("model")
        .unwrap();
    let bare_path = dir.join("bare.json");
    std::fs::write(&bare_path, bare.to_string()).unwrap();
    refused(
        &["--plan", bare_path.to_str().unwrap(), "--sweep", "auto"],
        &["--sweep auto: the plan", "records no model"],
    );
    // `train --sweep auto` plans on the spot and chooses as `plan` does:
    // the plan it saves records what it took, and the model is the same.
    let saved = dir.join("trained-auto.json");
    let budget = ["--hbm-budget", "45%"];
    let auto = json(&train(
        &[
            &shape[..],
            &budget,
            &["--sweep", "AUTO", "--json"],
            &["--save-plan", saved.to_str().unwrap()],
        ]
        .concat(),
    ));
    assert_eq!(auto["sweep_auto"]["sweep"], recorded.as_str(), "{auto}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    assert_eq!(written["workload"]["model"]["sweep"], recorded.as_str());
    assert_eq!(auto["weights_sha256"], outputs["weights_sha256"]);
    // On two devices, each a process: the members build the workload of
    // the sweeps the launcher took (another one's plan is refused).
    let two = ["--devices", "2", "--processes"];
    let line = sweep_line(&train(
        &[&shape[..], &budget, &two, &["--sweep", "auto"]].concat(),
    ));
    let taken = line.split_whitespace().nth(1).unwrap();
    assert_ne!(taken, "outputs", "{line}");
    // With more features than hidden units, layer 1 projects first and
    // has a transposed aggregation to sweep (`b1`): the sweeps `auto`
    // takes, and `b1` given on two devices, are recorded by the plans
    // saved, which train the same model.
    let wide = "planted:nodes=600,classes=4,features=64,val=100,test=200,seed=2";
    for (budget, devices, sweep) in [("50%", "1", "auto"), ("50%", "2", "b1")] {
        let saved = dir.join(format!("wide-{devices}.json"));
        let args = [
            &["train", "--graph", wide, "--epochs", "1", "--json"][..],
            &shape[..],
            &[
                "--hbm-budget",
                budget,
                "--devices",
                devices,
                "--sweep",
                sweep,
            ],
            &["--save-plan", saved.to_str().unwrap()],
        ];
        let auto = json(&fateplan(&args.concat()));
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
        let recorded = written["workload"]["model"]["sweep"]
            .as_str()
            .unwrap_or("outputs");
        if sweep == "auto" {
            assert_eq!(auto["sweep_auto"]["sweep"], recorded, "{auto}");
        } else {
            assert_eq!(recorded, sweep, "{devices} devices");
        }
        let again = [
            &["train", "--graph", wide, "--epochs", "1", "--json"][..],
            &["--plan", saved.to_str().unwrap()],
        ];
        let again = json(&fateplan(&again.concat()));
        assert_eq!(
            again["weights_sha256"], auto["weights_sha256"],
            "{devices} devices"
        );
    }
    // `plan --gpus 2 --sweep auto` chooses with the exchanges planned,
    // and `train --plan` trains the shares by the sweeps it took.
    let two_gpus = dir.join("two-gpus.json");
    let out = fateplan(
        &[
            &[
                "plan",
                "--graph",
                graph,
                "--profile",
                "a100-80g",
                "--gpus",
                "2",
            ][..],
            &shape[..],
            &["--hbm-budget", "25%", "--sweep", "auto"],
            &["-o", two_gpus.to_str().unwrap()],
        ]
        .concat(),
    );
    let line = sweep_line(&out);
    assert!(line.contains("predicted against"), "{line}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&two_gpus).unwrap()).unwrap();
    let taken = line.split_whitespace().nth(1).unwrap();
    assert_eq!(written["workload"]["model"]["sweep"], taken, "{line}");
    assert_eq!(written["gpus"], 2);
    let trained = json(&train(&["--plan", two_gpus.to_str().unwrap(), "--json"]));
    assert_eq!(trained["devices"].as_array().map(Vec::len), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_csr_cache_gives_the_same_model_and_refuses_another_graph() {
    let dir = std::env::temp_dir().join(format!("fateplan-train-csr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("graph.csr");
    let plan = dir.join("plan.json");
    let run = |seed: &str, extra: &[&str]| {
        let graph = format!("planted:nodes=600,classes=4,features=16,val=100,test=200,seed={seed}");
        fateplan(
            &[
                &[
                    "train",
                    "--graph",
                    graph.as_str(),
                    "--epochs",
                    "3",
                    "--partitions",
                    "4",
                    "--json",
                ][..],
                extra,
            ]
            .concat(),
        )
    };
    let plain = json(&run("2", &[]));
    let with_cache = ["--csr-cache", cache.to_str().unwrap()];
    let built = json(&run("2", &with_cache));
    assert!(cache.exists());
    let read = json(&run(
        "2",
        &[&with_cache[..], &["--save-plan", plan.to_str().unwrap()]].concat(),
    ));
    assert_eq!(plain["weights_sha256"], built["weights_sha256"]);
    assert_eq!(plain["weights_sha256"], read["weights_sha256"]);
    assert!(plan.exists());
    // The JSON says so too: whether the cache was read, and the plan saved.
    assert!(plain.get("csr_cache").is_none(), "{plain}");
    assert_eq!(built["csr_cache"]["read"], false, "{built}");
    assert_eq!(read["csr_cache"]["read"], true, "{read}");
    assert_eq!(read["csr_cache"]["path"], cache.to_str().unwrap());
    assert_eq!(read["saved_plan"], plan.to_str().unwrap());
    assert!(
        read["workload"]
            .as_str()
            .is_some_and(|w| w.ends_with("-p4")),
        "{read}"
    );
    // The text report lists the files read and written.
    let trace = dir.join("trace.json");
    let graph = "planted:nodes=600,classes=4,features=16,val=100,test=200,seed=2";
    let (cache_arg, trace_arg) = (cache.to_str().unwrap(), trace.to_str().unwrap());
    let again = |cache_arg: &str| {
        fateplan(&[
            "train",
            "--graph",
            graph,
            "--epochs",
            "1",
            "--partitions",
            "4",
            "--csr-cache",
            cache_arg,
            "--trace",
            trace_arg,
        ])
    };
    let out = again(cache_arg);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("csr cache {cache_arg} (read)"))
            && text.contains(&format!("trace     {trace_arg}")),
        "{text}"
    );
    let fresh = dir.join("fresh.csr");
    let text = stdout(&again(fresh.to_str().unwrap()));
    assert!(
        text.contains(&format!("csr cache {} (written)", fresh.display())),
        "{text}"
    );
    // Another graph of the same size: the cache is not its adjacency.
    let other = run("3", &with_cache);
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("graph.csr") && stderr.contains("edges") && stderr.contains("stale"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--backend cuda`: on a machine without the CUDA driver (or NVRTC,
/// cuBLAS, a device), one clean line that says what is missing, exit
/// status 1 and no panic; with a GPU, the model trains as on the CPU.
#[test]
fn the_cuda_backend_trains_or_says_in_one_line_why_it_cannot() {
    let graph =
        "planted:nodes=600,classes=3,features=16,degree=6,homophily=0.9,val=60,test=100,seed=3";
    let args = |backend: &'static str| {
        [
            "train",
            "--graph",
            graph,
            "--epochs",
            "100",
            "--lr",
            "0.05",
            "--partitions",
            "2",
            "--json",
            "--backend",
            backend,
        ]
    };
    let output = fateplan(&args("cuda"));
    let err = stderr(&output);
    assert!(!err.contains("panicked"), "{err}");
    if !output.status.success() {
        let required = std::env::var("FATEPLAN_REQUIRE_GPU").is_ok_and(|v| v == "1");
        assert!(!required, "FATEPLAN_REQUIRE_GPU=1 but: {err}");
        assert_eq!(output.status.code(), Some(1), "{err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line: {err}");
        assert!(lines[0].starts_with("error: cuda: "), "{err}");
        eprintln!("skipped GPU training: {}", lines[0]);
        return;
    }
    let gpu: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    let cpu_output = fateplan(&args("cpu"));
    assert!(cpu_output.status.success(), "{}", stderr(&cpu_output));
    let cpu: serde_json::Value = serde_json::from_str(&stdout(&cpu_output)).unwrap();
    let (g, c) = (
        gpu["final_loss"].as_f64().unwrap(),
        cpu["final_loss"].as_f64().unwrap(),
    );
    assert!(
        (g - c).abs() <= 1e-3 * c.abs().max(1.0),
        "loss: cuda {g}, cpu {c}"
    );
    // The CPU reaches 0.65 here; chance is 1/3.
    let (g, c) = (
        gpu["test_accuracy"].as_f64().unwrap(),
        cpu["test_accuracy"].as_f64().unwrap(),
    );
    assert!(
        g > 0.5 && (g - c).abs() <= 0.02,
        "test accuracy: cuda {g}, cpu {c}"
    );
    // The device pool's peak is reported on the GPU, and only there; the
    // plan counts every buffer the pool holds.
    assert!(cpu.get("device_peak_bytes").is_none(), "{cpu}");
    let pool = gpu["device_peak_bytes"].as_u64().expect("the pool's peak");
    let counted = gpu["peak_bytes"]["hbm"].as_u64().unwrap();
    assert!(
        pool > 0 && pool <= counted,
        "pool {pool}, counted {counted}"
    );
}

#[test]
fn more_threads_than_sixteen_a_core_are_refused_before_any_start() {
    let output = fateplan(&[
        "train",
        "--graph",
        "planted:nodes=100",
        "--threads",
        "100000",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("--threads 100000: more than") && message.contains("cores"),
        "{message}"
    );
}

#[test]
fn an_unknown_backend_is_refused() {
    let output = fateplan(&["train", "--graph", "planted:nodes=100", "--backend", "tpu"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("'--backend <BACKEND>'")
            && stderr(&output).contains("[possible values: cpu, cuda]"),
        "{}",
        stderr(&output)
    );
    // CUDA-only flags are not silently ignored on the CPU backend.
    let output = fateplan(&[
        "train",
        "--graph",
        "planted:nodes=100",
        "--kernel-cache",
        "k",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("--kernel-cache applies to --backend cuda, not cpu"),
        "{}",
        stderr(&output)
    );
    // `gpu` is `cuda` (clap suggested `cpu` for it).
    let output = fateplan(&[
        "train",
        "--graph",
        "planted:nodes=100",
        "--backend",
        "gpu",
        "--epochs",
        "1",
        "--json",
    ]);
    let said = stderr(&output);
    assert!(!said.contains("invalid value"), "{said}");
    if !output.status.success() {
        // No GPU here: refused as cuda is, in one line.
        assert!(said.starts_with("error: cuda"), "{said}");
    }
}

#[test]
fn several_devices_train_the_same_model_and_report_their_exchanges() {
    let graph =
        "planted:nodes=600,classes=4,features=16,degree=6,homophily=0.8,val=100,test=200,seed=3";
    let spill = std::env::temp_dir().join(format!("fateplan-devices-cli-{}", std::process::id()));
    let common = ["train", "--graph", graph, "--epochs", "5", "--json"];
    let one = json(&fateplan(
        &[
            &common[..],
            &["--partitions", "4", "--policy", "retain-all"],
        ]
        .concat(),
    ));
    let two = json(&fateplan(
        &[
            &common[..],
            &[
                "--partitions",
                "2",
                "--devices",
                "2",
                "--shares",
                "ranges",
                "--policy",
                "offload-ssd-all",
                "--spill-dir",
                spill.to_str().unwrap(),
            ],
        ]
        .concat(),
    ));
    let (a, b) = (
        one["final_loss"].as_f64().unwrap(),
        two["final_loss"].as_f64().unwrap(),
    );
    assert!(
        (a - b).abs() <= 1e-5 * a.abs(),
        "final loss {a} against {b}"
    );
    // Sums run in another order: allow one of the 200 test nodes.
    let (a, b) = (
        one["test_accuracy"].as_f64().unwrap(),
        two["test_accuracy"].as_f64().unwrap(),
    );
    assert!(
        (a - b).abs() <= 1.0 / 200.0 + 1e-9,
        "test accuracy {a} against {b}"
    );
    let shares = &two["shares"];
    let (cut, all) = (
        shares["halo_edges"].as_u64().unwrap(),
        shares["edges"].as_u64().unwrap(),
    );
    assert!(0 < cut && cut < all, "{shares}");
    assert!(shares["halo_rows_max"].as_u64().unwrap() > 0, "{shares}");
    let devices = two["devices"].as_array().expect("a devices array");
    assert_eq!(devices.len(), 2);
    for device in devices {
        assert!(device["exchange"]["sent_bytes"].as_u64().unwrap() > 0);
        assert!(device["exchange"]["reduced_bytes"].as_u64().unwrap() > 0);
    }
    assert!(two["bytes_moved"]["ssd_write"].as_u64().unwrap() > 0);
    // The spill folder was missing: the devices' stores and the folder
    // are removed at the end.
    assert!(!spill.exists(), "{} was left behind", spill.display());
    let _ = std::fs::remove_dir_all(&spill);

    // A profile with a peer link: the plan carries the exchanges, and one
    // device's share of the node's host memory.
    let saved =
        std::env::temp_dir().join(format!("fateplan-devices-plan-{}.json", std::process::id()));
    let gpu = json(&fateplan(
        &[
            &common[..],
            &[
                "--partitions",
                "2",
                "--devices",
                "2",
                "--shares",
                "ranges",
                "--profile",
                "a100-80g",
                "--save-plan",
                saved.to_str().unwrap(),
            ],
        ]
        .concat(),
    ));
    let (a, b) = (a, gpu["test_accuracy"].as_f64().unwrap());
    assert!(
        (a - b).abs() <= 1.0 / 200.0 + 1e-9,
        "test accuracy {a} against {b}"
    );
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    assert!(
        !plan["exchanges"]
            .as_array()
            .expect("an exchanges array")
            .is_empty(),
        "the plan has no exchanges"
    );
    assert_eq!(gpu["budgets"]["host_bytes"].as_u64().unwrap(), 512 << 30);
    // The saved plan trains its devices, shares and partitions again
    // with none of them given.
    let again = json(&fateplan(
        &[
            &common[..],
            &["--plan", saved.to_str().unwrap(), "--profile", "a100-80g"],
        ]
        .concat(),
    ));
    assert_eq!(again["weights_sha256"], gpu["weights_sha256"]);
    assert_eq!(again["devices"].as_array().map(Vec::len), Some(2));
    // Another profile than the plan's is refused, naming both.
    let other = fateplan(
        &[
            &common[..],
            &["--plan", saved.to_str().unwrap(), "--profile", "h200"],
        ]
        .concat(),
    );
    assert_eq!(other.status.code(), Some(1), "{}", stderr(&other));
    assert!(
        stderr(&other).contains("--profile h200: the plan")
            && stderr(&other).contains("was made on profile \"a100-80g\""),
        "{}",
        stderr(&other)
    );
    // One of the same name with other figures is told apart by them.
    let edited = saved.with_extension("profile.json");
    let mut profile: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/a100-80g.json"),
        )
        .unwrap(),
    )
    .unwrap();
    profile["ssd"]["read_bytes_per_s"] = 1e9.into();
    std::fs::write(&edited, profile.to_string()).unwrap();
    // Under a built-in profile's name it is refused as it is read.
    let with_edited = || {
        let given = [
            "--plan",
            saved.to_str().unwrap(),
            "--profile",
            edited.to_str().unwrap(),
        ];
        fateplan(&[&common[..], &given[..]].concat())
    };
    let shipped_name = with_edited();
    assert_eq!(shipped_name.status.code(), Some(1));
    assert!(
        stderr(&shipped_name).contains("name: \"a100-80g\" is the name of a built-in profile"),
        "{}",
        stderr(&shipped_name)
    );
    // Under the plan's own (a profile measured again, both `lab`), it is
    // told apart by its figures.
    let mut lab: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    lab["profile"]["name"] = "lab".into();
    std::fs::write(&saved, lab.to_string()).unwrap();
    profile["name"] = "lab".into();
    std::fs::write(&edited, profile.to_string()).unwrap();
    let renamed = with_edited();
    assert_eq!(renamed.status.code(), Some(1), "{}", stderr(&renamed));
    assert!(
        stderr(&renamed).contains("was made on a profile also named \"lab\", with other figures"),
        "{}",
        stderr(&renamed)
    );
    let _ = std::fs::remove_file(&edited);
    let _ = std::fs::remove_file(&saved);

    // Min-cut shares (the default) renumber the vertices; the dropout
    // masks stay keyed by the vertices as given, so the model is one
    // device's.
    let dropout = [&common[..], &["--dropout", "0.5", "--policy", "retain-all"]].concat();
    let one = json(&fateplan(&[&dropout[..], &["--partitions", "4"]].concat()));
    let (mincut, ranges) = [["--shares", "mincut"], ["--shares", "ranges"]]
        .map(|shares| {
            json(&fateplan(
                &[
                    &dropout[..],
                    &["--partitions", "2", "--devices", "2"],
                    &shares[..],
                ]
                .concat(),
            ))
        })
        .into();
    let (a, b) = (
        one["final_loss"].as_f64().unwrap(),
        mincut["final_loss"].as_f64().unwrap(),
    );
    assert!(
        (a - b).abs() <= 1e-5 * a.abs(),
        "final loss {a} against {b}"
    );
    assert_eq!(mincut["shares"]["method"], "mincut");
    let halo = |run: &serde_json::Value| run["shares"]["halo_rows_total"].as_u64().unwrap();
    assert!(halo(&mincut) < halo(&ranges), "{mincut} {ranges}");

    // GAT: halo edges join their rows' edge softmax, and the attention
    // masks are keyed by the edges' ends, so two min-cut devices train
    // one device's model, dropout included.
    let gat = [
        &dropout[..],
        &["--model", "gat", "--hidden", "8", "--heads", "2"],
    ]
    .concat();
    let one = json(&fateplan(&[&gat[..], &["--partitions", "4"]].concat()));
    let two = json(&fateplan(
        &[&gat[..], &["--partitions", "2", "--devices", "2"]].concat(),
    ));
    let (a, b) = (
        one["final_loss"].as_f64().unwrap(),
        two["final_loss"].as_f64().unwrap(),
    );
    assert!(
        (a - b).abs() <= 1e-5 * a.abs(),
        "GAT: final loss {a} against {b}"
    );
    assert!(two["shares"]["halo_edges"].as_u64().unwrap() > 0, "{two}");

    let cases: [(&[&str], &str); 4] = [
        (
            &["--devices", "0"],
            "'--devices <DEVICES>': 0 is less than 1",
        ),
        (
            &["--devices", "2", "--shares", "metis"],
            "invalid value 'metis' for '--shares <SHARES>'",
        ),
        (&["--shares", "ranges"], "--devices above 1 (--devices 1)"),
        (&["--devices", "2", "--csr-cache", "c.bin"], "--csr-cache"),
    ];
    for (extra, needle) in cases {
        let output = fateplan(&[&["train", "--graph", graph, "--epochs", "1"][..], extra].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{extra:?}: {stderr}");
        assert!(stderr.contains(needle), "{extra:?}: {stderr}");
    }
}

#[test]
fn processes_read_their_own_rows_of_a_dataset_folder() {
    // Non-negative features in a folder of .npy files: each member reads
    // its rows from x.npy and normalises them as the whole graph's.
    let mut data = fateplan::runtime::generate::GeneratorSpec::parse(
        "planted:nodes=500,classes=3,features=10,degree=6,val=100,test=200,seed=8",
    )
    .unwrap()
    .generate()
    .unwrap();
    for v in &mut data.x {
        *v = v.abs();
    }
    let dir = scratch("positive");
    let folder = dir.join("positive");
    data.save(&folder).unwrap();
    let folder = folder.to_str().unwrap();
    let common = [
        "train",
        "--graph",
        folder,
        "--epochs",
        "3",
        "--json",
        "--partitions",
        "2",
        "--devices",
        "2",
    ];
    let threads = json(&fateplan(&common));
    // The launcher hands the members its partitioning in a temporary
    // folder, gone when the run ends.
    let temporary = dir.join("tmp");
    std::fs::create_dir_all(&temporary).unwrap();
    let processes = json(
        &std::process::Command::new(env!("CARGO_BIN_EXE_fateplan"))
            .args([&common[..], &["--processes"]].concat())
            .env("TMPDIR", &temporary)
            .output()
            .unwrap(),
    );
    let left: Vec<_> = std::fs::read_dir(&temporary).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(threads["features"], "rows normalised to sum 1");
    for key in ["features", "weights_sha256", "final_loss", "losses"] {
        assert_eq!(threads[key], processes[key], "{key}");
    }
    // Kept as they are: the same again.
    let raw = [&common[..], &["--raw-features"]].concat();
    let threads = json(&fateplan(&raw));
    let processes = json(&fateplan(&[&raw[..], &["--processes"]].concat()));
    assert_ne!(threads["features"], "rows normalised to sum 1");
    for key in ["features", "weights_sha256", "final_loss"] {
        assert_eq!(threads[key], processes[key], "{key}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kills the launcher where a test stops early (its members then see
/// the group close and stop).
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A launcher of two member processes training for ever, spilling to
/// `spill`.
fn endless_launcher(spill: &std::path::Path) -> KillOnDrop {
    let launcher = std::process::Command::new(env!("CARGO_BIN_EXE_fateplan"))
        .args([
            "train",
            "--graph",
            "planted:nodes=600,classes=4,features=16,seed=5",
            "--epochs",
            "1000000",
            "--partitions",
            "2",
            "--devices",
            "2",
            "--processes",
            "--policy",
            "offload-ssd-all",
            "--threads",
            "2",
            "--spill-dir",
            spill.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    KillOnDrop(Some(launcher))
}

/// The pid of the member whose spill file is in `spill`'s `device`
/// folder (its name holds its process's), once it is there.
fn member_pid(spill: &std::path::Path, device: u32, launcher: &mut KillOnDrop) -> u32 {
    let folder = spill.join(format!("device{device}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let found = std::fs::read_dir(&folder).ok().and_then(|entries| {
            entries.flatten().find_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let rest = name.strip_prefix("fateplan-spill-")?;
                rest.split('-').next()?.parse::<u32>().ok()
            })
        });
        if let Some(pid) = found {
            return pid;
        }
        let child = launcher.0.as_mut().unwrap();
        assert!(
            child.try_wait().unwrap().is_none(),
            "the launcher ended before a spill file appeared"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "no spill file in {}",
            folder.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A member killed mid-run (SIGKILL: it cannot close its spill store)
/// leaves no spill file and no device folder: the launcher removes what
/// it left, and says which member was killed.
#[test]
fn a_member_killed_mid_run_leaves_no_spill_file() {
    let dir = scratch("killed-member");
    let spill = dir.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let mut launcher = endless_launcher(&spill);
    let pid = member_pid(&spill, 0, &mut launcher);
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = launcher.0.take().unwrap().wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("killed by signal 9"), "{said}");
    let left: Vec<_> = std::fs::read_dir(&spill)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The launcher interrupted (SIGTERM, as a scheduler stops a job) hands
/// the signal to its members and waits for them: when it has ended, by
/// that signal, its members have ended too, their spill files and the
/// folders made for them gone, so that a script acting on its exit finds
/// nothing still running or left.
#[test]
fn an_interrupted_launcher_ends_after_its_members() {
    let dir = scratch("interrupted-launcher");
    // Made by the launcher for the run: removed too.
    let spill = dir.join("spill");
    let mut launcher = endless_launcher(&spill);
    let members = [0, 1].map(|d| member_pid(&spill, d, &mut launcher));
    let launcher_pid = launcher.0.as_ref().unwrap().id();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &launcher_pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = launcher.0.take().unwrap().wait_with_output().unwrap();
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(15),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for pid in members {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "member {pid} outlived its launcher"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "the spill folder made for the run is left: {left:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn each_device_a_process_trains_the_model_of_threads() {
    let graph =
        "planted:nodes=600,classes=4,features=16,degree=6,homophily=0.8,val=100,test=200,seed=5";
    let dir = std::env::temp_dir().join(format!("fateplan-processes-{}", std::process::id()));
    let spill = |name: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d.to_str().unwrap().to_string()
    };
    let common = [
        "train",
        "--graph",
        graph,
        "--epochs",
        "4",
        "--json",
        "--model",
        "sage",
        "--partitions",
        "2",
        "--devices",
        "3",
        "--policy",
        "offload-ssd-all",
    ];
    let threads_spill = spill("threads");
    let threads = json(&fateplan(
        &[&common[..], &["--spill-dir", &threads_spill]].concat(),
    ));
    // A spill folder that is missing, with a missing parent: created, and
    // removed with the devices' folders in it.
    let processes_spill = dir.join("processes").join("spill");
    let processes_spill = processes_spill.to_str().unwrap();
    let processes = json(&fateplan(
        &[
            &common[..],
            &[
                "--spill-dir",
                processes_spill,
                "--processes",
                "--compare-simulated",
            ],
        ]
        .concat(),
    ));
    // The same sums in the same order: the same bits.
    for key in ["weights_sha256", "final_loss", "test_accuracy", "losses"] {
        assert_eq!(threads[key], processes[key], "{key}");
    }
    // The members' stores say their I/O as the threads' do.
    let tier = processes["ssd_tier"].as_str().expect("an ssd_tier");
    assert!(
        tier.starts_with("one spill store per device process, in ")
            && tier.ends_with(threads["ssd_tier"].as_str().unwrap()),
        "{tier}\n{}",
        threads["ssd_tier"]
    );
    // The devices' folders are gone; a spill folder that was there stays.
    let left: Vec<_> = std::fs::read_dir(&threads_spill)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(!dir.join("processes").exists());
    let devices = processes["devices"].as_array().expect("a devices array");
    assert_eq!(devices.len(), 3);
    for (rank, (t, p)) in threads["devices"]
        .as_array()
        .unwrap()
        .iter()
        .zip(devices)
        .enumerate()
    {
        assert_eq!(p["rank"], rank);
        // Each member says how much memory its process held (where the
        // system says: Linux's /proc).
        if cfg!(target_os = "linux") {
            assert!(p["process_peak_bytes"].as_u64().unwrap() > 0, "{p}");
        }
        assert!(t["process_peak_bytes"].is_null(), "{t}");
        for key in ["sent_bytes", "received_bytes", "reduced_bytes"] {
            assert!(p["exchange"][key].as_u64().unwrap() > 0, "{p}");
            assert_eq!(t["exchange"][key], p["exchange"][key], "{key}");
        }
    }
    // Member 0's trace and epochs came back for the comparison.
    assert!(
        processes["compare_simulated"]["iteration_s"]["measured"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{}",
        processes["compare_simulated"]
    );
    assert!(processes["bytes_moved"]["ssd_write"].as_u64().unwrap() > 0);
    let streams = processes["compare_simulated"]["streams"]
        .as_array()
        .unwrap();
    assert!(
        streams
            .iter()
            .any(|s| s["busy_s"]["measured"].as_f64().unwrap() > 0.0),
        "member 0's trace has no copies: {streams:?}"
    );

    // A member that fails: the run names it and why.
    let broken = spill("broken");
    std::fs::write(dir.join("broken").join("device1"), b"not a folder").unwrap();
    let output = fateplan(&[&common[..], &["--spill-dir", &broken, "--processes"]].concat());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: member 1 failed: ") && stderr.contains("device1"),
        "{stderr}"
    );
    // Its JSON says which member, and the same words.
    let failed: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    assert_eq!(failed["kind"], "member_failed", "{failed}");
    assert_eq!(failed["member"], 1, "{failed}");
    // The member's own document: its kind, in its own words.
    let own = &failed["member_error"];
    assert_eq!(own["kind"], "failed", "{failed}");
    assert!(
        own["error"].as_str().unwrap().starts_with("--spill-dir ")
            && failed["error"]
                .as_str()
                .unwrap()
                .ends_with(own["error"].as_str().unwrap()),
        "{failed}"
    );
    assert!(
        stderr.contains(failed["error"].as_str().unwrap()),
        "{failed} against {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    // --processes needs devices; `member` needs its job.
    let output = fateplan(&["train", "--graph", graph, "--epochs", "1", "--processes"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--processes"));
    let output = fateplan(&["member"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("the job on standard input"));
}

/// Devices trained as threads share the run's threads out, and the run
/// says how many each has and which profile prices one device.
#[test]
fn devices_are_told_their_share_of_the_threads() {
    let graph = "planted:nodes=300,classes=3,features=8,degree=4,seed=2";
    let out = fateplan(&[
        "train",
        "--graph",
        graph,
        "--epochs",
        "1",
        "--partitions",
        "1",
        "--devices",
        "3",
        "--threads",
        "4",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fateplan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "each trains on a pool of 1-2 threads of the 4 (one at least), and the prediction \
             prices each at the profile's compute (one taken with `fateplan profile --threads 1` \
             measures the slowest device's)"
        ),
        "{stdout}"
    );
}

/// The planted-partition graph [`planted_without`] generates.
const PLANTED: &str = "planted:nodes=200,classes=4,features=8,val=40,test=40,seed=3";

/// The planted-partition graph of 200 nodes [`PLANTED`] generated into
/// `dir`, each of `masks` rewritten to select no node.
fn planted_without(dir: &std::path::Path, masks: &[&str]) -> std::path::PathBuf {
    let graph = dir.join("planted");
    let generated = fateplan(&[
        "generate",
        "--graph",
        PLANTED,
        "--out",
        graph.to_str().unwrap(),
    ]);
    assert!(generated.status.success(), "{}", stderr(&generated));
    for mask in masks {
        fateplan::runtime::npy::write(&graph.join(mask), "|b1", &[200], &[0u8; 200]).unwrap();
    }
    graph
}

/// A dataset folder whose training mask selects no node is refused by
/// name, not trained to a loss of zero.
#[test]
fn a_training_mask_that_selects_no_node_is_refused() {
    let dir = scratch("empty-train-mask");
    let graph = planted_without(&dir, &["train_mask.npy"]);
    for devices in [&[][..], &["--devices", "2", "--processes"][..]] {
        let out = fateplan(
            &[
                &["train", "--graph", graph.to_str().unwrap(), "--epochs", "1"][..],
                devices,
            ]
            .concat(),
        );
        assert_eq!(out.status.code(), Some(1), "{devices:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("train_mask.npy) selects none of its 200 nodes"),
            "{devices:?}: {}",
            stderr(&out)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Validation and test masks that select no node train, and their
/// accuracies are not figures: `n/a` in the report, `null` in JSON.
#[test]
fn masks_that_select_no_node_have_no_accuracy() {
    let dir = scratch("empty-eval-masks");
    let graph = planted_without(&dir, &["val_mask.npy", "test_mask.npy"]);
    let train = |json: bool| {
        let mut argv = vec!["train", "--graph", graph.to_str().unwrap(), "--epochs", "2"];
        if json {
            argv.push("--json");
        }
        let out = fateplan(&argv);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let report: serde_json::Value = serde_json::from_str(&train(true)).unwrap();
    assert!(report["train_accuracy"].as_f64().is_some(), "{report}");
    assert!(report["val_accuracy"].is_null(), "{report}");
    assert!(report["test_accuracy"].is_null(), "{report}");
    let text = train(false);
    assert!(
        text.contains("val n/a (no node in its mask)  test n/a (no node in its mask)"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `generate` keeps a folder's dataset files unless told to overwrite
/// them, and says which it found before drawing anything.
#[test]
fn generate_refuses_a_folder_holding_a_dataset_without_force() {
    let dir = scratch("generate-over");
    let graph = dir.join("planted");
    let write = |spec: &str, force: bool| {
        let mut args = vec![
            "generate",
            "--graph",
            spec,
            "--out",
            graph.to_str().unwrap(),
        ];
        if force {
            args.push("--force");
        }
        fateplan(&args)
    };
    let first = "planted:nodes=200,classes=4,features=8,val=40,test=40,seed=3";
    let wider = "planted:nodes=200,classes=4,features=16,val=40,test=40,seed=3";
    let made = write(first, false);
    assert!(made.status.success(), "{}", stderr(&made));
    assert!(!stderr(&made).contains("warning"), "{}", stderr(&made));
    let x = std::fs::read(graph.join("x.npy")).unwrap();
    // A graph with no training rows is written, with a warning that
    // `train` refuses it.
    let none = dir.join("untrained");
    let spec = "planted:nodes=200,classes=4,features=8,train_per_class=0,seed=3";
    let out = fateplan(&["generate", "--graph", spec, "--out", none.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: train_mask selects none of its 200 nodes"),
        "{}",
        stderr(&out)
    );
    let again = write(wider, false);
    assert!(!again.status.success());
    let message = stderr(&again);
    assert!(
        message.contains(&format!(
            "--out {}: already holds x.npy, y.npy, edge_index.npy, train_mask.npy, val_mask.npy, \
             test_mask.npy; pass --force to overwrite them",
            graph.display()
        )),
        "{message}"
    );
    assert_eq!(std::fs::read(graph.join("x.npy")).unwrap(), x);
    // One file left is named alone.
    for file in [
        "y.npy",
        "edge_index.npy",
        "train_mask.npy",
        "val_mask.npy",
        "test_mask.npy",
    ] {
        std::fs::remove_file(graph.join(file)).unwrap();
    }
    let message = stderr(&write(wider, false));
    assert!(
        message.contains("already holds x.npy; pass --force to overwrite it"),
        "{message}"
    );
    let forced = write(wider, true);
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert!(std::fs::read(graph.join("x.npy")).unwrap().len() > x.len());
    // A file where the folder should be.
    let file = dir.join("a-file");
    std::fs::write(&file, b"kept").unwrap();
    let refused = fateplan(&[
        "generate",
        "--graph",
        first,
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(
        stderr(&refused).contains("is not a directory"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"kept");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A label far above the others makes as many classes, most of which no
/// node has: training says so.
#[test]
fn classes_no_node_has_are_noted() {
    let dir = scratch("stray-label");
    let (graph, spec) = (planted_without(&dir, &[]), PLANTED);
    // Labels 0..4 in turn, the first one 50.
    let labels: Vec<u8> = (0..200i64)
        .map(|i| if i == 0 { 50 } else { i % 4 })
        .flat_map(i64::to_le_bytes)
        .collect();
    fateplan::runtime::npy::write(&graph.join("y.npy"), "<i8", &[200], &labels).unwrap();
    let out = fateplan(&["train", "--graph", graph.to_str().unwrap(), "--epochs", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "labels    51 classes (one more than the largest label, 50), of which 5 occur"
        ),
        "{}",
        stdout(&out)
    );
    // A label making the layer over 1024 wide and 16 times the labels
    // that occur is refused before training, named.
    let labels: Vec<u8> = (0..200i64)
        .map(|i| if i == 7 { 100_000 } else { i % 4 })
        .flat_map(i64::to_le_bytes)
        .collect();
    fateplan::runtime::npy::write(&graph.join("y.npy"), "<i8", &[200], &labels).unwrap();
    let out = fateplan(&["train", "--graph", graph.to_str().unwrap(), "--epochs", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let refused = "y.npy: y[7]: 100000, the largest label, would make the output layer 100001 \
                   wide, while 5 labels occur";
    assert!(stderr(&out).contains(refused), "{}", stderr(&out));
    // And `plan` refuses the folder as `train` does.
    let out = fateplan(&["plan", "--graph", graph.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(refused), "{}", stderr(&out));
    // Where every class occurs, nothing is said.
    let every = fateplan(&["train", "--graph", spec, "--epochs", "1"]);
    assert!(every.status.success(), "{}", stderr(&every));
    assert!(!stdout(&every).contains("labels "), "{}", stdout(&every));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Float64 features too small for float32 train as 0, and are said to.
#[test]
fn float64_features_read_as_0_are_noted() {
    let dir = scratch("flushed-features");
    let graph = planted_without(&dir, &[]);
    let path = graph.to_str().unwrap();
    let write = |x: &[f64]| {
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        fateplan::runtime::npy::write(&graph.join("x.npy"), "<f8", &[200, 8], &bytes).unwrap();
    };
    let mut x: Vec<f64> = (0..1600).map(|i| f64::from(i % 7) / 7.0).collect();
    write(&x);
    let out = fateplan(&["train", "--graph", path, "--epochs", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("read as 0"), "{}", stderr(&out));
    x[19] = 3e-60;
    write(&x);
    let out = fateplan(&["train", "--graph", path, "--epochs", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = "x.npy: 1 value is not 0 but under float32's least magnitude (about 1.4e-45), and \
                read as 0 (the first: x[2, 3] = 3e-60)";
    assert!(stderr(&out).contains(said), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Split masks that share nodes train as given, and the report says
/// which share how many, and what that does to the accuracies.
#[test]
fn overlapping_split_masks_are_noted() {
    let dir = scratch("overlapping-splits");
    let (graph, spec) = (planted_without(&dir, &[]), PLANTED);
    let dataset = fateplan::runtime::dataset::Dataset::load(&graph).unwrap();
    let (train, val) = (dataset.train_mask, dataset.val_mask);
    // The test mask: every training node and every validation node.
    let test: Vec<u8> = train
        .iter()
        .zip(&val)
        .map(|(t, v)| (*t || *v) as u8)
        .collect();
    fateplan::runtime::npy::write(&graph.join("test_mask.npy"), "|b1", &[200], &test).unwrap();
    let first = |mask: &[bool]| mask.iter().position(|&m| m).unwrap();
    let count = |mask: &[bool]| mask.iter().filter(|&&m| m).count();
    let expected = format!(
        "train_mask and test_mask share {} nodes (the first: node {}): the test accuracy \
         counts nodes trained on; val_mask and test_mask share {} nodes (the first: node {})",
        count(&train),
        first(&train),
        count(&val),
        first(&val)
    );
    let path = graph.to_str().unwrap();
    let out = fateplan(&["train", "--graph", path, "--epochs", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("splits    {expected}\n")),
        "{}",
        stdout(&out)
    );
    let out = fateplan(&["train", "--graph", path, "--epochs", "1", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["splits"], serde_json::json!(expected));
    // Apart, as generated, nothing is said.
    let apart = fateplan(&["train", "--graph", spec, "--epochs", "1"]);
    assert!(apart.status.success(), "{}", stderr(&apart));
    assert!(!stdout(&apart).contains("splits "), "{}", stdout(&apart));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A generated graph larger than the memory available is refused before
/// it is drawn, by `generate` and by `train`, rather than ending with the
/// process killed for memory.
#[test]
fn a_generated_graph_larger_than_memory_is_refused_before_it_is_drawn() {
    // 2^30 nodes of 15 features and 2^34 edges: over 300 GiB.
    let spec = "rmat:scale=30,features=15";
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map(|kib| kib << 10);
    match available {
        Some(bytes) if bytes < 300 << 30 => {}
        other => {
            eprintln!(
                "skipped: memory available {other:?} bytes (needs /proc/meminfo and under 300 GiB)"
            );
            return;
        }
    }
    let dir = scratch("too-large");
    let out_dir = dir.join("graph");
    let commands: [&[&str]; 2] = [
        &[
            "generate",
            "--graph",
            spec,
            "--out",
            out_dir.to_str().unwrap(),
        ],
        &["train", "--graph", spec, "--epochs", "1"],
    ];
    for args in commands {
        let out = fateplan(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("more than the")
                && stderr(&out).contains("GiB available (")
                && stderr(&out).contains("a smaller scale"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert!(!out_dir.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The memory available is the least of `MemAvailable`, the address-space
/// limit (`ulimit -v`) less what the process maps, and the cgroup's: a
/// graph that fits in `MemAvailable` but not under the limit is refused
/// before it is drawn, rather than ending with `memory allocation of N
/// bytes failed`.
/// `fateplan ARGS` under an address-space limit (`ulimit -v`) of
/// `limit_kib` KiB.
fn under_address_limit(limit_kib: u64, args: &[&str]) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {limit_kib} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_fateplan"))
        .args(args)
        .output()
        .expect("sh runs")
}

#[test]
fn a_generated_graph_over_the_address_space_limit_is_refused_before_it_is_drawn() {
    // 2·10^7 nodes of 16 features and 1.6·10^8 edges: 3.8 GiB, over a
    // limit of 2.9 GiB.
    let spec = "planted:nodes=20000000,features=16";
    let limit_kib = 3_000_000;
    let dir = scratch("over-ulimit");
    let out_dir = dir.join("graph");
    let commands: [&[&str]; 2] = [
        &[
            "generate",
            "--graph",
            spec,
            "--out",
            out_dir.to_str().unwrap(),
        ],
        &["train", "--graph", spec, "--epochs", "1"],
    ];
    for args in commands {
        let out = under_address_limit(limit_kib, args);
        let message = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {message}");
        assert!(
            message.contains("the graph takes at least 3.8 GiB in memory")
                && message.contains("GiB available (")
                && message.contains("fewer nodes or features"),
            "{args:?}: {message}"
        );
        // Where MemAvailable is the larger, the limit is the one named.
        let available = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            });
        if available.is_some_and(|kib| kib > limit_kib) {
            assert!(
                message.contains("the address-space limit (ulimit -v) of 2.9 GiB less the"),
                "{args:?}: {message}"
            );
        }
    }
    assert!(!out_dir.exists());
    let _ = std::fs::remove_dir_all(&dir);
    // Planned, an R-MAT spec too large to draw under the limit is refused
    // too (2^29 nodes: 6 GiB of labels and masks), not ended by a failed
    // allocation.
    let spec = "rmat:scale=29,features=1";
    let workload = ["--graph", spec, "--layers", "2", "--partitions", "1"];
    for command in ["plan", "compare", "curve"] {
        let args = &[&[command][..], &workload].concat();
        let out = under_address_limit(limit_kib, args);
        let message = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {message}");
        assert!(
            message.contains("size: the graph takes at least 6.0 GiB in memory (536870912 nodes")
                && message.contains("a smaller scale"),
            "{args:?}: {message}"
        );
        // With --json, its figures.
        let args = [&args[..], &["--json"]].concat();
        let out = under_address_limit(limit_kib, &args);
        let refused: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&out)));
        assert_eq!(refused["kind"], "over_memory", "{refused}");
        let needed = refused["needed_bytes"].as_u64().unwrap();
        assert!(needed >= 6 << 30, "{refused}");
        assert!(
            refused["available_bytes"].as_u64().unwrap() < limit_kib << 10,
            "{refused}"
        );
    }
}

/// A run whose plan holds more than the memory left (a small graph, a
/// wide model: 1.5 GiB at the plan's peak, under a limit that leaves
/// about 0.7 GiB) is refused before it trains, naming the workload, the
/// plan's peak and the budgets that would fit, rather than ended by a
/// failed allocation; on several devices, each device's peak counted.
#[test]
fn a_run_over_the_memory_left_is_refused_before_it_trains() {
    let graph = "planted:nodes=100000,features=8";
    let run = [
        "train", "--graph", graph, "--layers", "4", "--hidden", "1024", "--epochs", "1",
    ];
    for devices in [&[][..], &["--devices", "2"]] {
        let args = [&run[..], devices].concat();
        let out = under_address_limit(2_000_000, &args);
        let message = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {message}");
        assert!(
            message.contains("error: training workload \"gcn-4x1024-planted-n100000")
                && message.contains("GiB in memory (")
                && message.contains("the plan's peak, hbm ")
                && message.contains("(ulimit -v)")
                && message.contains("--hbm-budget and --host-budget"),
            "{args:?}: {message}"
        );
        assert_eq!(
            message.contains("2 devices each at the plan's peak"),
            !devices.is_empty(),
            "{args:?}: {message}"
        );
        assert!(stdout(&out).is_empty(), "trained: {}", stdout(&out));
    }
    // With --json, the refusal is a document with its figures.
    let args = [&run[..], &["--json"]].concat();
    let out = under_address_limit(2_000_000, &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let refused: serde_json::Value =
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(refused["kind"], "over_memory", "{refused}");
    let needed = refused["needed_bytes"].as_u64().unwrap();
    assert!(
        needed > refused["available_bytes"].as_u64().unwrap(),
        "{refused}"
    );
    assert!(needed > 1 << 30, "{refused}");
    assert!(stderr(&out).contains(refused["error"].as_str().unwrap()));
    // A plan given holds its own budgets: another plan is needed.
    let dir = scratch("over-memory-plan");
    let file = dir.join("wide.json");
    let plan = [
        "plan",
        "--graph",
        graph,
        "--layers",
        "4",
        "--hidden",
        "1024",
        "-o",
        file.to_str().unwrap(),
    ];
    assert!(fateplan(&plan).status.success());
    let args = [&run[..], &["--plan", file.to_str().unwrap()]].concat();
    let out = under_address_limit(2_000_000, &args);
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains("error: training workload \"gcn-4x1024-planted-n100000")
            && message.contains(&format!(
                "; the plan {} holds that under its own budgets: make another with `fateplan \
                 plan` under smaller ones (--hbm-budget and --host-budget), or free memory",
                file.display()
            ))
            && !message.contains("--spill-dir"),
        "{message}"
    );
    let args = [&args[..], &["--json"]].concat();
    let refused: serde_json::Value =
        serde_json::from_str(&stdout(&under_address_limit(2_000_000, &args))).unwrap();
    assert_eq!(refused["kind"], "over_memory", "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("make another"),
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--trace` into a folder that does not exist was found only once
/// training had ended; it is refused before.
#[test]
fn a_trace_that_cannot_be_written_is_refused_before_training() {
    let dir = scratch("trace-target");
    let missing = dir.join("no-such-folder").join("t.json");
    let graph = "planted:nodes=200,classes=4,features=8,val=40,test=40,seed=3";
    for (path, expect) in [
        (missing.as_path(), "no such directory"),
        (dir.as_path(), "is a directory"),
    ] {
        let out = fateplan(&[
            "train",
            "--graph",
            graph,
            "--epochs",
            "1",
            "--trace",
            path.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("--trace {}: {expect}", path.display())),
            "{}",
            stderr(&out)
        );
        assert!(stdout(&out).is_empty(), "trained first: {}", stdout(&out));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plan made from a graph's spec trains the folder `generate` wrote
/// from it (the same tensors and operators under the folder's name),
/// saying so; another graph's plan is still refused.
#[test]
fn a_plan_trains_its_graph_under_another_name() {
    let dir = scratch("renamed-plan");
    let spec = "planted:nodes=300,classes=3,features=8,seed=1";
    let folder = dir.join("g1");
    let plan = dir.join("plan.json");
    let (folder_arg, plan_arg) = (folder.to_str().unwrap(), plan.to_str().unwrap());
    let generated = fateplan(&["generate", "--graph", spec, "--out", folder_arg]);
    assert!(generated.status.success(), "{}", stderr(&generated));
    let planned = fateplan(&[
        "plan", "--graph", spec, "--layers", "2", "--hidden", "16", "-o", plan_arg,
    ]);
    assert!(planned.status.success(), "{}", stderr(&planned));
    let train = |graph: &str| {
        fateplan(&[
            "train", "--graph", graph, "--plan", plan_arg, "--epochs", "1", "--json",
        ])
    };
    let out = train(folder_arg);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["workload"], "gcn-2x16-g1-p1", "{json}");
    assert_eq!(
        json["plan_workload"], "gcn-2x16-planted-n300-c3-h0.8-seed1-p1",
        "{json}"
    );
    let other = train("planted:nodes=300,classes=3,features=8,seed=2");
    assert_eq!(other.status.code(), Some(1), "{}", stderr(&other));
    assert!(
        stderr(&other).contains(&format!("--plan {plan_arg}: made for workload")),
        "{}",
        stderr(&other)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With several devices, `--trace` writes each device's track, as
/// threads of one process and as member processes.
#[test]
fn a_trace_of_several_devices_holds_each_devices_track() {
    let dir = scratch("trace-devices");
    let graph = "planted:nodes=300,classes=4,features=8,val=60,test=60,seed=3";
    for processes in [false, true] {
        let trace = dir.join(format!("trace-{processes}.json"));
        let mut args = vec![
            "train",
            "--graph",
            graph,
            "--epochs",
            "2",
            "--devices",
            "2",
            "--trace",
            trace.to_str().unwrap(),
        ];
        if processes {
            args.push("--processes");
        }
        let out = fateplan(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
        assert_eq!(doc["otherData"]["devices"], 2, "{doc}");
        let events = doc["traceEvents"].as_array().unwrap();
        for (pid, name) in [(1, "device 0"), (2, "device 1")] {
            assert!(
                events.iter().any(|e| e["name"] == "process_name"
                    && e["pid"] == pid
                    && e["args"]["name"] == name),
                "processes {processes}: no {name}"
            );
            let ops = events
                .iter()
                .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["cat"] == "op")
                .count();
            assert!(ops > 0, "processes {processes}: {name} has no operators");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cache path that is a folder, or a spill folder that is a file, is
/// refused by flag before anything trains.
#[test]
fn a_cache_that_is_a_folder_or_a_spill_folder_that_is_a_file_is_refused() {
    let dir = scratch("paths");
    let file = dir.join("a-file");
    std::fs::write(&file, b"kept").unwrap();
    let graph = "planted:nodes=200,classes=4,features=8,val=40,test=40,seed=3";
    let nowhere = dir.join("none").join("c.bin");
    let cases = [
        (
            ["--csr-cache", dir.to_str().unwrap()],
            format!("--csr-cache {}: is a directory", dir.display()),
        ),
        (
            ["--csr-cache", nowhere.to_str().unwrap()],
            format!("no such directory {}", dir.join("none").display()),
        ),
        (
            ["--spill-dir", file.to_str().unwrap()],
            format!("--spill-dir {}: is not a directory", file.display()),
        ),
    ];
    for (flag, message) in &cases {
        let mut args = vec!["train", "--graph", graph, "--epochs", "1"];
        args.extend_from_slice(flag);
        let out = fateplan(&args);
        assert_eq!(out.status.code(), Some(1), "{flag:?}");
        assert!(stderr(&out).contains(message.as_str()), "{}", stderr(&out));
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"kept");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plan for several GPUs trained at a share of the retain-all peak:
/// the share is of the retain-all plan on those GPUs, on the plan's
/// profile, exchange buffers included, so 100% holds the plan.
#[test]
fn a_plan_for_several_gpus_trains_at_all_of_its_retain_all_peak() {
    let dir = scratch("gpus-share");
    let plan = dir.join("two.json");
    let graph = "planted:nodes=600,classes=4,features=16,val=100,test=200,seed=2";
    let shape = ["--layers", "2", "--hidden", "16", "--partitions", "2"];
    let planned = fateplan(
        &[
            &[
                "plan",
                "--graph",
                graph,
                "--gpus",
                "2",
                "-o",
                plan.to_str().unwrap(),
            ][..],
            &shape[..],
        ]
        .concat(),
    );
    assert!(planned.status.success(), "{}", stderr(&planned));
    let trained = fateplan(&[
        "train",
        "--graph",
        graph,
        "--plan",
        plan.to_str().unwrap(),
        "--devices",
        "2",
        "--hbm-budget",
        "100%",
        "--epochs",
        "1",
    ]);
    assert!(trained.status.success(), "{}", stderr(&trained));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A one-layer model has no hidden layer: `--hidden` and GAT's `--heads`
/// change nothing, which a warning says (a head count that does not
/// divide the hidden width is not refused), and the weights are those of
/// the defaults; `plan` warns the same.
#[test]
fn a_one_layer_model_warns_that_hidden_and_heads_change_nothing() {
    let graph = "rmat:scale=9,features=8,classes=4,seed=1";
    let train = |extra: &[&str]| {
        let mut args = vec![
            "train", "--graph", graph, "--model", "gat", "--layers", "1", "--epochs", "2", "--json",
        ];
        args.extend_from_slice(extra);
        let out = fateplan(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (report["weights_sha256"].clone(), stderr(&out))
    };
    let (plain, quiet) = train(&[]);
    assert!(!quiet.contains("warning"), "{quiet}");
    let (odd, warned) = train(&["--heads", "3", "--hidden", "20"]);
    assert_eq!(plain, odd);
    assert!(
        warned.contains(
            "warning: --hidden 20 and --heads 3 change no weight or operator with --layers 1"
        ),
        "{warned}"
    );
    let dir = scratch("one-layer");
    let plan = dir.join("plan.json");
    let out = fateplan(&[
        "plan",
        "--graph",
        graph,
        "--layers",
        "1",
        "--hidden",
        "64",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let warning = "--hidden 64 changes no weight or operator";
    assert_eq!(stderr(&out).matches(warning).count(), 1, "{}", stderr(&out));
    // Said once by a curve, which plans the workload at each budget.
    let out = fateplan(&[
        "curve",
        "--graph",
        graph,
        "--layers",
        "1",
        "--hidden",
        "64",
        "--partitions",
        "1",
        "--budgets",
        "50%,100%",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out).matches(warning).count(), 1, "{}", stderr(&out));
    // A plan's own shape, trained with --plan, is not the user's flags.
    let out = fateplan(&[
        "train",
        "--graph",
        graph,
        "--plan",
        plan.to_str().unwrap(),
        "--epochs",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
    // Two layers: the heads split the hidden width, and must divide it.
    let out = fateplan(&[
        "train", "--graph", graph, "--model", "gat", "--layers", "2", "--heads", "3", "--epochs",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not divisible by 3 heads"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_device_budget_no_plan_fits_at_the_partitions_given_points_to_auto() {
    let args = [
        "train",
        "--graph",
        "rmat:scale=7,features=32,classes=4,seed=3",
        "--hidden",
        "16",
        "--partitions",
        "1",
        "--epochs",
        "1",
    ];
    let out = fateplan(&[&args[..], &["--hbm-budget", "16KiB"]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    // One line.
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("infeasible: hbm")
            && stderr.contains(
                " (at --partitions 1: other counts need other device budgets, more partitions \
                 smaller steps; `fateplan plan` with the same model flags, the budgets in bytes \
                 and --partitions auto finds the fewest that fit, or where none does (dp or milp, \
                 on one GPU), the count that needs the least)"
            ),
        "{stderr}"
    );
    // Short of host memory, not the device's: no word of partitions.
    let out = fateplan(
        &[
            &args[..],
            &["--policy", "offload-host-all", "--host-budget", "1KiB"],
        ]
        .concat(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("infeasible: host") && !stderr.contains("--partitions auto"),
        "{stderr}"
    );
}

/// `--compare-simulated` on a plan whose tensors go to the SSD: the PCIe
/// rows' measured busy time spans the SSD copies whole, the simulated one
/// their PCIe part alone, so those rows give no ratio; the SSD lanes'
/// rows compare them.
#[test]
fn ssd_copies_are_compared_on_their_lanes_not_as_pcie_time() {
    let spill = std::env::temp_dir().join(format!("fateplan-compare-ssd-{}", std::process::id()));
    let report = json(&fateplan(&[
        "train",
        "--graph",
        "rmat:scale=9,features=16,classes=4,seed=1",
        "--epochs",
        "3",
        "--partitions",
        "2",
        "--policy",
        "offload-ssd-all",
        "--spill-dir",
        spill.to_str().unwrap(),
        "--compare-simulated",
        "--json",
    ]));
    let compared = &report["compare_simulated"];
    let row = |list: &str, name: &str| -> serde_json::Value {
        compared[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {list} row {name}: {compared}"))
            .clone()
    };
    for link in ["pcie_h2d", "pcie_d2h", "ssd"] {
        let busy = &row("links", link)["busy_s"];
        assert!(busy["measured"].as_f64().unwrap() > 0.0, "{link}: {busy}");
        assert!(busy["ratio"].is_null(), "{link}: {busy}");
    }
    for lane in ["ssd_read", "ssd_write"] {
        let busy = &row("streams", lane)["busy_s"];
        assert!(busy["ratio"].as_f64().unwrap() > 0.0, "{lane}: {busy}");
    }
    let _ = std::fs::remove_dir_all(&spill);
}

/// `--eval-every N` evaluates every N epochs and after the last, says the
/// best, and trains the same weights as without it.
#[test]
fn eval_every_reports_validation_and_trains_the_same_weights() {
    let sha = |out: &Output| {
        let text = stdout(out);
        let line = text
            .lines()
            .find(|l| l.starts_with("weights   sha256"))
            .unwrap();
        line.to_string()
    };
    let args = ["train", "--graph", PLANTED, "--epochs", "5"];
    let plain = fateplan(&args);
    assert!(plain.status.success(), "{}", stderr(&plain));
    assert!(!stdout(&plain).contains("validation"), "{}", stdout(&plain));
    let mut every = args.to_vec();
    every.extend(["--eval-every", "2"]);
    let evaluated = fateplan(&every);
    assert!(evaluated.status.success(), "{}", stderr(&evaluated));
    assert_eq!(sha(&evaluated), sha(&plain));
    let text = stdout(&evaluated);
    let line = text
        .lines()
        .find(|l| l.starts_with("validation every 2 epochs: best "))
        .unwrap();
    assert!(line.ends_with("(epoch 5), of 3 evaluations"), "{line}");
    every.push("--json");
    let document = json(&fateplan(&every));
    let epochs: Vec<u64> = document["validation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["epoch"].as_u64().unwrap())
        .collect();
    assert_eq!(epochs, [2, 4, 5]);
    let last = document["validation"][2]["accuracy"].as_f64().unwrap();
    assert_eq!(Some(last), document["val_accuracy"].as_f64(), "{document}");
    // Devices as threads evaluate together, and train the same weights.
    let mut devices = args.to_vec();
    devices.extend(["--devices", "2"]);
    let plain = fateplan(&devices);
    devices.extend(["--eval-every", "2"]);
    let evaluated = fateplan(&devices);
    assert!(evaluated.status.success(), "{}", stderr(&evaluated));
    assert_eq!(sha(&evaluated), sha(&plain));
    assert!(
        stdout(&evaluated).contains("of 3 evaluations"),
        "{}",
        stdout(&evaluated)
    );
    // Member processes report at the end: refused, by the flag.
    let mut processes = args.to_vec();
    processes.extend(["--devices", "2", "--processes", "--eval-every", "2"]);
    let out = fateplan(&processes);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--eval-every 2: member processes report at the end"));
}
