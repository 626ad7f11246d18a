//! The episode every importer produces (steps mapped into screen pixels, with their screenshots) and the
//! `data.jsonl` step written for each of its steps.

use std::path::PathBuf;

use crate::action::Action;
use crate::dataset::{pixel, BBox, DataStep, GoldBoxes};

pub(super) use crate::dataset::IMAGES_DIR;

/// Where a step's screenshot comes from.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ImageData {
    /// A file of the source (copied).
    File(PathBuf),
    /// Encoded image bytes held in the source record (written under the extension of their sniffed format).
    Bytes(Vec<u8>),
}

/// One step as an importer maps it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct StepDraft {
    /// The step's index in the source episode (names its screenshot and locates it in messages).
    pub source_index: usize,
    /// The screenshot.
    pub image: ImageData,
    /// The screen size `[w, h]` the step's pixel coordinates refer to.
    pub screen: [u32; 2],
    /// The gold action in screen pixels.
    pub action: Action,
    /// Gold element boxes `[x1, y1, x2, y2]` in screen pixels.
    pub bboxes: Vec<BBox>,
    /// Annotated reasoning, if the source has it.
    pub thought: String,
    /// A one-line description of the step (the golden history text); the action's tool call when empty.
    pub subtask: String,
    /// The step's own instruction (`--level low`).
    pub instruction: Option<String>,
}

/// One episode as an importer maps it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Episode {
    /// The source's episode id.
    pub id: String,
    /// The app, where the source names it (else empty).
    pub app_name: String,
    /// The goal.
    pub instruction: String,
    /// The steps that could be mapped, in order.
    pub steps: Vec<StepDraft>,
}

/// A number rounded to 1/100 pixel, written without a fraction when integral.
pub(super) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A box clipped to the screen; `None` when nothing of positive area is left.
pub(super) fn clip_box(b: BBox, screen: [u32; 2]) -> Option<BBox> {
    let (w, h) = (screen[0] as f64, screen[1] as f64);
    let c = [
        round2(b[0].clamp(0.0, w)),
        round2(b[1].clamp(0.0, h)),
        round2(b[2].clamp(0.0, w)),
        round2(b[3].clamp(0.0, h)),
    ];
    (c[2] > c[0] && c[3] > c[1]).then_some(c)
}

/// The kind of a step left out because its screenshot file is not there.
pub(super) const MISSING_SCREENSHOT: &str = "missing screenshot";

/// Where a source step left out stands: `at`, and for a missing screenshot the file the source names (`image`).
pub(super) fn skip_location(at: String, kind: &str, image: Option<&str>) -> String {
    match image {
        Some(image) if kind == MISSING_SCREENSHOT => format!("{at} ({image})"),
        _ => at,
    }
}

/// The `data.jsonl` step of a draft, its screenshot at `image`.
pub(super) fn data_step(s: &StepDraft, image: String) -> DataStep {
    let subtask = if s.subtask.trim().is_empty() {
        s.action.to_tool_call().to_string()
    } else {
        s.subtask.clone()
    };
    let boxes = s.bboxes.iter().map(|b| b.map(pixel)).collect::<Vec<_>>();
    DataStep {
        image,
        thought: s.thought.clone(),
        subtask,
        action: s.action.to_tool_call(),
        response: String::new(),
        bbox: (!boxes.is_empty()).then_some(GoldBoxes::Many(boxes)),
        candidate_bbox: None,
        instruction: s.instruction.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_are_clipped_and_degenerate_ones_dropped() {
        assert_eq!(
            clip_box([-5.0, 10.0, 50.0, 300.0], [100, 200]),
            Some([0.0, 10.0, 50.0, 200.0])
        );
        assert_eq!(clip_box([120.0, 10.0, 150.0, 30.0], [100, 200]), None);
        assert_eq!(clip_box([10.0, 10.0, 10.0, 30.0], [100, 200]), None);
    }
}
