//! The arguments of `data validate`, `data import` and `sample`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::values::whole;
use super::HubArgs;
use crate::hub::DataLocation;

/// `data` subcommands.
#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Check a benchmark folder completely (images included) and print a summary.
    Validate(ValidateArgs),
    /// Turn another mobile-agent benchmark (AndroidControl, AITZ, GUI-Odyssey, CAGUI) into a benchmark folder.
    Import(ImportArgs),
}

/// Arguments of `data import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// `androidcontrol`, `androidcontrol-mobile-use`, `aitz`, `gui-odyssey` or `cagui`.
    #[arg(long)]
    pub format: crate::import::ImportFormat,
    /// The source as published: AndroidControl's TFRecord folder (or one file), the mobile_use JSONL file, the AITZ
    /// or CAGUI folder the episodes' `image_path` values are relative to, the GUI-Odyssey folder.
    #[arg(long)]
    pub source: PathBuf,
    /// The benchmark folder to write: new, empty, or an earlier import of the same source (replaced).
    #[arg(long)]
    pub out: PathBuf,
    /// AndroidControl: a key of `splits.json` (`train`, `validation`, `test`) or `test_subsplits.json`;
    /// GUI-Odyssey: a split file, `NAME[:train|test]` (e.g. `random`, test part by default).
    #[arg(long)]
    pub split: Option<String>,
    /// `high` (the goal only, default) or `low` (the goal and each step's instruction), where the source has
    /// step instructions.
    #[arg(long)]
    pub level: Option<crate::import::Level>,
    /// Import at most N episodes.
    #[arg(long, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub limit: Option<usize>,
    /// Fail on the first source step or episode that cannot be imported (default: count it in the summary).
    #[arg(long)]
    pub strict: bool,
    /// `androidcontrol-mobile-use`: the folder holding the screenshots, found by file name (default: the JSONL's
    /// folder, then its `images/`).
    #[arg(long)]
    pub images: Option<PathBuf>,
}

/// Arguments of `data validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Benchmark folder holding `data.jsonl`, or `hf:OWNER/NAME[@REVISION]`; the embedded sample when absent.
    #[arg(long)]
    pub data: Option<DataLocation>,
    /// The Hub, for `hf:` data.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Arguments of `sample`.
#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Folder to write `data.jsonl`, `images/` and `benchmark.json` into: new, empty, or an earlier `sample` output
    /// (replaced); any other folder is refused.
    #[arg(long)]
    pub out: PathBuf,
}
