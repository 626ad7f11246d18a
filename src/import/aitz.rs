//! Android-in-the-Zoo (AITZ, `IMNearth/CoAT`): one JSON list of step objects per episode
//! (`<subset>/<EPISODE>/<EPISODE>.json`) beside its PNG screenshots; `image_path` is relative to the split folder
//! (e.g. `test/`), which is `--source`; a screenshot not found there is taken from beside the episode's JSON. The
//! README and `data-example/` of `IMNearth/CoAT` show the fields.
//!
//! * Screen: the PNG's size (AITZ stores resized screenshots, e.g. 270×600, and nothing else about the screen).
//! * `result_touch_yx` / `result_lift_yx`: normalised `[y, x]` (y first), mapped by [`super::aitw`].
//! * `ui_positions`: `[y, x, h, w]` in pixels of the stored image (AgentCPM-GUI
//!   `eval/eval_data/process_aitz.py` divides them by the image height and width); the boxes that contain a tap
//!   become its gold boxes.
//! * `coat_action_think` becomes the step's `thought`, `coat_action_desc` its `subtask`.

use super::aitw::{self, Flavor};
use super::sink::Sink;
use super::{ImportError, ImportOptions};

/// Import every AITZ episode under `--source`.
pub(super) fn import(opts: &ImportOptions, sink: &mut Sink) -> Result<(), ImportError> {
    aitw::import(&opts.source, Flavor::Aitz, sink)
}
