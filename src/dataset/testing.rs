//! Trajectories written in code, for unit tests: a step is its subtask and gold action, every screenshot is
//! `images/a.png` (never opened), and the task is 淘宝's "搜索耳机".

use super::{Step, Trajectory};
use crate::action::Action;

/// A step with this subtask and gold action, and nothing else.
pub(crate) fn step(subtask: &str, action: Action) -> Step {
    Step {
        image: "images/a.png".into(),
        thought: String::new(),
        subtask: subtask.into(),
        action,
        response: String::new(),
        bboxes: Vec::new(),
        instruction: None,
    }
}

/// Trajectory `id` of these steps on screens of `[width, height]`.
pub(crate) fn trajectory(id: &str, [width, height]: [u32; 2], steps: Vec<Step>) -> Trajectory {
    Trajectory {
        id: id.into(),
        line: 1,
        app_name: "淘宝".into(),
        instruction: "搜索耳机".into(),
        system: None,
        image_width: width,
        image_height: height,
        steps,
    }
}
