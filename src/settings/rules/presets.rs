//! The built-in presets. Each threshold cites its source here, in the preset's `description` (written into
//! `metrics.json`) and in `docs/rules.md`, which also lists every place a preset departs from its reference.

use super::{
    BoxChoice, BoxGrowth, DirectionSpace, DistanceMetric, PointSpace, Precision, Reading,
    RulePreset, SwipeRule, TextRule, ZeroMove,
};

const QWEN_SWIPE: SwipeRule = SwipeRule::Direction {
    space: DirectionSpace::Points,
    zero: ZeroMove::Up,
};

impl RulePreset {
    /// The Mobile-R1 rule (default): strict box containment, else a 0.14 normalised distance; exact texts; swipe
    /// direction in screen pixels.
    pub fn mobile_r1() -> RulePreset {
        RulePreset {
            name: "mobile-r1".into(),
            version: 1,
            description: "Mobile-R1 action reward (arXiv 2506.20332): point inside a gold box (edges included, \
                          no enlargement); without boxes normalised distance <= 0.14; swipe direction of the finger \
                          in screen pixels; exact text after trim"
                .into(),
            source: None,
            bbox_scale: 1.0,
            distance_threshold: 0.14,
            distance_fallback_with_boxes: false,
            box_edges_inside: true,
            text: TextRule::Exact,
            key: TextRule::IgnoreCase,
            points: PointSpace::ScreenPixels,
            box_growth: BoxGrowth::AboutCentre,
            box_choice: BoxChoice::Any,
            distance: DistanceMetric::Normalised,
            precision: Precision::Double,
            tolerance: 1e-9,
            swipe: SwipeRule::default(),
            open_by_click: false,
            terminate_status: true,
            wait_is_terminate: false,
            short_swipe_is_tap: None,
            reading: Reading::Lenient,
        }
    }

    /// `qwen-ac`: the name kept for [`RulePreset::qwen_ac_infigui`].
    pub fn qwen_ac() -> RulePreset {
        RulePreset::qwen_ac_infigui()
    }

    /// Qwen2.5-VL's AndroidControl evaluator as ported by InfiGUI-R1.
    pub fn qwen_ac_infigui() -> RulePreset {
        RulePreset {
            name: "qwen-ac-infigui".into(),
            version: 2,
            description: "Qwen2.5-VL AndroidControl evaluator, InfiGUI-R1 port \
                          (Reallm-Labs/InfiGUI-R1 eval/android_control/evaluate_android_control.py): point inside a \
                          gold box enlarged x1.2 about its centre (BBOX_ENLARGE_FACTOR), else pixel distance in the \
                          resized image <= 0.04 x its longer side (POINT_DISTANCE_THRESHOLD); open also by a click on \
                          the icon box; swipe direction on normalised coordinates; text containment either way"
                .into(),
            source: Some(
                "Reallm-Labs/InfiGUI-R1 eval/android_control/evaluate_android_control.py".into(),
            ),
            bbox_scale: 1.2,
            distance_threshold: 0.04,
            distance_fallback_with_boxes: true,
            box_edges_inside: true,
            text: TextRule::Substring,
            key: TextRule::Substring,
            points: PointSpace::Normalised,
            box_growth: BoxGrowth::AboutCentre,
            box_choice: BoxChoice::Any,
            distance: DistanceMetric::ImageMaxSide,
            precision: Precision::Double,
            tolerance: 0.0,
            swipe: QWEN_SWIPE,
            open_by_click: true,
            terminate_status: true,
            wait_is_terminate: false,
            short_swipe_is_tap: None,
            reading: Reading::QwenEvaluator,
        }
    }

    /// Qwen2.5-VL's AndroidControl evaluator as UI-S1 runs it.
    pub fn qwen_ac_uis1() -> RulePreset {
        RulePreset {
            name: "qwen-ac-uis1".into(),
            description: "Qwen2.5-VL AndroidControl evaluator as UI-S1 runs it \
                          (X-PLUG/MobileAgent UI-S1/evaluation/qwenvl_utils.py evaluate_android_control_action): \
                          point inside a gold box enlarged x1.2 about its centre (BBOX_ENLARGE_FACTOR), else \
                          normalised distance <= 0.04 (POINT_DISTANCE_THRESHOLD); open also by a click on the icon \
                          box; any swipe matches a swipe (its direction check is commented out); text containment"
                .into(),
            source: Some("X-PLUG/MobileAgent UI-S1/evaluation/qwenvl_utils.py".into()),
            distance: DistanceMetric::Normalised,
            swipe: SwipeRule::TypeOnly,
            ..RulePreset::qwen_ac_infigui()
        }
    }

