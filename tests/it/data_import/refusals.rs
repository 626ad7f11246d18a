//! Source steps that `data validate` would refuse are never written: a gold point off the screen, a screenshot
//! that is not an image, an unreadable `ui_positions`, a bad CAGUI screen size. Each is counted by kind with its
//! place (the folder written then validates), and `--strict` fails naming the step; `mobile_use` boxes beyond
//! their screenshot are counted and warned about.

use std::path::Path;

use serde_json::{json, Value};

use super::{import, import_raw, info, samples, trajectories};
use crate::util::text;

/// Copy the sample folder `rel` (recursively) to `to`.
fn copy_sample(rel: &str, to: &Path) {
    let from = samples().join(rel);
    for entry in walk(&from) {
        let dest = to.join(entry.strip_prefix(&from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &dest).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Rewrite the JSON file at `path` with `edit`.
fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// `--strict` (plus `extra`) fails with all of `want` in its message and leaves no output folder.
fn strict_fails(format: &str, source: &Path, tmp: &Path, extra: &[&str], want: &[&str]) {
    let out = tmp.join("strict");
    let o = import_raw(format, source, &out, &[&["--strict"], extra].concat());
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    for w in want {
        assert!(t.contains(w), "want `{w}` in: {t}");
    }
    assert!(!out.exists());
}

#[test]
fn androidcontrol_leaves_out_a_screenshot_that_is_no_image_and_a_click_off_the_screen() {
    let tmp = tempfile::tempdir().unwrap();
    let src = samples().join("androidcontrol-damaged");
    let out = tmp.path().join("ac");
    let s = import("androidcontrol", &src, &out, &[]);
    assert!(s.contains("Imported 1 episode, 1 step "), "{s}");
    assert!(s.contains("unreadable screenshot: 1 (first: "), "{s}");
    assert!(
        s.contains("episode 201 step 1: point [500, 100] is off the 108×240 screen"),
        "{s}"
    );
    let c = &info(&out)["counts"];
    assert_eq!(c["steps_not_imported"]["unreadable screenshot"], 1);
    assert_eq!(c["steps_not_imported"]["gold point off the screen"], 1);
    let steps = &trajectories(&out)[0]["trajectory"];
    assert_eq!(steps[0]["image"], "images/201/2.png");
    strict_fails(
        "androidcontrol",
        &src,
        tmp.path(),
        &[],
        &["--strict: ", "episode 201 step 0", "unreadable screenshot"],
    );
}

#[test]
fn gui_odyssey_leaves_out_a_point_beyond_its_grid() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("odyssey");
    copy_sample("gui-odyssey", &src);
    // The split's train half is this episode alone (for --strict below).
    edit_json(&src.join("annotations/odyssey-ep-2.json"), |v| {
        v["steps"][0]["info"] = json!([[1250, 500]]);
    });
    let s = import("gui-odyssey", &src, &tmp.path().join("o"), &[]);
    assert!(s.contains("gold point off the screen: 1 (first: "), "{s}");
    assert!(
        s.contains("episode odyssey-ep-2 step 0: point [1350, 1200]"),
        "{s}"
    );
    strict_fails(
        "gui-odyssey",
        &src,
        tmp.path(),
        &["--split", "random:train"],
        &["episode odyssey-ep-2 step 0", "gold point off the screen"],
    );
}

/// A `mobile_use` JSONL of one episode over 540×1200 screenshots whose coordinates are those of a 1080×2400
/// screen: a click off the screenshot, a box partly and a box wholly beyond it.
fn half_size_source(dir: &Path) -> std::path::PathBuf {
    for name in ["a.png", "b.png", "c.png"] {
        image::GrayImage::new(540, 1200)
            .save(dir.join(name))
            .unwrap();
    }
    let line = json!({"goal": "open settings", "episode_id": 7, "steps": [
        {"screenshot": "a.png", "action_content": {"action": "click", "coordinate": [700, 300]}},
        {"screenshot": "b.png", "action_content": {"action": "click", "coordinate": [100, 100]},
         "check_options": {"candidate_bbox": [[50, 50, 150, 150], [0, 473, 1080, 2337], [600, 1300, 700, 1400]]}},
        {"screenshot": "c.png", "action_content": {"action": "system_button", "button": "Back"}}
    ]});
    let file = dir.join("eval.jsonl");
    std::fs::write(&file, format!("{line}\n")).unwrap();
    file
}

#[test]
fn mobile_use_counts_boxes_beyond_smaller_screenshots_and_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let src = half_size_source(tmp.path());
    let out = tmp.path().join("mu");
    let s = import("androidcontrol-mobile-use", &src, &out, &[]);
    assert!(
        s.contains("Imported 1 episode, 2 steps (1 with gold boxes)"),
        "{s}"
    );
    assert!(
        s.contains("warning: 1 gold point(s) and 2 gold box(es) lie beyond their screenshot"),
        "{s}"
    );
    let c = &info(&out)["counts"];
    assert_eq!(c["steps_not_imported"]["gold point off the screen"], 1);
    let adjusted = &c["adjusted"];
    assert_eq!(
        adjusted["gold box partly beyond its screenshot, clipped to it (per box)"],
        1
    );
    assert_eq!(
        adjusted["gold box beyond its screenshot, left out (per box)"],
        1
    );
    let steps = &trajectories(&out)[0]["trajectory"];
    assert_eq!(
        steps[0]["bbox"],
        json!([[50, 50, 150, 150], [0, 473, 540, 1200]])
    );
    strict_fails(
        "androidcontrol-mobile-use",
        &src,
        tmp.path(),
        &[],
        &[
            "eval.jsonl:1: episode 7 step 0",
            "gold point off the screen",
        ],
    );
}

#[test]
fn aitz_and_cagui_name_unreadable_ui_positions_and_a_bad_screen_size() {
    let tmp = tempfile::tempdir().unwrap();
    let aitz = tmp.path().join("aitz");
    copy_sample("aitz/test/general", &aitz.join("general"));
    let hand = "GENERAL-9000000000000000001";
    edit_json(&aitz.join(format!("general/{hand}/{hand}.json")), |v| {
        v[0]["ui_positions"] = json!("[[470, 50, 20, 40], [100, 1");
    });
    let kind = "tap whose ui_positions is not a list of [y, x, h, w] boxes";
    let s = import("aitz", &aitz, &tmp.path().join("a"), &[]);
    assert!(s.contains(&format!("{kind}: 1")), "{s}");
    assert!(s.contains("(0 with gold boxes)"), "{s}");
    strict_fails(
        "aitz",
        &aitz,
        tmp.path(),
        &[],
        &["9000000000000000001 step 0", kind],
    );

    let cagui = tmp.path().join("cagui");
    copy_sample("cagui", &cagui);
    let id = "cagui-sample-0001";
    edit_json(&cagui.join(format!("domestic/{id}/{id}.json")), |v| {
        v[0]["ui_positions"] = json!("[[0.08, 0.4, 0.05], [0.5, 0.5, 0.1, 0.1]]");
        v[1]["image_width"] = json!("wide");
    });
    let out = tmp.path().join("c");
    let s = import("cagui", &cagui, &out, &[]);
    assert!(s.contains(&format!("{kind}: 1")), "{s}");
    let bad_screen = "step whose image_width / image_height are not positive integers";
    assert!(s.contains(&format!("{bad_screen}: 1 (first: ")), "{s}");
    assert!(!s.contains("screen size differs"), "{s}");
    assert_eq!(info(&out)["counts"]["steps_not_imported"][bad_screen], 1);
    strict_fails(
        "cagui",
        &cagui,
        tmp.path(),
        &[],
        &[&format!("{id} step 0"), kind],
    );
}
