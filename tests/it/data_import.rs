//! `data import` through the binary on the samples of `tests/data/import/` (made by its `make_samples.py`, each in
//! its source's published layout): import → `data validate` passes → the summary and `benchmark.json` count right;
//! the awkward cases (`[y, x]` order, scroll vs swipe direction, a missing screenshot, an action `mobile_use`
//! cannot express, a corrupt record, `--strict`); the output folder rules; and the suggested rule preset driving
//! `score`, `report` and `eval`.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::util::{bin, text};

mod refusals;
mod rules;

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import")
}

fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run the binary")
}

/// `data import --format F --source S --out OUT` plus `extra`, which must succeed; its summary.
fn import(format: &str, source: &Path, out: &Path, extra: &[&str]) -> String {
    let o = import_raw(format, source, out, extra);
    assert!(o.status.success(), "import failed:\n{}", text(&o));
    let summary = text(&o);
    let v = run(&["data", "validate", "--data", out.to_str().unwrap()]);
    assert!(v.status.success(), "validate failed:\n{}", text(&v));
    assert!(text(&v).contains("\nOK"), "{}", text(&v));
    summary
}

fn import_raw(format: &str, source: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "data",
        "import",
        "--format",
        format,
        "--source",
        source.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn trajectories(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("data.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn info(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("benchmark.json")).unwrap()).unwrap()
}

fn args(step: &Value) -> &Value {
    &step["action"]["arguments"]
}

fn traj<'a>(all: &'a [Value], id: &str) -> &'a Value {
    all.iter().find(|t| t["id"] == id).expect(id)
}

#[test]
fn androidcontrol_records_with_a11y_boxes_scroll_directions_and_a_corrupt_record() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ac");
    let src = samples().join("androidcontrol");
    let s = import("androidcontrol", &src, &out, &["--split", "test"]);
    assert!(
        s.contains("Imported 3 episodes, 10 steps (2 with gold boxes)"),
        "{s}"
    );
    assert!(
        s.contains("action type \"double_tap\" has no mobile_use equivalent: 1"),
        "{s}"
    );
    assert!(s.contains("corrupt record: data CRC mismatch: 1"), "{s}");
    assert!(
        s.contains("type (click, text, enter) imported as type(text): 1"),
        "{s}"
    );
    let all = trajectories(&out);
    let ids: Vec<&str> = all.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["101", "102", "104"]); // 103 is in train, 105 is the corrupt record
    let e101 = &traj(&all, "101")["trajectory"];
    assert_eq!(
        args(&e101[1]),
        &serde_json::json!({"action": "click", "coordinate": [54, 200]})
    );
    // The clickable button under the point, not the label inside it nor the root.
    assert_eq!(e101[1]["bbox"], serde_json::json!([[40, 190, 70, 210]]));
    // scroll down (content) = finger up; scroll right = finger left.
    assert_eq!(
        args(&e101[2]),
        &serde_json::json!({"action": "swipe", "coordinate": [54, 120], "coordinate2": [54, 0]})
    );
    let e102 = &traj(&all, "102")["trajectory"];
    assert_eq!(
        args(&e102[2]),
        &serde_json::json!({"action": "swipe", "coordinate": [54, 120], "coordinate2": [0, 120]})
    );
    // The long-clickable note, in the application window behind the keyboard's (which does not cover it).
    assert_eq!(e102[0]["bbox"], serde_json::json!([[10, 40, 100, 60]]));
    assert!(traj(&all, "104")["trajectory"][0].get("bbox").is_none()); // no node under the point
    let i = info(&out);
    assert_eq!(i["rules"], "androidcontrol");
    assert_eq!(i["source"]["split"], "test");
    assert_eq!(i["counts"]["steps"], 10);
    assert_eq!(
        i["counts"]["episodes_not_imported"]["corrupt record: data CRC mismatch"],
        1
    );

    // Without a split every readable episode comes in; the low level adds each step's instruction.
    let all_out = tmp.path().join("ac-all");
    let s = import("androidcontrol", &src, &all_out, &["--level", "low"]);
    assert!(s.contains("Imported 4 episodes, 12 steps"), "{s}");
    let first = &trajectories(&all_out)[0]["trajectory"][1];
    assert_eq!(first["instruction"], "tap the add button");
    let o = import_raw(
        "androidcontrol",
        &src,
        &tmp.path().join("x"),
        &["--split", "nope"],
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--split: unknown split \"nope\" (known: train, validation, test)"),
        "{}",
        text(&o)
    );
}

