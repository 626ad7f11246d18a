//! What `data import` did: the summary it prints.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::dataset::BenchmarkInfo;

/// What `data import` did, for the summary it prints.
#[derive(Debug, Clone)]
pub(crate) struct ImportReport {
    /// The benchmark folder written.
    pub out: PathBuf,
    /// `benchmark.json` as written (counts included).
    pub info: BenchmarkInfo,
    /// The first source location of each kind of step or episode not imported.
    pub examples: BTreeMap<String, String>,
    /// Whether an earlier import of the same source was replaced.
    pub replaced: bool,
    /// Warnings about the source as a whole (printed with the summary).
    pub warnings: Vec<String>,
}

impl ImportReport {
    /// The summary printed by `data import`.
    pub fn render(&self) -> String {
        let c = self.info.counts.clone().unwrap_or_default();
        let src = self.info.source.as_ref();
        let mut out = format!(
            "Imported {} episode{}, {} step{} ({} with gold boxes) from {} {} into {}{}\n",
            c.episodes,
            if c.episodes == 1 { "" } else { "s" },
            c.steps,
            if c.steps == 1 { "" } else { "s" },
            c.steps_with_boxes,
            src.map_or("?", |s| s.format.as_str()),
            src.map_or_else(String::new, |s| s.path.display().to_string()),
            self.out.display(),
            if self.replaced {
                " (replacing the earlier import)"
            } else {
                ""
            }
        );
        out.push_str("  action types:\n");
        for (t, n) in &c.action_types {
            out.push_str(&format!("    {t}: {n}\n"));
        }
        let sections = [
            ("source episodes not imported", &c.episodes_not_imported),
            ("source steps not imported", &c.steps_not_imported),
        ];
        for (title, map) in sections {
            let total: usize = map.values().sum();
            out.push_str(&format!("  {title}: {total}\n"));
            for (kind, n) in map {
                let e = self.examples.get(kind).map_or("", String::as_str);
                out.push_str(&format!("    {kind}: {n} (first: {e})\n"));
            }
        }
        if !c.adjusted.is_empty() {
            out.push_str("  steps imported with a documented change:\n");
            for (kind, n) in &c.adjusted {
                out.push_str(&format!("    {kind}: {n}\n"));
            }
        }
        for w in &self.warnings {
            out.push_str(&format!("  warning: {w}\n"));
        }
        if let Some(r) = &self.info.rules {
            out.push_str(&format!(
                "  suggested rule preset: {r} (in {}; --rules overrides it)\n",
                crate::dataset::INFO_FILE
            ));
        }
        out
    }
}