    /// AgentCPM-GUI's evaluator in its default mode (GUIEvalKit's `common` evaluator), with exact coordinates.
    pub fn androidcontrol() -> RulePreset {
        RulePreset {
            name: "androidcontrol".into(),
            version: 2,
            description: "14% rule (AITW _TAP_DISTANCE_THRESHOLD; used on AndroidControl by OS-Atlas, UI-TARS and \
                          GUI-R1) as AgentCPM-GUI eval/utils/evaluator.py scores it (= GUIEvalKit \
                          guieval/eval/evaluator.py 'common'): point inside a gold box that contains the gold point, \
                          boxes grown x1.2 (ANNOTATION_*_AUGMENT_FRACTION, clipped to the screen), else normalised \
                          distance <= 0.14; swipe direction on normalised coordinates; text containment; wait and \
                          terminate are one 'stop' type, status not compared"
                .into(),
            source: Some(
                "OpenBMB/AgentCPM-GUI eval/utils/evaluator.py (eval_android_control=False)".into(),
            ),
            bbox_scale: 1.2,
            distance_threshold: 0.14,
            distance_fallback_with_boxes: true,
            box_edges_inside: true,
            text: TextRule::Substring,
            key: TextRule::Substring,
            points: PointSpace::PredThousandths,
            box_growth: BoxGrowth::Clipped,
            box_choice: BoxChoice::ContainingGold,
            distance: DistanceMetric::Normalised,
            precision: Precision::Double,
            tolerance: 0.0,
            swipe: QWEN_SWIPE,
            open_by_click: false,
            terminate_status: false,
            wait_is_terminate: true,
            short_swipe_is_tap: None,
            reading: Reading::AgentCpm,
        }
    }

    /// AgentCPM-GUI's evaluator in its AndroidControl mode (GUIEvalKit's `androidcontrol` evaluator).
    pub fn androidcontrol_strict() -> RulePreset {
        RulePreset {
            name: "androidcontrol-strict".into(),
            description: "Qwen-aligned AndroidControl rule as AgentCPM-GUI eval/utils/evaluator.py scores it with \
                          --eval_android_control (= GUIEvalKit guieval/eval/evaluator.py 'androidcontrol'): point \
                          inside one of the 5 gold boxes nearest the gold point, grown x1.2 and clipped to the screen, \
                          else normalised distance <= 0.04 (_TAP_DISTANCE_THRESHOLD_AC); swipe direction on \
                          normalised coordinates; text containment; wait and terminate are one 'stop' type"
                .into(),
            source: Some(
                "OpenBMB/AgentCPM-GUI eval/utils/evaluator.py (eval_android_control=True)".into(),
            ),
            distance_threshold: 0.04,
            box_choice: BoxChoice::NearestToGold { count: 5 },
            ..RulePreset::androidcontrol()
        }
    }

    /// AgentCPM-GUI's pipeline for Qwen2.5-VL on CAGUI: its Qwen-to-AgentCPM conversion, then its evaluator.
    pub fn cagui() -> RulePreset {
        RulePreset {
            name: "cagui".into(),
            description: "CAGUI as AgentCPM-GUI scores Qwen2.5-VL (eval/run_predict_qwen2_5VL.py qwen2_5_2_minicpm, \
                          then eval/utils/evaluator.py): predicted points truncated to the 0-1000 grid, point inside \
                          a gold box that contains the gold point, boxes grown x1.2 and clipped, else normalised \
                          distance <= 0.14; swipe direction on normalised coordinates (a still swipe is 'up'); text \
                          containment; wait and terminate are one 'stop' type, status not compared"
                .into(),
            source: Some(
                "OpenBMB/AgentCPM-GUI eval/run_predict_qwen2_5VL.py + eval/utils/evaluator.py".into(),
            ),
            points: PointSpace::PredThousandthsTruncated,
            ..RulePreset::androidcontrol()
        }
    }

