//! Phase 1 of a semi-online run (`eval --history predicted`): each trajectory's steps run as a chain, step t+1's
//! prompt holding the model's answers to steps 0..t (see [`super::history`] for the two procedures' prompts).
//!
//! Scheduling stays batched: the queue starts with the first pending step of every trajectory ready
//! ([`JobQueue::chained`]); the moment step t's answer is appended to `predictions.jsonl`, [`Phase::settled`]
//! judges it under the run's rules and releases step t+1, or gives up the rest of the chain (`uis1-sop` after a
//! wrong step, or a step that could not be prepared, which is redone on resume). Many chains are in flight at
//! once, so the engine keeps its batch full while each chain waits for its own answer.
//!
//! Resume rebuilds each chain from the saved lines: the answers of its first steps, in order, up to the first
//! step without one, are judged again with the same rules (a setting of the run), so a resumed run builds the
//! same prompts as an uninterrupted one.

use std::collections::HashMap;
use std::sync::Mutex;

use anyhow::Result;
use serde_json::json;

use super::history::{semi_online_messages, OwnStep};
use super::phase::Phase;
use super::prompts::PromptStyle;
use super::steps::{prediction_line, StepJob};
use crate::backend::{ChatRequest, ChatResult, JobQueue};
use crate::dataset::Benchmark;
use crate::predictions::Prediction;
use crate::preprocess::{image_dimensions, ImageProcessorConfig};
use crate::records::{PredictionLine, Procedure};
use crate::score::score_step;
use crate::settings::RulePreset;

/// How a finished step is judged while the run goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Decide<'a> {
    /// Under a rule preset (the run's `--rules`).
    Rules(&'a RulePreset),
    /// Every step right (`bench`, which scores nothing: every chain runs to its end with the model's own
    /// answers in its prompts).
    AlwaysRight,
}

/// The settings of a semi-online step phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SemiOnlineConfig<'a> {
    /// The procedure.
    pub procedure: Procedure,
    /// How steps are judged.
    pub decide: Decide<'a>,
    /// What the system prompt is made from (its coordinate frame also reads the answers).
    pub system: PromptStyle,
    /// How the backend resizes screenshots.
    pub image: &'a ImageProcessorConfig,
    /// Most generated tokens.
    pub max_new_tokens: usize,
}

/// The semi-online step phase of `bench`.
pub(crate) struct SemiOnlinePhase<'a> {
    bench: &'a Benchmark,
    cfg: SemiOnlineConfig<'a>,
    /// The pending steps, each trajectory's in order and together.
    jobs: Vec<StepJob>,
    /// Per pending step, the index one past its chain's last step.
    chain_end: Vec<usize>,
    /// The first pending step of each chain, the longest chains first.
    first: Vec<usize>,
    /// Per trajectory, what the history keeps of its steps done so far.
    own: Mutex<Vec<Vec<OwnStep>>>,
}

impl<'a> SemiOnlinePhase<'a> {
    /// The phase over `bench`, resuming from `saved` (the lines of `predictions.jsonl` so far, in file order).
    pub fn new(bench: &'a Benchmark, saved: &[PredictionLine], cfg: SemiOnlineConfig<'a>) -> Self {
        let mut latest: HashMap<(&str, usize), &PredictionLine> = HashMap::new();
        for line in saved.iter().filter(|l| l.error.is_none()) {
            latest.insert((line.trajectory.as_str(), line.step), line);
        }
        let mut own = vec![Vec::new(); bench.trajectories.len()];
        let (mut jobs, mut chain_end, mut chains) = (Vec::new(), Vec::new(), Vec::new());
        for (ti, t) in bench.trajectories.iter().enumerate() {
            let mut stopped = false;
            while let Some(line) = latest.get(&(t.id.as_str(), own[ti].len())) {
                let step = judge(bench, &cfg, ti, line);
                stopped = cfg.procedure.stops_at_first_error() && !step.correct;
                own[ti].push(step);
                if stopped {
                    break;
                }
            }
            let next = own[ti].len();
            if stopped || next >= t.steps.len() {
                continue;
            }
            let start = jobs.len();
            jobs.extend((next..t.steps.len()).map(|si| (ti, si)));
            chain_end.resize(jobs.len(), jobs.len());
            chains.push((
                t.steps.len() - next,
                t.image_width as u64 * t.image_height as u64,
                start,
            ));
        }
        // The longest chains start first: a chain's steps run one after another, so they set the phase's end.
        chains.sort_by_key(|&(len, pixels, start)| (std::cmp::Reverse((len, pixels)), start));
        Self {
            bench,
            cfg,
            jobs,
            chain_end,
            first: chains.into_iter().map(|(_, _, start)| start).collect(),
            own: Mutex::new(own),
        }
    }

