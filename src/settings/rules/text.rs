//! Text comparison rules for `type`, `open` and `key` arguments.
//!
//! The reference evaluators are Python: the rules that copy one of them normalise text as Python's `str.strip()`
//! and `str.lower()` do and test containment with Python's `in`, so an empty text is contained in every text.

use serde::{Deserialize, Serialize};

/// How `type` / `open` / `key` texts are compared.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextRule {
    /// Equal after trimming.
    Exact,
    /// Equal after trimming, ignoring case.
    IgnoreCase,
    /// Case-insensitive containment in either direction after trimming; an empty text matches only an empty text
    /// (the project's own reading, used by the `qwen-ac` preset recorded by earlier versions).
    Contains,
    /// Python's `p in g or g in p` after `.lower().strip()` on both sides, as the Qwen AndroidControl evaluator
    /// ports and AgentCPM-GUI write it: an empty prediction is contained in every gold text.
    Substring,
    /// GUI-Odyssey's `text_matching`: both texts cut at their first `:` (its `"TYPE: text".split(':')` decoding
    /// keeps only the part before a second colon), stripped, case kept; correct when one contains the other or
    /// the normalised Levenshtein similarity `1 − dist / max(len)` is at least `threshold`.
    SubstringOrAnls {
        /// Minimum similarity (GUI-Odyssey: `TEXT_ANLS_THRESHOLD = 0.5`).
        threshold: f64,
    },
    /// Texts are not compared: the type is enough (AITW's `check_actions_match` compares only the action type of
    /// a non-gesture action).
    Ignore,
}

/// The characters Python's `str.strip()` removes: Unicode whitespace plus the information separators
/// U+001C–U+001F, which `str.isspace()` also counts.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(py_space)
}

/// Levenshtein distance over Unicode scalar values (Python string indexing), insertions, deletions and
/// substitutions each costing 1.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let (short, long) = if a.len() > b.len() { (b, a) } else { (a, b) };
    let mut prev: Vec<usize> = (0..=short.len()).collect();
    for (i2, c2) in long.iter().enumerate() {
        let mut row = Vec::with_capacity(short.len() + 1);
        row.push(i2 + 1);
        for (i1, c1) in short.iter().enumerate() {
            let v = if c1 == c2 {
                prev[i1]
            } else {
                1 + prev[i1].min(prev[i1 + 1]).min(row[i1])
            };
            row.push(v);
        }
        prev = row;
    }
    prev[short.len()]
}

/// The part of an Odyssey action text that its `split(':')` decoding keeps.
fn before_colon(s: &str) -> &str {
    s.split(':').next().unwrap_or(s)
}

impl TextRule {
    /// Whether `pred` matches `gold` under this rule.
    pub fn matches(self, gold: &str, pred: &str) -> bool {
        match self {
            TextRule::Exact => gold.trim() == pred.trim(),
            TextRule::IgnoreCase => gold.trim().to_lowercase() == pred.trim().to_lowercase(),
            TextRule::Contains => {
                let (g, p) = (gold.trim().to_lowercase(), pred.trim().to_lowercase());
                if g.is_empty() || p.is_empty() {
                    g == p
                } else {
                    g.contains(&p) || p.contains(&g)
                }
            }
            TextRule::Substring => {
                let g = py_strip(&gold.to_lowercase()).to_owned();
                let p = py_strip(&pred.to_lowercase()).to_owned();
                g.contains(&p) || p.contains(&g)
            }
            TextRule::SubstringOrAnls { threshold } => {
                let g = py_strip(before_colon(gold));
                let p = py_strip(before_colon(pred));
                if g.contains(p) || p.contains(g) {
                    return true;
                }
                let length = g.chars().count().max(p.chars().count());
                let value = if length == 0 {
                    0.0
                } else {
                    levenshtein(g, p) as f64 / length as f64
                };
                1.0 - value >= threshold
            }
            TextRule::Ignore => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_strip_and_containment() {
        assert_eq!(py_strip("\u{1f} a \u{3000}"), "a");
        assert!(TextRule::Substring.matches("Hello World", " hello "));
        assert!(TextRule::Substring.matches("蓝牙耳机", ""), "'' in s");
        assert!(!TextRule::Contains.matches("蓝牙耳机", ""));
        assert!(!TextRule::Substring.matches("abc", "abd"));
    }

    #[test]
    fn odyssey_anls() {
        let r = TextRule::SubstringOrAnls { threshold: 0.5 };
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "abc"), 3);
        assert!(r.matches("kitten", "sitting"), "1 - 3/7 >= 0.5");
        assert!(!r.matches("abcd", "wxyz"));
        assert!(!r.matches("ABCD", "abcd"), "case is kept");
        assert!(
            r.matches("http://a.com", "http://b.org"),
            "cut at the first colon"
        );
    }
}
