//! Which history a step prompt shows (`eval --history`, `--semi-online`), as recorded in a run's manifest
//! (`settings.history`): the gold history of the benchmark, or the model's own earlier outputs under one of the
//! two published semi-online procedures. Pure values; `crate::eval` builds the prompts and `crate::score` the
//! metrics of each procedure.

use serde::{Deserialize, Serialize};

use crate::settings::RulePreset;

/// Whose actions fill a step prompt's history (`--history`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HistorySource {
    /// The benchmark's annotated `subtask` sentences of the earlier steps (every step independent).
    #[default]
    Gold,
    /// The model's own earlier outputs, under a semi-online [`Procedure`].
    Predicted,
}

impl std::str::FromStr for HistorySource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "gold" => Ok(Self::Gold),
            "predicted" => Ok(Self::Predicted),
            other => Err(format!(
                "--history must be `gold` or `predicted`, not `{other}`"
            )),
        }
    }
}

/// A published semi-online procedure (`--semi-online`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Procedure {
    /// UI-S1's semi-online performance (SOP) evaluation: one conversation per trajectory with the model's own
    /// replies put back verbatim and the two most recent screenshots; the trajectory stops at its first wrong step.
    #[serde(rename = "uis1-sop")]
    Uis1Sop,
    /// GUIEvalKit's `semi_online` mode: a text history of earlier tool calls, the model's own where the step was
    /// right and the gold action where it was wrong; only the current screenshot; every step runs and is scored.
    #[serde(rename = "guievalkit")]
    GuiEvalKit,
}

impl Procedure {
    /// The name on the command line and in the manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Uis1Sop => "uis1-sop",
            Self::GuiEvalKit => "guievalkit",
        }
    }

    /// Screenshots a prompt shows, the current one included (UI-S1's `n_history_image_limit` default 2,
    /// GUIEvalKit's `image_memory` 1).
    pub fn images(self) -> usize {
        match self {
            Self::Uis1Sop => 2,
            Self::GuiEvalKit => 1,
        }
    }

    /// How the history is shown.
    pub fn format(self) -> HistoryFormat {
        match self {
            Self::Uis1Sop => HistoryFormat::MultiTurn,
            Self::GuiEvalKit => HistoryFormat::Text,
        }
    }

    /// Whether a trajectory stops at its first wrong step (else the gold action fills the history and it goes on).
    pub(crate) fn stops_at_first_error(self) -> bool {
        self == Self::Uis1Sop
    }
}

impl std::fmt::Display for Procedure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Procedure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "uis1-sop" | "uis1" | "ui-s1" => Ok(Self::Uis1Sop),
            "guievalkit" => Ok(Self::GuiEvalKit),
            other => Err(format!(
                "--semi-online must be `uis1-sop` or `guievalkit`, not `{other}`"
            )),
        }
    }
}

/// How a prompt shows the earlier steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryFormat {
    /// A conversation: one user turn per step (text, screenshot) and the model's reply as the assistant turn.
    MultiTurn,
    /// One user turn: the instruction and `Step k: <tool call>;` per earlier step, then the current screenshot.
    Text,
}

/// The semi-online settings of a run: everything that changes which prompts run and what they hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SemiOnlineSettings {
    /// The procedure.
    pub procedure: Procedure,
    /// Screenshots per prompt, the current one included.
    pub images: usize,
    /// How the history is shown.
    pub format: HistoryFormat,
    /// The rule preset that decides, while the run goes, whether a step was right (where a trajectory stops,
    /// which history entries are the gold action): the run's `--rules`.
    pub rules: RulePreset,
}

impl SemiOnlineSettings {
    /// The settings of `procedure`, deciding steps with `rules`.
    pub fn new(procedure: Procedure, rules: RulePreset) -> Self {
        Self {
            procedure,
            images: procedure.images(),
            format: procedure.format(),
            rules,
        }
    }
}

/// The history of a run's step prompts (`settings.history` of the manifest; absent there means gold).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum History {
    /// The gold history.
    #[default]
    Gold,
    /// The model's own earlier outputs (boxed: a manifest's settings stay small in the common, gold case).
    Predicted(Box<SemiOnlineSettings>),
}

impl History {
    /// Whether this is the gold history (what a manifest without the field means).
    pub(crate) fn is_gold(&self) -> bool {
        matches!(self, History::Gold)
    }

    /// The semi-online settings, when the history is the model's own.
    pub fn semi_online(&self) -> Option<&SemiOnlineSettings> {
        match self {
            History::Gold => None,
            History::Predicted(s) => Some(s.as_ref()),
        }
    }

    /// `gold`, or the procedure's name.
    pub fn label(&self) -> &'static str {
        self.semi_online().map_or("gold", |s| s.procedure.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_reads_and_writes_as_the_manifest_shows_it() {
        let h = History::Predicted(Box::new(SemiOnlineSettings::new(
            Procedure::Uis1Sop,
            RulePreset::default(),
        )));
        let v = serde_json::to_value(&h).unwrap();
        assert_eq!(v["source"], "predicted");
        assert_eq!(v["procedure"], "uis1-sop");
        assert_eq!(v["images"], 2);
        assert_eq!(v["format"], "multi_turn");
        assert_eq!(v["rules"]["name"], "mobile-r1");
        assert_eq!(serde_json::from_value::<History>(v).unwrap(), h);
        let gold: History = serde_json::from_str(r#"{"source":"gold"}"#).unwrap();
        assert!(gold.is_gold());
        assert_eq!("guievalkit".parse::<Procedure>().unwrap().images(), 1);
        assert!("predicted".parse::<HistorySource>().is_ok());
        assert!("both".parse::<HistorySource>().is_err());
        assert!("sop".parse::<Procedure>().is_err());
    }
}
