//! Each matching rule of the `mobile-r1` and `qwen-ac` presets (`qwen-ac` is `qwen-ac-infigui`).
use mobile_r1_eval::action::{Action, Button, Status};
use mobile_r1_eval::score::{match_args, ArgCheck, Direction};
use mobile_r1_eval::settings::RulePreset;

const SCREEN: [u32; 2] = [1000, 2000];

fn click(x: f64, y: f64) -> Action {
    Action::Click { coordinate: [x, y] }
}

fn ok(
    rules: &RulePreset,
    gold: &Action,
    boxes: &[[f64; 4]],
    pred: &Action,
    size: Option<[u32; 2]>,
) -> bool {
    match_args(rules, gold, boxes, pred, SCREEN, size)
        .expect("same type")
        .0
}

#[test]
fn presets_by_name() {
    assert_eq!(
        RulePreset::by_name("mobile-r1"),
        Some(RulePreset::mobile_r1())
    );
    assert_eq!(RulePreset::by_name("QWEN_AC"), Some(RulePreset::qwen_ac()));
    assert_eq!(RulePreset::by_name("nope"), None);
    let v = serde_json::to_value(RulePreset::qwen_ac()).unwrap();
    assert_eq!(v["bbox_scale"], 1.2);
    assert_eq!(v["distance_threshold"], 0.04);
}

#[test]
fn mobile_r1_boxes_edges_included_no_fallback() {
    let r = RulePreset::mobile_r1();
    let g = click(500.0, 1000.0);
    let b = [[400.0, 900.0, 600.0, 1100.0]];
    assert!(
        ok(&r, &g, &b, &click(400.0, 1100.0), None),
        "edges count as inside"
    );
    assert!(
        !ok(&r, &g, &b, &click(610.0, 1000.0), None),
        "no enlargement, no distance fallback"
    );
    // A second box also counts.
    let two = [b[0], [0.0, 0.0, 50.0, 50.0]];
    let (hit, check) = match_args(&r, &g, &two, &click(10.0, 10.0), SCREEN, None).unwrap();
    assert!(hit);
    assert!(matches!(
        check,
        ArgCheck::Box {
            inside: Some(1),
            ..
        }
    ));
}

#[test]
fn mobile_r1_distance_without_boxes() {
    let r = RulePreset::mobile_r1();
    let g = click(500.0, 1000.0);
    // 0.14 of the width = 140 px on x.
    assert!(ok(&r, &g, &[], &click(640.0, 1000.0), None));
    assert!(!ok(&r, &g, &[], &click(641.0, 1000.0), None));
    // Each axis normalised by its own side: 0.1 on x and 0.1 on y → 0.1414 > 0.14.
    assert!(!ok(&r, &g, &[], &click(600.0, 1200.0), None));
    assert!(ok(&r, &g, &[], &click(598.0, 1198.0), None));
    // Long press: time ignored.
    let lp = |x, t| Action::LongPress {
        coordinate: [x, 1000.0],
        time: t,
    };
    assert!(ok(&r, &lp(500.0, Some(2.0)), &[], &lp(520.0, None), None));
}