    /// The first pending step of each chain.
    pub(crate) fn first_steps(&self) -> Vec<StepJob> {
        self.first.iter().map(|&i| self.jobs[i]).collect()
    }

    fn own(&self) -> std::sync::MutexGuard<'_, Vec<Vec<OwnStep>>> {
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the history keeps of a saved or new answer to step `line.step` of trajectory `ti`.
fn judge(
    bench: &Benchmark,
    cfg: &SemiOnlineConfig<'_>,
    ti: usize,
    line: &PredictionLine,
) -> OwnStep {
    let pred = Prediction {
        frame: cfg.system.frame,
        ..Prediction::from_line(line.clone())
    };
    let correct = match cfg.decide {
        Decide::AlwaysRight => true,
        Decide::Rules(rules) => {
            let t = &bench.trajectories[ti];
            line.step < t.steps.len() && score_step(rules, t, ti, line.step, Some(&pred)).correct
        }
    };
    OwnStep {
        correct,
        tool_call: pred.parsed.tool_call_text.clone(),
        response: pred.response,
    }
}

impl Phase for SemiOnlinePhase<'_> {
    type Record = PredictionLine;

    fn name(&self) -> &'static str {
        "steps"
    }

    fn total(&self) -> usize {
        self.bench.num_steps()
    }

    fn pending(&self) -> usize {
        self.jobs.len()
    }

    fn request(&self, i: usize) -> Result<ChatRequest> {
        let (ti, si) = self.jobs[i];
        let traj = &self.bench.trajectories[ti];
        let history: Vec<OwnStep> =
            self.own()[ti].get(..si).map(<[_]>::to_vec).ok_or_else(|| {
                anyhow::anyhow!(
                    "trajectory {} step {si}: the earlier steps are not done",
                    traj.id
                )
            })?;
        let path = self.bench.root.join(&traj.steps[si].image);
        let resized = self.cfg.image.resized_size(image_dimensions(&path)?)?;
        let (messages, shown) = semi_online_messages(
            self.cfg.procedure,
            traj,
            si,
            &history,
            resized,
            self.cfg.system,
        )?;
        Ok(ChatRequest {
            messages,
            images: shown
                .into_iter()
                .map(|k| self.bench.root.join(&traj.steps[k].image))
                .collect(),
            max_new_tokens: self.cfg.max_new_tokens,
            top_logprobs: 0,
            ignore_eos: false,
        })
    }

    fn record(&self, i: usize, outcome: Result<ChatResult, String>) -> PredictionLine {
        let (ti, si) = self.jobs[i];
        prediction_line(&self.bench.trajectories[ti].id, si, outcome)
    }

    fn queue(&self) -> JobQueue {
        JobQueue::chained(self.jobs.len(), self.first.clone())
    }

    fn settled(&self, i: usize, record: &PredictionLine, jobs: &JobQueue) -> usize {
        let (ti, _) = self.jobs[i];
        let rest = self.chain_end[i] - i - 1;
        let go_on = record.error.is_none() && {
            let step = judge(self.bench, &self.cfg, ti, record);
            let stop = self.cfg.procedure.stops_at_first_error() && !step.correct;
            self.own()[ti].push(step);
            !stop
        };
        match (go_on, rest) {
            (_, 0) => 0,
            (true, _) => {
                jobs.release(i + 1);
                0
            }
            (false, n) => {
                jobs.forgo(n);
                n
            }
        }
    }

    fn describe(&self, i: usize) -> serde_json::Value {
        let (ti, si) = self.jobs[i];
        json!({"trajectory": self.bench.trajectories[ti].id, "step": si})
    }
}
