//! `score --out` of a semi-online run (`eval --history predicted`) through the binary: the scored folder records
//! the run that made the predictions (its model and history), so its metrics, its report and a later `report DIR`
//! keep the semi-online figures and where each trajectory stopped, as the run's own report does.

use crate::semi_online_support::*;

#[test]
fn a_scored_folder_of_a_semi_online_run_keeps_its_history_and_model() {
    let tmp = tempfile::tempdir().unwrap();
    let (sop, scored) = (tmp.path().join("sop"), tmp.path().join("scored"));
    ok(&eval(
        &sop,
        &[
            "--history",
            "predicted",
            "--semi-online",
            "uis1-sop",
            "--no-judge",
        ],
    ));
    let preds = sop.join("predictions.jsonl");
    ok(&run(&[
        "score",
        "--predictions",
        preds.to_str().unwrap(),
        "--out",
        scored.to_str().unwrap(),
    ]));
    let record = json_file(&scored.join("scored.json"));
    assert_eq!(record["schema_version"], 2);
    let model = model_dir();
    assert_eq!(record["run_settings"]["model"], model.to_str().unwrap());
    assert_eq!(record["run_settings"]["history"]["procedure"], "uis1-sop");

    let run_metrics = json_file(&sop.join("metrics.json"));
    let check = |why: &str| {
        let m = json_file(&scored.join("metrics.json"));
        assert_eq!(m["semi_online"], run_metrics["semi_online"], "{why}");
        assert_eq!(
            m["format_error_kinds"], run_metrics["format_error_kinds"],
            "{why}"
        );
        let html = std::fs::read_to_string(scored.join("report.html")).unwrap();
        assert!(
            html.contains("data-metric=\"semi_online.average_progress\""),
            "{why}: the semi-online section"
        );
        assert!(
            html.contains("\"stopsEarly\":true"),
            "{why}: where each trajectory stopped"
        );
        assert!(
            !html.contains("(not recorded)"),
            "{why}: the model is named"
        );
        assert!(html.contains("tiny-b"), "{why}: the model is named");
    };
    check("score --out");
    std::fs::remove_file(scored.join("report.html")).unwrap();
    ok(&run(&["report", scored.to_str().unwrap()]));
    check("report DIR");

    // Compared with its run, the scored folder has the same history.
    let cmp = tmp.path().join("cmp");
    ok(&run(&[
        "report",
        "--compare",
        sop.to_str().unwrap(),
        scored.to_str().unwrap(),
        "--out",
        cmp.to_str().unwrap(),
    ]));
    let c = json_file(&cmp.join("compare.json"));
    assert_eq!(c["history"], serde_json::json!(["uis1-sop", "uis1-sop"]));
}
