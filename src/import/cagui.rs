//! CAGUI, the Chinese agent benchmark of AgentCPM-GUI (Hugging Face `openbmb/CAGUI`, `CAGUI_agent/`): one JSON list
//! of step objects per episode (`domestic/<id>/<id>.json`) with JPEG screenshots; `image_path` (e.g.
//! `domestic/<id>/<id>_0.jpeg`) is relative to `--source`. The fields are those AgentCPM-GUI's evaluator reads
//! (`OpenBMB/AgentCPM-GUI eval/run_eval_agent.py`, `eval/utils/evaluator.py`):
//!
//! * Screen: `image_width` / `image_height`.
//! * `result_touch_yx` / `result_lift_yx`: normalised `[y, x]`, as in AITZ ([`super::aitw`]).
//! * `ui_positions`: normalised `[y, x, h, w]` (the CAGUI step quoted in AgentCPM-GUI's GitHub discussion number
//!   32); boxes containing the gold point become its gold boxes, in pixels.
//! * Action ids: AITW's, plus 0 = long press and 1 = wait, each with `duration` in milliseconds
//!   (`eval/utils/action_type.py`: `LONG_POINT = 0`, `NO_ACTION = 1`); `time` = `duration` / 1000 s.

use super::aitw::{self, Flavor};
use super::sink::Sink;
use super::{ImportError, ImportOptions};

/// Import every CAGUI episode under `--source`.
pub(super) fn import(opts: &ImportOptions, sink: &mut Sink) -> Result<(), ImportError> {
    aitw::import(&opts.source, Flavor::Cagui, sink)
}