#[test]
fn image_size_maps_points_to_screen() {
    let r = RulePreset::mobile_r1();
    let g = click(500.0, 1000.0);
    let b = [[450.0, 950.0, 550.0, 1050.0]];
    // The model saw a 500x1000 image: (250, 500) → (500, 1000).
    assert!(ok(&r, &g, &b, &click(250.0, 500.0), Some([500, 1000])));
    assert!(!ok(&r, &g, &b, &click(250.0, 500.0), None));
    let (_, check) = match_args(&r, &g, &[], &click(28.0, 28.0), SCREEN, Some([280, 560])).unwrap();
    match check {
        ArgCheck::Distance { point, .. } => assert_eq!(point, [100.0, 100.0]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn qwen_ac_enlarged_boxes_then_distance() {
    // `qwen-ac` is InfiGUI-R1's port: the distance is 0.04 of the longer side of the image the model saw.
    let r = RulePreset::qwen_ac();
    assert_eq!(r.name, "qwen-ac-infigui");
    let g = click(500.0, 1000.0);
    let b = [[400.0, 900.0, 600.0, 1100.0]];
    // ×1.2 about the centre: x in [380, 620].
    assert!(ok(&r, &g, &b, &click(620.0, 1000.0), None));
    assert!(!ok(&r, &g, &b, &click(621.0, 1000.0), None));
    // Outside every box but within 0.04 × 2000 px of the gold point.
    let small = [[495.0, 995.0, 505.0, 1005.0]];
    assert!(ok(&r, &g, &small, &click(579.0, 1000.0), None));
    assert!(!ok(&r, &g, &small, &click(581.0, 1000.0), None));
    // On a 500×1000 image the limit is 40 image pixels, 80 screen pixels on either axis.
    assert!(ok(&r, &g, &[], &click(289.0, 500.0), Some([500, 1000])));
    assert!(!ok(&r, &g, &[], &click(291.0, 500.0), Some([500, 1000])));
    // UI-S1's port normalises each axis instead: 0.04 of the width on x (exact float comparisons: 0.54 − 0.5 > 0.04).
    let u = RulePreset::qwen_ac_uis1();
    assert!(ok(&u, &g, &small, &click(539.0, 1000.0), None));
    assert!(!ok(&u, &g, &small, &click(541.0, 1000.0), None));
}

#[test]
fn a_recorded_first_version_qwen_ac_scores_as_it_did() {
    // A manifest written before the reference presets holds `qwen-ac` version 1 without the later fields; it
    // re-scores with its own rule: normalised distance, pixel-space swipes, containment with empty = empty.
    let old: RulePreset = serde_json::from_str(
        r#"{"name":"qwen-ac","version":1,"description":"Qwen2.5-VL AndroidControl rule","bbox_scale":1.2,
            "distance_threshold":0.04,"distance_fallback_with_boxes":true,"box_edges_inside":true,
            "text":"contains","key":"contains"}"#,
    )
    .unwrap();
    let g = click(500.0, 1000.0);
    let small = [[495.0, 995.0, 505.0, 1005.0]];
    assert!(ok(&old, &g, &small, &click(540.0, 1000.0), None));
    assert!(!ok(&old, &g, &small, &click(541.0, 1000.0), None));
    let ty = |s: &str| Action::Type { text: s.into() };
    assert!(!ok(&old, &ty("蓝牙耳机"), &[], &ty(""), None));
    let v = serde_json::to_value(&old).unwrap();
    assert_eq!(v["points"], "screen_pixels");
    assert_eq!(v["tolerance"], 1e-9);
}

#[test]
fn swipe_directions() {
    let r = RulePreset::mobile_r1();
    let sw = |a: [f64; 2], b: [f64; 2]| Action::Swipe {
        coordinate: a,
        coordinate2: b,
    };
    let up = sw([500.0, 1500.0], [500.0, 500.0]);
    assert!(ok(&r, &up, &[], &sw([100.0, 900.0], [120.0, 100.0]), None));
    assert!(!ok(
        &r,
        &up,
        &[],
        &sw([500.0, 500.0], [500.0, 1500.0]),
        None
    ));
    assert!(!ok(
        &r,
        &up,
        &[],
        &sw([100.0, 1000.0], [900.0, 900.0]),
        None
    ));
    let (_, check) =
        match_args(&r, &up, &[], &sw([0.0, 0.0], [-50.0, 10.0]), SCREEN, None).unwrap();
    assert_eq!(
        check,
        ArgCheck::Direction {
            gold: Some(Direction::Up),
            predicted: Some(Direction::Left)
        }
    );
    // Mapping by a non-square image_size can change the dominant axis: (100, 80) in a 500x500 image is
    // (200, 320) on the 1000x2000 screen, a downward move.
    let right_in_image = sw([0.0, 0.0], [100.0, 80.0]);
    let down = sw([0.0, 0.0], [0.0, 100.0]);
    assert!(ok(&r, &down, &[], &right_in_image, Some([500, 500])));
}

#[test]
fn texts_buttons_status_wait() {
    let m = RulePreset::mobile_r1();
    let q = RulePreset::qwen_ac();
    let ty = |s: &str| Action::Type { text: s.into() };
    assert!(ok(&m, &ty("蓝牙耳机"), &[], &ty("  蓝牙耳机\n"), None));
    assert!(!ok(&m, &ty("蓝牙耳机"), &[], &ty("蓝牙"), None));
    assert!(ok(&q, &ty("蓝牙耳机"), &[], &ty("蓝牙"), None));
    assert!(ok(&q, &ty("Hello"), &[], &ty("say hello world"), None));
    // As in the reference (Python's `"" in s`), an empty prediction is contained in every text.
    assert!(ok(&q, &ty("蓝牙耳机"), &[], &ty(""), None));
    let open = |s: &str| Action::Open { text: s.into() };
    assert!(!ok(&m, &open("淘宝"), &[], &open("手机淘宝"), None));
    assert!(ok(&q, &open("淘宝"), &[], &open("手机淘宝"), None));
    let key = |s: &str| Action::Key { text: s.into() };
    assert!(ok(&m, &key("volume_up"), &[], &key("VOLUME_UP"), None));
    assert!(!ok(&m, &key("volume_up"), &[], &key("volume_down"), None));
    let btn = |b| Action::SystemButton { button: b };
    assert!(ok(&m, &btn(Button::Back), &[], &btn(Button::Back), None));
    assert!(!ok(&m, &btn(Button::Back), &[], &btn(Button::Home), None));
    let term = |s| Action::Terminate { status: s };
    assert!(!ok(
        &m,
        &term(Status::Success),
        &[],
        &term(Status::Failure),
        None
    ));
    let wait = |t| Action::Wait { time: t };
    assert!(ok(&m, &wait(Some(1.0)), &[], &wait(Some(5.0)), None));
    assert!(
        match_args(&m, &wait(None), &[], &click(1.0, 1.0), SCREEN, None).is_none(),
        "type mismatch"
    );
}