#[test]
fn strict_fails_on_the_first_step_it_cannot_import_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ac");
    let o = import_raw(
        "androidcontrol",
        &samples().join("androidcontrol"),
        &out,
        &["--strict"],
    );
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("--strict: ")
            && t.contains("#1: episode 102 step 4: action type \"double_tap\""),
        "{t}"
    );
    // Neither the output folder nor a staging folder is left.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    // A corrupt record alone also fails under --strict.
    let one = tmp.path().join("one");
    std::fs::create_dir(&one).unwrap();
    std::fs::copy(
        samples().join("androidcontrol/android_control-00001-of-00002"),
        one.join("android_control-00001-of-00002"),
    )
    .unwrap();
    let o = import_raw("androidcontrol", &one, &out, &["--strict"]);
    assert!(
        text(&o).contains("corrupt record: data CRC mismatch"),
        "{}",
        text(&o)
    );
    assert!(!out.exists());
}

#[test]
fn mobile_use_jsonl_keeps_pixels_and_boxes_and_fixes_left_right_swipes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = samples().join("androidcontrol-mobile-use");
    let out = tmp.path().join("mu");
    let src = dir.join("android_control_evaluation_std.sample.jsonl");
    let s = import("androidcontrol-mobile-use", &src, &out, &[]);
    assert!(
        s.contains("Imported 4 episodes, 12 steps (6 with gold boxes)"),
        "{s}"
    );
    assert!(s.contains("missing screenshot: 1 (first: "), "{s}");
    assert!(s.contains("episode 45 step 3"), "{s}");
    assert!(s.contains("swipe reversed to move the finger against check_options.direction (an AndroidControl scroll): 2"), "{s}");
    let all = trajectories(&out);
    // "down": the conversion's finger already moves up, kept.
    let down = &traj(&all, "16426")["trajectory"][2];
    assert_eq!(args(down)["coordinate"], serde_json::json!([540, 1800]));
    assert_eq!(args(down)["coordinate2"], serde_json::json!([540, 600]));
    // "right": the conversion moved the finger right; the content scrolls right when the finger moves left.
    let right = &traj(&all, "73")["trajectory"][0];
    assert_eq!(args(right)["coordinate"], serde_json::json!([810, 1200]));
    assert_eq!(args(right)["coordinate2"], serde_json::json!([270, 1200]));
    // candidate_bbox kept as the gold boxes; the missing screenshot's step is left out.
    assert_eq!(
        traj(&all, "8202")["trajectory"][1]["bbox"],
        serde_json::json!([[147, 157, 933, 283]])
    );
    assert_eq!(traj(&all, "45")["trajectory_length"], 4);
    assert_eq!(info(&out)["rules"], "androidcontrol");

    // The training file: float coordinates, a bbox in the action, a final terminate; no step instructions, so
    // the low level has nothing to import.
    let train = dir.join("android_control_train_example.sample.jsonl");
    let t_out = tmp.path().join("train");
    let s = import("androidcontrol-mobile-use", &train, &t_out, &[]);
    assert!(
        s.contains("Imported 1 episode, 4 steps (1 with gold boxes)"),
        "{s}"
    );
    let steps = &trajectories(&t_out)[0]["trajectory"];
    assert_eq!(args(&steps[2])["coordinate"][1], 389.8351648351648);
    assert_eq!(steps[2]["bbox"], serde_json::json!([[360, 327, 695, 466]]));
    assert_eq!(args(&steps[3])["status"], "success");
    let o = import_raw(
        "androidcontrol-mobile-use",
        &train,
        &tmp.path().join("low"),
        &["--level", "low"],
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("no step_instruction for --level low: 4"),
        "{}",
        text(&o)
    );
}

