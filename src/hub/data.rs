//! Benchmarks on the Hub: `--data hf:OWNER/NAME[@REVISION]` is a dataset repository holding `data.jsonl` and the
//! screenshots it names (the Mobile-R1 release, `PG23/Mobile-R1`, keeps them under `images/`). The repo is fetched
//! into the cache (only `data.jsonl`, `benchmark.json` when present, and the screenshots `data.jsonl` references),
//! and its snapshot folder is the benchmark folder.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::{check_repo_id, Hub, HubError, HubRepo, RepoKind};
use crate::dataset::{Benchmark, DATA_FILE, INFO_FILE};
use crate::records::DataSource;

/// The prefix of a Hub dataset in `--data`.
pub(crate) const HF_PREFIX: &str = "hf:";

/// Where `--data` points: a local benchmark folder, or a dataset repo on the Hub.
#[derive(Debug, Clone, PartialEq)]
pub enum DataLocation {
    /// A folder holding `data.jsonl`.
    Local(PathBuf),
    /// `hf:OWNER/NAME[@REVISION]`.
    Hub {
        /// `OWNER/NAME`.
        repo: String,
        /// A branch, tag or commit (default `main`).
        revision: String,
    },
}

impl FromStr for DataLocation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some(spec) = s.strip_prefix(HF_PREFIX) else {
            return Ok(DataLocation::Local(PathBuf::from(s)));
        };
        let (repo, revision) = match spec.split_once('@') {
            Some((r, rev)) if !rev.is_empty() => (r, rev),
            Some(_) => return Err(format!("{s}: empty revision after `@`")),
            None => (spec, "main"),
        };
        check_repo_id(repo).map_err(|e| format!("{s}: {e} (expected hf:OWNER/NAME[@REVISION])"))?;
        Ok(DataLocation::Hub {
            repo: repo.to_string(),
            revision: revision.to_string(),
        })
    }
}

impl std::fmt::Display for DataLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataLocation::Local(p) => write!(f, "{}", p.display()),
            DataLocation::Hub { repo, revision } => write!(f, "{HF_PREFIX}{repo}@{revision}"),
        }
    }
}

/// A benchmark fetched from the Hub: its snapshot folder and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FetchedData {
    /// The benchmark folder (the cache's snapshot of the resolved commit).
    pub dir: PathBuf,
    /// Repository, revision asked for, commit.
    pub source: DataSource,
}

/// Fetch (or find in the cache) dataset `repo` at `revision` as a benchmark folder.
pub fn fetch(hub: &Hub, repo: &str, revision: &str) -> Result<FetchedData, HubError> {
    let r = hub.repo(RepoKind::Dataset, repo, revision)?;
    if let Some(commit) = r.commit() {
        let dir = r.cache().snapshot_dir(&commit);
        if dir.join(DATA_FILE).is_file() && missing_images(&dir)?.is_empty() {
            return Ok(found(&r, dir, commit));
        }
    }
    if hub.settings.offline {
        return offline_gap(&r);
    }
    let listing = r.revision_info()?;
    let data = r.get_required(DATA_FILE)?;
    if listing.contains(INFO_FILE) {
        r.get_required(INFO_FILE)?;
    }
    let dir = data
        .parent()
        .expect("a snapshot file has a folder")
        .to_path_buf();
    let wanted: Vec<Vec<String>> = missing_images(&dir)?
        .into_iter()
        .map(|p| candidates(&p, &listing))
        .collect();
    if !wanted.is_empty() {
        tracing::info!("{repo}: fetching {} screenshots", wanted.len());
        r.get_many(&wanted)?;
    }
    let commit = r.commit().expect("fetching resolved the commit");
    Ok(found(&r, dir, commit))
}

fn found(r: &HubRepo, dir: PathBuf, commit: String) -> FetchedData {
    FetchedData {
        dir,
        source: DataSource {
            repo: r.id().to_string(),
            revision: r.revision().to_string(),
            commit,
        },
    }
}

/// Offline and the snapshot is not whole: the error names the first missing file.
fn offline_gap(r: &HubRepo) -> Result<FetchedData, HubError> {
    let data = r.get_required(DATA_FILE)?;
    let dir = data.parent().expect("snapshot folder").to_path_buf();
    let missing = missing_images(&dir)?;
    let more = match missing.len() {
        0 | 1 => String::new(),
        n => format!(" (and {} more screenshots)", n - 1),
    };
    Err(HubError::NotCached {
        repo: r.id().to_string(),
        file: format!("{}{more}", missing.first().map_or("", String::as_str)),
        cache: r.hub().settings.cache_dir.clone(),
    })
}

/// The screenshots `dir/data.jsonl` references that the folder lacks (as written in `data.jsonl`; a bare name
/// also counts as present under `images/`, where the release keeps them).
fn missing_images(dir: &Path) -> Result<Vec<String>, HubError> {
    let file = dir.join(DATA_FILE);
    let text = std::fs::read_to_string(&file).map_err(super::io_err(&file))?;
    let bench = Benchmark::from_jsonl(&text, dir, &file).map_err(HubError::Data)?;
    let mut seen = HashSet::new();
    let mut missing = Vec::new();
    for step in bench.trajectories.iter().flat_map(|t| &t.steps) {
        let p = step.image.replace('\\', "/");
        if seen.insert(p.clone())
            && !dir.join(&p).is_file()
            && !dir.join(crate::dataset::IMAGES_DIR).join(&p).is_file()
        {
            missing.push(p);
        }
    }
    Ok(missing)
}

/// The repo paths that may hold screenshot `p`: the one the listing has, else `p` then `images/p`.
fn candidates(p: &str, listing: &HashSet<String>) -> Vec<String> {
    let under = format!("{}/{p}", crate::dataset::IMAGES_DIR);
    match (listing.contains(p), listing.contains(&under)) {
        (true, _) => vec![p.to_string()],
        (false, true) => vec![under],
        (false, false) => vec![p.to_string(), under],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_locations_parse() {
        assert_eq!(
            "hf:PG23/Mobile-R1".parse::<DataLocation>().unwrap(),
            DataLocation::Hub {
                repo: "PG23/Mobile-R1".into(),
                revision: "main".into()
            }
        );
        let d: DataLocation = "hf:PG23/Mobile-R1@refs/pr/3".parse().unwrap();
        assert_eq!(d.to_string(), "hf:PG23/Mobile-R1@refs/pr/3");
        assert_eq!(
            "bench/dir".parse::<DataLocation>().unwrap(),
            DataLocation::Local("bench/dir".into())
        );
        assert!("hf:Mobile-R1".parse::<DataLocation>().is_err());
        assert!("hf:a/b@".parse::<DataLocation>().is_err());
    }

    #[test]
    fn screenshot_candidates_follow_the_listing() {
        let listing: HashSet<String> = ["images/a.png".to_string(), "b.png".to_string()].into();
        assert_eq!(candidates("a.png", &listing), ["images/a.png"]);
        assert_eq!(candidates("b.png", &listing), ["b.png"]);
        assert_eq!(candidates("c.png", &listing), ["c.png", "images/c.png"]);
    }
}