    /// AgentCPM-GUI's published AndroidControl pipeline for Qwen2.5-VL: its conversion's truncated 0–1000 points,
    /// then its evaluator in AndroidControl mode.
    pub fn androidcontrol_agentcpm() -> RulePreset {
        RulePreset {
            name: "androidcontrol-agentcpm".into(),
            description: "AndroidControl as AgentCPM-GUI scores Qwen2.5-VL for its published table \
                          (eval/run_predict_qwen2_5VL.py qwen2_5_2_minicpm, then eval/utils/evaluator.py with \
                          --eval_android_control): predicted points truncated to the 0-1000 grid and refused outside \
                          it, point inside one of the 5 gold boxes nearest the gold point, grown x1.2 and clipped, \
                          else normalised distance <= 0.04; swipe direction on normalised coordinates; text \
                          containment; wait and terminate are one 'stop' type"
                .into(),
            source: Some(
                "OpenBMB/AgentCPM-GUI eval/run_predict_qwen2_5VL.py + eval/utils/evaluator.py \
                 (eval_android_control=True)"
                    .into(),
            ),
            points: PointSpace::PredThousandthsTruncated,
            ..RulePreset::androidcontrol_strict()
        }
    }

    /// AITW's action matching.
    pub fn aitw() -> RulePreset {
        RulePreset {
            name: "aitw".into(),
            version: 2,
            description: "AITW action matching (google-research android_in_the_wild/action_matching.py): taps match \
                          when both lie in one gold box grown by 1.4 of its size each way \
                          (ANNOTATION_*_AUGMENT_FRACTION, clipped to the screen) or within normalised distance 0.14 \
                          (_TAP_DISTANCE_THRESHOLD); a swipe of length <= 0.04 is a tap \
                          (_SWIPE_DISTANCE_THRESHOLD); swipes match on the main axis only; other actions on type \
                          (texts not compared); 32-bit arithmetic, as its JAX arrays"
                .into(),
            source: Some(
                "google-research/google-research android_in_the_wild/action_matching.py".into(),
            ),
            bbox_scale: 2.4,
            distance_threshold: 0.14,
            distance_fallback_with_boxes: true,
            box_edges_inside: true,
            text: TextRule::Ignore,
            key: TextRule::Ignore,
            points: PointSpace::Normalised,
            box_growth: BoxGrowth::Clipped,
            box_choice: BoxChoice::ContainingGold,
            distance: DistanceMetric::Normalised,
            precision: Precision::Single,
            tolerance: 0.0,
            swipe: SwipeRule::Axis,
            open_by_click: false,
            terminate_status: true,
            wait_is_terminate: false,
            short_swipe_is_tap: Some(0.04),
            reading: Reading::AitwConverted,
        }
    }

    /// GUI-Odyssey's action matching.
    pub fn gui_odyssey() -> RulePreset {
        RulePreset {
            name: "gui-odyssey".into(),
            version: 2,
            description: "GUI-Odyssey action matching (OpenGVLab/GUI-Odyssey src/eval_mm/GUIOdyssey_action_matching.py) \
                          on its 0-1000 grid: point inside the SAM2 box as given (the first gold box), else normalised distance <= 0.14 \
                          (CLICK_COORD_THRESHOLD); scroll direction as data/format_converter.py decode_action names it \
                          (a still swipe is 'down'); text containment or ANLS >= 0.5 (TEXT_ANLS_THRESHOLD), case kept"
                .into(),
            source: Some(
                "OpenGVLab/GUI-Odyssey src/eval_mm/GUIOdyssey_action_matching.py".into(),
            ),
            bbox_scale: 1.0,
            distance_threshold: 0.14,
            distance_fallback_with_boxes: true,
            box_edges_inside: true,
            text: TextRule::SubstringOrAnls { threshold: 0.5 },
            key: TextRule::SubstringOrAnls { threshold: 0.5 },
            points: PointSpace::Thousandths,
            box_growth: BoxGrowth::AsGiven,
            box_choice: BoxChoice::First,
            distance: DistanceMetric::Normalised,
            precision: Precision::Double,
            tolerance: 0.0,
            swipe: SwipeRule::Direction {
                space: DirectionSpace::Points,
                zero: ZeroMove::Down,
            },
            open_by_click: false,
            terminate_status: true,
            wait_is_terminate: false,
            short_swipe_is_tap: None,
            reading: Reading::QwenConverted,
        }
    }
}