#[test]
fn aitz_episode_folder_alone_finds_its_screenshots_beside_the_json() {
    let tmp = tempfile::tempdir().unwrap();
    let episode = samples().join("aitz/test/google_apps/GOOGLE_APPS-523638528775825151");
    let out = tmp.path().join("one");
    let s = import("aitz", &episode, &out, &[]);
    assert!(s.contains("Imported 1 episode, 4 steps"), "{s}");
    let all = trajectories(&out);
    let steps = all[0]["trajectory"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    for s in steps {
        assert!(out.join(s["image"].as_str().unwrap()).is_file(), "{s}");
    }
}

#[test]
fn aitz_with_no_screenshots_names_the_first_missing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "GOOGLE_APPS-523638528775825151.json";
    let bare = tmp.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    std::fs::copy(
        samples()
            .join("aitz/test/google_apps/GOOGLE_APPS-523638528775825151")
            .join(name),
        bare.join(name),
    )
    .unwrap();
    let o = import_raw("aitz", &bare, &tmp.path().join("out"), &[]);
    assert!(!o.status.success());
    let e = text(&o);
    assert!(e.contains("no episode could be imported"), "{e}");
    assert!(e.contains("missing screenshot: 4 (first: "), "{e}");
    assert!(
        e.contains(
            "(google_apps/GOOGLE_APPS-523638528775825151/GOOGLE_APPS-523638528775825151_0.png)"
        ),
        "{e}"
    );
}

#[test]
fn aitz_reads_y_first_taps_and_finger_swipes_with_pixel_boxes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("aitz");
    let s = import("aitz", &samples().join("aitz/test"), &out, &[]);
    assert!(
        s.contains("Imported 2 episodes, 8 steps (1 with gold boxes)"),
        "{s}"
    );
    assert!(
        s.contains("action type 8 (unused in AITW) has no mobile_use equivalent: 1"),
        "{s}"
    );
    assert!(s.contains("missing screenshot: 1"), "{s}");
    let all = trajectories(&out);
    let hand = &traj(&all, "9000000000000000001");
    assert_eq!(
        (hand["image_width"].as_u64(), hand["image_height"].as_u64()),
        (Some(270), Some(600))
    );
    let steps = &hand["trajectory"];
    // "[0.8, 0.25]" is y = 0.8, x = 0.25: pixel (67.5, 480), inside the box [y 470, x 50, h 20, w 40].
    assert_eq!(
        args(&steps[0])["coordinate"],
        serde_json::json!([67.5, 480])
    );
    assert_eq!(steps[0]["bbox"], serde_json::json!([[50, 470, 90, 490]]));
    assert_eq!(steps[0]["subtask"], "click on the alarm tab");
    // Touch x 0.2 → lift x 0.8: the finger moves right.
    assert_eq!(
        args(&steps[1]),
        &serde_json::json!({"action": "swipe", "coordinate": [54, 300], "coordinate2": [216, 300]})
    );
    assert_eq!(
        args(&steps[2]),
        &serde_json::json!({"action": "type", "text": "wake"})
    );
    assert_eq!(args(&steps[3])["status"], "failure");
    // The CoAT example: home, a swipe up (lift y 0.001 < touch y 0.54), a tap, complete.
    let coat = &traj(&all, "523638528775825151")["trajectory"];
    assert_eq!(args(&coat[0])["button"], "Home");
    assert!(args(&coat[1])["coordinate2"][1].as_f64() < args(&coat[1])["coordinate"][1].as_f64());
    assert_eq!(args(&coat[2])["action"], "click");
    assert_eq!(args(&coat[3])["status"], "success");
    assert_eq!(info(&out)["rules"], "aitw");
    let o = import_raw(
        "aitz",
        &samples().join("aitz/test"),
        &tmp.path().join("x"),
        &["--split", "test"],
    );
    assert!(
        text(&o).contains("--split: the aitz format has no splits"),
        "{}",
        text(&o)
    );
}

#[test]
fn gui_odyssey_splits_grid_coordinates_and_the_recent_apps_key() {
    let tmp = tempfile::tempdir().unwrap();
    let src = samples().join("gui-odyssey");
    let out = tmp.path().join("ody");
    let s = import("gui-odyssey", &src, &out, &["--split", "random"]);
    assert!(
        s.contains("Imported 1 episode, 6 steps (2 with gold boxes)"),
        "{s}"
    );
    assert!(
        s.contains("KEY_APPSELECT (recent apps) has no mobile_use button: 1"),
        "{s}"
    );
    let t = &trajectories(&out)[0];
    assert_eq!(t["id"], "odyssey-ep-1");
    assert_eq!(t["app_name"], "Chrome, Keep Notes");
    let steps = &t["trajectory"];
    // (250, 500) on the 0–1000 grid of a 1080×2400 screen; sam2_bbox likewise.
    assert_eq!(
        args(&steps[0])["coordinate"],
        serde_json::json!([270, 1200])
    );
    assert_eq!(
        steps[0]["bbox"],
        serde_json::json!([[216, 1080, 324, 1320]])
    );
    assert_eq!(
        args(&steps[1]),
        &serde_json::json!({"action": "swipe", "coordinate": [540, 1920], "coordinate2": [540, 480]})
    );
    assert_eq!(args(&steps[4])["button"], "Back"); // KEY_BACK (the recent-apps step was left out)
    assert_eq!(info(&out)["source"]["split"], "random");
    let train = tmp.path().join("train");
    let s = import(
        "gui-odyssey",
        &src,
        &train,
        &["--split", "random:train", "--level", "low"],
    );
    assert!(s.contains("Imported 1 episode, 2 steps"), "{s}");
    assert_eq!(
        trajectories(&train)[0]["trajectory"][0]["instruction"],
        "press home"
    );
    let s = import(
        "gui-odyssey",
        &src,
        &tmp.path().join("all"),
        &["--limit", "5"],
    );
    assert!(s.contains("Imported 2 episodes, 8 steps"), "{s}");
    let s = import(
        "gui-odyssey",
        &src,
        &tmp.path().join("one"),
        &["--limit", "1"],
    );
    assert!(s.contains("Imported 1 episode"), "{s}");
}

#[test]
fn cagui_normalised_boxes_long_press_and_wait_durations() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cagui");
    let s = import("cagui", &samples().join("cagui"), &out, &[]);
    assert!(
        s.contains("Imported 1 episode, 6 steps (2 with gold boxes)"),
        "{s}"
    );
    assert!(
        s.contains("action type 2 (unused in AITW) has no mobile_use equivalent: 1"),
        "{s}"
    );
    let t = &trajectories(&out)[0];
    assert_eq!(t["instruction"], "在天气应用里查看北京明天的天气");
    assert_eq!(
        (t["image_width"].as_u64(), t["image_height"].as_u64()),
        (Some(1264), Some(2800))
    );
    let steps = &t["trajectory"];
    // Tap at y 0.1, x 0.5; the normalised box [y 0.08, x 0.4, h 0.05, w 0.2] in pixels.
    assert_eq!(args(&steps[0])["coordinate"], serde_json::json!([632, 280]));
    assert_eq!(
        steps[0]["bbox"],
        serde_json::json!([[505.6, 224, 758.4, 364]])
    );
    assert_eq!(
        args(&steps[2]),
        &serde_json::json!({"action": "long_press", "coordinate": [632, 1400], "time": 1.5})
    );
    assert_eq!(
        args(&steps[3]),
        &serde_json::json!({"action": "wait", "time": 2})
    );
    assert!(args(&steps[4])["coordinate2"][1].as_f64() < args(&steps[4])["coordinate"][1].as_f64());
    assert_eq!(args(&steps[5])["status"], "success");
    assert!(steps[0]["image"].as_str().unwrap().ends_with(".jpeg"));
    assert_eq!(info(&out)["rules"], "cagui");
}

#[test]
fn out_is_new_empty_or_an_earlier_import_of_the_same_source() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    let src = samples().join("cagui");
    import("cagui", &src, &out, &[]);
    // The same source again replaces it.
    let s = import("cagui", &src, &out, &["--limit", "1"]);
    assert!(s.contains("(replacing the earlier import)"), "{s}");
    // Another source is refused and the folder kept as it was.
    let before = std::fs::read(out.join("data.jsonl")).unwrap();
    let o = import_raw("gui-odyssey", &samples().join("gui-odyssey"), &out, &[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("holds an import of cagui"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(out.join("data.jsonl")).unwrap(), before);
    // A folder holding anything else is refused.
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "keep").unwrap();
    let o = import_raw("cagui", &src, &mine, &[]);
    assert!(
        text(&o).contains("holds no benchmark.json of an import"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read_dir(&mine).unwrap().count(), 1);
    // An empty folder is fine; a flag the format does not take is refused by name.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    import("cagui", &src, &empty, &[]);
    let o = import_raw("cagui", &src, &tmp.path().join("z"), &["--level", "low"]);
    assert!(
        text(&o).contains("--level: the cagui format has no step instructions"),
        "{}",
        text(&o)
    );
}
